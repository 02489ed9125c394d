package cluster

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// sharingNone is GPU Feature Discovery's sharing strategy of a node whose GPUs are not shared.
const sharingNone = "none"

// NodeSharing is how one node shares its full GPUs, as GPU Feature Discovery labels it: the strategy
// (nvidia.com/gpu.sharing-strategy: "none", "time-slicing" or "mps") and the replicas each physical GPU
// is advertised as (nvidia.com/gpu.replicas). GFD writes replicas 0 when sharing is disabled and 1 when
// it is configured without replication, and a strategy other than "none" only with more than 1 replica.
type NodeSharing struct {
	// Strategy is the label's value, "" when the node has no such label.
	Strategy string
	// Replicas is the label's value, 0 when the label is absent or not a number.
	Replicas int
	// MIG is the MIG strategy (nvidia.com/mig.strategy: "single" or "mixed"), "" when the node's GPUs are
	// not partitioned. Each MIG device is then a device of its own: its UUID is what is held exclusively,
	// unless the replicas share it too.
	MIG string
}

// NodeSharingOf reads a node's sharing labels.
func NodeSharingOf(labels map[string]string) NodeSharing {
	r, err := strconv.Atoi(labels[LabelSharingReplicas])
	if err != nil || r < 0 {
		r = 0
	}
	mig := labels[LabelMIGStrategy]
	if mig == sharingNone {
		mig = ""
	}
	return NodeSharing{Strategy: labels[LabelSharingStrategy], Replicas: r, MIG: mig}
}

// Shared reports whether the labels let several pods hold one physical GPU: a strategy other than "none"
// with more than one replica. A node without the labels, labelled "none", or with one replica is
// exclusive, so every check stays as strict as on a node that never heard of sharing.
func (s NodeSharing) Shared() bool {
	return s.Strategy != "" && s.Strategy != sharingNone && s.Replicas > 1
}

// HoldersPerDevice is how many holders one physical GPU may have: its replicas when shared, else 1.
func (s NodeSharing) HoldersPerDevice() int {
	if s.Shared() {
		return s.Replicas
	}
	return 1
}

// String describes the sharing for messages: "time-slicing, 2 replicas per GPU", "MIG (mixed
// strategy), each MIG device exclusive" or "exclusive".
func (s NodeSharing) String() string {
	unit := "GPU"
	if s.MIG != "" {
		unit = "MIG device"
	}
	switch {
	case s.Shared() && s.MIG != "":
		return fmt.Sprintf("MIG (%s strategy), %s, %d replicas per %s", s.MIG, s.Strategy, s.Replicas, unit)
	case s.Shared():
		return fmt.Sprintf("%s, %d replicas per %s", s.Strategy, s.Replicas, unit)
	case s.MIG != "":
		return fmt.Sprintf("MIG (%s strategy), each MIG device exclusive", s.MIG)
	}
	return "exclusive"
}

// sharingDisagreements names the nodes whose GFD labels and allocatable resource disagree: a node
// labelled with nvidia.com/gpu.count and nvidia.com/gpu.replicas should advertise count × replicas (count
// when replicas is 0, sharing disabled). A difference is worth a note, not a failure: unhealthy GPUs leave
// allocatable for a while, and labels go stale when the plugin's sharing config changes without GFD
// following, which would make the exclusivity check judge a node by the wrong replica count.
func sharingDisagreements(nodes []corev1.Node, resource corev1.ResourceName) []string {
	var out []string
	for _, n := range nodes {
		countLabel, hasCount := n.Labels[LabelGPUCount]
		replicasLabel, hasReplicas := n.Labels[LabelSharingReplicas]
		if !hasCount || !hasReplicas {
			continue
		}
		count, errC := strconv.Atoi(countLabel)
		replicas, errR := strconv.Atoi(replicasLabel)
		if errC != nil || errR != nil || count < 0 || replicas < 0 {
			out = append(out, fmt.Sprintf("node %s: GPU labels %s=%q, %s=%q are not counts; its sharing is judged as exclusive",
				n.Name, LabelGPUCount, countLabel, LabelSharingReplicas, replicasLabel))
			continue
		}
		want := int64(count * max(replicas, 1))
		res := renamedSibling(n, resource)
		q := n.Status.Allocatable[res]
		if got := q.Value(); got != want {
			each := "1 replica"
			if replicas > 1 {
				each = strconv.Itoa(replicas) + " replicas"
			}
			out = append(out, fmt.Sprintf("node %s: GPU labels say %d GPUs × %s = %d %s, allocatable says %d (unhealthy devices, or labels stale since the sharing configuration changed)",
				n.Name, count, each, want, res, got))
		}
	}
	slices.Sort(out)
	return out
}

// renamedSibling is the name under which node serves resource: resource itself, or when it serves none of
// it, its other name under NVIDIA's renameByDefault (nvidia.com/gpu ↔ nvidia.com/gpu.shared) where that one
// has devices. A node renamed for sharing keeps the plain name at 0 for a while.
func renamedSibling(n corev1.Node, resource corev1.ResourceName) corev1.ResourceName {
	if q := n.Status.Allocatable[resource]; q.Value() > 0 {
		return resource
	}
	other := resource + SharedResourceSuffix
	if plain, ok := strings.CutSuffix(string(resource), SharedResourceSuffix); ok {
		other = corev1.ResourceName(plain)
	}
	if q := n.Status.Allocatable[other]; q.Value() > 0 {
		return other
	}
	return resource
}
