package scenarios

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// A pod counts as evicted once the eviction controller marked it (DisruptionTarget), it is being deleted,
// or it failed; a running pod is not.
func TestEvictedPod(t *testing.T) {
	running := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if got := evictedPod(running); got != "" {
		t.Errorf("running pod: %q", got)
	}
	marked := running.DeepCopy()
	marked.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByDeviceTaintManager", Message: "Device Taint manager: deleting due to NoExecute taint"}}
	if got := evictedPod(marked); !strings.Contains(got, "DeletionByDeviceTaintManager") {
		t.Errorf("marked pod: %q", got)
	}
	deleting := running.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	if got := evictedPod(deleting); got != "being deleted" {
		t.Errorf("deleting pod: %q", got)
	}
	failed := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}}
	if got := evictedPod(failed); got != "phase Failed: Evicted" {
		t.Errorf("failed pod: %q", got)
	}
}
