package monitoring

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

// The Prometheus Operator's API (monitoring.coreos.com/v1).
var (
	OperatorGroupVersion = schema.GroupVersion{Group: "monitoring.coreos.com", Version: "v1"}
	PodMonitors          = OperatorGroupVersion.WithResource("podmonitors")
	prometheuses         = OperatorGroupVersion.WithResource("prometheuses")
)

// Operator is what the Prometheus Operator's API asks of a PodMonitor for its Prometheus objects to
// select it.
type Operator struct {
	// Served is false where the cluster does not serve PodMonitors (no operator: the annotations decide).
	Served bool
	// Labels are the union of the Prometheus objects' podMonitorSelector matchLabels.
	Labels map[string]string
	// Notes say what a PodMonitor in the test namespace cannot satisfy (a Prometheus that selects
	// PodMonitors only in its own namespace, or by expressions).
	Notes []string
}

// ReadOperator reads whether PodMonitors are served and which labels the Prometheus objects select them by.
func ReadOperator(ctx context.Context, disc discovery.DiscoveryInterface, dyn dynamic.Interface) (Operator, error) {
	res, err := disc.ServerResourcesForGroupVersion(OperatorGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return Operator{}, nil
	}
	if err != nil {
		return Operator{}, fmt.Errorf("reading the %s API: %w", OperatorGroupVersion, err)
	}
	if !slices.ContainsFunc(res.APIResources, func(r metav1.APIResource) bool { return r.Name == PodMonitors.Resource }) {
		return Operator{}, nil
	}
	op := Operator{Served: true, Labels: map[string]string{}}
	list, err := dyn.Resource(prometheuses).List(ctx, metav1.ListOptions{})
	if err != nil {
		return op, fmt.Errorf("listing Prometheus objects: %w", err)
	}
	for _, p := range list.Items {
		name := p.GetNamespace() + "/" + p.GetName()
		sel, found, _ := unstructured.NestedMap(p.Object, "spec", "podMonitorSelector")
		if !found {
			op.Notes = append(op.Notes, "Prometheus "+name+" has no podMonitorSelector: it selects no PodMonitor")
			continue
		}
		labels, _, _ := unstructured.NestedStringMap(sel, "matchLabels")
		maps.Copy(op.Labels, labels)
		if exprs, _, _ := unstructured.NestedSlice(sel, "matchExpressions"); len(exprs) > 0 {
			op.Notes = append(op.Notes, "Prometheus "+name+" selects PodMonitors by expressions, which the suite's PodMonitor carries only its matchLabels for")
		}
		if _, ok, _ := unstructured.NestedMap(p.Object, "spec", "podMonitorNamespaceSelector"); !ok {
			op.Notes = append(op.Notes, "Prometheus "+name+" selects PodMonitors in its own namespace "+p.GetNamespace()+" only (no podMonitorNamespaceSelector)")
		}
	}
	if len(list.Items) == 0 {
		op.Notes = append(op.Notes, "the PodMonitor API is served but no Prometheus object exists to select a PodMonitor")
	}
	return op, nil
}

// String says what the operator's API asks, for the evidence.
func (o Operator) String() string {
	if !o.Served {
		return "the Prometheus Operator's PodMonitor API is not served: discovery by the prometheus.io/scrape annotations only"
	}
	keys := slices.Sorted(maps.Keys(o.Labels))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + o.Labels[k]
	}
	s := "PodMonitor served; labelled " + strings.Join(parts, ",") + " for the Prometheus objects' podMonitorSelector"
	if len(o.Notes) > 0 {
		s += " (" + strings.Join(o.Notes, "; ") + ")"
	}
	return s
}
