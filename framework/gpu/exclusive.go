package gpu

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/internal/workload/probe"
)

// Holding is what one pod running on a node holds of a path's devices, for the exclusivity check.
type Holding struct {
	// Pod names the holder.
	Pod string
	// Allocated are the IDs the path's authority handed out (Allocation.Allocated: replica IDs when
	// shared); nil when the authority could not be read.
	Allocated []string
	// Seen are the devices the pod's container saw, normalised (Allocation.Normalize).
	Seen []string
}

// SharingFor is how the exclusivity check judges node's devices on path p: by the node's GPU Feature
// Discovery labels on the device-plugin path, whose extended resource those labels describe (replicas
// under time-slicing and MPS alike; under MIG each MIG UUID is a device of its own); always exclusive on
// a claim-based path, where sharing is a claim's own configuration and never replicas the labels count,
// and a DRA partition is a device of its own as a MIG device is.
func SharingFor(p Path, nodeLabels map[string]string) cluster.NodeSharing {
	if p.ClaimBased() {
		return cluster.NodeSharing{}
	}
	return cluster.NodeSharingOf(nodeLabels)
}

// CheckExclusive judges what pods running side by side on node hold. On an exclusive node (no sharing
// labels, "none", or one replica) a physical device held or seen by two pods is a breach, as it always
// was. On a node the labels call shared (time-slicing or MPS), distinct replicas of one GPU may go to
// different pods; the same replica ID handed out twice, or a GPU held by more pods than it has replicas,
// is still a breach. A MIG device is judged by its own UUID like a GPU; that its parent GPU is not held
// whole at the same time is CheckMIGParents's question.
func CheckExclusive(node string, sharing cluster.NodeSharing, holdings []Holding) error {
	if sharing.Shared() {
		if err := sameIDTwice(node, holdings); err != nil {
			return err
		}
	}
	limit := sharing.HoldersPerDevice()
	holders := physicalHolders(holdings)
	for _, device := range slices.Sorted(maps.Keys(holders)) {
		pods := holders[device]
		if len(pods) <= limit {
			continue
		}
		if limit == 1 {
			return fmt.Errorf("device %s is seen by pod %s and by pod %s, both running on %s: a device was handed out twice%s",
				device, pods[0], pods[1], node, unlabelledReplicas(holdings))
		}
		return fmt.Errorf("GPU %s is held by %d pods (%s) on %s, which the node's labels share %d ways (%s): a device was handed out more often than it has replicas",
			device, len(pods), strings.Join(pods, ", "), node, limit, sharing)
	}
	if !sharing.Shared() {
		return sameIDTwice(node, holdings)
	}
	return nil
}

// sameIDTwice finds an advertised ID held twice, by two pods or by one.
func sameIDTwice(node string, holdings []Holding) error {
	owner := map[string]string{}
	for _, h := range holdings {
		for _, id := range h.Allocated {
			other, dup := owner[id]
			switch {
			case dup && other == h.Pod:
				return fmt.Errorf("%s is allocated twice to pod %s on %s: a device was handed out twice", id, h.Pod, node)
			case dup:
				return fmt.Errorf("%s is held by pod %s and by pod %s, both running on %s: a device was handed out twice", id, other, h.Pod, node)
			}
			owner[id] = h.Pod
		}
	}
	return nil
}

// physicalHolders maps each physical device to the distinct pods that hold it (by their allocation) or
// see it (by their container), in holding order: a double allocation shows in either.
func physicalHolders(holdings []Holding) map[string][]string {
	out := map[string][]string{}
	for _, h := range holdings {
		devices := append(PhysicalDevices(h.Allocated), h.Seen...)
		for _, d := range devices {
			if !slices.Contains(out[d], h.Pod) {
				out[d] = append(out[d], h.Pod)
			}
		}
	}
	return out
}

// unlabelledReplicas explains a breach on a node judged exclusive whose pods were given replica IDs:
// the plugin shares the GPUs, but no sharing labels say so (GPU Feature Discovery absent or stale).
func unlabelledReplicas(holdings []Holding) string {
	for _, h := range holdings {
		for _, id := range h.Allocated {
			if ParseDeviceID(id).Replicated {
				return fmt.Sprintf(" (the kubelet handed out replica IDs such as %s, but the node's %s and %s labels do not say its GPUs are shared)",
					id, cluster.LabelSharingStrategy, cluster.LabelSharingReplicas)
			}
		}
	}
	return ""
}

// MIGHolding is what one pod running on a node holds of MIG devices and whole GPUs, for CheckMIGParents.
type MIGHolding struct {
	// Pod names the holder.
	Pod string
	// MIG are the MIG devices its container was given, each with its parent GPU (the probe's mig_devices).
	MIG []probe.MIGDevice
	// Replicas is how many pods may hold each of those MIG devices at once: the replicas its resource
	// advertises per MIG device when NVIDIA's plugin time-slices them; 0 or 1 when each is exclusive.
	Replicas int
	// ReplicaIDs are the replica IDs ("MIG-…::1") the kubelet handed it for time-sliced MIG devices, each
	// of which must go to one pod only.
	ReplicaIDs []string
	// Whole are the GPUs it holds whole: GPU UUIDs, or replica IDs of them.
	Whole []string
}

// CheckMIGParents judges what pods running side by side on node hold of MIG devices and whole GPUs. A
// MIG device's memory and compute are a slice of its parent GPU, so a GPU held whole while any of its
// MIG devices is held (by another pod or the same one) has been handed out twice; and a MIG device held by
// more pods than it has replicas (two, when it is not time-sliced), or one replica ID held by two pods, is a
// breach as it would be for a GPU. A MIG device whose parent is unknown is judged by its UUID only.
func CheckMIGParents(node string, holdings []MIGHolding) error {
	type holder struct{ pod, device, profile string }
	whole := map[string][]string{}      // GPU → pods holding it whole
	parts := map[string][]holder{}      // GPU → MIG devices held of it
	migHolders := map[string][]string{} // MIG UUID → pods
	replicaOwner := map[string]string{} // replica ID → pod
	for _, h := range holdings {
		for _, g := range PhysicalDevices(h.Whole) {
			if !slices.Contains(whole[g], h.Pod) {
				whole[g] = append(whole[g], h.Pod)
			}
		}
		for _, id := range h.ReplicaIDs {
			if other, dup := replicaOwner[id]; dup && other != h.Pod {
				return fmt.Errorf("replica %s of a time-sliced MIG device is held by pod %s and by pod %s, both running on %s: a replica was handed out twice", id, other, h.Pod, node)
			}
			replicaOwner[id] = h.Pod
		}
		for _, m := range h.MIG {
			holders := migHolders[m.UUID]
			if !slices.Contains(holders, h.Pod) {
				holders = append(holders, h.Pod)
				migHolders[m.UUID] = holders
			}
			switch limit := max(h.Replicas, 1); {
			case len(holders) > limit && limit == 1:
				return fmt.Errorf("MIG device %s (%s of %s) is held by pod %s and by pod %s, both running on %s: a MIG device was handed out twice",
					m.UUID, m.Profile, m.Parent, holders[0], h.Pod, node)
			case len(holders) > limit:
				return fmt.Errorf("MIG device %s (%s of %s) is held by %d pods (%s) on %s, which its resource time-slices %d ways: a MIG device was handed out more often than it has replicas",
					m.UUID, m.Profile, m.Parent, len(holders), strings.Join(holders, ", "), node, limit)
			}
			if m.Parent != "" {
				parts[m.Parent] = append(parts[m.Parent], holder{h.Pod, m.UUID, m.Profile})
			}
		}
	}
	for _, g := range slices.Sorted(maps.Keys(whole)) {
		if len(parts[g]) == 0 {
			continue
		}
		p := parts[g][0]
		owner := whole[g][0]
		if owner == p.pod {
			return fmt.Errorf("pod %s on %s holds GPU %s whole and also its MIG device %s (%s): a GPU was handed out together with its own partition",
				owner, node, g, p.device, p.profile)
		}
		return fmt.Errorf("GPU %s is held whole by pod %s while pod %s holds its MIG device %s (%s), both running on %s: a MIG device's parent was handed out with it (%d MIG device(s) of it held in all)",
			g, owner, p.pod, p.device, p.profile, node, len(parts[g]))
	}
	return nil
}
