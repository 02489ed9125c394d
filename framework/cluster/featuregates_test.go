package cluster

import (
	"context"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// The testdata files are the kubernetes_feature_enabled family as the local v1.37.2 cluster's API server
// and a GPU worker's kubelet exported it (kubectl get --raw /metrics | grep kubernetes_feature_enabled).
func recordedMetrics(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseFeatureGatesKeepsOnlyGPURelevantGates(t *testing.T) {
	gates, err := ParseFeatureGates("kube-apiserver", strings.NewReader(string(recordedMetrics(t, "apiserver-feature-metrics.txt"))))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]FeatureGate{}
	for _, g := range gates {
		if !RelevantGate(g.Name) {
			t.Errorf("irrelevant gate kept: %s", g.Name)
		}
		if g.Component != "kube-apiserver" {
			t.Errorf("component = %q", g.Component)
		}
		byName[g.Name] = g
	}
	if g := byName["DynamicResourceAllocation"]; !g.Enabled || g.Stage != "" || g.String() != "DynamicResourceAllocation=true (GA)" {
		t.Errorf("DynamicResourceAllocation = %+v (%s)", g, g)
	}
	if g, ok := byName["DRAPartitionableDevices"]; !ok || !g.Enabled || g.Stage != "BETA" {
		t.Errorf("DRAPartitionableDevices = %+v, %t", g, ok)
	}
	if g, ok := byName["DRADerivedAttributes"]; !ok || g.Enabled || g.Stage != "ALPHA" {
		t.Errorf("a disabled alpha gate must be recorded as off: %+v, %t", g, ok)
	}
	if _, ok := byName["SidecarContainers"]; ok {
		t.Errorf("SidecarContainers is not GPU-relevant")
	}
	if len(gates) < 20 || len(gates) > 60 {
		t.Errorf("%d relevant gates; expected the DRA family and a few more", len(gates))
	}
}

func TestParseFeatureGatesWithoutTheMetric(t *testing.T) {
	_, err := ParseFeatureGates("kube-apiserver", strings.NewReader("# TYPE up gauge\nup 1\n"))
	if err == nil || !strings.Contains(err.Error(), "kubernetes_feature_enabled") {
		t.Errorf("err = %v, want one naming the missing metric", err)
	}
}

func TestReadFeatureGates(t *testing.T) {
	api, kubelet := recordedMetrics(t, "apiserver-feature-metrics.txt"), recordedMetrics(t, "kubelet-feature-metrics.txt")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes/proxy"}, "w1", nil)
	getter := func(apiErr, kubeletErr error) getRaw {
		return func(_ context.Context, path ...string) ([]byte, error) {
			if path[0] == "/metrics" {
				return api, apiErr
			}
			if strings.Join(path, "/") != "/api/v1/nodes/w1/proxy/metrics" {
				t.Errorf("unexpected path %v", path)
			}
			return kubelet, kubeletErr
		}
	}

	gates, notes := readFeatureGates(t.Context(), getter(nil, nil), "w1")
	if len(notes) != 0 {
		t.Errorf("notes: %v", notes)
	}
	components := map[string]int{}
	for _, g := range gates {
		components[g.Component]++
	}
	if components["kube-apiserver"] == 0 || components["kubelet/w1"] == 0 {
		t.Errorf("gates per component: %v", components)
	}

	// The kubelet's metrics need nodes/proxy: forbidden is a note naming it, and the API server's gates stay.
	gates, notes = readFeatureGates(t.Context(), getter(nil, forbidden), "w1")
	if len(notes) != 1 || !strings.Contains(notes[0], "nodes/proxy") || !strings.Contains(notes[0], "kubelet/w1") {
		t.Errorf("notes = %v", notes)
	}
	for _, g := range gates {
		if g.Component != "kube-apiserver" {
			t.Errorf("gate from an unreadable component: %+v", g)
		}
	}

	gates, notes = readFeatureGates(t.Context(), getter(apierrors.NewForbidden(schema.GroupResource{}, "/metrics", nil), nil), "")
	if len(gates) != 0 || len(notes) != 1 || !strings.Contains(notes[0], "/metrics") {
		t.Errorf("API server forbidden: gates %v notes %v", gates, notes)
	}

	if _, notes := readFeatureGates(t.Context(), nil, "w1"); len(notes) != 1 {
		t.Errorf("no transport: notes %v", notes)
	}
}

func TestGateNodePrefersAReadyGPUNode(t *testing.T) {
	ready := func(n *corev1.Node, status corev1.ConditionStatus) corev1.Node {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
		return *n
	}
	s := Snapshot{Nodes: []corev1.Node{
		ready(gpuNode("a-cpu", nil, nil), corev1.ConditionTrue),
		ready(gpuNode("b-gpu-down", nil, map[string]int64{"nvidia.com/gpu": 8}), corev1.ConditionUnknown),
		ready(gpuNode("z-gpu", nil, map[string]int64{"nvidia.com/gpu": 8}), corev1.ConditionTrue),
		ready(gpuNode("m-dra", nil, nil), corev1.ConditionTrue),
	}}
	if got := gateNode(s); got != "z-gpu" {
		t.Errorf("gateNode = %q, want z-gpu (b-gpu-down is not Ready, m-dra has no slice yet)", got)
	}
	s.ResourceSlices = []resourcev1.ResourceSlice{{Spec: resourcev1.ResourceSliceSpec{NodeName: ptr.To("m-dra")}}}
	if got := gateNode(s); got != "m-dra" {
		t.Errorf("gateNode = %q, want m-dra (first Ready GPU node by name)", got)
	}
	if got := gateNode(Snapshot{Nodes: s.Nodes[:2]}); got != "" {
		t.Errorf("gateNode with no Ready GPU node = %q", got)
	}
}
