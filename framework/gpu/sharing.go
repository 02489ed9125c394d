package gpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gpuconform.io/gpuconform/framework/cluster"
)

// ReplicaSeparator joins a physical device ID and a replica number in the IDs a sharing device plugin
// advertises: NVIDIA's device plugin names the replicas of a time-sliced or MPS-shared GPU
// "<uuid>::<n>" (its rm.AnnotatedID), hands the kubelet those IDs, and gives the container the
// physical GPU behind them.
const ReplicaSeparator = "::"

// DeviceID is one advertised device ID split the way NVIDIA's AnnotatedID splits it.
type DeviceID struct {
	// Advertised is the ID as the kubelet lists it.
	Advertised string
	// Physical is the device behind it: the part before "::", or the whole ID when it has none.
	Physical string
	// Replica is the replica number after "::" (0 when absent or not a number, as NVIDIA reads it).
	Replica int
	// Replicated is true when the ID carries a replica number.
	Replicated bool
}

// ParseDeviceID splits an advertised ID into its physical device and replica. An ID without "::" is its
// own physical device.
func ParseDeviceID(id string) DeviceID {
	physical, replica, ok := strings.Cut(id, ReplicaSeparator)
	if !ok {
		return DeviceID{Advertised: id, Physical: id}
	}
	n, _ := strconv.Atoi(replica)
	return DeviceID{Advertised: id, Physical: physical, Replica: n, Replicated: true}
}

// PhysicalOf is the physical device behind an advertised ID.
func PhysicalOf(id string) string { return ParseDeviceID(id).Physical }

// AnyReplicated reports whether any of ids is a replica ID.
func AnyReplicated(ids []string) bool {
	return slices.ContainsFunc(ids, func(id string) bool { return ParseDeviceID(id).Replicated })
}

// PhysicalDevices maps advertised IDs to the distinct physical devices behind them, sorted: what a
// container given those IDs sees, since two replicas of one GPU are still one GPU to it.
func PhysicalDevices(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, PhysicalOf(id))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// splitReplicas turns what the kubelet lists for a container into an allocation's Devices and Replicas:
// without replica IDs, the IDs themselves (sorted, duplicates kept so a comparison sees them) and no
// replicas; with them, the distinct physical devices and the replica IDs as listed (sorted).
func splitReplicas(ids []string) (devices, replicas []string) {
	if !AnyReplicated(ids) {
		devices = slices.Clone(ids)
		slices.Sort(devices)
		return devices, nil
	}
	replicas = slices.Clone(ids)
	slices.Sort(replicas)
	return PhysicalDevices(ids), replicas
}

// duplicates returns the entries of ids that occur more than once, sorted, each once.
func duplicates(ids []string) []string {
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	var out []string
	for id, n := range seen {
		if n > 1 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// DescribeReplicas renders replica IDs per physical device for reports: "replicas 0, 1 of GPU-a;
// replica 0 of GPU-b". Empty when none of ids is a replica ID.
func DescribeReplicas(ids []string) string {
	if !AnyReplicated(ids) {
		return ""
	}
	byDevice := map[string][]int{}
	for _, id := range ids {
		d := ParseDeviceID(id)
		byDevice[d.Physical] = append(byDevice[d.Physical], d.Replica)
	}
	devices := make([]string, 0, len(byDevice))
	for d := range byDevice {
		devices = append(devices, d)
	}
	slices.Sort(devices)
	parts := make([]string, 0, len(devices))
	for _, d := range devices {
		ns := byDevice[d]
		slices.Sort(ns)
		nums := make([]string, len(ns))
		for i, n := range ns {
			nums[i] = strconv.Itoa(n)
		}
		word := "replica"
		if len(ns) > 1 {
			word = "replicas"
		}
		parts = append(parts, fmt.Sprintf("%s %s of %s", word, strings.Join(nums, ", "), d))
	}
	return strings.Join(parts, "; ")
}

// ReplicasEntry is the report entry through which a spec records the replica IDs a pod was given (its
// value a ReplicaObservation), so the signoff can say what sharing the run observed, beside what the
// labels claim.
const ReplicasEntry = "gpu replicas"

// ReplicaObservation is the value of a ReplicasEntry: the replica IDs one allocation held on a node.
type ReplicaObservation struct {
	Node string   `json:"node"`
	IDs  []string `json:"ids"`
}

// String is what the report shows: "w1: replicas 0, 1 of GPU-a".
func (o ReplicaObservation) String() string { return o.Node + ": " + DescribeReplicas(o.IDs) }

// SharingObservedEntry is the report entry through which a spec records what one pod saw of a node's GPU
// sharing (its value a SharingObservation), so the signoff states each node's sharing as seen from a
// pod, beside what discovery read from the node.
const SharingObservedEntry = "gpu sharing observed"

// ObservedMIG is the Mode of an observation whose pod was given MIG devices (or DRA partitions, which a
// container sees the same way): a pod cannot tell the strategy that advertised them.
const ObservedMIG = "mig"

// SharingObservation is the value of a SharingObservedEntry: what one pod on a node was given on a path.
type SharingObservation struct {
	Node string `json:"node"`
	Path string `json:"path"`
	// Mode is the sharing the pod's evidence shows: cluster.ModeExclusive, ModeTimeSlicing, ModeMPS, or
	// ObservedMIG.
	Mode string `json:"mode"`
	Pod  string `json:"pod"`
	// Saw is what it was given: "MIG-… (3g.40gb of GPU-…)", "replica 1 of GPU-…", "GPU-… whole".
	Saw string `json:"saw"`
	// Note is what the mode does not promise or what limits it set: "no memory or fault isolation" for
	// time-slicing, the MPS limits, …
	Note string `json:"note,omitempty"`
}

// String is what the report shows: "pod p0 on w1 (device-plugin): time-slicing, saw replica 1 of GPU-a
// (no memory or fault isolation)".
func (o SharingObservation) String() string {
	s := fmt.Sprintf("pod %s on %s (%s): %s, saw %s", o.Pod, o.Node, o.Path, o.Mode, o.Saw)
	if o.Note != "" {
		s += " (" + o.Note + ")"
	}
	return s
}

// SeenConsistent reports whether what a pod saw (an observation's Mode) fits the mode discovery read
// from its node's evidence: whole GPUs fit an exclusive node and the whole GPUs a mig-mixed, a
// partitionable or a dra-shared node also hands out (a claim that asks for no share of a shared GPU's
// capacity consumes its request policy's default, which may be all of it); replicas fit time-slicing or
// MPS only, each its own; MIG devices fit the MIG modes and DRA partitions; a share of a GPU's capacity
// fits dra-shared only.
func SeenConsistent(nodeMode, seen string) bool {
	switch seen {
	case cluster.ModeExclusive:
		return nodeMode == cluster.ModeExclusive || nodeMode == cluster.ModeMIGMixed || nodeMode == cluster.ModePartitionable || nodeMode == cluster.ModeConsumable
	case ObservedMIG:
		return nodeMode == cluster.ModeMIGSingle || nodeMode == cluster.ModeMIGMixed || nodeMode == cluster.ModePartitionable
	}
	return nodeMode == seen
}
