package faults

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The failed-device check quotes the eviction controller's status on the rule: its condition where it
// processed the rule, and that it wrote none where kube-controller-manager runs without it.
func TestTaintRuleStatusQuotesTheEvictionController(t *testing.T) {
	dev := Device{Node: "w1", ID: "GPU-1", Driver: "gpu.nvidia.com", Pool: "w1", Name: "gpu-1"}
	name := RuleName("run-a", dev)
	bodies := map[string]string{
		"processed": `{"kind":"DeviceTaintRule","metadata":{"name":"` + name + `"},"status":{"conditions":[{"type":"EvictionInProgress","status":"False","reason":"Completed","message":"1 pod evicted"}]}}`,
		"ignored":   `{"kind":"DeviceTaintRule","metadata":{"name":"` + name + `"}}`,
	}
	for tc, want := range map[string]string{
		"processed": "EvictionInProgress=False (Completed: 1 pod evicted)",
		"ignored":   "has no status condition: kube-controller-manager's device-taint-eviction-controller has not processed it",
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/apis/resource.k8s.io/v1/devicetaintrules/"+name {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(bodies[tc]))
		}))
		kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		got, err := (&TaintRule{Kube: kube, RunID: "run-a"}).Status(t.Context(), dev)
		srv.Close()
		if err != nil || !strings.Contains(got, want) {
			t.Errorf("%s: %q (%v), want it to say %q", tc, got, err, want)
		}
	}
}
