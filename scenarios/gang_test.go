package scenarios

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/gpu"
)

func TestPartialPlacement(t *testing.T) {
	running := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "workload", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Unix(10, 0))}}}}}}
	waiting := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: "Unschedulable", Message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}}}}
	got := partialPlacement(map[int]*corev1.Pod{0: running, 1: waiting}, 3)
	for _, want := range []string{"worker 0 on n1 run", "worker 1 (Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.)", "worker 2 (no pod)"} {
		if !strings.Contains(got, want) {
			t.Errorf("partial placement %q lacks %q", got, want)
		}
	}
	if got := partialPlacement(map[int]*corev1.Pod{0: waiting, 1: waiting}, 2); got != "" {
		t.Errorf("no worker runs: not a partial placement, got %q", got)
	}
	if got := partialPlacement(map[int]*corev1.Pod{0: running, 1: running}, 2); got != "" {
		t.Errorf("every worker runs: not a partial placement, got %q", got)
	}
}

// Kueue's TAS counts node allocatable: a claim-based gang has no capacity there, and the reason names the
// extended resource on the path that maps one.
func TestHostTopologyOnEachPath(t *testing.T) {
	topo := cluster.Topology{Name: "hosts", Levels: []string{corev1.LabelHostname}}
	dra := &gpu.DRA{Devices: map[string][]string{"w1": {"a", "b", "c", "d"}}}
	b := GangInput{Base: Base{GPUPool: []string{"w1"}}, Topologies: []cluster.Topology{topo}}
	if got, why := b.hostTopology(&gpu.DevicePlugin{Resource: "nvidia.com/gpu", Allocatable: map[string]int64{"w1": 4}}); why != "" || got.Name != "hosts" {
		t.Errorf("device plugin: %+v, %q", got, why)
	}
	if _, why := b.hostTopology(dra); !strings.Contains(why, "where DRA devices are not") {
		t.Errorf("dra: %q", why)
	}
	if _, why := b.hostTopology(&gpu.ExtendedDRA{DRA: dra, Resource: "nvidia.com/gpu"}); !strings.Contains(why, "the nodes DRA serves nvidia.com/gpu on advertise none") {
		t.Errorf("extended-resource-dra: %q", why)
	}
}
