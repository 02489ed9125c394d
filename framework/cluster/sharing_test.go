package cluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"gpuconform.io/gpuconform/framework/config"
)

func TestNodeSharingOf(t *testing.T) {
	cases := []struct {
		name    string
		labels  map[string]string
		shared  bool
		holders int
	}{
		{"no labels", nil, false, 1},
		{"GFD with sharing disabled", map[string]string{LabelSharingStrategy: "none", LabelSharingReplicas: "0"}, false, 1},
		{"none, 1 replica", map[string]string{LabelSharingStrategy: "none", LabelSharingReplicas: "1"}, false, 1},
		{"time-slicing, 1 replica", map[string]string{LabelSharingStrategy: "time-slicing", LabelSharingReplicas: "1"}, false, 1},
		{"replicas without a strategy", map[string]string{LabelSharingReplicas: "4"}, false, 1},
		{"time-slicing, 2 replicas", map[string]string{LabelSharingStrategy: "time-slicing", LabelSharingReplicas: "2"}, true, 2},
		{"mps, 4 replicas", map[string]string{LabelSharingStrategy: "mps", LabelSharingReplicas: "4"}, true, 4},
		{"unreadable replicas", map[string]string{LabelSharingStrategy: "time-slicing", LabelSharingReplicas: "two"}, false, 1},
	}
	for _, c := range cases {
		s := NodeSharingOf(c.labels)
		if s.MIG != "" {
			t.Errorf("%s: MIG %q without a MIG label", c.name, s.MIG)
		}
		if s.Shared() != c.shared || s.HoldersPerDevice() != c.holders {
			t.Errorf("%s: %+v shared=%v holders=%d, want %v and %d", c.name, s, s.Shared(), s.HoldersPerDevice(), c.shared, c.holders)
		}
	}
}

// A MIG node's devices are its MIG devices, each exclusive unless replicas share it too.
func TestNodeSharingOfMIG(t *testing.T) {
	mixed := NodeSharingOf(map[string]string{LabelMIGStrategy: "mixed", LabelSharingStrategy: "none", LabelSharingReplicas: "1"})
	if mixed.MIG != "mixed" || mixed.Shared() || mixed.HoldersPerDevice() != 1 || mixed.String() != "MIG (mixed strategy), each MIG device exclusive" {
		t.Errorf("mixed: %+v %q", mixed, mixed)
	}
	sliced := NodeSharingOf(map[string]string{LabelMIGStrategy: "single", LabelSharingStrategy: "time-slicing", LabelSharingReplicas: "2"})
	if !sliced.Shared() || sliced.HoldersPerDevice() != 2 || sliced.String() != "MIG (single strategy), time-slicing, 2 replicas per MIG device" {
		t.Errorf("time-sliced MIG: %+v %q", sliced, sliced)
	}
	if none := NodeSharingOf(map[string]string{LabelMIGStrategy: "none"}); none.MIG != "" || none.String() != "exclusive" {
		t.Errorf("mig.strategy=none: %+v", none)
	}
}

func TestSharingDisagreements(t *testing.T) {
	labelled := func(name, count, replicas string, alloc int64) corev1.Node {
		l := map[string]string{LabelGPUCount: count}
		if replicas != "" {
			l[LabelSharingReplicas] = replicas
		}
		return *gpuNode(name, l, map[string]int64{"nvidia.com/gpu": alloc})
	}
	nodes := []corev1.Node{
		labelled("agree-sliced", "4", "2", 8),
		labelled("agree-whole", "4", "1", 4),
		labelled("agree-disabled", "4", "0", 4),
		labelled("no-replicas-label", "4", "", 3),
		labelled("stale-labels", "4", "2", 4),
		labelled("missing-gpu", "8", "1", 7),
		labelled("garbled", "four", "2", 8),
		*gpuNode("cpu", nil, nil),
		// renameByDefault: the node serves its replicas as nvidia.com/gpu.shared.
		*gpuNode("renamed", map[string]string{LabelGPUCount: "4", LabelSharingReplicas: "2"}, map[string]int64{"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 8}),
	}
	got := sharingDisagreements(nodes, "nvidia.com/gpu")
	want := []string{
		"node garbled: GPU labels nvidia.com/gpu.count=\"four\"",
		"node missing-gpu: GPU labels say 8 GPUs × 1 replica = 8 nvidia.com/gpu, allocatable says 7",
		"node stale-labels: GPU labels say 4 GPUs × 2 replicas = 8 nvidia.com/gpu, allocatable says 4",
	}
	if len(got) != len(want) {
		t.Fatalf("notes = %q, want %d", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("note %d = %q, want it to start %q", i, got[i], want[i])
		}
	}

	// Discovery carries the note.
	caps := Discover(Snapshot{Nodes: []corev1.Node{labelled("stale-labels", "4", "2", 4)}}, config.Default())
	if len(caps.Notes) != 1 || !strings.Contains(caps.Notes[0], "stale-labels") {
		t.Errorf("discovery notes = %q, want the disagreement", caps.Notes)
	}
}
