package diagnose

import (
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
)

// TestDecideClassSelects: an allocation failure is final only when a claim's DeviceClass selects none of
// the devices published for it; a class that selects some says how many (the devices are in use, or
// fewer than asked for), and a class or slices that could not be read leave it open, saying so.
func TestDecideClassSelects(t *testing.T) {
	edit := func(change func(s *Snapshot)) *Snapshot {
		s := snapshotOf(t, "dra-class-selects-nothing.yaml", pod(podName))
		change(s)
		return s
	}
	fixed := func(s *Snapshot) { s.DeviceClasses[0].Spec.Selectors = s.DeviceClasses[0].Spec.Selectors[:1] }
	for _, tc := range []struct {
		name     string
		s        *Snapshot
		terminal bool
		want     string
	}{
		{"a class that selects nothing", edit(func(*Snapshot) {}), true, "selects 0 of 3 published devices"},
		{"a class that selects every device: they are in use", edit(fixed), false, "DeviceClass gpu.nvidia.com matches 3 of 3 published devices"},
		{"a class narrowed to one node's devices", edit(func(s *Snapshot) {
			s.DeviceClasses[0].Spec.Selectors[1].CEL.Expression = "device.attributes['gpu.nvidia.com'].index == 5"
		}), false, "matches 1 of 3 published devices"},
		{"a selector that does not compile", edit(func(s *Snapshot) {
			s.DeviceClasses[0].Spec.Selectors[1].CEL.Expression = "device.attributes['gpu.nvidia.com'].productName =="
		}), true, "does not compile"},
		{"the slices could not be read", edit(func(s *Snapshot) {
			s.Errors = append(s.Errors, ReadError{Read: listRead("resourceslices", resourcev1.GroupName, ""), Err: forbidden("list", "resourceslices")})
		}), false, "whether DeviceClass gpu.nvidia.com selects any published device was not checked"},
		{"the class could not be read", edit(func(s *Snapshot) {
			s.DeviceClasses = nil
			s.Errors = append(s.Errors, ReadError{Read: getRead("deviceclasses", resourcev1.GroupName, "", "gpu.nvidia.com"), Err: forbidden("get", "deviceclasses")})
		}), false, "DeviceClass gpu.nvidia.com could not be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Decide(tc.s)
			if err != nil {
				t.Fatal(err)
			}
			if res.Reason != DRAAllocationFailed || res.Terminal != tc.terminal {
				t.Errorf("%s terminal=%v, want %s terminal=%v\n%s", res.Reason, res.Terminal, DRAAllocationFailed, tc.terminal, res)
			}
			if !containsText(res.Messages, tc.want) {
				t.Errorf("no message contains %q\n%s", tc.want, res)
			}
		})
	}
}
