package probe

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// MIGDevice is one MIG device `nvidia-smi -L` lists in the container, under its parent GPU.
type MIGDevice struct {
	// UUID is the MIG device's UUID ("MIG-…"; drivers before R470 print "MIG-GPU-<uuid>/<gi>/<ci>").
	UUID string `json:"uuid"`
	// Parent is the UUID of the GPU line it is listed under ("GPU-…").
	Parent string `json:"parent"`
	// Profile is the GPU instance profile nvidia-smi names ("3g.40gb").
	Profile string `json:"profile"`
	// GPUIndex is the parent's index on its "GPU N:" line.
	GPUIndex int `json:"gpu_index"`
	// Device is the MIG device's index on its "Device N:" line.
	Device int `json:"device"`
}

// MPS is what the container shows of CUDA MPS, as a real node shows it. NVIDIA's device plugin in MPS mode
// gives a container only the pipe directory of its MPS control daemon (CUDA_MPS_PIPE_DIRECTORY, with the
// daemon's directory mounted there) and sets the per-client limits as that daemon's defaults
// (k8s-device-plugin cmd/mps-control-daemon/mps/daemon.go: set_default_active_thread_percentage,
// set_default_device_pinned_mem_limit <index> <size>M); the NVIDIA container toolkit injects
// nvidia-cuda-mps-control with the compute capability. So the limits here are what the daemon answers
// through nvidia-cuda-mps-control in the container, and only that: CUDA_MPS_* limit variables a user may
// have set are kept apart in Env, for information.
type MPS struct {
	// PipeDirectory is CUDA_MPS_PIPE_DIRECTORY: where the MPS control daemon listens ("" when unset; the
	// client then asks MPS's default, /tmp/nvidia-mps).
	PipeDirectory string `json:"pipe_directory"`
	// ActiveThreadPercentage is the daemon's answer to get_default_active_thread_percentage, a whole number
	// where it is one ("50" for "50.0"); empty when the daemon gave none (Control says why).
	ActiveThreadPercentage string `json:"active_thread_percentage"`
	// PinnedDeviceMemLimit is the daemon's answers to get_default_device_pinned_mem_limit <index>, one per
	// GPU of the container, as "<index>=<answer>" comma-separated ("3=40779M"); empty when the daemon gave
	// none. The index is the GPU's on the node (its /dev/nvidiaN), the one NVIDIA's plugin sets it under.
	PinnedDeviceMemLimit string `json:"pinned_device_mem_limit"`
	// LimitsFrom is MPSControl when the limits are the daemon's answers; empty when it gave none.
	LimitsFrom string `json:"limits_from,omitempty"`
	// Control is how asking the daemon went: MPSControlAnswered, MPSControlNotInstalled,
	// MPSControlNoAnswer or MPSControlEmpty.
	Control string `json:"control,omitempty"`
	// ControlError says, in the container's words, why the daemon gave no limits.
	ControlError string `json:"control_error,omitempty"`
	// Asked is every command sent to nvidia-cuda-mps-control, with its answer.
	Asked []MPSAnswer `json:"asked,omitempty"`
	// Env holds the CUDA_MPS_* limit variables set in the container, if any: a user's own per-client
	// limits, which NVIDIA's plugin does not set. Informational only: no check is satisfied by them.
	Env *MPSEnv `json:"env,omitempty"`
	// CUDA is what a CUDA program under MPS saw in the container; nil when none ran.
	CUDA *MPSContext `json:"cuda,omitempty"`
}

// MPSAnswer is one command sent to nvidia-cuda-mps-control and what it printed.
type MPSAnswer struct {
	Command string `json:"command"`
	Answer  string `json:"answer"`
	// Error is how the client failed (its exit status, a timeout); empty when it answered.
	Error string `json:"error,omitempty"`
}

// MPSEnv are the CUDA_MPS_* limit variables of the container, as set.
type MPSEnv struct {
	ActiveThreadPercentage string `json:"active_thread_percentage,omitempty"`
	PinnedDeviceMemLimit   string `json:"pinned_device_mem_limit,omitempty"`
}

// MPSContext is what a CUDA program under MPS saw: its context's SM count beside the device's, the pinned
// memory limit it reported, and whether an allocation above that limit failed, as the limit promises.
// StandIn names what stood in for a real CUDA context (no driver in the container), if anything did.
type MPSContext struct {
	SMCount                   int    `json:"sm_count"`
	DeviceSMCount             int    `json:"device_sm_count"`
	MemoryLimitBytes          uint64 `json:"memory_limit_bytes"`
	OverLimitAllocationFailed bool   `json:"over_limit_allocation_failed"`
	StandIn                   string `json:"stand_in,omitempty"`
	// Error is the CUDA call that failed under MPS (a client that cannot reach its server fails cuInit or
	// its context with CUDA_ERROR_MPS_CONNECTION_FAILED).
	Error string `json:"error,omitempty"`
}

// MPSControl is the MPS control client the NVIDIA container toolkit mounts beside nvidia-smi.
const MPSControl = "nvidia-cuda-mps-control"

// The commands that read the defaults NVIDIA's plugin sets on its daemon (NVIDIA's MPS documentation,
// "nvidia-cuda-mps-control"; the plugin's own health check sends the first).
const (
	MPSGetActiveThreadPercentage = "get_default_active_thread_percentage"
	MPSGetPinnedDeviceMemLimit   = "get_default_device_pinned_mem_limit" // followed by the device index
)

// How asking the MPS control daemon went (MPS.Control).
const (
	// MPSControlAnswered: the daemon answered every command.
	MPSControlAnswered = "answered"
	// MPSControlNotInstalled: nvidia-cuda-mps-control is not on the container's PATH.
	MPSControlNotInstalled = "not-installed"
	// MPSControlNoAnswer: the client failed or timed out (the real one prints "Cannot find MPS control
	// daemon process" and exits 1 when no daemon listens behind the pipe directory).
	MPSControlNoAnswer = "no-answer"
	// MPSControlEmpty: the client exited 0 and printed nothing.
	MPSControlEmpty = "empty-answer"
)

// mpsControlQuery runs nvidia-cuda-mps-control with one command on its stdin and returns its trimmed
// answer; an error says how it failed (exit status and words, or a timeout).
type mpsControlQuery func(command string) (string, error)

// readMPSDaemon asks the daemon behind the container's pipe directory for its defaults, through query
// (nil: the client is not installed, path is the PATH searched): the active thread percentage, then the
// pinned memory limit of each GPU index. It stops at the first command that gets no answer and records
// how, so a missing client, a daemon that does not answer and an empty answer read apart.
func readMPSDaemon(m *MPS, indexes []int, query mpsControlQuery, path string) {
	if m == nil {
		return
	}
	if query == nil {
		m.Control = MPSControlNotInstalled
		m.ControlError = fmt.Sprintf("%s is not on the container's PATH (PATH=%s): the NVIDIA container toolkit injects it with the compute driver capability", MPSControl, path)
		return
	}
	pipe := m.PipeDirectory
	if pipe == "" {
		pipe = "unset, so MPS's default /tmp/nvidia-mps"
	}
	ask := func(command string) (string, bool) {
		out, err := query(command)
		a := MPSAnswer{Command: command, Answer: out}
		switch {
		case err != nil:
			a.Error = err.Error()
			m.Control = MPSControlNoAnswer
			m.ControlError = fmt.Sprintf("%s, asked %q with CUDA_MPS_PIPE_DIRECTORY %s, did not answer: %v", MPSControl, command, pipe, err)
			if out != "" {
				m.ControlError += ": " + out
			}
		case out == "":
			m.Control = MPSControlEmpty
			m.ControlError = fmt.Sprintf("%s, asked %q with CUDA_MPS_PIPE_DIRECTORY %s, answered nothing", MPSControl, command, pipe)
		}
		m.Asked = append(m.Asked, a)
		return out, err == nil && out != ""
	}
	pct, ok := ask(MPSGetActiveThreadPercentage)
	if !ok {
		return
	}
	if len(indexes) == 0 {
		indexes = []int{0}
	}
	parts := make([]string, 0, len(indexes))
	for _, i := range indexes {
		limit, ok := ask(fmt.Sprintf("%s %d", MPSGetPinnedDeviceMemLimit, i))
		if !ok {
			return
		}
		parts = append(parts, fmt.Sprintf("%d=%s", i, limit))
	}
	m.ActiveThreadPercentage, m.PinnedDeviceMemLimit = wholeNumber(pct), strings.Join(parts, ",")
	m.Control, m.LimitsFrom = MPSControlAnswered, MPSControl
}

// gpuIndexes are the node indexes of the GPUs whose device nodes the container has (/dev/nvidiaN): the
// index NVIDIA's plugin sets a GPU's pinned memory limit under on its daemon.
func gpuIndexes(devFiles []string) []int {
	var out []int
	for _, f := range devFiles {
		if m := devFileName.FindStringSubmatch(filepath.Base(f)); m != nil {
			n, _ := strconv.Atoi(m[1])
			out = append(out, n)
		}
	}
	return out
}

// wholeNumber drops a zero fraction ("50.0" → "50"), as the daemon prints percentages.
func wholeNumber(s string) string {
	if f, err := strconv.ParseFloat(s, 64); err == nil && f == float64(int64(f)) {
		return strconv.FormatInt(int64(f), 10)
	}
	return s
}

// mpsPrefix starts every variable CUDA's MPS client reads.
const mpsPrefix = "CUDA_MPS_"

// mpsFromEnv reads the MPS variables; nil when no CUDA_MPS_* variable is set, so a container that was not
// given an MPS share reads as such rather than as one with empty limits. The limits stay empty: they are
// the daemon's to give (readMPSDaemon); limit variables go to Env.
func mpsFromEnv(env map[string]string) *MPS {
	set := false
	for k := range env {
		set = set || strings.HasPrefix(k, mpsPrefix)
	}
	if !set {
		return nil
	}
	m := &MPS{PipeDirectory: env["CUDA_MPS_PIPE_DIRECTORY"]}
	if pct, mem := env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]; pct != "" || mem != "" {
		m.Env = &MPSEnv{ActiveThreadPercentage: pct, PinnedDeviceMemLimit: mem}
	}
	return m
}

// ParsePinnedMemLimit reads pinned memory limits in CUDA's "<device>=<size>" form ("0=40960M,1=20G": a
// size in MB, or in GB with G, as CUDA's MPS documentation writes it; a bare number is bytes, so the "0"
// of a daemon with no limit reads as 0) into MiB per device: MPS.PinnedDeviceMemLimit, or
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT. An entry it cannot read is an error naming it.
func ParsePinnedMemLimit(v string) (map[int]int64, error) {
	out := map[int]int64{}
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		ord, size, ok := strings.Cut(part, "=")
		n, errOrd := strconv.Atoi(strings.TrimSpace(ord))
		size = strings.TrimSpace(size)
		if !ok || errOrd != nil || n < 0 || size == "" {
			return nil, fmt.Errorf("pinned device memory limit %q: entry %q is not <ordinal>=<size>[M|G]", v, part)
		}
		unit, div := int64(1), int64(1<<20)
		switch strings.ToUpper(size[len(size)-1:]) {
		case "M":
			unit, div, size = 1, 1, size[:len(size)-1]
		case "G":
			unit, div, size = 1024, 1, size[:len(size)-1]
		}
		amount, err := strconv.ParseInt(size, 10, 64)
		if err != nil || amount < 0 {
			return nil, fmt.Errorf("pinned device memory limit %q: entry %q has no size CUDA reads", v, part)
		}
		out[n] = amount * unit / div
	}
	return out, nil
}

var (
	smiGPUIndexLine = regexp.MustCompile(`^GPU\s+(\d+):.*\(UUID:\s*([^)\s]+)\s*\)`)
	smiMIGFullLine  = regexp.MustCompile(`^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*([^)\s]+)\s*\)`)
)

// ParseNvidiaSMIMIG reads the MIG devices from `nvidia-smi -L` output, each with the GPU line it is listed
// under:
//
//	GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5e2a...)
//	  MIG 3g.40gb     Device  0: (UUID: MIG-1b2c...)
//
// Never nil: an output without MIG devices gives an empty list.
func ParseNvidiaSMIMIG(output string) []MIGDevice {
	out := []MIGDevice{}
	parent, index := "", 0
	for line := range strings.SplitSeq(output, "\n") {
		line = strings.TrimRight(line, "\r")
		if m := smiGPUIndexLine.FindStringSubmatch(line); m != nil {
			index, _ = strconv.Atoi(m[1])
			parent = m[2]
			continue
		}
		if m := smiMIGFullLine.FindStringSubmatch(line); m != nil {
			dev, _ := strconv.Atoi(m[2])
			out = append(out, MIGDevice{UUID: m[3], Parent: parent, Profile: m[1], GPUIndex: index, Device: dev})
		}
	}
	return out
}
