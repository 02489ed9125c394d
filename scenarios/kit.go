package scenarios

import (
	"fmt"

	"github.com/onsi/ginkgo/v2"

	"gpuconform.io/gpuconform/framework/labels"
)

// Devices is how much of its path's devices a spec's pods use while it runs, in the terms a scenario
// author knows (how many nodes, a few devices or every one of them); the kit derives the pool locks from it.
type Devices int

const (
	// AnyNodes (the zero value, what a spec that declares nothing takes) is a few devices, wherever the
	// scheduler or Kueue puts the pods on the path. It runs beside every spec that leaves a device free.
	AnyNodes Devices = iota
	// EachNode is a few devices on each of the path's nodes (a pod per node). Like AnyNodes, but it runs in
	// the run's first seconds, before node holders queue up for the whole run.
	EachNode
	// NoDevice means its pods never get a device (they stay Pending, or the API server refuses them), and the
	// outcome reads every node's state: no node may stop under it.
	NoDevice
	// FewOnOneNode is a few devices of one node, which it leases (Spec.lease) once it knows which nodes fit.
	FewOnOneNode
	// OneWholeNode is every device of one node, leased before its body starts (Spec.Node).
	OneWholeNode
	// WholeNodes is every device of a few nodes, as many as it asks for in its body (Spec.leaseNodes).
	WholeNodes
	// WholePath is every device of the path, on nodes it cannot name ahead (the scheduler or Kueue picks).
	WholePath
	// WholePool means no other spec uses a device of any path beside it (it measures a node's timings).
	WholePool
	// CanaryPool is the canary pool's nodes on every path, and one known-good node, for a rehearsal that
	// compares the known-good pool before and after (canaryHold plans its locks).
	CanaryPool
)

// Takes is what one spec (or a container of specs) needs of the cluster while it runs, as data. The kit
// (takes) derives from it the spec's pool-lock labels (framework/labels: holds:*, on:node, leases:nodes,
// devices:none, stops:node, faults:device), which poolHold, the run's lease (framework/suite) and a user's
// --label-filter read, and its place in the run's order (Ginkgo's SpecPriority). Scenario code names no
// lock label.
type Takes struct {
	Devices Devices
	// StopsNode: it stops one node or its kubelet, and says which through Spec.stopping before it does.
	StopsNode bool
	// FailsDevice: it makes a device unhealthy, or withdraws it, without stopping its node.
	FailsDevice bool
	// AddsNodes: it makes the cluster add or remove nodes, which changes every other spec's view of the
	// pool: it runs alone, after the others (Ginkgo's Serial).
	AddsNodes bool
}

// takes are the decorators of a spec or container that takes n: its labels, and its priority where its
// locks call for one. A combination no lock plan serves panics at start.
func takes(n Takes) []any {
	ls, priority := n.derive()
	out := []any{labels.Of(ls...)}
	if priority != nil {
		out = append(out, *priority)
	}
	if n.AddsNodes {
		out = append(out, ginkgo.Serial)
	}
	return out
}

// derive is n's pool-lock labels and its priority (nil: the default).
func (n Takes) derive() ([]string, *ginkgo.SpecPriority) {
	var ls []string
	var priority *ginkgo.SpecPriority
	switch n.Devices {
	case AnyNodes:
	case EachNode:
		priority = &poolReadersFirst
	case NoDevice:
		ls, priority = append(ls, labels.NoDevices), &noDevicesFirst
	case FewOnOneNode:
		ls = append(ls, labels.OnNode)
	case OneWholeNode:
		ls = append(ls, labels.HoldsNode)
	case WholeNodes:
		ls = append(ls, labels.LeasesNodes)
	case WholePath:
		ls, priority = append(ls, labels.HoldsPath), &pathHoldersLast
	case WholePool:
		ls = append(ls, labels.HoldsNodes)
	case CanaryPool:
		ls = append(ls, labels.HoldsCanary, labels.Disruptive)
	default:
		panic(fmt.Sprintf("scenarios: unknown Devices %d", n.Devices))
	}
	if n.StopsNode {
		// Only these compose with a node stop: the node's other specs wait for it (stopping), and a
		// spec holding nodes of its own, or none, has no node to name.
		if n.Devices != AnyNodes && n.Devices != WholePath {
			panic(fmt.Sprintf("scenarios: a spec that stops a node uses a few devices anywhere or its path whole, not Devices %d", n.Devices))
		}
		ls, priority = append(ls, labels.StopsNode, labels.Disruptive), &chainFirst
	}
	if n.FailsDevice {
		if n.Devices != OneWholeNode && n.Devices != WholeNodes {
			panic(fmt.Sprintf("scenarios: a spec that fails a device holds the nodes it fails one on (OneWholeNode or WholeNodes), not Devices %d", n.Devices))
		}
		ls = append(ls, labels.FaultsDevice, labels.Disruptive)
	}
	return ls, priority
}
