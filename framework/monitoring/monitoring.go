// Package monitoring reads a cluster's monitoring system the way its users do: a Prometheus, queried
// through its HTTP API, either at a URL or as a Service inside the cluster reached through the API
// server's service proxy (so the suite needs no route into the cluster). It is what the AI Conformance
// requirement ai_service_metrics asks a platform to show: a workload that exposes metrics in the
// Prometheus format is discovered and collected without being named to the monitoring system.
//
// Discovery follows the two conventions a Prometheus installation offers: the prometheus.io/scrape pod
// annotations of Prometheus's own Kubernetes example configuration (and of the prometheus-community
// chart), and, where the Prometheus Operator's API is served, a PodMonitor labelled for the Prometheus
// objects' podMonitorSelector.
package monitoring

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"gpuconform.io/gpuconform/framework/accelmetrics"
	"gpuconform.io/gpuconform/framework/config"
)

// prometheusSelectors are the labels Prometheus installations put on the Service of their server: the
// prometheus-community chart's (and this project's local stack's), and the Prometheus Operator's
// governing Service of every Prometheus object.
var prometheusSelectors = []string{"app.kubernetes.io/name=prometheus", "operated-prometheus=true"}

// portNames are the names Prometheus installations give the Service port of the HTTP API, in order of
// preference: the operator's, kube-prometheus-stack's, the chart's.
var portNames = []string{"web", "http-web", "http"}

// Endpoint is the monitoring system the suite queries.
type Endpoint struct {
	// Kind is config.MetricsService (a Prometheus Service in the cluster) or config.MetricsPrometheus (a URL).
	Kind string `json:"kind"`
	// Namespace, Name and Port are the Service's (Port "": resolved by name at query time).
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Port      string `json:"port,omitempty"`
	// URL is the Prometheus base URL.
	URL string `json:"url,omitempty"`
	// Found says how the endpoint was chosen.
	Found string `json:"found"`
}

// Present reports whether an endpoint was resolved.
func (e Endpoint) Present() bool { return e.Kind != "" }

// String names the endpoint for the record and messages.
func (e Endpoint) String() string {
	switch e.Kind {
	case config.MetricsService:
		return fmt.Sprintf("Prometheus Service %s/%s%s through the API server's service proxy (%s)", e.Namespace, e.Name, prefixed(":", e.Port), e.Found)
	case config.MetricsPrometheus:
		return fmt.Sprintf("Prometheus %s (%s)", e.URL, e.Found)
	}
	return "none"
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// Discover resolves the configured monitoring system: a named one as given; "auto" as the Prometheus the
// accelerator metrics are read from when that is one, else the first Service (by namespace and name)
// labelled as a Prometheus server's. It returns why there is none otherwise.
func Discover(ctx context.Context, kube kubernetes.Interface, configured string, accel accelmetrics.Endpoint) (Endpoint, string) {
	want, err := config.ParseMetricsEndpoint(configured)
	if err != nil {
		return Endpoint{}, err.Error()
	}
	switch want.Kind {
	case config.MetricsNone:
		return Endpoint{}, "--monitoring=none"
	case config.MetricsService:
		return Endpoint{Kind: want.Kind, Namespace: want.Namespace, Name: want.Name, Port: portString(want.Port), Found: "--monitoring"}, ""
	case config.MetricsPrometheus:
		return Endpoint{Kind: want.Kind, URL: want.URL, Found: "--monitoring"}, ""
	}
	if accel.Kind == config.MetricsPrometheus {
		return Endpoint{Kind: config.MetricsPrometheus, URL: accel.URL, Found: "auto: the accelerator metrics' Prometheus"}, ""
	}
	for _, sel := range prometheusSelectors {
		list, err := kube.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return Endpoint{}, fmt.Sprintf("cannot list Services to find a Prometheus (%v); name it with --monitoring=service:NAMESPACE/NAME[:PORT] or prometheus:URL", err)
		}
		svcs := slices.DeleteFunc(list.Items, func(s corev1.Service) bool { return len(s.Spec.Ports) == 0 })
		if len(svcs) == 0 {
			continue
		}
		slices.SortFunc(svcs, func(a, b corev1.Service) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
		s := svcs[0]
		return Endpoint{Kind: config.MetricsService, Namespace: s.Namespace, Name: s.Name, Port: servicePort(s), Found: "auto: Service labelled " + sel}, ""
	}
	return Endpoint{}, fmt.Sprintf("no monitoring system found: no Service is labelled %s (a Prometheus server's); name it with --monitoring=service:NAMESPACE/NAME[:PORT] or prometheus:URL",
		strings.Join(prometheusSelectors, " or "))
}

func portString(p int) string {
	if p == 0 {
		return ""
	}
	return strconv.Itoa(p)
}

// servicePort is the Service's port for the HTTP API: by a known name, else its only port ("" when it
// cannot tell).
func servicePort(s corev1.Service) string {
	for _, name := range portNames {
		if slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == name }) {
			return name
		}
	}
	if len(s.Spec.Ports) == 1 {
		return cmp.Or(s.Spec.Ports[0].Name, fmt.Sprint(s.Spec.Ports[0].Port))
	}
	return ""
}

// API is a Prometheus HTTP API client for the endpoint, with where it reaches (for messages).
func API(cfg *rest.Config, e Endpoint) (promv1.API, string, error) {
	switch e.Kind {
	case config.MetricsPrometheus:
		c, err := promapi.NewClient(promapi.Config{Address: e.URL})
		if err != nil {
			return nil, "", fmt.Errorf("a Prometheus client for %s: %w", e.URL, err)
		}
		return promv1.NewAPI(c), "Prometheus " + e.URL, nil
	case config.MetricsService:
		if e.Port == "" {
			return nil, "", fmt.Errorf("the Service %s/%s has several ports and none is named %s: name one with --monitoring=service:%s/%s:PORT",
				e.Namespace, e.Name, strings.Join(portNames, ", "), e.Namespace, e.Name)
		}
		rt, err := rest.TransportFor(cfg)
		if err != nil {
			return nil, "", err
		}
		base := strings.TrimSuffix(cfg.Host, "/") + fmt.Sprintf("/api/v1/namespaces/%s/services/%s:%s/proxy", e.Namespace, e.Name, e.Port)
		c, err := promapi.NewClient(promapi.Config{Address: base, RoundTripper: rt})
		if err != nil {
			return nil, "", err
		}
		return promv1.NewAPI(c), fmt.Sprintf("Prometheus Service %s/%s:%s through the API server's service proxy", e.Namespace, e.Name, e.Port), nil
	}
	return nil, "", errors.New("no monitoring system")
}

// Terminal says why err will not mend by waiting: the API server refused the suite the proxy (401,
// 403: what to grant) or the Service or path is not there (404). "" for anything else.
func Terminal(err error) string {
	var perr *promv1.Error
	if !errors.As(err, &perr) || perr.Type != promv1.ErrClient {
		return ""
	}
	detail := strings.TrimSpace(perr.Detail)
	if len(detail) > 300 {
		detail = detail[:300] + "…"
	}
	switch {
	case strings.HasSuffix(perr.Msg, " 401"), strings.HasSuffix(perr.Msg, " 403"):
		return fmt.Sprintf("access denied (%s: %s): grant get on services/proxy in the monitoring's namespace (fixtures/rbac)", perr.Msg, detail)
	case strings.HasSuffix(perr.Msg, " 404"):
		return fmt.Sprintf("not found (%s: %s): the monitoring endpoint does not serve Prometheus's HTTP API there", perr.Msg, detail)
	}
	return ""
}
