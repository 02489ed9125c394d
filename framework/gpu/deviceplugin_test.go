package gpu

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"gpuconform.io/gpuconform/fixtures"
)

// The podresources helper declares the run's CPU and memory, requests equal to limits, so a namespace
// whose quota covers limits admits it as it admits the test pods.
func TestPodResourcesHelperDeclaresCPUAndMemory(t *testing.T) {
	kube := fake.NewClientset()
	var helper *corev1.Pod
	kube.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		helper = a.(clienttesting.CreateAction).GetObject().(*corev1.Pod)
		return true, nil, errors.New("stop here")
	})
	f := fixtures.NewFactory("r1")
	f.CPU, f.Memory = resource.MustParse("200m"), resource.MustParse("96Mi")
	pod := gpuPod("ns", "held-1", "w1", "1", corev1.PodRunning)
	if _, err := runPodResourcesHelper(t.Context(), GivenInput{Kube: kube, Pod: pod, Container: "c", Factory: f}, "nvidia.com/gpu"); err == nil || helper == nil {
		t.Fatalf("the helper was not created: %v", err)
	}
	r := helper.Spec.Containers[0].Resources
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "200m", corev1.ResourceMemory: "96Mi"} {
		req, lim := r.Requests[name], r.Limits[name]
		if req.Cmp(resource.MustParse(want)) != 0 || lim.Cmp(req) != 0 {
			t.Errorf("helper %s: request %s, limit %s; want both %s", name, req.String(), lim.String(), want)
		}
	}
}
