package monitoring

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

func apiService(name string, service map[string]any, conds ...map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
	u.SetAPIVersion("apiregistration.k8s.io/v1")
	u.SetKind("APIService")
	u.SetName(name)
	if service != nil {
		u.Object["spec"] = map[string]any{"service": service}
	}
	var cs []any
	for _, c := range conds {
		cs = append(cs, c)
	}
	u.Object["status"] = map[string]any{"conditions": cs}
	return u
}

func TestMetricsAPIsReadsTheRegisteredOnesAndTheirAvailability(t *testing.T) {
	scheme := runtime.NewScheme()
	lists := map[schema.GroupVersionResource]string{apiServiceGVR: "APIServiceList"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, lists,
		apiService("v1beta1.custom.metrics.k8s.io", map[string]any{"namespace": "monitoring", "name": "prometheus-adapter"},
			map[string]any{"type": "Available", "status": "False", "reason": "MissingEndpoints", "message": "no addresses"}),
		apiService("v1beta1.external.metrics.k8s.io", map[string]any{"namespace": "keda", "name": "keda-metrics"},
			map[string]any{"type": "Available", "status": "True", "reason": "Passed", "message": "all checks passed"}),
		apiService("v1beta2.custom.metrics.k8s.io", nil))
	apis, err := MetricsAPIs(t.Context(), dyn)
	if err != nil {
		t.Fatal(err)
	}
	if len(apis) != 3 {
		t.Fatalf("got %d APIs, want 3: %v", len(apis), apis)
	}
	if a := apis[0]; a.Available() || !a.Custom() || a.String() != "APIService v1beta1.custom.metrics.k8s.io (service monitoring/prometheus-adapter): Available=False MissingEndpoints no addresses" {
		t.Errorf("first: %s (available %v, custom %v)", a, a.Available(), a.Custom())
	}
	if a := apis[1]; a.Available() || a.Service != "local" || a.Status != "Unknown" {
		t.Errorf("one without service or condition: %+v", a)
	}
	if a := apis[2]; !a.Available() || a.Custom() || a.Service != "keda/keda-metrics" {
		t.Errorf("external: %+v", a)
	}
	none, err := MetricsAPIs(t.Context(), dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, lists))
	if err != nil || len(none) != 0 {
		t.Errorf("none registered: %v, %v", none, err)
	}
}
