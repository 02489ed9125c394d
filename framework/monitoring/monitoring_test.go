package monitoring

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"gpuconform.io/gpuconform/framework/accelmetrics"
	"gpuconform.io/gpuconform/framework/config"
)

func promService(ns, name string, labels map[string]string, ports ...string) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
	for i, p := range ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: p, Port: int32(9090 + i)})
	}
	return s
}

func TestDiscoverFindsAPrometheusServiceOrSaysWhyNot(t *testing.T) {
	ctx := t.Context()
	chart := promService("monitoring", "prometheus-server", map[string]string{"app.kubernetes.io/name": "prometheus"}, "http")
	operated := promService("monitoring", "prometheus-operated", map[string]string{"operated-prometheus": "true"}, "web", "grpc")
	kube := fake.NewClientset(chart, operated)

	e, why := Discover(ctx, kube, "", accelmetrics.Endpoint{})
	if why != "" || e.Kind != config.MetricsService || e.Name != "prometheus-server" || e.Port != "http" {
		t.Fatalf("auto = %+v (%s), want the chart's Service on its http port", e, why)
	}
	e, _ = Discover(ctx, fake.NewClientset(operated), "auto", accelmetrics.Endpoint{})
	if e.Name != "prometheus-operated" || e.Port != "web" {
		t.Fatalf("auto = %+v, want the operator's governing Service on its web port (of two)", e)
	}
	e, _ = Discover(ctx, kube, "", accelmetrics.Endpoint{Kind: config.MetricsPrometheus, URL: "http://prom:9090"})
	if e.Kind != config.MetricsPrometheus || e.URL != "http://prom:9090" {
		t.Fatalf("auto beside a Prometheus for accelerator metrics = %+v, want that Prometheus", e)
	}
	e, _ = Discover(ctx, kube, "service:obs/vm:8428", accelmetrics.Endpoint{})
	if e.Namespace != "obs" || e.Name != "vm" || e.Port != "8428" || e.Found != "--monitoring" {
		t.Fatalf("named = %+v", e)
	}
	if e, why := Discover(ctx, kube, "none", accelmetrics.Endpoint{}); e.Present() || why != "--monitoring=none" {
		t.Fatalf("none = %+v (%s)", e, why)
	}
	e, why = Discover(ctx, fake.NewClientset(), "", accelmetrics.Endpoint{})
	if e.Present() || !strings.Contains(why, "app.kubernetes.io/name=prometheus or operated-prometheus=true") || !strings.Contains(why, "--monitoring=") {
		t.Fatalf("no Prometheus = %+v, why %q: want the labels looked for and the flag", e, why)
	}
}

// apiServer plays the API server's service proxy in front of a Prometheus.
func apiServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) (*rest.Config, Endpoint) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(handle))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}, Endpoint{Kind: config.MetricsService, Namespace: "monitoring", Name: "prometheus", Port: "web"}
}

const proxy = "/api/v1/namespaces/monitoring/services/prometheus:web/proxy"

func TestQueryGoesThroughTheServiceProxy(t *testing.T) {
	at := time.Now().Unix()
	cfg, e := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != proxy+"/api/v1/query" {
			http.Error(w, "unexpected path "+r.URL.Path, http.StatusNotFound)
			return
		}
		_ = r.ParseForm()
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"reqs","pod":"p","q":%q},"value":[%d,"7"]}]}}`, r.Form.Get("query"), at)
	})
	api, from, err := API(cfg, e)
	if err != nil || !strings.Contains(from, "monitoring/prometheus:web through the API server's service proxy") {
		t.Fatalf("API = %q, %v", from, err)
	}
	got, err := Query(t.Context(), api, `reqs{n="1"}`)
	if err != nil || len(got) != 1 || got[0].Value != 7 || got[0].Labels["q"] != `reqs{n="1"}` {
		t.Fatalf("Query = %+v, %v", got, err)
	}
	if s := got[0].String(); !strings.HasPrefix(s, `reqs{pod="p",q="reqs{n=\"1\"}"} 7 @ `) {
		t.Errorf("String = %s", s)
	}
}

func TestTerminalNamesWhatToGrant(t *testing.T) {
	for code, want := range map[int]string{http.StatusForbidden: "grant get on services/proxy", http.StatusNotFound: "does not serve Prometheus's HTTP API", http.StatusServiceUnavailable: ""} {
		cfg, e := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `services "prometheus" is forbidden`, code)
		})
		api, _, err := API(cfg, e)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Query(t.Context(), api, "up")
		if err == nil {
			t.Fatalf("%d: no error", code)
		}
		got := Terminal(err)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%d: Terminal = %q, want %q (a 503 can mend: the server is starting)", code, got, want)
		}
	}
	if _, _, err := API(&rest.Config{}, Endpoint{Kind: config.MetricsService, Namespace: "m", Name: "p"}); err == nil || !strings.Contains(err.Error(), "--monitoring=service:m/p:PORT") {
		t.Errorf("a Service without a known port: %v", err)
	}
}

func TestCollectedNeedsTheCounterToGrowBetweenTwoSamples(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var c Collection
	if err := c.Observe(nil); err != nil || c.Collected() {
		t.Fatal("no series is not collected")
	}
	_ = c.Observe([]Series{{Value: 3, At: t0}})
	if c.Collected() {
		t.Fatal("one sample is collected")
	}
	_ = c.Observe([]Series{{Value: 3, At: t0.Add(5 * time.Second)}})
	if c.Collected() {
		t.Fatal("a sample that did not grow is collected (a stale series)")
	}
	_ = c.Observe([]Series{{Value: 9, At: t0.Add(10 * time.Second)}})
	if !c.Collected() || c.First.Value != 3 || c.Last.Value != 9 {
		t.Fatalf("grown = %+v", c)
	}
	if err := c.Observe([]Series{{Value: 1}, {Value: 2}}); err == nil {
		t.Error("two series for one pod's nonce accepted")
	}
}

func TestTargetViewSaysWhatTheMonitoringSawOfThePod(t *testing.T) {
	cases := map[string]struct{ body, want string }{
		"active": {`{"activeTargets":[{"discoveredLabels":{"__meta_kubernetes_namespace":"ns","__meta_kubernetes_pod_name":"p"},"labels":{},"scrapePool":"kubernetes-pods",` +
			`"scrapeUrl":"http://10.0.0.5:8080/metrics","health":"down","lastError":"connection refused"}],"droppedTargets":[]}`,
			"it discovered the pod as http://10.0.0.5:8080/metrics in scrape pool kubernetes-pods: health down, last error connection refused"},
		"dropped": {`{"activeTargets":[{"discoveredLabels":{},"labels":{},"scrapePool":"kubernetes-pods","scrapeUrl":"x","health":"up"}],` +
			`"droppedTargets":[{"discoveredLabels":{"__meta_kubernetes_namespace":"ns","__meta_kubernetes_pod_name":"p"}}]}`,
			"its relabelling dropped all 1 of its candidate targets (active scrape pools: kubernetes-pods)"},
		"unseen": {`{"activeTargets":[],"droppedTargets":[]}`, "it has no target, active or dropped, for pod ns/p: its discovery does not see the pod's namespace"},
	}
	for name, tc := range cases {
		cfg, e := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != proxy+"/api/v1/targets" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintf(w, `{"status":"success","data":%s}`, tc.body)
		})
		api, _, _ := API(cfg, e)
		if got := TargetView(t.Context(), api, "ns", "p"); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}

func TestReadOperatorLabelsThePodMonitorForThePrometheusObjects(t *testing.T) {
	disc := &fakediscovery.FakeDiscovery{Fake: &fake.NewClientset().Fake}
	op, err := ReadOperator(t.Context(), disc, fakedynamic.NewSimpleDynamicClient(runtime.NewScheme()))
	if err != nil || op.Served || !strings.Contains(op.String(), "annotations only") {
		t.Fatalf("no operator API = %+v, %v", op, err)
	}
	disc.Resources = []*metav1.APIResourceList{{GroupVersion: "monitoring.coreos.com/v1", APIResources: []metav1.APIResource{{Name: "podmonitors"}, {Name: "prometheuses"}}}}
	prom := func(ns, name string, spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		u.SetAPIVersion("monitoring.coreos.com/v1")
		u.SetKind("Prometheus")
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	dyn := fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{prometheuses: "PrometheusList"},
		prom("monitoring", "k8s", map[string]any{"podMonitorSelector": map[string]any{"matchLabels": map[string]any{"release": "kube-prometheus-stack"}}, "podMonitorNamespaceSelector": map[string]any{}}),
		prom("team", "local", map[string]any{"podMonitorSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "x", "operator": "Exists"}}}}))
	op, err = ReadOperator(t.Context(), disc, dyn)
	if err != nil || !op.Served || op.Labels["release"] != "kube-prometheus-stack" {
		t.Fatalf("operator = %+v, %v", op, err)
	}
	s := op.String()
	for _, want := range []string{"labelled release=kube-prometheus-stack", "Prometheus team/local selects PodMonitors by expressions", "Prometheus team/local selects PodMonitors in its own namespace team only"} {
		if !strings.Contains(s, want) {
			t.Errorf("%q lacks %q", s, want)
		}
	}
	if strings.Contains(s, "monitoring/k8s selects PodMonitors in its own namespace") {
		t.Errorf("%q: an empty podMonitorNamespaceSelector selects every namespace", s)
	}
}
