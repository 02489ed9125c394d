package accelmetrics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/framework/config"
)

// ErrTerminal marks a scrape that cannot succeed by waiting: no exporter pod on the node, access denied.
var ErrTerminal = errors.New("terminal")

// Scrape is what one read of the endpoint returned for a node.
type Scrape struct {
	Samples []Sample
	// From says where they were read (the exporter pod through the API server's proxy, or the query).
	From string
}

// Read returns the endpoint's samples for node: through the API server's pod proxy from the exporter pod
// that serves node (a DaemonSet's endpoint on that node), or from Prometheus by the exporter's Hostname
// label. An error wrapping ErrTerminal will not mend by waiting.
func Read(ctx context.Context, kube kubernetes.Interface, e Endpoint, node string) (Scrape, error) {
	switch e.Kind {
	case config.MetricsService:
		return readService(ctx, kube, e, node)
	case config.MetricsPrometheus:
		return readPrometheus(ctx, e, node)
	}
	return Scrape{}, fmt.Errorf("%w: no accelerator metrics endpoint", ErrTerminal)
}

// readService finds the Service's endpoint on node and scrapes its pod's /metrics through the API
// server's proxy (so the suite needs no network route into the cluster).
func readService(ctx context.Context, kube kubernetes.Interface, e Endpoint, node string) (Scrape, error) {
	eps, err := kube.DiscoveryV1().EndpointSlices(e.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + e.Name})
	if err != nil {
		return Scrape{}, terminalIfDenied(fmt.Errorf("listing the EndpointSlices of Service %s/%s: %w", e.Namespace, e.Name, err))
	}
	var pod string
	port := int32(e.Port)
	var onNodes []string
	for _, sl := range eps.Items {
		if port == 0 {
			port = metricsPort(sl.Ports)
		}
		for _, ep := range sl.Endpoints {
			if ep.NodeName == nil || ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
				continue
			}
			onNodes = append(onNodes, *ep.NodeName)
			if *ep.NodeName == node {
				pod = ep.TargetRef.Name
			}
		}
	}
	if pod == "" {
		slices.Sort(onNodes)
		return Scrape{}, fmt.Errorf("%w: no pod of Service %s/%s runs on node %s (its endpoints are on: %s): the exporter does not cover this GPU node",
			ErrTerminal, e.Namespace, e.Name, node, strings.Join(slices.Compact(onNodes), ", "))
	}
	if port == 0 {
		return Scrape{}, fmt.Errorf("%w: Service %s/%s has no port named metrics and more than one port; name it with --accelerator-metrics=service:%s/%s:PORT", ErrTerminal, e.Namespace, e.Name, e.Namespace, e.Name)
	}
	from := fmt.Sprintf("pod %s/%s:%d/metrics (Service %s/%s, node %s), through the API server's pod proxy", e.Namespace, pod, port, e.Namespace, e.Name, node)
	raw, err := kube.CoreV1().RESTClient().Get().Namespace(e.Namespace).Resource("pods").Name(pod + ":" + strconv.Itoa(int(port))).
		SubResource("proxy").Suffix("metrics").Timeout(30 * time.Second).DoRaw(ctx)
	if err != nil {
		return Scrape{From: from}, terminalIfDenied(fmt.Errorf("scraping %s: %w", from, err))
	}
	samples, err := ParseText(string(raw))
	if err != nil {
		return Scrape{From: from}, fmt.Errorf("%w: %s does not serve the Prometheus text format: %w", ErrTerminal, from, err)
	}
	return Scrape{Samples: samples, From: from}, nil
}

// metricsPort is the slice's port named "metrics", else its only port, else 0.
func metricsPort(ports []discoveryv1.EndpointPort) int32 {
	for _, p := range ports {
		if p.Name != nil && *p.Name == "metrics" && p.Port != nil {
			return *p.Port
		}
	}
	if len(ports) == 1 && ports[0].Port != nil {
		return *ports[0].Port
	}
	return 0
}

// terminalIfDenied marks an authorisation failure terminal, with what to grant.
func terminalIfDenied(err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return fmt.Errorf("%w: %w (grant get on pods/proxy and list on endpointslices in the exporter's namespace: fixtures/rbac)", ErrTerminal, err)
	}
	return err
}

// readPrometheus asks Prometheus for the node's utilisation and memory samples.
func readPrometheus(ctx context.Context, e Endpoint, node string) (Scrape, error) {
	client, err := promapi.NewClient(promapi.Config{Address: e.URL})
	if err != nil {
		return Scrape{}, fmt.Errorf("%w: Prometheus client for %s: %w", ErrTerminal, e.URL, err)
	}
	query := fmt.Sprintf(`{__name__=~"%s|%s|%s", %s=%q}`, GPUUtil, EngineActive, FBUsed, LabelHost, node)
	from := fmt.Sprintf("Prometheus %s, query %s", e.URL, query)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, _, err := promv1.NewAPI(client).Query(ctx, query, time.Now())
	if err != nil {
		return Scrape{From: from}, fmt.Errorf("querying %s: %w", from, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return Scrape{From: from}, fmt.Errorf("%w: %s answered a %s, not a vector", ErrTerminal, from, v.Type())
	}
	return Scrape{Samples: fromVector(vec), From: from}, nil
}

// fromVector converts a Prometheus query result into samples.
func fromVector(vec model.Vector) []Sample {
	out := make([]Sample, 0, len(vec))
	for _, s := range vec {
		smp := Sample{Labels: map[string]string{}, Value: float64(s.Value)}
		for k, v := range s.Metric {
			if k == model.MetricNameLabel {
				smp.Name = string(v)
				continue
			}
			smp.Labels[string(k)] = string(v)
		}
		out = append(out, smp)
	}
	slices.SortFunc(out, func(a, b Sample) int { return strings.Compare(a.String(), b.String()) })
	return out
}
