package gpu

import (
	"net/http"
	"net/http/httptest"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

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

// A health check quotes how the slices show the device it failed: tainted by the driver, untainted, or
// withdrawn; another driver's device of the same name is not it.
func TestDeviceSignalReadsTheDevicesTaints(t *testing.T) {
	slice := func(name, driver string, devs ...resourcev1.Device) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.ResourceSliceSpec{Driver: driver, Pool: resourcev1.ResourcePool{Name: "w1"}, Devices: devs}}
	}
	taint := resourcev1.DeviceTaint{Key: "gpu.nvidia.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoSchedule}
	kube := fake.NewClientset(
		slice("w1-a", "gpu.nvidia.com", resourcev1.Device{Name: "gpu-0", Taints: []resourcev1.DeviceTaint{taint}}, resourcev1.Device{Name: "gpu-1"}),
		slice("w1-b", "other.example.com", resourcev1.Device{Name: "gpu-2"}))
	p := &DRA{Driver: "gpu.nvidia.com"}
	for name, want := range map[string]string{
		"gpu-0": "in ResourceSlice w1-a with taint gpu.nvidia.com/xid=79:NoSchedule",
		"gpu-1": "in ResourceSlice w1-a, untainted",
		"gpu-2": "in no ResourceSlice of pool w1 (withdrawn)",
	} {
		got, err := p.DeviceSignal(t.Context(), kube, "w1", name)
		if err != nil || got != want {
			t.Errorf("%s: %q (%v), want %q", name, got, err, want)
		}
	}
}

// A device a DeviceTaintRule taints is named with the rule: the slice itself stays as it was.
func TestDeviceSignalNamesTheRuleThatTaintsIt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/resource.k8s.io/v1/resourceslices":
			_, _ = w.Write([]byte(`{"kind":"ResourceSliceList","apiVersion":"resource.k8s.io/v1","items":[{"metadata":{"name":"w1-a"},"spec":{"driver":"gpu.nvidia.com","pool":{"name":"w1","generation":1,"resourceSliceCount":1},"nodeName":"w1","devices":[{"name":"gpu-0"},{"name":"gpu-1"}]}}]}`))
		case "/apis/resource.k8s.io/v1/devicetaintrules":
			_, _ = w.Write([]byte(`{"kind":"DeviceTaintRuleList","apiVersion":"resource.k8s.io/v1","items":[{"metadata":{"name":"bad-gpu-0"},"spec":{"deviceSelector":{"driver":"gpu.nvidia.com","pool":"w1","device":"gpu-0"},"taint":{"key":"example.com/unhealthy","value":"xid","effect":"NoExecute"}}}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	p := &DRA{Driver: "gpu.nvidia.com"}
	for name, want := range map[string]string{
		"gpu-0": "in ResourceSlice w1-a, untainted; DeviceTaintRule bad-gpu-0 taints it example.com/unhealthy=xid:NoExecute",
		"gpu-1": "in ResourceSlice w1-a, untainted",
	} {
		if got, err := p.DeviceSignal(t.Context(), kube, "w1", name); err != nil || got != want {
			t.Errorf("%s: %q (%v), want %q", name, got, err, want)
		}
	}
	if n, err := LiveCapacity(t.Context(), kube, p, "w1"); err != nil || n != 1 {
		t.Errorf("live capacity %d (%v), want 1: the rule's device is kept from allocations", n, err)
	}
}
