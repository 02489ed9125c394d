package cluster

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

func TestResourcesSchemeKnowsTheSuitesKinds(t *testing.T) {
	res, err := NewResources(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []runtime.Object{&kueue.ClusterQueue{}, &kueue.LocalQueue{}, &kueue.ResourceFlavor{}, &kueue.WorkloadPriorityClass{},
		&kueue.Workload{}, &resourcev1.ResourceClaim{}, &resourcev1.ResourceClaimTemplate{}, &resourcev1.DeviceClass{},
		&resourcev1alpha3.DeviceTaintRule{}, &corev1.Namespace{}} {
		if _, err := apiutil.GVKForObject(obj, res.GetScheme()); err != nil {
			t.Errorf("%T: %v", obj, err)
		}
	}
}

func TestResourcesRequestsAreCounted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var body any
		switch r.URL.Path {
		case "/api":
			body = metav1.APIVersions{Versions: []string{"v1"}}
		case "/apis":
			body = metav1.APIGroupList{}
		case "/api/v1":
			body = metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "namespaces", Kind: "Namespace", Verbs: []string{"get", "list"}}}}
		case "/api/v1/namespaces/x":
			body = corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "x"}}
		default:
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	defer srv.Close()
	counter := &RequestCounter{}
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(counter.Wrap)
	c := &Clients{Requests: counter}
	var err error
	if c.Resources, err = NewResources(cfg); err != nil {
		t.Fatal(err)
	}
	var ns corev1.Namespace
	if err := c.ResourcesIn("other").Get(t.Context(), "x", "", &ns); err != nil || ns.Name != "x" {
		t.Fatalf("get: %v %+v", err, ns)
	}
	if got := counter.Snapshot(); got.ByVerb()["get"] == 0 {
		t.Errorf("klient's requests were not counted: %v", got)
	}
}
