package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// featureMetric is the gauge every Kubernetes component (1.26+) exports on /metrics, one series per gate:
// kubernetes_feature_enabled{name="DRAPrioritizedList",stage="BETA"} 1. It is the only way to read the
// gates a running component was started with through the API, without access to its flags.
const featureMetric = "kubernetes_feature_enabled"

// FeatureGate is one gate as a component reports it.
type FeatureGate struct {
	// Component is where it was read: "kube-apiserver" or "kubelet/<node>".
	Component string `json:"component"`
	Name      string `json:"name"`
	// Stage is ALPHA, BETA, DEPRECATED or "" (GA).
	Stage   string `json:"stage,omitempty"`
	Enabled bool   `json:"enabled"`
}

func (g FeatureGate) String() string {
	stage := g.Stage
	if stage == "" {
		stage = "GA"
	}
	return fmt.Sprintf("%s=%t (%s)", g.Name, g.Enabled, stage)
}

// relevantGatePrefixes select the gates that change how GPUs are advertised, allocated, shared or
// scheduled; the record lists only these (a component reports a few hundred).
var relevantGatePrefixes = []string{
	"DRA", "DynamicResourceAllocation", "DevicePlugin", "KubeletPodResources", "ResourceHealthStatus",
	"PodLevelResources", "SchedulerAsyncPreemption", "SchedulerQueueingHints",
}

// RelevantGate reports whether a gate belongs in the compatibility record.
func RelevantGate(name string) bool {
	for _, p := range relevantGatePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// ParseFeatureGates reads the relevant gates from a component's /metrics text, sorted by name.
func ParseFeatureGates(component string, metrics io.Reader) ([]FeatureGate, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(metrics)
	if err != nil {
		return nil, fmt.Errorf("parsing %s metrics: %w", component, err)
	}
	fam, ok := families[featureMetric]
	if !ok {
		return nil, fmt.Errorf("%s exports no %s metric (Kubernetes before 1.26, or metrics filtered)", component, featureMetric)
	}
	var gates []FeatureGate
	for _, m := range fam.GetMetric() {
		g := FeatureGate{Component: component, Name: label(m, "name"), Stage: label(m, "stage")}
		if g.Name == "" || !RelevantGate(g.Name) {
			continue
		}
		g.Enabled = m.GetGauge().GetValue() == 1
		gates = append(gates, g)
	}
	slices.SortFunc(gates, func(a, b FeatureGate) int { return strings.Compare(a.Name, b.Name) })
	return gates, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// rawGetTimeout bounds one metrics read.
const rawGetTimeout = 20 * time.Second

// getRaw fetches a path from the API server (a non-resource URL or a proxied one) as bytes.
type getRaw func(ctx context.Context, path ...string) ([]byte, error)

// restGetRaw is getRaw over the clientset's REST transport; nil when it has none (a fake clientset).
func restGetRaw(kube kubernetes.Interface) getRaw {
	rc, ok := kube.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		return nil
	}
	return func(ctx context.Context, path ...string) ([]byte, error) {
		// A kubelet behind a NotReady node answers the proxy slowly or never; the record must not hold the run.
		ctx, cancel := context.WithTimeout(ctx, rawGetTimeout)
		defer cancel()
		return rc.Get().AbsPath(path...).DoRaw(ctx)
	}
}

// ReadFeatureGates reads the API server's gates and, when node is set (Capabilities.GateNode), that
// node's kubelet's gates through the API server's node proxy. What cannot be read becomes a note naming
// the permission. It reads a few megabytes, so it runs once per run, not in discovery's polling loop.
func ReadFeatureGates(ctx context.Context, kube kubernetes.Interface, node string) ([]FeatureGate, []string) {
	return readFeatureGates(ctx, restGetRaw(kube), node)
}

func readFeatureGates(ctx context.Context, get getRaw, node string) ([]FeatureGate, []string) {
	if get == nil {
		return nil, []string{"feature gates not recorded: the client cannot make raw requests"}
	}
	var gates []FeatureGate
	var notes []string
	read := func(component, forbidden string, path ...string) {
		raw, err := get(ctx, path...)
		if err == nil {
			var g []FeatureGate
			if g, err = ParseFeatureGates(component, bytes.NewReader(raw)); err == nil {
				gates = append(gates, g...)
				return
			}
		}
		if apierrors.IsForbidden(err) {
			notes = append(notes, fmt.Sprintf("feature gates of %s not recorded: %s", component, forbidden))
		} else {
			notes = append(notes, fmt.Sprintf("feature gates of %s not recorded: %v", component, err))
		}
	}
	read("kube-apiserver", `forbidden; grant "get" on the non-resource URL /metrics (the shipped roles have it)`, "/metrics")
	if node != "" {
		read("kubelet/"+node, `forbidden; a kubelet's /metrics needs "get" on nodes/proxy, which the shipped roles leave out on purpose (it reaches the kubelet's API)`,
			"/api/v1/nodes", node, "proxy", "metrics")
	}
	return gates, notes
}

// gateNode picks the node whose kubelet's gates are recorded: the first (by name) Ready node that
// advertises an extended GPU resource or publishes a ResourceSlice; "" when none does.
func gateNode(s Snapshot) string {
	gpu := map[string]bool{}
	for _, n := range s.Nodes {
		for r := range n.Status.Allocatable {
			if isExtendedGPUResource(r) {
				gpu[n.Name] = true
			}
		}
	}
	for _, rs := range s.ResourceSlices {
		if rs.Spec.NodeName != nil {
			gpu[*rs.Spec.NodeName] = true
		}
	}
	var names []string
	for _, n := range s.Nodes {
		if gpu[n.Name] && NodeReady(n) == corev1.ConditionTrue {
			names = append(names, n.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return slices.Min(names)
}

// NodeReady is the status of the node's Ready condition; "" when it has none.
func NodeReady(n corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}
