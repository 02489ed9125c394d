// Package labels is the closed set of Ginkgo labels the suite may use. Specs take their labels from
// here, never from string literals, so a typo cannot silently create a label no filter selects, and
// CI runs with --fail-on-empty so a typo in a filter fails instead of passing zero specs.
package labels

import (
	"fmt"
	"sort"

	"github.com/onsi/ginkgo/v2"
)

// The label set. Each constant is the exact string `--label-filter` matches.
const (
	// Disruptive marks specs that change nodes (cordon, stop, device failure, plugin roll); they run only
	// with the `disruptive` opt-in and only inside the configured pool.
	Disruptive = "Disruptive"
	// Serial marks specs that must not run alongside others (they consume a whole pool's devices).
	Serial = "Serial"
	// Slow marks specs expected to take longer than five minutes on a real cluster.
	Slow = "Slow"

	// PathDevicePlugin marks specs exercising the device-plugin allocation path.
	PathDevicePlugin = "path:device-plugin"
	// PathDRA marks specs exercising the DRA allocation path.
	PathDRA = "path:dra"

	// ScenarioAllocation marks the "right devices, right node" specs.
	ScenarioAllocation = "scenario:allocation"
	// ScenarioShortage marks specs that ask for more devices than are free.
	ScenarioShortage = "scenario:shortage"
	// ScenarioFailure marks specs that lose a worker or a device.
	ScenarioFailure = "scenario:failure"
	// ScenarioPreemption marks preemption-with-checkpoint-recovery specs.
	ScenarioPreemption = "scenario:preemption"
	// ScenarioUpgrade marks the upgrade rehearsal on the canary pool.
	ScenarioUpgrade = "scenario:upgrade"

	// NeedsKueue marks specs that submit through a Kueue LocalQueue.
	NeedsKueue = "needs:kueue"
)

var known = map[string]bool{
	Disruptive: true, Serial: true, Slow: true,
	PathDevicePlugin: true, PathDRA: true,
	ScenarioAllocation: true, ScenarioShortage: true, ScenarioFailure: true, ScenarioPreemption: true, ScenarioUpgrade: true,
	NeedsKueue: true,
}

// Known returns the label set, sorted, for documentation and `--help` output.
func Known() []string {
	out := make([]string, 0, len(known))
	for l := range known {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// Validate returns an error naming every label that is not in the set.
func Validate(ls ...string) error {
	var bad []string
	for _, l := range ls {
		if !known[l] {
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
