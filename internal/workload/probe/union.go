package probe

import (
	"maps"
	"slices"
	"strings"
)

// UnionRule documents how Devices is computed from Sources. It is exported so the suite can quote it
// in a failure message when a count surprises someone. What a real runtime gives a container is the truth:
// device nodes and nvidia-smi (which lists the GPUs whose device nodes it can open) are primary; the
// environment only says what someone asked the runtime to do.
//
//  1. When nvidia-smi ran and answered (a list, or "No devices were found"), its UUIDs are the devices,
//     and nothing else counts: an NVIDIA_VISIBLE_DEVICES entry nvidia-smi cannot see is a GPU the
//     container does not have. A GPU split into MIG instances counts as its instances.
//  2. Otherwise, when /dev/nvidiaN device nodes exist, there are that many devices; they are named by the
//     identities the environment gives (NVIDIA_VISIBLE_DEVICES UUIDs, DRA GPU_DEVICE_<n> values,
//     GPUCONFORM_VISIBLE_DEVICES) when those name exactly as many, else by the device node paths.
//  3. Otherwise the environment's identities are the devices. NVIDIA_VISIBLE_DEVICES=all counts as
//     "all devices of the node" (the single entry AllDevices), never as none: under the NVIDIA runtime it
//     exposes every GPU, and without device nodes or nvidia-smi the probe cannot tell that runtime did not
//     run. Host indexes ("0") in NVIDIA_VISIBLE_DEVICES are counted as given.
const UnionRule = "nvidia-smi's UUIDs when it ran (nothing else counts then); else one device per /dev/nvidiaN, " +
	"named by the environment's identities when they match in number; else the union of NVIDIA_VISIBLE_DEVICES " +
	"entries (all = every GPU of the node), DRA GPU_DEVICE_<n> values and GPUCONFORM_VISIBLE_DEVICES"

// AllDevices is the single entry of Devices when the container was given NVIDIA_VISIBLE_DEVICES=all and no
// primary source says which GPUs that is.
const AllDevices = "all"

// nonSpecificVisibleDevices are NVIDIA_VISIBLE_DEVICES values that select no particular device.
var nonSpecificVisibleDevices = map[string]bool{"none": true, "void": true, "": true}

// union applies UnionRule to s and returns the sorted device set and the sources that contributed.
func union(s Sources) (devices []string, countedFrom []string) {
	if s.NvidiaSMI != nil && s.NvidiaSMIError == "" {
		devices = dedupSorted(s.NvidiaSMI)
		return devices, []string{SourceNvidiaSMI}
	}
	envIDs, envFrom, all := environmentIDs(s)
	if len(s.DevFiles) > 0 {
		if len(envIDs) == len(s.DevFiles) && !all {
			return envIDs, append(envFrom, SourceDevFiles)
		}
		return dedupSorted(s.DevFiles), []string{SourceDevFiles}
	}
	if all {
		return []string{AllDevices}, []string{SourceNvidiaVisibleDevices}
	}
	return envIDs, envFrom
}

// environmentIDs collects the identities the environment names, the sources that named them, and whether
// NVIDIA_VISIBLE_DEVICES asked for all GPUs.
func environmentIDs(s Sources) (ids []string, from []string, all bool) {
	var raw []string
	note := func(source string, add []string) {
		n := 0
		for _, id := range add {
			if id != "" {
				raw = append(raw, id)
				n++
			}
		}
		if n > 0 && !slices.Contains(from, source) {
			from = append(from, source)
		}
	}
	var visible []string
	for _, v := range s.NvidiaVisibleDevices {
		switch {
		case strings.EqualFold(v, AllDevices):
			all = true
		case !nonSpecificVisibleDevices[strings.ToLower(v)]:
			visible = append(visible, v)
		}
	}
	note(SourceNvidiaVisibleDevices, visible)
	var dra []string
	for _, key := range slices.Sorted(maps.Keys(s.DRAEnv)) {
		if draDeviceKey.MatchString(key) {
			dra = append(dra, s.DRAEnv[key])
		}
	}
	note(SourceDRAEnv, dra)
	note(SourceGPUConformVisibleDevices, s.GPUConformVisibleDevices)
	if from == nil {
		from = []string{}
	}
	return dedupSorted(raw), from, all
}
