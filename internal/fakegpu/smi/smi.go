// Package smi is the fake GPU stack's nvidia-smi (cmd/nvidia-smi): it answers the few invocations
// conformance workloads make of the real tool, from the device nodes a container can see and the
// inventory file the fake agent's CDI spec mounts beside it.
//
// Like the real tool it reports only the GPUs whose device nodes are present (the runtime injects the
// allocated ones), renumbers them 0..k-1 in minor order, lists under a GPU the MIG devices whose cap
// devices (/dev/nvidia-caps/nvidia-cap<K>) the container has, and fails with the real tool's messages and
// exit codes when there is no driver (no /dev/nvidiactl, exit 9) or no GPU (exit 6). Its messages for
// failures go to stderr rather than stdout as the real tool does, so a caller that keeps only stderr
// of a failed run (the workload probe does) can say why.
package smi

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// Exit codes of the real nvidia-smi that the fake reproduces.
const (
	ExitOK          = 0
	ExitBadArgs     = 2   // an option, field or format the command does not take
	ExitUnknownOpt  = 255 // an option the tool does not know at all
	ExitNoDevices   = 6   // "No devices were found"
	ExitDriverError = 9   // could not communicate with the driver
)

// DriverFailure is the real tool's message when it cannot reach the driver.
const DriverFailure = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. " +
	"Make sure that the latest NVIDIA driver is installed and running."

// Env is what the fake reads from its surroundings; tests replace it to run without root.
type Env struct {
	// DevDir holds the device nodes ("/dev" in a container).
	DevDir string
	// InventoryFile is the fake driver's knowledge of the node's GPUs.
	InventoryFile string
	// Stat follows path and reports whether it is a character device and its numbers.
	Stat func(path string) (isCharDev bool, major, minor uint32, err error)
	// Now is the clock -q's Timestamp reads (time.Now when nil).
	Now func() time.Time
}

// DefaultEnv is the container's environment: /dev, the inventory named by fakegpu.EnvInventory or else
// fakegpu.ContainerInventoryFile, and the real stat(2).
func DefaultEnv() Env {
	inv := os.Getenv(fakegpu.EnvInventory)
	if inv == "" {
		inv = fakegpu.ContainerInventoryFile
	}
	return Env{DevDir: "/dev", InventoryFile: inv, Stat: StatDevice}
}

// StatDevice is Env.Stat on the real file system. It follows symlinks, as opening the node would.
func StatDevice(path string) (bool, uint32, uint32, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return false, 0, 0, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
		return false, 0, 0, nil
	}
	rdev := uint64(st.Rdev) //nolint:unconvert // Rdev is not a uint64 on every platform
	return true, unix.Major(rdev), unix.Minor(rdev), nil
}

// gpu is one GPU the container can see, with its in-container index and the MIG devices of it the
// container can see (by placement).
type gpu struct {
	index int
	fakegpu.GPU
	migs []fakegpu.MIGDevice
}

// options is the parsed command line.
type options struct {
	help, list, version bool
	query               []string // --query-gpu fields; nil when not given
	format              string   // --format value; "" when not given
	q                   bool     // -q: the detailed query
	display             []string // -d display types (DisplayClock, DisplayPerformance); nil when not given
}

// Main runs the fake nvidia-smi with args (without the program name) and returns its exit code. Zero
// fields of env are taken from DefaultEnv.
func Main(args []string, env Env, stdout, stderr io.Writer) int {
	def := DefaultEnv()
	if env.DevDir == "" {
		env.DevDir = def.DevDir
	}
	if env.InventoryFile == "" {
		env.InventoryFile = def.InventoryFile
	}
	if env.Stat == nil {
		env.Stat = def.Stat
	}
	if env.Now == nil {
		env.Now = time.Now
	}

	opt, err := parseArgs(args)
	if err != nil {
		return argError(stdout, err)
	}
	if opt.help {
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	// Validate the query before touching the "driver", as the real tool rejects bad fields first.
	var fields []field
	var header, units bool
	if opt.query != nil {
		if fields, header, units, err = parseQuery(opt.query, opt.format); err != nil {
			return argError(stdout, err)
		}
	}

	inv, gpus, code := readDriver(env, stderr)
	if code != ExitOK {
		return code
	}
	if opt.version {
		fmt.Fprintf(stdout, "NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\nCUDA Version        : %s\n",
			inv.DriverVersion, nvmlVersion(inv.DriverVersion), inv.DriverVersion, inv.CUDAVersion)
		return ExitOK
	}
	if len(gpus) == 0 {
		fmt.Fprintln(stderr, "No devices were found")
		return ExitNoDevices
	}
	switch {
	case opt.list:
		for _, g := range gpus {
			fmt.Fprintf(stdout, "GPU %d: %s (UUID: %s)\n", g.index, g.Product, g.UUID)
			// NVIDIA's format: the MIG devices under their GPU, indented, numbered within it from 0.
			for k, m := range g.migs {
				fmt.Fprintf(stdout, "  MIG %-11s Device %2d: (UUID: %s)\n", m.Profile, k, m.UUID)
			}
		}
	case opt.query != nil:
		writeCSV(stdout, inv, gpus, fields, header, units)
	case opt.q:
		writeQuery(stdout, inv, gpus, opt.display, env.Now())
	default:
		writeSummary(stdout, inv, gpus)
	}
	return ExitOK
}

const usage = `NVIDIA System Management Interface (fake, for the gpuconform fake GPU stack)

Usage: nvidia-smi [OPTION]

    -h,   --help                Print this usage and exit.
          --version             Print the driver and CUDA versions.
    -L,   --list-gpus           List the visible GPUs: GPU <index>: <name> (UUID: <uuid>), and
                                under each its visible MIG devices.
          --query-gpu=FIELDS    Query the visible GPUs. FIELDS: index, uuid (gpu_uuid), name
                                (gpu_name), memory.total, driver_version, pci.bus_id (gpu_bus_id), count,
                                clocks.current.{graphics,sm,memory,video} (clocks.gr, clocks.sm,
                                clocks.mem, clocks.video), clocks.max.{graphics,sm,memory}, pstate,
                                power.draw, power.limit, enforced.power.limit,
                                clocks_event_reasons.{active,gpu_idle,applications_clocks_setting,
                                sw_power_cap,hw_slowdown,hw_thermal_slowdown,hw_power_brake_slowdown,
                                sw_thermal_slowdown,sync_boost} (also as clocks_throttle_reasons.*).
          --format=csv[,noheader][,nounits]  CSV is also the default.
    -q,   --query               Detailed GPU information; the fake knows its PERFORMANCE and CLOCK
                                sections.
    -d,   --display=TYPES       With -q: the sections to show, PERFORMANCE and/or CLOCK.

Without options a summary table of the visible GPUs is printed.
`

// parseArgs accepts "--opt=value" and "--opt value" for the options that take a value. Its errors
// carry the real tool's wording and exit code.
func parseArgs(args []string) (options, error) {
	var opt options
	var modeArgs []string // the options that chose a command, as given
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		takesValue := name == "--query-gpu" || name == "--format" || name == "-d" || name == "--display"
		if takesValue && !hasValue {
			if i+1 >= len(args) {
				return opt, argErr{ExitBadArgs, fmt.Sprintf("ERROR: Option %s requires a value. Please run 'nvidia-smi -h' for help.\n", name)}
			}
			i++
			value, hasValue = args[i], true
		}
		if hasValue && !takesValue {
			return opt, unknownOption(args[i])
		}
		switch name {
		case "-h", "--help":
			opt.help = true
		case "-L", "--list-gpus":
			opt.list, modeArgs = true, append(modeArgs, name)
		case "--version":
			opt.version, modeArgs = true, append(modeArgs, name)
		case "--query-gpu":
			opt.query, modeArgs = strings.Split(value, ","), append(modeArgs, name)
		case "--format":
			opt.format = value
		case "-q", "--query":
			opt.q, modeArgs = true, append(modeArgs, name)
		case "-d", "--display":
			d, err := parseDisplay(value)
			if err != nil {
				return opt, err
			}
			opt.display = d
		default:
			return opt, unknownOption(args[i])
		}
	}
	switch {
	case opt.help:
		return opt, nil
	case len(modeArgs) > 1:
		// Recorded: `-L --version` names -L; the other pairs are assumed to read the same way.
		return opt, argErr{ExitBadArgs, fmt.Sprintf("ERROR: Option %s is not valid for this command. Please run 'nvidia-smi -h' for help.\n", modeArgs[0])}
	case opt.format != "" && opt.query == nil:
		// Recorded: --format without a query is "not recognized", as an unknown option.
		return opt, unknownOption("--format=" + opt.format)
	case opt.display != nil && !opt.q:
		// Assumed to read like --format without its query (not recorded).
		return opt, unknownOption("-d")
	}
	return opt, nil
}

// argErr is an invalid command line: the real tool's message (printed on stdout, as it does) and exit
// code.
type argErr struct {
	code int
	msg  string
}

func (e argErr) Error() string { return e.msg }

func unknownOption(arg string) argErr {
	return argErr{ExitUnknownOpt, fmt.Sprintf("ERROR: Option %s is not recognized. Please run 'nvidia-smi -h'.\n", arg)}
}

// argError prints an argument error as the real tool does and returns its exit code.
func argError(stdout io.Writer, err error) int {
	if e, ok := errors.AsType[argErr](err); ok {
		fmt.Fprintln(stdout, e.msg)
		return e.code
	}
	fmt.Fprintln(stdout, err)
	return ExitBadArgs
}

// nvmlVersion is the NVML library version the real tool prints beside a driver version: its first two
// components (580.159.04 → 580.159).
func nvmlVersion(driver string) string {
	parts := strings.Split(driver, ".")
	if len(parts) > 2 {
		parts = parts[:2]
	}
	return strings.Join(parts, ".")
}

// field is one supported --query-gpu field.
type field struct {
	header string
	value  func(inv fakegpu.Inventory, n int, g gpu, units bool) string
}

func notAvailable(s string) string {
	if s == "" {
		return "[N/A]"
	}
	return s
}

// queryFields maps each accepted name (with the real tool's aliases) to its field.
var queryFields = func() map[string]field {
	index := field{"index", func(_ fakegpu.Inventory, _ int, g gpu, _ bool) string { return strconv.Itoa(g.index) }}
	uuid := field{"uuid", func(_ fakegpu.Inventory, _ int, g gpu, _ bool) string { return g.UUID }}
	name := field{"name", func(_ fakegpu.Inventory, _ int, g gpu, _ bool) string { return g.Product }}
	mem := field{"memory.total [MiB]", func(_ fakegpu.Inventory, _ int, g gpu, units bool) string {
		switch {
		case g.MemoryMiB == 0:
			return "[N/A]"
		case units:
			return fmt.Sprintf("%d MiB", g.MemoryMiB)
		}
		return strconv.Itoa(g.MemoryMiB)
	}}
	driver := field{"driver_version", func(inv fakegpu.Inventory, _ int, _ gpu, _ bool) string {
		return notAvailable(inv.DriverVersion)
	}}
	bus := field{"pci.bus_id", func(_ fakegpu.Inventory, _ int, g gpu, _ bool) string { return notAvailable(g.PCIBusID) }}
	count := field{"count", func(_ fakegpu.Inventory, n int, _ gpu, _ bool) string { return strconv.Itoa(n) }}
	fields := map[string]field{
		"index": index, "uuid": uuid, "gpu_uuid": uuid, "name": name, "gpu_name": name,
		"memory.total": mem, "driver_version": driver, "pci.bus_id": bus, "gpu_bus_id": bus,
		"count": count, // the real tool (580) has no minor_number field: the transcript records its refusal
	}
	maps.Copy(fields, clockFields()) // clocks.go
	return fields
}()

// parseQuery resolves the --query-gpu fields and the --format value.
func parseQuery(names []string, format string) (out []field, header, units bool, err error) {
	if format == "" {
		format = "csv" // recorded: without --format the real tool prints CSV with a header
	}
	header, units = true, true
	for i, opt := range strings.Split(format, ",") {
		switch {
		case i == 0 && opt == "csv":
		case i > 0 && opt == "noheader":
			header = false
		case i > 0 && opt == "nounits":
			units = false
		default:
			// Recorded, also for "csv, noheader" (a space after the comma) and "json".
			return nil, false, false, argErr{ExitBadArgs, "Format modifier is not recognized."}
		}
	}
	for _, n := range names {
		n = strings.TrimSpace(n)
		f, ok := queryFields[n]
		if !ok {
			return nil, false, false, argErr{ExitBadArgs, fmt.Sprintf("Field %q is not a valid field to query.\n", n)}
		}
		out = append(out, f)
	}
	return out, header, units, nil
}

// readDriver stands in for the real tool's talk to the driver: nvidiactl must be there, the inventory
// readable, and the visible GPUs are the nvidia<N> character devices of major 195, by minor. A GPU's
// visible MIG devices are those whose cap device (nvidia-caps/nvidia-cap<K>, major
// fakegpu.NvidiaCapsMajor) is there too; a cap device without its GPU's device node gives nothing, as
// NVML cannot open the GPU it belongs to.
func readDriver(env Env, stderr io.Writer) (fakegpu.Inventory, []gpu, int) {
	fail := func(detail error) (fakegpu.Inventory, []gpu, int) {
		fmt.Fprintf(stderr, "%s\n(fake nvidia-smi: %v)\n", DriverFailure, detail)
		return fakegpu.Inventory{}, nil, ExitDriverError
	}
	ctl := filepath.Join(env.DevDir, "nvidiactl")
	isChar, major, minor, err := env.Stat(ctl)
	switch {
	case err != nil:
		return fail(fmt.Errorf("%s: %w", ctl, err))
	case !isChar || major != fakegpu.NvidiaMajor || minor != fakegpu.NvidiaCtlMinor:
		return fail(fmt.Errorf("%s is not character device %d:%d", ctl, fakegpu.NvidiaMajor, fakegpu.NvidiaCtlMinor))
	}
	inv, err := fakegpu.Load(env.InventoryFile)
	if err != nil {
		return fail(fmt.Errorf("cannot read the inventory: %w", err)) // the error names the file
	}
	entries, err := os.ReadDir(env.DevDir)
	if err != nil {
		return fail(err)
	}

	// Keyed by minor: two nodes with the same numbers are one GPU, as for the driver.
	seen := map[int]fakegpu.GPU{}
	for _, e := range entries {
		digits, ok := strings.CutPrefix(e.Name(), "nvidia")
		if !ok || !isDecimal(digits) {
			continue // nvidiactl, nvidia-uvm, nvidia-caps, ...
		}
		isChar, major, minor, err := env.Stat(filepath.Join(env.DevDir, e.Name()))
		if err != nil || !isChar || major != fakegpu.NvidiaMajor || minor == fakegpu.NvidiaCtlMinor {
			continue // not a GPU node the driver would answer on
		}
		m := int(minor)
		g, ok := inv.ByMinor(m)
		if !ok {
			// Listed rather than dropped, so a node the inventory does not know shows in the count.
			g = fakegpu.GPU{Minor: m, UUID: fmt.Sprintf("GPU-unknown-minor-%d", m), Product: "Unknown"}
		}
		seen[m] = g
	}
	caps := visibleCaps(env)
	gpus := make([]gpu, 0, len(seen))
	for _, g := range seen {
		v := gpu{GPU: g}
		for _, m := range g.MIG {
			if caps[m.CapMinor] {
				v.migs = append(v.migs, m)
			}
		}
		slices.SortFunc(v.migs, func(a, b fakegpu.MIGDevice) int { return cmp.Compare(a.Start, b.Start) })
		gpus = append(gpus, v)
	}
	// The real tool renumbers the GPUs a container sees from 0, in minor (PCI) order.
	slices.SortFunc(gpus, func(a, b gpu) int { return cmp.Compare(a.Minor, b.Minor) })
	for i := range gpus {
		gpus[i].index = i
	}
	return inv, gpus, ExitOK
}

// visibleCaps returns the minors of the MIG cap devices in the container's nvidia-caps directory.
func visibleCaps(env Env) map[int]bool {
	dir := filepath.Join(env.DevDir, fakegpu.NvidiaCapsDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // no MIG device given: no directory at all
	}
	caps := map[int]bool{}
	for _, e := range entries {
		digits, ok := strings.CutPrefix(e.Name(), "nvidia-cap")
		if !ok || !isDecimal(digits) {
			continue
		}
		isChar, major, minor, err := env.Stat(filepath.Join(dir, e.Name()))
		if err == nil && isChar && major == fakegpu.NvidiaCapsMajor {
			caps[int(minor)] = true
		}
	}
	return caps
}

// isDecimal reports whether s is a non-empty run of ASCII digits (strconv.Atoi would also take "+1").
func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func writeCSV(w io.Writer, inv fakegpu.Inventory, gpus []gpu, fields []field, header, units bool) {
	cells := make([]string, len(fields))
	if header {
		for i, f := range fields {
			cells[i] = f.header
		}
		fmt.Fprintln(w, strings.Join(cells, ", "))
	}
	for _, g := range gpus {
		for i, f := range fields {
			cells[i] = f.value(inv, len(gpus), g, units)
		}
		fmt.Fprintln(w, strings.Join(cells, ", "))
	}
}

// writeSummary prints a compact form of the real tool's default table.
func writeSummary(w io.Writer, inv fakegpu.Inventory, gpus []gpu) {
	fmt.Fprintf(w, "NVIDIA-SMI %s   Driver Version: %s   CUDA Version: %s\n",
		inv.DriverVersion, inv.DriverVersion, inv.CUDAVersion)
	fmt.Fprintf(w, "%-4s %-32s %-18s %s\n", "GPU", "Name", "Bus-Id", "Memory-Total")
	for _, g := range gpus {
		mem := "[N/A]"
		if g.MemoryMiB > 0 {
			mem = fmt.Sprintf("%dMiB", g.MemoryMiB)
		}
		fmt.Fprintf(w, "%4d %-32s %-18s %s\n", g.index, g.Product, notAvailable(g.PCIBusID), mem)
	}
	header := false
	for _, g := range gpus {
		for k, m := range g.migs {
			if !header {
				fmt.Fprintf(w, "MIG devices:\n%-4s %-4s %-11s %-40s %s\n", "GPU", "MIG", "Profile", "UUID", "Memory-Total")
				header = true
			}
			fmt.Fprintf(w, "%4d %4d %-11s %-40s %dMiB\n", g.index, k, m.Profile, m.UUID, m.MemoryMiB)
		}
	}
}
