package diagnose

import (
	"cmp"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Cause is one entry of the scheduler's "0/N nodes are available: ..." list:
// how many nodes gave this reason, and the reason text as the scheduler wrote it.
type Cause struct {
	Count int
	Text  string
}

// SchedulerMessage is a parsed FailedScheduling / PodScheduled=False message.
type SchedulerMessage struct {
	// Nodes is N from "0/N nodes are available"; 0 when the message has another shape.
	Nodes int
	// Causes are the counted reasons, in the scheduler's (sorted) order. A
	// PreFilter failure has no counts; it becomes one cause counted for all nodes.
	Causes []Cause
	// Preemption is the text after "preemption:", kept for the evidence.
	Preemption string
}

// nodesAvailableRE matches the FitError prefix (k8s pkg/scheduler/framework
// NoNodeAvailableMsg = "0/%v nodes are available").
var nodesAvailableRE = regexp.MustCompile(`^0/(\d+) nodes are available:\s*`)

// countedRE matches one "<count> <reason>" entry of the histogram.
var countedRE = regexp.MustCompile(`^(\d+) (.+)$`)

// ParseSchedulerMessage splits the scheduler's FitError text into counted
// causes. The histogram is joined with ", " and closed with "."; reason texts
// can themselves contain ", " and "." (e.g. "Insufficient nvidia.com/gpu", DRA
// request names), so fragments that do not start with a count are glued back
// onto the previous cause instead of splitting on every separator.
func ParseSchedulerMessage(msg string) SchedulerMessage {
	var out SchedulerMessage
	msg = strings.TrimSpace(msg)
	m := nodesAvailableRE.FindStringSubmatch(msg)
	if m == nil {
		if msg != "" {
			out.Causes = []Cause{{Count: 0, Text: strings.TrimSuffix(msg, ".")}}
		}
		return out
	}
	out.Nodes, _ = strconv.Atoi(m[1])
	body := msg[len(m[0]):]
	// The scheduler appends " preemption: 0/N nodes are available: ..." after
	// the histogram's closing period.
	if i := strings.Index(body, " preemption:"); i >= 0 {
		out.Preemption = strings.TrimSpace(body[i+len(" preemption:"):])
		body = body[:i]
	}
	body = strings.TrimSuffix(strings.TrimSpace(body), ".")
	if body == "" {
		return out
	}
	if !countedRE.MatchString(body) {
		// A PreFilter rejection (e.g. a missing ResourceClaim) is reported
		// once for the whole cluster, without a count.
		out.Causes = []Cause{{Count: out.Nodes, Text: body}}
		return out
	}
	for frag := range strings.SplitSeq(body, ", ") {
		if cm := countedRE.FindStringSubmatch(frag); cm != nil {
			n, _ := strconv.Atoi(cm[1])
			out.Causes = append(out.Causes, Cause{Count: n, Text: cm[2]})
			continue
		}
		if len(out.Causes) > 0 {
			last := &out.Causes[len(out.Causes)-1]
			last.Text += ", " + frag
		}
	}
	return out
}

// causeClass groups scheduler reason texts by what they mean for the pod.
type causeClass int

const (
	classOther causeClass = iota
	// Gates exclude a node regardless of load: the pod may never run there.
	classTaint
	classAffinity
	classNodeUnusable // cordoned, wrong node name, unknown conditions
	// Capacity: the node is eligible but full.
	classDevice
	classCPU
	classMemory
	classOtherResource // pods, ephemeral-storage, ports
	classVolume
	classDRA
	classDRAMissing
)

// classify maps one reason text to its class. The texts come from the
// kube-scheduler filter plugins (tainttoleration, nodeaffinity, noderesources,
// volumebinding, dynamicresources in k8s v1.37).
func classify(text string) causeClass {
	t := strings.ToLower(text)
	switch {
	case strings.Contains(t, "untolerated taint") || strings.Contains(t, "taints that the pod didn't tolerate"):
		return classTaint
	case strings.Contains(t, "didn't satisfy plugin"):
		// Nodes a PreFilter plugin left out of the candidates (kube-scheduler's schedule_one.go:
		// "node(s) didn't satisfy plugin(s) [NodeAffinity]", and the runtime's "didn't satisfy plugin(s) %v
		// simultaneously" / "didn't satisfy plugin %v" when the plugins' node sets do not intersect): a
		// placement gate, never a lack of capacity. TaintToleration is the taint gate; every other plugin
		// that narrows nodes in PreFilter (NodeAffinity, NodeName, volume topology) restricts placement.
		if strings.Contains(t, "tainttoleration") {
			return classTaint
		}
		return classAffinity
	case strings.Contains(t, "didn't match pod's node affinity/selector") || strings.Contains(t, "didn't match scheduler-enforced node affinity"):
		return classAffinity
	case strings.Contains(t, "were unschedulable") || strings.Contains(t, "didn't match the requested node name") || strings.Contains(t, "had unknown conditions"):
		return classNodeUnusable
	case t == "insufficient cpu":
		return classCPU
	case t == "insufficient memory":
		return classMemory
	case strings.HasPrefix(t, "insufficient ephemeral-storage") || strings.HasPrefix(t, "insufficient hugepages-") || t == "too many pods" || strings.Contains(t, "free ports"):
		return classOtherResource
	case strings.HasPrefix(t, "insufficient "):
		// Any other "Insufficient <name>" is an extended resource: a device.
		return classDevice
	case strings.Contains(t, "persistentvolumeclaim") || strings.Contains(t, "persistent volume") || strings.Contains(t, "persistentvolume") || strings.Contains(t, "free storage") || strings.Contains(t, "pvc(s)"):
		return classVolume
	case strings.Contains(t, "resourceclaim") && (strings.Contains(t, "not found") || strings.Contains(t, "not created yet")),
		strings.Contains(t, "device class") && strings.Contains(t, "does not exist"),
		strings.Contains(t, "resourceclaimtemplate") && strings.Contains(t, "not found"):
		return classDRAMissing
	case strings.Contains(t, "cannot allocate all claims") || strings.Contains(t, "resourceclaim") || strings.Contains(t, "resource claim") ||
		strings.Contains(t, "allocating devices") || strings.Contains(t, "no matching device"):
		return classDRA
	}
	return classOther
}

// isGate reports whether a class excludes a node outright (as opposed to a
// node that is eligible but lacks free capacity).
func (c causeClass) isGate() bool {
	return c == classTaint || c == classAffinity || c == classNodeUnusable
}

// reason maps a class to its verdict.
func (c causeClass) reason() (Layer, Reason) {
	switch c {
	case classTaint:
		return LayerScheduler, UntoleratedTaint
	case classAffinity:
		return LayerScheduler, NodeSelectorMismatch
	case classDevice:
		return LayerScheduler, InsufficientDevice
	case classCPU:
		return LayerScheduler, InsufficientCPU
	case classMemory:
		return LayerScheduler, InsufficientMemory
	case classVolume:
		return LayerScheduler, UnboundVolume
	case classDRA:
		return LayerDRA, DRAAllocationFailed
	case classDRAMissing:
		return LayerDRA, DRAClaimMissing
	}
	return LayerScheduler, Unknown
}

// PrimaryCause picks the cause that holds the pod back, and reports whether
// one was found. The rule, and why:
//   - A missing DRA object wins outright: nothing else can be fixed first.
//   - Nodes rejected by a gate (taint, affinity, cordon) can never run the
//     pod, so when any node passed the gates the primary cause is among the
//     capacity causes of those eligible nodes; a GPU shortage on the GPU nodes
//     is not hidden by the tainted control plane.
//   - Among capacity causes the highest count wins; on a tie a device or DRA
//     cause wins over CPU/memory, because the eligible nodes lack both and the
//     device is the scarcer thing to free. A device shortage is therefore
//     reported only when no other capacity cause is strictly more common.
//   - When every node fails a gate, the most common gate wins.
func (m SchedulerMessage) PrimaryCause() (Cause, bool) {
	if len(m.Causes) == 0 {
		return Cause{}, false
	}
	var gates, capacity []Cause
	for _, c := range m.Causes {
		cl := classify(c.Text)
		switch {
		case cl == classDRAMissing:
			return c, true
		case cl.isGate():
			gates = append(gates, c)
		default:
			capacity = append(capacity, c)
		}
	}
	pick := func(cs []Cause) Cause {
		slices.SortStableFunc(cs, func(a, b Cause) int {
			if a.Count != b.Count {
				return cmp.Compare(b.Count, a.Count)
			}
			return cmp.Compare(tieRank(classify(a.Text)), tieRank(classify(b.Text)))
		})
		return cs[0]
	}
	if len(capacity) > 0 {
		return pick(capacity), true
	}
	return pick(gates), true
}

// tieRank orders classes on equal counts: lower wins.
func tieRank(c causeClass) int {
	switch c {
	case classDRA:
		return 0
	case classDevice:
		return 1
	case classVolume:
		return 2
	case classMemory:
		return 3
	case classCPU:
		return 4
	case classTaint:
		return 5
	case classAffinity:
		return 6
	}
	return 9
}
