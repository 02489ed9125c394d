// Package labels is the closed set of Ginkgo labels the suite may use. Specs take their labels from
// here, never from string literals, so a typo cannot silently create a label no filter selects, and
// CI runs with --fail-on-empty so a typo in a filter fails instead of passing zero specs. Scenario
// labels ("scenario:<name>") join the set when a scenario declares itself (scenarios.Define).
package labels

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/onsi/ginkgo/v2"

	"gpuconform.io/gpuconform/framework/conformance"
)

// The fixed part of the set. Each constant is the exact string `--label-filter` matches.
const (
	// Disruptive marks specs that change nodes (cordon, stop, device failure, plugin roll); they run only
	// with the `disruptive` opt-in and only inside the configured pool.
	Disruptive = "Disruptive"
	// Serial is Ginkgo's label of its Serial decorator (a spec that runs alone, after the others). No spec
	// of the suite uses it: each says with a holds:* or stops:node label what it must not run beside
	// (framework/poollock), and runs beside everything else.
	Serial = "Serial"
	// HoldsPath marks specs that need their path's devices and cannot say on which one node (gangs, which
	// Kueue or the scheduler places): no other spec on the path runs beside them; the other path's specs
	// do (framework/poollock).
	HoldsPath = "holds:path"
	// HoldsNode marks specs that need every device of their path on one node and no more (fill a node,
	// preemption, device faults): each leases one node of its path and keeps its pods there, so two of
	// them run side by side on two nodes; the path's plain specs wait for them (framework/poollock).
	HoldsNode = "holds:node"
	// OnNode marks specs whose pods need a few devices of one node: each leases one node of its path shared
	// once it knows which nodes fit (scenarios' Spec.lease) and keeps its pods there, so it runs beside
	// holders of the path's other nodes (framework/poollock).
	OnNode = "on:node"
	// LeasesNodes marks specs whose pods need the devices of a few nodes to themselves and may use any such
	// nodes (a gang's workers, pinned to the nodes it leased): each leases, once it knows how many, that
	// many nodes of its path exclusive at once (scenarios' Spec.leaseNodes) and holds its path shared, so
	// it runs beside holders and stoppers of the path's other nodes (framework/poollock).
	LeasesNodes = "leases:nodes"
	// NoDevices marks specs whose pods never get a device (they must stay Pending, or the API server refuses
	// them) and whose outcome does not depend on which devices are free: they hold their path shared only,
	// beside every node's holders, so that nodes and drivers stay as they are while they run.
	NoDevices = "devices:none"
	// HoldsNodes marks specs that measure a node's timings: no spec on any path runs beside them.
	HoldsNodes = "holds:nodes"
	// StopsNode marks specs that stop one node or its kubelet (failed worker, kubelet restart): once they
	// know the node (scenarios' Spec.stopping) they hold it exclusive on every path, and return it only
	// once it offers every path's devices again; specs on the other nodes run beside them, specs that
	// read every node's state (devices:none, holds:path, plain) do not. With holds:path as well, the
	// spec's own path is held whole (its workload moves to another node).
	StopsNode = "stops:node"
	// FaultsDevice marks specs that make a device unhealthy, or withdraw it, without stopping its node
	// (device health, a failed device under a job, a gang's failed worker): they run beside each other, but
	// not beside the upgrade rehearsal (HoldsCanary) until it has compared what every known-good node
	// offers before and after.
	FaultsDevice = "faults:device"
	// HoldsCanary marks the driver-upgrade rehearsal: it holds the canary pool's nodes on every path, one
	// known-good node for its pods there (sentinel, serving reserve, reference load), and keeps every
	// device from failing and every node from stopping until it has compared the known-good pool before and
	// after (faults:device and stops:node specs wait); every other spec runs beside it, and they all run
	// beside its canary checks and rollback once it has let the rest go.
	HoldsCanary = "holds:canary"
	// Slow marks specs expected to take longer than five minutes on a real cluster.
	Slow = "Slow"

	// PathDevicePlugin marks specs exercising the device-plugin allocation path.
	PathDevicePlugin = "path:device-plugin"
	// PathDRA marks specs exercising the DRA allocation path.
	PathDRA = "path:dra"
	// PathExtendedDRA marks specs exercising an extended resource served by a DRA driver.
	PathExtendedDRA = "path:extended-resource-dra"

	// NeedsKueue marks specs that submit through a Kueue LocalQueue.
	NeedsKueue = "needs:kueue"

	// ScenarioPrefix starts every scenario's label: "scenario:" + the scenario's name.
	ScenarioPrefix = "scenario:"

	// RequirementPrefix starts the label of a spec that proves an AI Conformance requirement:
	// "conformance:" + the requirement's ID (framework/conformance).
	RequirementPrefix = "conformance:"
)

// Requirement is the label of the specs that prove requirement id; an ID no known checklist has panics.
func Requirement(id conformance.ID) string {
	l := RequirementPrefix + string(id)
	if err := Validate(l); err != nil {
		panic(err)
	}
	return l
}

// scenarios holds the scenario labels declared so far. Scenarios declare themselves while packages
// initialise (like flags), before any spec tree is built; the lock keeps a concurrent reader safe.
var scenarios = struct {
	sync.RWMutex
	names map[string]bool
}{names: map[string]bool{}}

// DeclareScenario adds the label of the scenario name to the set and returns it. Declaring a name twice
// panics: two scenarios would share one label.
func DeclareScenario(name string) string {
	scenarios.Lock()
	defer scenarios.Unlock()
	if name == "" || strings.ContainsAny(name, " :&|!(),") || scenarios.names[name] {
		panic(fmt.Sprintf("labels: scenario name %q is empty, not a plain word, or declared twice", name))
	}
	scenarios.names[name] = true
	return ScenarioPrefix + name
}

// Scenario returns the label of the declared scenario name; an undeclared name panics.
func Scenario(name string) string {
	l := ScenarioPrefix + name
	if err := Validate(l); err != nil {
		panic(err)
	}
	return l
}

func known(l string) bool {
	switch l {
	case Disruptive, Serial, HoldsPath, HoldsNode, OnNode, LeasesNodes, NoDevices, HoldsNodes, StopsNode, FaultsDevice, HoldsCanary, Slow, PathDevicePlugin, PathDRA, PathExtendedDRA, NeedsKueue:
		return true
	}
	if id, ok := strings.CutPrefix(l, RequirementPrefix); ok {
		return conformance.Known(conformance.ID(id))
	}
	scenarios.RLock()
	defer scenarios.RUnlock()
	name, ok := strings.CutPrefix(l, ScenarioPrefix)
	return ok && scenarios.names[name]
}

// Known returns the label set, sorted, for documentation and `--help` output.
func Known() []string {
	scenarios.RLock()
	out := []string{Disruptive, Serial, HoldsPath, HoldsNode, OnNode, LeasesNodes, NoDevices, HoldsNodes, StopsNode, FaultsDevice, HoldsCanary, Slow, PathDevicePlugin, PathDRA, NeedsKueue}
	for _, v := range conformance.Versions() {
		c, _ := conformance.For(v)
		for _, r := range c.Requirements {
			if l := RequirementPrefix + string(r.ID); !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	for n := range maps.Keys(scenarios.names) {
		out = append(out, ScenarioPrefix+n)
	}
	scenarios.RUnlock()
	slices.Sort(out)
	return out
}

// Validate returns an error naming every label that is not in the set.
func Validate(ls ...string) error {
	var bad []string
	for _, l := range ls {
		if !known(l) {
			bad = append(bad, l)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("unknown spec label(s) %q; the closed set is %q (framework/labels)", bad, Known())
	}
	return nil
}

// Of validates ls and returns them as a Ginkgo decorator. An unknown label panics while the spec tree
// is built, which Ginkgo reports as a suite failure naming the caller: a typo fails the run before any
// spec executes.
func Of(ls ...string) ginkgo.Labels {
	if err := Validate(ls...); err != nil {
		panic(err)
	}
	return ginkgo.Label(ls...)
}

// ForPath returns the label for an allocation path name ("device-plugin" or "dra").
func ForPath(path string) string {
	return "path:" + path
}
