package cluster

import (
	"fmt"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/config"
)

// bigSnapshot is a cluster of n GPU nodes, each with 8 devices on both paths.
func bigSnapshot(n int) Snapshot {
	s := Snapshot{DeviceClasses: []resourcev1.DeviceClass{{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.nvidia.com"`}}}}}}, ResourceAPI: true}
	for i := range n {
		name := fmt.Sprintf("gpu-node-%05d", i)
		// Every node carries the same taints, as an API server's admission taints every new node
		// not-ready and a managed service dedicates its GPU pool.
		s.Nodes = append(s.Nodes, *tainted(gpuNode(name, map[string]string{LabelGPUProduct: "H100"}, map[string]int64{"nvidia.com/gpu": 8}), notReady, gpuDedication))
		sl := resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu"}, Spec: resourcev1.ResourceSliceSpec{
			Driver: "gpu.nvidia.com", NodeName: ptr.To(name), Pool: resourcev1.ResourcePool{Name: name, ResourceSliceCount: 1}}}
		for d := range 8 {
			sl.Spec.Devices = append(sl.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", d)})
		}
		s.ResourceSlices = append(s.ResourceSlices, sl)
	}
	return s
}

// BenchmarkDiscover5000 is discovery's decision on a 5,000-node GPU cluster (make scale measures it
// against a real API server, reads included).
func BenchmarkDiscover5000(b *testing.B) {
	s := bigSnapshot(5000)
	cfg := config.Default()
	b.ReportAllocs()
	for b.Loop() {
		Discover(s, cfg)
	}
}
