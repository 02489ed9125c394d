package diagnose

import (
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// nvidiaSlice is one node's slice with n GPUs carrying the attributes NVIDIA's DRA driver (and the fake
// agent) publishes.
func nvidiaSlice(node string, generation int64, n int) resourcev1.ResourceSlice {
	s := resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu.nvidia.com"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.nvidia.com", NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, Generation: generation, ResourceSliceCount: 1},
	}}
	for i := range n {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{
			Name: "gpu-" + string(rune('0'+i)),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"type":          {StringValue: ptr.To("gpu")},
				"productName":   {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
				"index":         {IntValue: ptr.To(int64(i))},
				"driverVersion": {VersionValue: ptr.To("550.54.15")},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
		})
	}
	return s
}

func deviceClass(exprs ...string) *resourcev1.DeviceClass {
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"}}
	for _, e := range exprs {
		dc.Spec.Selectors = append(dc.Spec.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: e}})
	}
	return dc
}

const nvidiaClass = `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'`

func TestMatchDeviceClass(t *testing.T) {
	other := nvidiaSlice("w1", 1, 2)
	other.Name, other.Spec.Driver = "w1-gpu.example.com", "gpu.example.com"
	published := []resourcev1.ResourceSlice{nvidiaSlice("w2", 1, 4), nvidiaSlice("w1", 1, 4), other}
	for _, tc := range []struct {
		name        string
		class       *resourcev1.DeviceClass
		slices      []resourcev1.ResourceSlice
		matched     int
		published   int
		w1          []string // the devices selected on w1
		nothing     []string // texts SelectsNothing must contain; none: it must be ""
		notNothing  string   // a text SelectsNothing must not contain
		wantDrivers []string
	}{
		{name: "the driver's own class selects every GPU of its driver, none of another's", class: deviceClass(nvidiaClass), slices: published,
			matched: 8, published: 8, w1: []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, wantDrivers: []string{"gpu.nvidia.com"}},
		{name: "a class narrowed by a second selector selects some", class: deviceClass(nvidiaClass, `device.attributes['gpu.nvidia.com'].index < 2`), slices: published,
			matched: 4, published: 8, w1: []string{"gpu-0", "gpu-1"}, wantDrivers: []string{"gpu.nvidia.com"}},
		{name: "a value never published selects nothing", class: deviceClass(nvidiaClass, `device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'`), slices: published,
			matched: 0, published: 8,
			nothing: []string{`DeviceClass gpu.nvidia.com selects 0 of 8 published devices: expression "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'" is false for gpu-0 on node w1`,
				"productName=NVIDIA H100 80GB HBM3", "index=0", "driverVersion=550.54.15"}},
		{name: "an attribute renamed by the driver fails on every device", class: deviceClass(`device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].product == "H100"`), slices: published,
			matched: 0, published: 8, nothing: []string{`expression "device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].product == "H100"" fails for gpu-0 on node w1: no such key: product`}},
		{name: "an attribute retyped (int compared with a string) selects nothing", class: deviceClass(nvidiaClass, `device.attributes['gpu.nvidia.com'].index == '0'`), slices: published,
			matched: 0, published: 8, nothing: []string{"selects 0 of 8"}},
		{name: "a selector that does not compile selects nothing", class: deviceClass(`device.driver == 'gpu.nvidia.com' && device.vendor == 'nvidia'`), slices: published,
			matched: 0, published: 8, nothing: []string{`selects 0 of 8 published devices: selector expression "device.driver == 'gpu.nvidia.com' && device.vendor == 'nvidia'" does not compile`, "vendor"}},
		{name: "a class that names no driver takes every published device as a candidate", class: deviceClass(`device.attributes[device.driver].type == 'gpu'`), slices: published,
			matched: 10, published: 10, w1: []string{"gpu-0", "gpu-0", "gpu-1", "gpu-1", "gpu-2", "gpu-3"}},
		{name: "only a pool's newest generation counts", class: deviceClass(nvidiaClass), slices: []resourcev1.ResourceSlice{nvidiaSlice("w1", 1, 4), nvidiaSlice("w1", 2, 2)},
			matched: 2, published: 2, w1: []string{"gpu-0", "gpu-1"}},
		{name: "no device published is not a class that selects nothing", class: deviceClass(nvidiaClass, `false`),
			matched: 0, published: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := MatchDeviceClass(t.Context(), tc.class, tc.slices)
			matched, published := m.Counts()
			if matched != tc.matched || published != tc.published {
				t.Errorf("counts %d of %d, want %d of %d (%s)", matched, published, tc.matched, tc.published, m.SelectsNothing())
			}
			if tc.w1 != nil && !slices.Equal(m.Matched["w1"], tc.w1) {
				t.Errorf("w1 matched %v, want %v", m.Matched["w1"], tc.w1)
			}
			why := m.SelectsNothing()
			if len(tc.nothing) == 0 && why != "" {
				t.Errorf("SelectsNothing = %q, want none", why)
			}
			for _, want := range tc.nothing {
				if !strings.Contains(why, want) {
					t.Errorf("SelectsNothing = %q, want it to contain %q", why, want)
				}
			}
			if tc.wantDrivers != nil && !slices.Equal(m.Drivers, tc.wantDrivers) {
				t.Errorf("drivers %v, want %v", m.Drivers, tc.wantDrivers)
			}
			if want := "DeviceClass gpu.nvidia.com matches"; !strings.HasPrefix(m.Summary(), want) {
				t.Errorf("summary %q", m.Summary())
			}
		})
	}
}

func TestClassDrivers(t *testing.T) {
	for expr, want := range map[string][]string{
		nvidiaClass:                          {"gpu.nvidia.com"},
		`"gpu.example.com" == device.driver`: {"gpu.example.com"},
		`device.driver in ["b.example.com", "a.example.com"]`:                   {"a.example.com", "b.example.com"},
		`device.driver == "a.example.com" || device.driver == "a.example.com"`:  {"a.example.com"},
		`device.attributes["gpu.nvidia.com"].type == "gpu"`:                     nil,
		`device.attributes["gpu.nvidia.com"].driver == "not-a-driver-selector"`: nil,
		`device.driver == `: nil,
	} {
		if got := ClassDrivers(deviceClass(expr)); !slices.Equal(got, want) {
			t.Errorf("ClassDrivers(%s) = %v, want %v", expr, got, want)
		}
	}
}
