package probe

import (
	"sort"
	"strings"
)

// UnionRule documents how Devices is computed from Sources. It is exported so the suite can quote it
// in a failure message when a count surprises someone.
//
//  1. Identities come from nvidia-smi UUIDs, the specific entries of NVIDIA_VISIBLE_DEVICES, the
//     GPU_DEVICE_<n> values of the DRA environment and GPUCONFORM_VISIBLE_DEVICES. They are unioned
//     and deduplicated by exact string, so a real NVIDIA container, where NVIDIA_VISIBLE_DEVICES and
//     nvidia-smi name the same UUIDs, counts each GPU once.
//  2. When nvidia-smi listed at least one device, NVIDIA_VISIBLE_DEVICES entries that are not UUIDs
//     (host indexes such as "0") are left out: nvidia-smi renumbers GPUs inside the container, so an
//     index cannot be matched to a UUID and keeping it would count the same GPU twice. UUID entries
//     are kept, so a UUID the runtime was told about but nvidia-smi cannot see still shows up.
//  3. /dev/nvidiaN files are host minor numbers, not identities: they are reported in
//     sources.dev_files and counted only when no other source named a device (a container that was
//     given bare device nodes), never in addition to identities.
const UnionRule = "union of nvidia-smi UUIDs, NVIDIA_VISIBLE_DEVICES entries (indexes dropped when " +
	"nvidia-smi listed devices), DRA GPU_DEVICE_<n> values and GPUCONFORM_VISIBLE_DEVICES, deduplicated; " +
	"/dev/nvidiaN counted only when no other source named a device"

// nonSpecificVisibleDevices are NVIDIA_VISIBLE_DEVICES values that select no particular device.
var nonSpecificVisibleDevices = map[string]bool{"all": true, "none": true, "void": true, "": true}

// union applies UnionRule to s and returns the sorted device set and the sources that contributed.
func union(s Sources) (devices []string, countedFrom []string) {
	seen := map[string]bool{}
	add := func(source string, ids ...string) {
		contributed := false
		for _, id := range ids {
			if id == "" {
				continue
			}
			contributed = true
			seen[id] = true
		}
		if contributed && !contains(countedFrom, source) {
			countedFrom = append(countedFrom, source)
		}
	}

	add(SourceNvidiaSMI, s.NvidiaSMI...)
	for _, v := range s.NvidiaVisibleDevices {
		if nonSpecificVisibleDevices[strings.ToLower(v)] {
			continue
		}
		if len(s.NvidiaSMI) > 0 && !looksLikeUUID(v) {
			continue
		}
		add(SourceNvidiaVisibleDevices, v)
	}
	for _, key := range sortedKeys(s.DRAEnv) {
		if draDeviceKey.MatchString(key) {
			add(SourceDRAEnv, s.DRAEnv[key])
		}
	}
	add(SourceGPUConformVisibleDevices, s.GPUConformVisibleDevices...)
	if len(seen) == 0 {
		add(SourceDevFiles, s.DevFiles...)
	}

	devices = make([]string, 0, len(seen))
	for id := range seen {
		devices = append(devices, id)
	}
	sort.Strings(devices)
	if countedFrom == nil {
		countedFrom = []string{}
	}
	return devices, countedFrom
}

// looksLikeUUID reports whether an NVIDIA_VISIBLE_DEVICES entry names a GPU or MIG instance by UUID
// rather than by index.
func looksLikeUUID(v string) bool {
	return strings.HasPrefix(v, "GPU-") || strings.HasPrefix(v, "MIG-")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
