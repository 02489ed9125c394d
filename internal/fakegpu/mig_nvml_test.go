//go:build cgo

package fakegpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
)

// TestProfilesMatchNVML checks the fake's MIG geometry against NVIDIA's own model of the H100 80GB:
// go-nvml's mock DGX H100. The mock needs cgo (pkg/nvml is cgo bindings), which the fake agent's static
// build has not, so the table is the fake's and this test keeps it NVIDIA's (make unit runs it with cgo).
func TestProfilesMatchNVML(t *testing.T) {
	server := dgxh100.New()
	device, ret := server.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatalf("mock DGX H100 has no device 0: %v", ret)
	}
	name, _ := device.GetName()
	if name != "NVIDIA H100 80GB HBM3" {
		t.Errorf("mock GPU is %q; the fake's product and profiles are the H100 80GB HBM3's", name)
	}
	byName := map[string]nvml.GpuInstanceProfileInfo{}
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := device.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS {
			continue
		}
		byName[profileName(info)] = info
	}
	for _, p := range H100Profiles {
		info, ok := byName[p.Name]
		if !ok {
			t.Errorf("profile %s: the mock H100 has no such profile (it has %v)", p.Name, keys(byName))
			continue
		}
		if int(info.SliceCount) != p.Slices || int(info.MemorySizeMB) != p.MemoryMiB || int(info.MultiprocessorCount) != p.Multiprocessors {
			t.Errorf("profile %s: fake has %d slices, %d MiB, %d SMs; NVIDIA's mock %d, %d, %d", p.Name,
				p.Slices, p.MemoryMiB, p.Multiprocessors, info.SliceCount, info.MemorySizeMB, info.MultiprocessorCount)
		}
		placements, ret := device.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			t.Errorf("profile %s: placements: %v", p.Name, ret)
			continue
		}
		var starts []int
		for _, pl := range placements {
			starts = append(starts, int(pl.Start))
		}
		if !equalInts(starts, p.Starts) {
			t.Errorf("profile %s: fake places it at %v, NVIDIA's mock at %v", p.Name, p.Starts, starts)
		}
	}
}

// profileName is NVIDIA's "<slices>g.<memory>gb" name of a GPU instance profile, the way the device
// plugin builds it from the profile info (memory rounded to whole GB).
func profileName(info nvml.GpuInstanceProfileInfo) string {
	gb := (info.MemorySizeMB + 1023) / 1024
	return itoa(int(info.SliceCount)) + "g." + itoa(int(gb)) + "gb"
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

func keys(m map[string]nvml.GpuInstanceProfileInfo) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
