package gpu

import (
	"fmt"
	"slices"
	"strings"

	"gpuconform.io/gpuconform/framework/cluster"
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
// Discovery labels on the device-plugin path, whose extended resource those labels describe; always
// exclusive on a claim-based path, where sharing is a claim's own configuration and never replicas the
// labels count.
func SharingFor(p Path, nodeLabels map[string]string) cluster.NodeSharing {
	if p.ClaimBased() {
		return cluster.NodeSharing{}
	}
	return cluster.NodeSharingOf(nodeLabels)
}

// CheckExclusive judges what pods running side by side on node hold. On an exclusive node (no sharing
// labels, "none", or one replica) a physical device held or seen by two pods is a breach, as it always
// was. On a node the labels call shared, distinct replicas of one GPU may go to different pods; the same
// replica ID handed out twice, or a GPU held by more pods than it has replicas, is still a breach.
func CheckExclusive(node string, sharing cluster.NodeSharing, holdings []Holding) error {
	if sharing.Shared() {
		if err := sameIDTwice(node, holdings); err != nil {
			return err
		}
	}
	limit := sharing.HoldersPerDevice()
	holders := physicalHolders(holdings)
	for _, device := range sortedKeys(holders) {
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

func sortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
