package resname

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestExtended(t *testing.T) {
	for name, want := range map[corev1.ResourceName]bool{
		"nvidia.com/gpu": true, "nvidia.com/mig-1g.10gb": true, "deviceclass.resource.kubernetes.io/gpu.nvidia.com": true,
		"cpu": false, "memory": false, "hugepages-2Mi": false, "kubernetes.io/anything": false, "requests.nvidia.com/gpu": false,
	} {
		if got := Extended(name); got != want {
			t.Errorf("Extended(%s) = %t, want %t", name, got, want)
		}
	}
}
