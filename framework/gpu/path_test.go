package gpu

import "testing"

func TestNormalizeMapsDeviceNamesToIdentities(t *testing.T) {
	a := Allocation{Devices: []string{"GPU-aaaa"}, Aliases: map[string]string{"gpu-4": "GPU-aaaa"}}
	// A container that knows its GPU by the device name (the dra-example-driver's environment) or by UUID
	// (nvidia-smi) sees the same device; another name stays what it is.
	if got := a.Normalize([]string{"gpu-4"}); !SameDevices(got, a.Devices) {
		t.Errorf("by name: %v", got)
	}
	if got := a.Normalize([]string{"GPU-aaaa"}); !SameDevices(got, a.Devices) {
		t.Errorf("by uuid: %v", got)
	}
	if got := a.Normalize([]string{"gpu-5"}); SameDevices(got, a.Devices) {
		t.Errorf("another device matched: %v", got)
	}
}

// The record says how many of the published devices the DRA path's class selects: a class narrowed by a
// selector shows fewer than its driver publishes.
func TestDRADescribeMatchesOfPublished(t *testing.T) {
	p := &DRA{DeviceClass: "gpu.nvidia.com", Driver: "gpu.nvidia.com", KueueResource: "gpus.nvidia.com",
		Devices: map[string][]string{"w1": {"gpu-0", "gpu-1"}, "w2": {"gpu-0"}}, Published: map[string]int{"w1": 4, "w2": 4}}
	want := "DRA: DeviceClass gpu.nvidia.com matches 3 of 8 published devices, driver gpu.nvidia.com (2 nodes; Kueue quota as gpus.nvidia.com)"
	if got := p.Describe(); got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
}
