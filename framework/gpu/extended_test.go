package gpu

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
)

// A half-migrated pool: w1's device plugin serves nvidia.com/gpu, w2's GPUs are the DRA driver's, which the
// class maps to the same name. Three paths; the device plugin's pods stay off w2 and the third path's off
// w1, both asking for nvidia.com/gpu; the third hands out the DRA path's devices (its locks are the DRA
// path's), less those its slices taint.
func TestPathsOfAHalfMigratedPool(t *testing.T) {
	caps := cluster.Capabilities{
		DevicePlugin: &cluster.DevicePluginPath{ResourceName: "nvidia.com/gpu", Allocatable: map[string]int64{"w1": 4}},
		DRA: &cluster.DRAPath{DeviceClass: "gpu.nvidia.com", Driver: "gpu.nvidia.com", Devices: map[string][]string{"w1": {"gpu-4"}, "w2": {"gpu-0", "gpu-2"}},
			Published: map[string]int{"w1": 1, "w2": 3}, Tainted: map[string][]string{"w2": {"gpu-1 gpu.nvidia.com/xid=79:NoSchedule"}}},
		ExtendedDRA: &cluster.ExtendedDRAPath{DeviceClass: "gpu.nvidia.com", ResourceName: "nvidia.com/gpu", Driver: "gpu.nvidia.com",
			DRANodes: map[string]int{"w2": 3}, Devices: map[string][]string{"w2": {"gpu-0", "gpu-1", "gpu-2"}}, PluginNodes: map[string]int64{"w1": 4}},
	}
	paths := Paths(caps, config.Default())
	if len(paths) != 3 || paths[2].Name() != config.PathExtendedDRA {
		t.Fatalf("paths %v", paths)
	}
	dp, ext := paths[0].(*DevicePlugin), paths[2].(*ExtendedDRA)
	if !slices.Equal(dp.ServedByDRA, []string{"w2"}) || !slices.Equal(ext.ServedByPlugin, []string{"w1"}) || ext.QuotaResource() != "nvidia.com/gpu" || DeviceDomain(ext) != config.PathDRA || DeviceDomain(dp) != config.PathDevicePlugin {
		t.Errorf("kept off %v/%v, quota %s, domains %s/%s", dp.ServedByDRA, ext.ServedByPlugin, ext.QuotaResource(), DeviceDomain(ext), DeviceDomain(dp))
	}
	if c := ext.Capacity(); c["w2"] != 2 || len(c) != 1 || len(ext.Tainted["w2"]) != 1 {
		t.Errorf("capacity %v (tainted %v): want w2's two untainted devices", c, ext.Tainted)
	}
	for _, tc := range []struct {
		path Path
		node string
	}{{dp, "w2"}, {ext, "w1"}} {
		spec := fixtures.NewFactory("run-1").GPUPod("p", "ns").Obj().Spec
		if objs := tc.path.RequestDevices(fixtures.Factory{}, &spec, spec.Containers[0].Name, 2, metav1.ObjectMeta{Name: "p"}); len(objs) != 0 {
			t.Errorf("%s: prerequisites %v", tc.path.Name(), objs)
		}
		q := spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
		r := spec.Containers[0].Resources.Requests["nvidia.com/gpu"]
		if q.Value() != 2 || r.Value() != 2 {
			t.Errorf("%s: limit %s, request %s", tc.path.Name(), q.String(), r.String())
		}
		terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if f := terms[0].MatchFields; len(terms) != 1 || len(f) != 1 || f[0].Operator != corev1.NodeSelectorOpNotIn || f[0].Values[0] != tc.node {
			t.Errorf("%s: kept by %+v, want off %s", tc.path.Name(), terms, tc.node)
		}
	}
	// Without the mapping the device plugin's pods go wherever the scheduler puts them.
	caps.ExtendedDRA = nil
	spec := fixtures.NewFactory("run-1").GPUPod("p", "ns").Obj().Spec
	Paths(caps, config.Default())[0].RequestDevices(fixtures.Factory{}, &spec, spec.Containers[0].Name, 1, metav1.ObjectMeta{})
	if spec.Affinity != nil {
		t.Errorf("affinity without a mapping: %+v", spec.Affinity)
	}
}

// The claim the scheduler created for a pod's extended resources is one of its claims; the live capacity
// of the third path on a node is 0 where a device plugin advertises the name.
func TestExtendedClaimAndLiveCapacity(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{ExtendedResourceClaimStatus: &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "p-extended-resources-x"}}}
	if got := ClaimNames(pod); !slices.Equal(got, []string{"p-extended-resources-x"}) {
		t.Errorf("ClaimNames = %v", got)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}}
	ext := &ExtendedDRA{DRA: &DRA{Driver: "gpu.nvidia.com"}, Resource: "nvidia.com/gpu"}
	if n, err := LiveCapacity(t.Context(), fake.NewClientset(node), ext, "w1"); err != nil || n != 0 {
		t.Errorf("LiveCapacity on a device-plugin node = %d, %v; want 0", n, err)
	}
}
