package cluster

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"gpuconform.io/gpuconform/framework/config"
)

func tainted(n *corev1.Node, taints ...corev1.Taint) *corev1.Node {
	n.Spec.Taints = append(n.Spec.Taints, taints...)
	return n
}

var (
	gpuDedication = corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
	maintenance   = corev1.Taint{Key: "maintenance", Value: "true", Effect: corev1.TaintEffectNoExecute}
	notReady      = corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}
)

func taintSnapshot(nodes ...*corev1.Node) Snapshot {
	s := Snapshot{}
	for _, n := range nodes {
		s.Nodes = append(s.Nodes, *n)
	}
	return s
}

func TestDedicationTaintOnEveryGPUNodeIsTolerated(t *testing.T) {
	alloc := map[string]int64{"nvidia.com/gpu": 4}
	s := taintSnapshot(
		tainted(gpuNode("cp", nil, nil), corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}),
		tainted(gpuNode("w1", nil, alloc), gpuDedication),
		tainted(gpuNode("w2", nil, alloc), gpuDedication, notReady),
		tainted(gpuNode("w3", nil, alloc), gpuDedication, maintenance),
	)
	c := Discover(s, config.Default())
	if want := []corev1.Taint{gpuDedication}; !reflect.DeepEqual(c.Taints.Dedication, want) || !reflect.DeepEqual(c.Taints.Tolerated, want) {
		t.Errorf("dedication %v, tolerated %v; want %v for both (the control plane is not in the pool, not-ready is a lifecycle taint)", c.Taints.Dedication, c.Taints.Tolerated, want)
	}
	if tol := c.Taints.Tolerations(); len(tol) != 1 || tol[0].Operator != corev1.TolerationOpEqual || tol[0].Value != "present" || tol[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("tolerations %+v: want exactly nvidia.com/gpu=present:NoSchedule", tol)
	}
	// w3's maintenance taint is its own: w3 is named and left out; w2's not-ready is named too.
	if got := c.Taints.Excluding["w3"]; len(got) != 1 || got[0].Key != "maintenance" {
		t.Errorf("excluding %v: want w3 for maintenance", c.Taints.Excluding)
	}
	if got := c.Pools.GPU.Nodes; !reflect.DeepEqual(got, []string{"w1"}) {
		t.Errorf("pool %v: want [w1] (w2 not ready, w3 in maintenance)", got)
	}
	if !strings.Contains(strings.Join(c.Notes, "\n"), "GPU node w3 is left out of the pool: taint maintenance=true:NoExecute") {
		t.Errorf("notes do not name the excluding taint: %q", c.Notes)
	}

	// Switched off, the taint is still found but not tolerated, and no node is dropped for it: the specs
	// meet it and say UntoleratedTaint.
	cfg := config.Default()
	off := false
	cfg.AutoTolerateDedicationTaints = &off
	c = Discover(s, cfg)
	if len(c.Taints.Dedication) != 1 || len(c.Taints.Tolerated) != 0 || c.Taints.Excluding["w1"] != nil {
		t.Errorf("auto-tolerate off: %+v", c.Taints)
	}

	// A configured key is tolerated even where only some nodes carry it.
	cfg = config.Default()
	cfg.DedicationTaints = []string{"maintenance"}
	c = Discover(s, cfg)
	if len(c.Taints.Tolerated) != 2 || c.Taints.Excluding["w3"] != nil {
		t.Errorf("configured key: %+v", c.Taints)
	}
}

func TestKindClusterFromProviderIDs(t *testing.T) {
	kind := gpuNode("w1", nil, nil)
	kind.Spec.ProviderID = "kind://docker/gpuconform/w1"
	cloud := gpuNode("w2", nil, nil)
	cloud.Spec.ProviderID = "aws:///us-east-1a/i-0123"
	if !Discover(taintSnapshot(kind), config.Default()).KindCluster {
		t.Error("a cluster of kind nodes is a kind cluster")
	}
	if Discover(taintSnapshot(kind, cloud), config.Default()).KindCluster {
		t.Error("a cluster with a cloud node is not a kind cluster")
	}
}
