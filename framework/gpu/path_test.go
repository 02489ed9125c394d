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
