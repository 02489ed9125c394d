package probe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options point Gather at its inputs. The zero value reads the real process environment, /dev and
// PATH; tests substitute their own.
type Options struct {
	// Environ is the environment as KEY=VALUE pairs; nil means os.Environ().
	Environ []string
	// DevDir is the directory scanned for nvidiaN device files; empty means "/dev".
	DevDir string
	// NvidiaSMITimeout bounds `nvidia-smi -L`, which can hang on a wedged driver; zero means 15s.
	NvidiaSMITimeout time.Duration
	// MPSControlTimeout bounds each nvidia-cuda-mps-control command; zero means 10s.
	MPSControlTimeout time.Duration
	// MPSCUDA, when set, runs a CUDA program under the container's MPS and says what it saw (the workload
	// binary's, which opens libcuda; this package does not, so the suite that reads its reports stays static).
	MPSCUDA func(daemon *MPS) *MPSContext
}

// draDeviceKey matches the variables that name a device in the dra-example-driver's CDI spec, and
// not the suffixed ones that describe it (GPU_DEVICE_0_RESOURCE_CLAIM and the like).
var draDeviceKey = regexp.MustCompile(`^GPU_DEVICE_[0-9]+$`)

// devFileName matches per-GPU device nodes; nvidiactl, nvidia-uvm and friends are shared control
// nodes present in every GPU container and say nothing about which GPU it got.
var devFileName = regexp.MustCompile(`^nvidia([0-9]+)$`)

// Gather collects every source present and fills Node, Pod, Devices, CountedFrom and Sources.
// Expectations are checked separately by Check.
func Gather(ctx context.Context, opts Options) Report {
	env := envMap(opts.Environ)
	var r Report
	r.Node = env["NODE_NAME"]
	if r.Node == "" {
		// Outside a pod spec that sets NODE_NAME, the hostname is the best stand-in; an error leaves it empty.
		r.Node, _ = os.Hostname()
	}
	r.Pod = env["POD_NAME"]

	if v, ok := env["NVIDIA_VISIBLE_DEVICES"]; ok {
		r.Sources.NvidiaVisibleDevices = splitList(v, true)
	}
	for k, v := range env {
		if strings.HasPrefix(k, "GPU_DEVICE_") {
			if r.Sources.DRAEnv == nil {
				r.Sources.DRAEnv = map[string]string{}
			}
			r.Sources.DRAEnv[k] = v
		}
	}
	if v, ok := env["GPUCONFORM_VISIBLE_DEVICES"]; ok {
		r.Sources.GPUConformVisibleDevices = splitList(v, false)
	}

	devDir := opts.DevDir
	if devDir == "" {
		devDir = "/dev"
	}
	r.Sources.DevFiles = scanDevFiles(devDir)

	timeout := opts.NvidiaSMITimeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	pathList, ok := env["PATH"]
	if !ok {
		// What containerd's CRI gives a container whose image sets no PATH; the NVIDIA toolkit mounts
		// nvidia-smi into /usr/bin, which it covers.
		pathList = defaultPath
	}
	bin := lookPathIn("nvidia-smi", pathList)
	r.Sources.NvidiaSMI, r.MIGDevices, r.Sources.NvidiaSMIError = runNvidiaSMI(ctx, bin, timeout)
	r.MPS = mpsFromEnv(env)
	if r.MPS != nil {
		var query mpsControlQuery
		if ctl := lookPathIn(MPSControl, pathList); ctl != "" {
			query = mpsControlRunner(ctx, ctl, opts.Environ, cmp.Or(opts.MPSControlTimeout, 10*time.Second))
		}
		readMPSDaemon(r.MPS, gpuIndexes(r.Sources.DevFiles), query, pathList)
		if opts.MPSCUDA != nil {
			r.MPS.CUDA = opts.MPSCUDA(r.MPS)
		}
	}
	r.DriverVersion, r.CUDAVersion, r.VersionError = queryVersions(ctx, bin, timeout, r.Sources.NvidiaSMIError != "")
	r.GPUs, r.GPUsError = queryMemory(ctx, bin, timeout, r.Sources.NvidiaSMIError != "")

	r.Devices, r.CountedFrom = union(r.Sources)
	return r
}

// envMap turns KEY=VALUE pairs into a map; later duplicates win, as they do for getenv.
func envMap(environ []string) map[string]string {
	if environ == nil {
		environ = os.Environ()
	}
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// splitList splits a comma-separated list and trims spaces. keepEmpty keeps the single empty entry of
// an empty value, because NVIDIA_VISIBLE_DEVICES="" is meaningful (no GPUs) and must stay visible in
// the sources; for the other lists an empty value simply lists nothing.
func splitList(v string, keepEmpty bool) []string {
	out := []string{}
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" && !keepEmpty {
			continue
		}
		out = append(out, part)
	}
	if keepEmpty && len(out) > 1 {
		// "a,,b" has no meaningful empty entries once real ones exist.
		kept := out[:0]
		for _, p := range out {
			if p != "" {
				kept = append(kept, p)
			}
		}
		out = kept
	}
	return out
}

// scanDevFiles returns the nvidiaN device paths in dir sorted by N, or nil when there are none, so
// that "no GPU device nodes" reads as an absent source.
func scanDevFiles(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	type devFile struct {
		index int
		path  string
	}
	var found []devFile
	for _, e := range entries {
		m := devFileName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		found = append(found, devFile{n, filepath.Join(dir, e.Name())})
	}
	if len(found) == 0 {
		return nil
	}
	// Numeric order, so nvidia10 sorts after nvidia2.
	slices.SortFunc(found, func(a, b devFile) int { return cmp.Compare(a.index, b.index) })
	paths := make([]string, len(found))
	for i, f := range found {
		paths[i] = f.path
	}
	return paths
}

// defaultPath is the search path used when the environment has no PATH at all.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// nvidiaSMINoDevices is nvidia-smi's exit status for "No devices were found" (NVML_ERROR_NOT_FOUND).
const nvidiaSMINoDevices = 6

// runNvidiaSMI runs `nvidia-smi -L` (bin, found on the PATH) and returns the UUIDs it lists and the MIG
// devices among them. When the binary is not installed (bin is empty) it returns (nil, nil, ""): most
// test containers have no NVIDIA userspace and that is not worth a word. When it is installed but fails,
// the error is returned for the report.
func runNvidiaSMI(ctx context.Context, bin string, timeout time.Duration) ([]string, []MIGDevice, string) {
	if bin == "" {
		return nil, nil, ""
	}
	out, code, err := runTool(ctx, bin, timeout, "-L")
	if code == nvidiaSMINoDevices {
		// "No devices were found": the driver answered, and the container has no GPU.
		return []string{}, []MIGDevice{}, ""
	}
	if err != nil {
		return []string{}, nil, err.Error()
	}
	return ParseNvidiaSMIList(out), ParseNvidiaSMIMIG(out), ""
}

// runTool runs bin with args, bounded by timeout, and returns its stdout and exit status (-1 when it
// did not exit by itself). A failure's error quotes what the tool said: the real nvidia-smi prints most
// of its failures on stdout (a recorded transcript shows it for bad arguments), so whichever stream
// said something.
func runTool(ctx context.Context, bin string, timeout time.Duration, args ...string) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err == nil {
		return string(out), 0, nil
	}
	code, said := -1, ""
	if exitErr, ok := errors.AsType[*exec.ExitError](err); ok {
		code = exitErr.ExitCode()
		said = strings.TrimSpace(string(exitErr.Stderr))
	}
	if said == "" {
		said = strings.TrimSpace(string(out))
	}
	cmd := strings.Join(append([]string{bin}, args...), " ")
	if said != "" {
		return string(out), code, fmt.Errorf("%s: %w: %s", cmd, err, said)
	}
	return string(out), code, fmt.Errorf("%s: %w", cmd, err)
}

// mpsControlRunner runs nvidia-cuda-mps-control (bin) once per command, the command on its stdin as
// NVIDIA's plugin sends it, in the container's environment (environ; nil: this process's), bounded by
// timeout. A failure's error gives the exit status and, when stdout had nothing, what stderr said.
func mpsControlRunner(ctx context.Context, bin string, environ []string, timeout time.Duration) mpsControlQuery {
	return func(command string) (string, error) {
		qctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(qctx, bin)
		cmd.Env = environ
		cmd.Stdin = strings.NewReader(command + "\n")
		cmd.WaitDelay = time.Second
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		out := strings.TrimSpace(stdout.String())
		switch {
		case errors.Is(qctx.Err(), context.DeadlineExceeded):
			return out, fmt.Errorf("no answer within %s", timeout)
		case err != nil && out == "" && strings.TrimSpace(stderr.String()) != "":
			return out, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
		return out, err
	}
}

// lookPathIn is exec.LookPath against an explicit PATH, so Gather honours Options.Environ instead of
// the process environment.
func lookPathIn(name, pathList string) string {
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" {
			continue
		}
		candidate := filepath.Join(dir, name)
		info, err := os.Stat(candidate)
		if err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0 {
			return candidate
		}
	}
	return ""
}

var (
	smiGPULine = regexp.MustCompile(`^GPU\s+\d+:.*\(UUID:\s*([^)\s]+)\s*\)`)
	smiMIGLine = regexp.MustCompile(`^\s+MIG\s.*Device\s+\d+:.*\(UUID:\s*([^)\s]+)\s*\)`)
)

// ParseNvidiaSMIList extracts device UUIDs from `nvidia-smi -L` output such as
//
//	GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5e2a...)
//	  MIG 1g.10gb     Device  0: (UUID: MIG-1b2c...)
//
// A GPU with MIG instances listed under it is replaced by those instances: with MIG the container is
// given instances, and counting the parent too would report one device more than was allocated.
// The result is in output order and never nil.
func ParseNvidiaSMIList(output string) []string {
	ids := []string{}
	var gpu string    // UUID of the GPU line being read
	var migs []string // MIG instances listed under it
	flush := func() {
		switch {
		case len(migs) > 0:
			ids = append(ids, migs...)
		case gpu != "":
			ids = append(ids, gpu)
		}
		gpu, migs = "", nil
	}
	for line := range strings.SplitSeq(output, "\n") {
		line = strings.TrimRight(line, "\r")
		if m := smiGPULine.FindStringSubmatch(line); m != nil {
			flush()
			gpu = m[1]
			continue
		}
		if m := smiMIGLine.FindStringSubmatch(line); m != nil {
			migs = append(migs, m[1])
		}
	}
	flush()
	return ids
}
