package gpu

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func gpuPod(ns, name, node string, gpus string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
		Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus)}}}}},
		Status: corev1.PodStatus{Phase: phase}}
}

// Other teams' GPU pods and claims on a node are what a whole-node check must leave out.
func TestInUse(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset(
		gpuPod("team-a", "train", "w1", "3", corev1.PodRunning),
		gpuPod("team-b", "done", "w1", "4", corev1.PodSucceeded), // ended: holds nothing
		gpuPod("team-b", "elsewhere", "w2", "2", corev1.PodRunning),
		&resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "w1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
			Driver: "gpu.nvidia.com", NodeName: ptr.To("w1"), Pool: resourcev1.ResourcePool{Name: "w1"},
			Devices: []resourcev1.Device{{Name: "gpu-4"}, {Name: "gpu-5"}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}},
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "serve-gpu"}, Status: resourcev1.ResourceClaimStatus{
			Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
				{Driver: "gpu.nvidia.com", Pool: "w1", Device: "gpu-4"}, {Driver: "gpu.nvidia.com", Pool: "w1", Device: "gpu-5"}}}}}},
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "other-node"}, Status: resourcev1.ResourceClaimStatus{
			Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
				{Driver: "gpu.nvidia.com", Pool: "w2", Device: "gpu-4"}}}}}},
	)
	dpUse, err := InUse(ctx, kube, &DevicePlugin{Resource: "nvidia.com/gpu"}, "w1", "w2")
	if dp := dpUse["w1"]; err != nil || dp.Capacity != 8 || dp.Devices != 3 || dp.Free() != 5 || len(dp.Holders) != 1 || dp.Holders[0] != "team-a/train" {
		t.Errorf("device plugin usage of w1 = %+v, %v; want 3 of 8 held by team-a/train", dp, err)
	}
	if w2 := dpUse["w2"]; w2.Devices != 2 || w2.Capacity != 0 || w2.Free() != 0 {
		t.Errorf("device plugin usage of w2 = %+v; want 2 held of nothing advertised, none free", w2)
	}
	draUse, err := InUse(ctx, kube, &DRA{Driver: "gpu.nvidia.com"}, "w1")
	if dra := draUse["w1"]; err != nil || dra.Capacity != 2 || dra.Devices != 2 || dra.Free() != 0 || len(dra.Holders) != 1 || dra.Holders[0] != "team-a/serve-gpu" {
		t.Errorf("DRA usage of w1 = %+v, %v; want both of its 2 devices held by team-a/serve-gpu", dra, err)
	}
}
