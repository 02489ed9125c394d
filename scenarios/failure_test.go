package scenarios

import (
	"testing"

	"gpuconform.io/gpuconform/framework/faults"
	"gpuconform.io/gpuconform/framework/gpu"
)

// A device fault names the device as the allocation result does on every claim-based path: the scheduler's
// claim on extended-resource-dra names pool and device like a pod's own claim on dra; the device plugin
// knows only the ID.
func TestVictimDeviceNamesTheClaimsDeviceOnEveryClaimPath(t *testing.T) {
	given := gpu.Allocation{Devices: []string{"GPU-1"}, DeviceRefs: []string{"w2/gpu-5"}}
	dra := &gpu.DRA{Driver: "gpu.nvidia.com", DeviceClass: "gpu.nvidia.com"}
	want := faults.Device{Node: "w2", ID: "GPU-1", Driver: "gpu.nvidia.com", Pool: "w2", Name: "gpu-5"}
	for _, p := range []gpu.Path{dra, &gpu.ExtendedDRA{DRA: dra, Resource: "nvidia.com/gpu"}} {
		if got := victimDevice(p, "w2", given); got != want {
			t.Errorf("%s: victimDevice = %+v, want %+v", p.Name(), got, want)
		}
	}
	// Two drivers behind one path: the fault cannot name the driver, only pool and device.
	if got := victimDevice(&gpu.DRA{Driver: "a.example.com,b.example.com"}, "w2", given); got.Driver != "" || got.Name != "gpu-5" {
		t.Errorf("two drivers: victimDevice = %+v", got)
	}
	if got := victimDevice(&gpu.DevicePlugin{Resource: "nvidia.com/gpu"}, "w2", given); got != (faults.Device{Node: "w2", ID: "GPU-1"}) {
		t.Errorf("device plugin: victimDevice = %+v", got)
	}
}
