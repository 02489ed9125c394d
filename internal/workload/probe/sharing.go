package probe

import (
	"fmt"
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

// MPS is what the container was told of CUDA MPS: the variables NVIDIA's device plugin sets for an
// MPS-shared GPU, each as set ("" when unset).
type MPS struct {
	// PipeDirectory is CUDA_MPS_PIPE_DIRECTORY: where the MPS control daemon listens.
	PipeDirectory string `json:"pipe_directory"`
	// ActiveThreadPercentage is CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: the share of the GPU's threads a
	// client may use.
	ActiveThreadPercentage string `json:"active_thread_percentage"`
	// PinnedDeviceMemLimit is CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, in CUDA's format "<ordinal>=<size>[M|G]",
	// comma-separated per visible device (ParsePinnedMemLimit reads it).
	PinnedDeviceMemLimit string `json:"pinned_device_mem_limit"`
	// LimitsFrom says where the limits were read: "env" (the container's CUDA_MPS_* variables) or
	// "nvidia-cuda-mps-control" (the MPS control daemon's defaults, asked through the pipe directory when
	// the variables are unset: NVIDIA's device plugin gives a container only the pipe directory, and its
	// MPS daemon applies the limits as defaults). Empty when no limit was found.
	LimitsFrom string `json:"limits_from,omitempty"`
}

// MPSControl is the MPS control client the NVIDIA container toolkit mounts beside nvidia-smi.
const MPSControl = "nvidia-cuda-mps-control"

// mpsControlQuery runs one command of the MPS control daemon (its commands are read from stdin) and
// returns its trimmed answer.
type mpsControlQuery func(command string) (string, error)

// fillMPSFromDaemon completes limits the environment lacks from the MPS control daemon's defaults for
// the container's device 0..n-1 (get_default_active_thread_percentage, get_default_device_pinned_mem_limit).
// A limit the daemon does not answer stays empty, so the check names it as missing.
func fillMPSFromDaemon(m *MPS, devices int, query mpsControlQuery) {
	if m == nil || query == nil || m.PipeDirectory == "" {
		return
	}
	if m.ActiveThreadPercentage != "" || m.PinnedDeviceMemLimit != "" {
		m.LimitsFrom = "env"
	}
	if m.ActiveThreadPercentage != "" && m.PinnedDeviceMemLimit != "" {
		return
	}
	asked := false
	if m.ActiveThreadPercentage == "" {
		if out, err := query("get_default_active_thread_percentage"); err == nil && out != "" {
			m.ActiveThreadPercentage, asked = wholeNumber(out), true
		}
	}
	if m.PinnedDeviceMemLimit == "" {
		var parts []string
		for d := range max(devices, 1) {
			out, err := query(fmt.Sprintf("get_default_device_pinned_mem_limit %d", d))
			if err != nil || out == "" {
				parts = nil
				break
			}
			parts = append(parts, fmt.Sprintf("%d=%s", d, out))
		}
		if len(parts) > 0 {
			m.PinnedDeviceMemLimit, asked = strings.Join(parts, ","), true
		}
	}
	if asked && m.LimitsFrom == "" {
		m.LimitsFrom = MPSControl
	}
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
// given an MPS share reads as such rather than as one with empty limits.
func mpsFromEnv(env map[string]string) *MPS {
	set := false
	for k := range env {
		set = set || strings.HasPrefix(k, mpsPrefix)
	}
	if !set {
		return nil
	}
	return &MPS{
		PipeDirectory:          env["CUDA_MPS_PIPE_DIRECTORY"],
		ActiveThreadPercentage: env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"],
		PinnedDeviceMemLimit:   env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"],
	}
}

// ParsePinnedMemLimit reads CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=40960M,1=20G": per device ordinal, a
// size in MB, or in GB with G, as CUDA's MPS documentation writes it; a bare number is bytes) into MiB per
// ordinal. An entry it cannot read is an error naming it.
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
