// Package localcluster brings up the project's local, offline GPU test cluster: kind nodes running
// Kubernetes built from the Go module proxy, a node image assembled from a Debian rootfs, every image the
// cluster runs built here (nothing is ever pulled), Kueue, and the fake GPU stack.
//
// It is infrastructure, not test logic: the CLI (`gpuconform cluster up|down|logs`) and `make e2e` call
// it, and the suites only receive the kubeconfig it writes. Every step is idempotent and keyed by the
// content of its inputs (see KeyBuilder), and every host workaround is decided in host.go.
package localcluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// Options configure the local cluster.
type Options struct {
	// Name is the kind cluster name.
	Name string
	// RepoRoot is the project checkout (it holds the wrapper modules and the sources of our own images).
	RepoRoot string
	// CacheDir holds content-keyed build outputs shared by every checkout on this machine.
	CacheDir string
	// OutputDir receives the kubeconfig and the logs of this checkout.
	OutputDir string
	// NodeImage, when set, is used instead of building a node image (e.g. an upstream kindest/node).
	NodeImage string
	// GPUWorkers and CanaryWorkers size the two pools.
	GPUWorkers, CanaryWorkers int
	// DRAOnlyWorkers of the GPU workers (the last ones) run no device plugin (DevicePluginOffLabel=false
	// from creation): the agent's DRA driver alone serves their GPUs, and its DeviceClass maps nvidia.com/gpu
	// to them (extendedResourceName), so unchanged pods asking for nvidia.com/gpu get DRA devices there: the
	// extended-resource-dra path. 0: no such worker and no mapping.
	DRAOnlyWorkers int
	// DevicesPerNode is how many fake devices each GPU/canary node advertises on each allocation path.
	DevicesPerNode int
	// Replicas is the time-slicing factor of the device-plugin half: each fake GPU is advertised Replicas
	// times, as NVIDIA's time-slicing does ("<uuid>::<n>" IDs, GFD's sharing labels). 1 = whole GPUs.
	// It is the agent's flag, so changing it on a running cluster rolls the agent, nothing else.
	Replicas int
	// Sharing is the agent's sharing mode (fakegpu.SharingModes: none, time-slicing, mps, mig-single,
	// mig-mixed); "" derives it from Replicas as before the modes existed: time-slicing above 1, else none.
	// Time-slicing and MPS need Replicas of at least 2, every other mode 1. Like Replicas it is the agent's
	// flag: changing it rolls the agent, nothing else, and installs or removes the mig.nvidia.com
	// DeviceClass.
	Sharing string
	// RenameShared advertises the time-sliced or MPS GPUs as nvidia.com/gpu.shared, as NVIDIA's plugin
	// does with renameByDefault (nvidia.com/gpu then drops to 0). Like Sharing it is the agent's flag.
	RenameShared bool
	// DRADriver chooses the DRA half of the fake GPU stack: DRADriverFake (the project's agent, driver
	// gpu.nvidia.com, sharing one inventory and the device nodes with the device plugin) or DRADriverExample
	// (the community dra-example-driver, driver gpu.example.com, environment variables only).
	DRADriver string
	// SharedDir is the host directory every worker mounts at NodeSharedDir (checkpoint storage that
	// outlives a node); empty: none.
	SharedDir string
	// Log receives progress lines.
	Log io.Writer
}

// DefaultOptions returns the options of the standard local cluster for the checkout at repoRoot.
func DefaultOptions(repoRoot string) Options {
	cache := os.Getenv("GPUCONFORM_CACHE")
	if cache == "" {
		if d, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(d, "gpuconform")
		} else {
			cache = filepath.Join(repoRoot, "_output", "cache")
		}
	}
	return Options{
		Name:      "gpuconform",
		RepoRoot:  repoRoot,
		CacheDir:  cache,
		OutputDir: filepath.Join(repoRoot, "_output"),
		// Four, the last of them DRA-only (DRAOnlyWorkers): the specs that hold one node of a path, the gangs
		// (which lease one or two) and the node stoppers spread over three device-plugin nodes instead of two,
		// so the device-plugin path's holders do not queue behind each other.
		GPUWorkers:     4,
		CanaryWorkers:  1,
		DRAOnlyWorkers: 1,
		DevicesPerNode: 4,
		Replicas:       replicasFromEnv(os.Getenv(EnvReplicas)),
		Sharing:        strings.TrimSpace(os.Getenv(EnvSharing)),
		RenameShared:   os.Getenv(EnvRenameShared) == "true",
		DRADriver:      DRADriverFake,
		SharedDir:      filepath.Join(cache, "shared", "gpuconform"),
		Log:            os.Stderr,
	}
}

// EnvReplicas sets Options.Replicas of DefaultOptions, so `make cluster` and the targets that depend on it
// bring the cluster up time-sliced without a flag: GPUCONFORM_REPLICAS=2 make e2e.
const EnvReplicas = "GPUCONFORM_REPLICAS"

// EnvSharing sets Options.Sharing of DefaultOptions, like EnvReplicas: GPUCONFORM_SHARING=mig-mixed make e2e.
const EnvSharing = "GPUCONFORM_SHARING"

// EnvRenameShared set to "true" sets Options.RenameShared of DefaultOptions: GPUCONFORM_SHARING=time-slicing
// GPUCONFORM_REPLICAS=2 GPUCONFORM_RENAME_SHARED=true make e2e.
const EnvRenameShared = "GPUCONFORM_RENAME_SHARED"

// replicasFromEnv reads EnvReplicas: unset is 1 (whole GPUs); a value that is not a number is 0, which
// New refuses, naming the variable.
func replicasFromEnv(v string) int {
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0
	}
	return n
}

// Validate reports the first option the cluster cannot be brought up with, before anything is created:
// the CLI calls it to refuse a bad combination as a usage error, and New calls it again.
func (o Options) Validate() error {
	mode := o.SharingMode()
	switch {
	case o.GPUWorkers < 1 || o.CanaryWorkers < 0:
		return fmt.Errorf("need at least 1 GPU worker and 0 or more canary workers (got %d, %d)", o.GPUWorkers, o.CanaryWorkers)
	case o.DRAOnlyWorkers < 0 || o.DRAOnlyWorkers >= o.GPUWorkers:
		return fmt.Errorf("--dra-only-workers %d: from 0 to one less than the GPU workers (%d), so the device-plugin path keeps a GPU worker of its own", o.DRAOnlyWorkers, o.GPUWorkers)
	case o.DRAOnlyWorkers > 0 && o.DRADriver == DRADriverExample:
		return fmt.Errorf("--dra-only-workers %d maps nvidia.com/gpu to the fake agent's DRA GPUs, which --dra-driver=%s replaces; pass --dra-only-workers 0 with it", o.DRAOnlyWorkers, DRADriverExample)
	case o.Replicas < 1:
		return fmt.Errorf("time-slicing replicas must be a number of at least 1 (--replicas, or %s in the environment); got %d", EnvReplicas, o.Replicas)
	case !slices.Contains(fakegpu.SharingModes, mode):
		return fmt.Errorf("sharing mode %q (--sharing, or %s in the environment) is not one of %s", mode, EnvSharing, strings.Join(fakegpu.SharingModes, ", "))
	case (mode == fakegpu.SharingTimeSlicing || mode == fakegpu.SharingMPS) && o.Replicas < 2:
		return fmt.Errorf("sharing mode %s shares each GPU among replicas: set --replicas (or %s) to 2 or more; got %d", mode, EnvReplicas, o.Replicas)
	case mode != fakegpu.SharingTimeSlicing && mode != fakegpu.SharingMPS && o.Replicas != 1:
		return fmt.Errorf("--replicas %d (or %s) applies to the time-slicing and mps sharing modes only; sharing mode %s needs 1 (or pass --sharing time-slicing)", o.Replicas, EnvReplicas, mode)
	case o.RenameShared && mode != fakegpu.SharingTimeSlicing && mode != fakegpu.SharingMPS:
		return fmt.Errorf("--rename-shared (or %s) renames a time-sliced or MPS resource; sharing mode %s shares nothing to rename (pass --sharing time-slicing --replicas 2)", EnvRenameShared, mode)
	}
	return nil
}

// SharingMode is the sharing mode the agent runs in: Sharing, or when it is empty the mode Replicas
// implies (time-slicing above 1, else none), so GPUCONFORM_REPLICAS=2 alone keeps meaning time-slicing.
func (o Options) SharingMode() string { return fakegpu.ModeOf(o.Sharing, o.Replicas) }

// gpuStack is the fake GPU stack these options ask for, its agent running tools (the tools image).
func (o Options) gpuStack(tools string) GPUStackOptions {
	s := GPUStackOptions{Image: tools, Devices: o.DevicesPerNode, ResourceName: GPUResource, Replicas: o.Replicas, Sharing: o.SharingMode(), RenameShared: o.RenameShared,
		DriverVersion: "550.54.15", UpgradeTo: "560.35.03", PluginVersion: "v1", PluginUpgradeTo: "v2", DriverName: DRADriverName, DRADevices: o.DevicesPerNode}
	if o.DRADriver == DRADriverExample {
		s.DriverName, s.DRADevices, s.ExampleDRADriver = ExampleDRADriverName, 0, true
	}
	if o.DRAOnlyWorkers > 0 {
		s.ExtendedResource = GPUResource
	}
	return s
}

// Cluster drives one local cluster.
type Cluster struct {
	opts   Options
	quirks HostQuirks
	logDir string
	// built records the outputs of this run's build steps, by name (setBuilt, binary: Kueue's build runs
	// beside other steps).
	builtMu sync.Mutex
	built   map[string]string
	// progress is shared with the heartbeats of the running step (progress.go).
	progress progressState
	// rootfs is the node rootfs built beside the Kubernetes build (up.go's beside), for buildAll.
	rootfs *background
	// builds are the component builds started in the background (startBuild), by component name: Kueue's
	// and the tools', which the steps that load their images wait for.
	buildsMu sync.Mutex
	builds   map[string]*background
}

// New prepares a Cluster; it detects the host's quirks but changes nothing.
func New(opts Options) (*Cluster, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	q, err := DetectQuirks()
	if err != nil {
		return nil, fmt.Errorf("inspect host: %w", err)
	}
	logDir := filepath.Join(opts.OutputDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	return &Cluster{opts: opts, quirks: q, logDir: logDir, built: map[string]string{}}, nil
}

// Kubeconfig is where the cluster's kubeconfig is written.
func (c *Cluster) Kubeconfig() string { return filepath.Join(c.opts.OutputDir, "kubeconfig") }

// logf writes one progress line; a running step's heartbeats write from another goroutine.
func (c *Cluster) logf(format string, args ...any) {
	c.progress.mu.Lock()
	defer c.progress.mu.Unlock()
	fmt.Fprintf(c.opts.Log, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// logFile names the log file of a command.
func (c *Cluster) logFile(what string) string {
	r := strings.NewReplacer(" ", "-", "/", "-", ":", "-")
	return filepath.Join(c.logDir, r.Replace(what)+".log")
}

// run executes a command with its output in a log file; an error names the command and the log.
func (c *Cluster) run(ctx context.Context, what string, name string, args ...string) error {
	return c.runIn(ctx, "", nil, what, name, args...)
}

// runIn is run with a working directory and extra environment.
func (c *Cluster) runIn(ctx context.Context, dir string, env []string, what string, name string, args ...string) error {
	path := c.logFile(what)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	c.setActiveLog(path)
	fmt.Fprintf(f, "$ %s %s\n", name, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w (log: %s%s)", what, err, path, tailOf(path))
	}
	return nil
}

// output runs a command and returns its trimmed stdout; stderr is part of the error.
func output(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// tailOf returns the last lines of a log, for error messages.
func tailOf(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return "; last lines:\n    " + strings.Join(lines, "\n    ")
}

// FindRepoRoot walks up from dir to the checkout of this project.
func FindRepoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module gpuconform.io/gpuconform\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("%s is not inside a gpuconform checkout (no go.mod of module gpuconform.io/gpuconform above it)", dir)
		}
	}
}
