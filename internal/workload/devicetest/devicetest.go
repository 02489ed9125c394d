// Package devicetest is the suite's device test, NVIDIA's CUDA vectorAdd sample done by the workload
// binary itself: run in a pod given GPUs, it requires each layer the driver stack must inject (a GPU device
// node, the driver's control device /dev/nvidiactl, nvidia-smi seeing as many GPUs as there are device
// nodes), then, through the injected libcuda (package cuda), allocates memory on every device CUDA shows,
// copies two vectors in, adds them in a kernel, copies the sum out and checks every element. It prints
// each device's name and UUID (which must be one nvidia-smi lists) and the driver's CUDA version.
//
// Without libcuda in the container (the local cluster's fake GPUs, or a runtime that did not inject the
// driver) it is a stand-in: the layers are checked, no kernel runs, and the report says so (StandIn). A
// vendor image can replace it (the suite's --device-test-image).
//
// It reads what the workload probe reads (package probe does the scanning and runs nvidia-smi) and judges
// it differently: the probe counts devices however they show, this test requires each layer of the stack.
package devicetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gpuconform.io/gpuconform/internal/workload/probe"
)

// Passed is the line the test prints last when it passes, the words NVIDIA's vectorAdd sample ends with,
// so one rule reads the verdict of either.
const Passed = "Test PASSED"

// Options point the test at its container. The zero value reads the real one.
type Options struct {
	// Root is the container's file system root: /dev and every PATH entry are read below it. Empty means "/".
	Root string
	// Environ is the environment as KEY=VALUE pairs (PATH, NODE_NAME, POD_NAME); nil means os.Environ().
	Environ []string
	// NvidiaSMITimeout bounds each nvidia-smi call, which can hang on a wedged driver; zero means the
	// probe's default.
	NvidiaSMITimeout time.Duration
	// CUDALibrary is the driver library to open; empty: libcuda.so.1 where the container has it.
	CUDALibrary string
	// Elements is the vectors' length; zero means DefaultElements.
	Elements int
}

// DefaultElements is the vectors' length, vectorAdd's own 50,000.
const DefaultElements = 50_000

// Report is the JSON line the test prints, whether it passes or not: what each layer showed, and what is
// missing.
type Report struct {
	// Node and Pod are the probe's (the downward API's NODE_NAME and POD_NAME).
	Node string `json:"node"`
	Pod  string `json:"pod"`
	// OK is true when nothing is missing.
	OK bool `json:"ok"`
	// DeviceNodes are the /dev/nvidiaN device nodes the container has, by N.
	DeviceNodes []string `json:"device_nodes"`
	// ControlDevice says whether /dev/nvidiactl is there.
	ControlDevice bool `json:"nvidiactl"`
	// NvidiaSMI are the GPUs `nvidia-smi -L` listed (a GPU split into MIG devices once, by its UUID): null
	// when nvidia-smi is not on PATH.
	NvidiaSMI []string `json:"nvidia_smi"`
	// NvidiaSMIIDs are every UUID `nvidia-smi -L` printed (GPUs and MIG devices), which CUDA's must be among.
	NvidiaSMIIDs []string `json:"-"`
	// NvidiaSMIError says why nvidia-smi, although on PATH, listed nothing usable.
	NvidiaSMIError string `json:"nvidia_smi_error,omitempty"`
	// CUDA is what the CUDA driver showed and did; nil when the container has no libcuda (StandIn).
	CUDA *CUDAReport `json:"cuda,omitempty"`
	// StandIn says that no kernel ran and why, and what was checked instead; empty when CUDA ran.
	StandIn string `json:"stand_in,omitempty"`
	// Missing says what failed, one sentence each, in the order the layers stack up; empty when OK.
	Missing []string `json:"missing"`
	// Message is Missing joined, or what passed.
	Message string `json:"message"`
}

// Check gathers the container's view with the workload probe and judges it.
func Check(ctx context.Context, opts Options) Report {
	root := cmpRoot(opts.Root)
	env := opts.Environ
	if env == nil {
		env = os.Environ()
	}
	seen := probe.Gather(ctx, probe.Options{Environ: underRoot(root, env), DevDir: filepath.Join(root, "dev"), NvidiaSMITimeout: opts.NvidiaSMITimeout})
	r := Report{Node: seen.Node, Pod: seen.Pod, DeviceNodes: containerPaths(root, seen.Sources.DevFiles)}
	if r.DeviceNodes == nil {
		r.DeviceNodes = []string{}
	}
	_, err := os.Stat(filepath.Join(root, "dev", "nvidiactl"))
	r.ControlDevice = err == nil
	// The probe leaves nvidia_smi null exactly when the tool is not on PATH (Sources' convention).
	if seen.Sources.NvidiaSMI != nil {
		r.NvidiaSMI = listedGPUs(seen)
		r.NvidiaSMIIDs = seen.Sources.NvidiaSMI
		r.NvidiaSMIError = seen.Sources.NvidiaSMIError
	}
	r.CUDA, r.StandIn = runCUDA(opts)
	judge(&r, pathOf(env))
	return r
}

// judge fills Missing, OK and Message from what r recorded; path is the container's PATH, for the message.
func judge(r *Report, path string) {
	r.Missing = []string{}
	if len(r.DeviceNodes) == 0 {
		r.Missing = append(r.Missing, "no GPU device node (/dev/nvidia[0-9]*) in the container: the runtime injected no GPU")
	}
	if !r.ControlDevice {
		r.Missing = append(r.Missing, "no /dev/nvidiactl in the container: the driver's control device was not injected, so no CUDA program can reach the driver")
	}
	switch {
	case r.NvidiaSMI == nil:
		r.Missing = append(r.Missing, fmt.Sprintf("nvidia-smi is not on PATH (%s): the driver's user-space tools were not injected into the container", path))
	case r.NvidiaSMIError != "":
		r.Missing = append(r.Missing, "nvidia-smi failed: "+r.NvidiaSMIError)
	case len(r.NvidiaSMI) != len(r.DeviceNodes):
		r.Missing = append(r.Missing, fmt.Sprintf("nvidia-smi -L lists %d GPU(s) %s but the container has %d GPU device node(s) %s",
			len(r.NvidiaSMI), list(r.NvidiaSMI), len(r.DeviceNodes), list(r.DeviceNodes)))
	}
	r.Missing = append(r.Missing, judgeCUDA(r.CUDA, r.NvidiaSMIIDs)...)
	r.OK = len(r.Missing) == 0
	if r.OK {
		r.Message = fmt.Sprintf("%d GPU device node(s), /dev/nvidiactl, and nvidia-smi listing the same %d GPU(s)", len(r.DeviceNodes), len(r.NvidiaSMI))
		if r.CUDA != nil {
			r.Message += fmt.Sprintf("; CUDA %s: vectorAdd verified on %d device(s)", r.CUDA.DriverVersion, len(r.CUDA.Devices))
		} else {
			r.Message += "; " + r.StandIn
		}
		return
	}
	r.Message = strings.Join(r.Missing, "; ")
}

// Run checks the container and prints the report as one JSON line on stdout, then Passed when it passed. It
// returns the report; the caller turns OK into the exit code.
func Run(ctx context.Context, opts Options, stdout io.Writer) (Report, error) {
	r := Check(ctx, opts)
	line, err := json.Marshal(r)
	if err != nil {
		return r, fmt.Errorf("encoding device test report: %w", err)
	}
	out := string(line) + "\n"
	if r.OK {
		out += Passed + "\n"
	}
	if _, err := io.WriteString(stdout, out); err != nil {
		return r, fmt.Errorf("writing device test report: %w", err)
	}
	return r, nil
}

// listedGPUs are the GPUs of `nvidia-smi -L`: the probe lists a GPU split into MIG devices as those
// devices, and a container given one MIG device still has its GPU's one device node, so each such GPU
// counts once, by its own UUID.
func listedGPUs(seen probe.Report) []string {
	migs := map[string]string{} // MIG UUID → parent GPU UUID
	for _, m := range seen.MIGDevices {
		migs[m.UUID] = m.Parent
	}
	out := []string{}
	for _, id := range seen.Sources.NvidiaSMI {
		if parent, ok := migs[id]; ok {
			id = parent
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func cmpRoot(root string) string {
	if root == "" {
		return "/"
	}
	return root
}

// underRoot is env with each PATH entry moved below root, so the probe finds the container's nvidia-smi in
// a root that is not "/" (tests). Below such a root an environment without PATH gets an empty one, so the
// probe's default PATH never finds a tool of the machine running the test.
func underRoot(root string, env []string) []string {
	if root == "/" {
		return env
	}
	out := make([]string, 0, len(env)+1)
	if pathOf(env) == pathUnset {
		out = append(out, "PATH=")
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			var dirs []string
			for _, d := range filepath.SplitList(v) {
				if d != "" {
					dirs = append(dirs, filepath.Join(root, d))
				}
			}
			kv = "PATH=" + strings.Join(dirs, string(filepath.ListSeparator))
		}
		out = append(out, kv)
	}
	return out
}

// containerPaths are paths below root as the container names them.
func containerPaths(root string, paths []string) []string {
	if root == "/" || paths == nil {
		return paths
	}
	out := make([]string, len(paths))
	for i, p := range paths {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			rel = p
		}
		out[i] = "/" + rel
	}
	return out
}

// pathUnset is pathOf's answer for an environment without PATH.
const pathUnset = "PATH unset, so the runtime's default"

// pathOf is the PATH the environment gives, as "PATH=…", for a message.
func pathOf(env []string) string {
	for _, kv := range slices.Backward(env) {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			return "PATH=" + v
		}
	}
	return pathUnset
}

func list(l []string) string { return "[" + strings.Join(l, " ") + "]" }
