package scenarios

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/onsi/ginkgo/v2"

	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/suite"
)

// Registry is every scenario, in the order the suite registers them. Adding a scenario is one file that
// declares it (Define) and one line here.
var Registry = []*Scenario{
	Allocation,
	Failure,
	Preemption,
	Upgrade,
	DRAUpgrade,
	Shortage,
	Driver,
	Sharing,
	Noisy,
	Gang,
	Metrics,
	ServiceMetrics,
	PodAutoscaling,
	ClusterAutoscaling,
	InferenceGateway,
	Prioritized,
	AdminAccess,
	Operator,
	Platform,
}

// Scenario is a scenario's declaration: what the suite, the labels, the verdict policy, the report and
// the preflight know of it.
type Scenario struct {
	// Name is the scenario's word; its label is labels.ScenarioPrefix + Name.
	Name string
	// Title says in a line what it proves.
	Title string
	// Required: a signoff requires a passed spec of it by default, where the run meets its Needs (see
	// suite.Needs for which needs gate that).
	Required bool
	// Needs is what it needs to exercise its specs; Uses what some of them use where the run offers it
	// (Kueue for the queue-based variants, say). The preflight asks permissions for both.
	Needs, Uses suite.Needs
	// Measured: the signoff lists the steps its passed specs measured (times to recover, steps lost).
	Measured bool
	// Proves are the AI Conformance requirements some of its specs prove; those specs carry the
	// requirement's label (proves), which --profile ai-conformance selects.
	Proves []conformance.Proof
	// NotOnExtendedDRA, when set, says why the scenario's specs do not run on the extended-resource-dra
	// path: none is registered there, and the record lists the path's scenario as not exercised with
	// this reason. Empty: they run there as on every other path.
	NotOnExtendedDRA string

	label    string
	register func(*suite.Run)
}

// declaredProofs are the requirements each scenario declared, by name: what proves checks a spec's
// label against (a map, not the Registry, which the spec functions cannot refer to at initialisation).
var declaredProofs = map[string][]conformance.ID{}

// notOnExtendedDRA are the scenarios' NotOnExtendedDRA, by name.
var notOnExtendedDRA = map[string]string{}

// proves is the label of a spec of scenario that proves requirement id; a requirement the scenario does
// not declare in Proves panics, so the evidence never cites a spec its scenario does not stand behind.
func proves(scenario string, id conformance.ID) ginkgo.Labels {
	if !slices.Contains(declaredProofs[scenario], id) {
		panic(fmt.Sprintf("scenarios: a spec of %s claims %s, which the scenario does not declare in Proves", scenario, id))
	}
	return labels.Of(labels.Requirement(id))
}

// Proofs are every scenario's declared proofs with the scenario's name, in registry order.
func Proofs() []conformance.Claim {
	var out []conformance.Claim
	for _, s := range Registry {
		for _, p := range s.Proves {
			out = append(out, conformance.Claim{Proof: p, Scenario: s.Name})
		}
	}
	return out
}

// Label is the scenario's Ginkgo label.
func (s *Scenario) Label() string { return s.label }

// Register registers the scenario's specs for the run.
func (s *Scenario) Register(r *suite.Run) { s.register(r) }

// Define declares a scenario: its label joins the closed set, and its specs are registered by spec from
// one typed input, which input builds from the run once (after discovery; the environment it carries is
// the run's, live when the specs run).
func Define[I scenarioInput](s Scenario, input func(*suite.Run) I, spec func(func() I)) *Scenario {
	s.label = labels.DeclareScenario(s.Name)
	for _, p := range s.Proves {
		labels.Requirement(p.Requirement) // an unknown requirement panics here, at start
		declaredProofs[s.Name] = append(declaredProofs[s.Name], p.Requirement)
	}
	if s.NotOnExtendedDRA != "" {
		notOnExtendedDRA[s.Name] = s.NotOnExtendedDRA
	}
	s.register = func(r *suite.Run) {
		spec(sync.OnceValue(func() I { return input(r) }))
	}
	return &s
}

// RequiredLabels are the labels of the scenarios a signoff requires by default of a run offering f.
func RequiredLabels(f suite.Facts) []string {
	var out []string
	for _, s := range Registry {
		if s.Required && f.Gates(s.Needs) {
			out = append(out, s.label)
		}
	}
	return out
}

// Uses is the union of every scenario's needs and uses: what the preflight asks permissions for.
func Uses() suite.Needs {
	var n suite.Needs
	for _, s := range Registry {
		n = n.Or(s.Needs).Or(s.Uses)
	}
	return n
}

// MeasuredLabels are the labels of the scenarios whose measured steps the signoff lists.
func MeasuredLabels() []string {
	var out []string
	for _, s := range Registry {
		if s.Measured {
			out = append(out, s.label)
		}
	}
	return out
}

// ProfileFilter is the label filter of the AI Conformance profile of a checklist version: the specs
// proving any requirement of that checklist that a scenario claims.
func ProfileFilter(version string) string {
	list, _ := conformance.For(version)
	var ls []string
	for _, c := range Proofs() {
		if _, ok := list.Find(c.Requirement); ok {
			ls = append(ls, labels.Requirement(c.Requirement))
		}
	}
	slices.Sort(ls)
	return strings.Join(slices.Compact(ls), " || ")
}

// ConformanceRequiredLabels are the labels a conformance profile run requires a passed spec of: every
// MUST requirement of the checklist that a scenario claims, whatever the cluster offers (a requirement
// gpuconform cannot show on this cluster is unproven, so the run is INCOMPLETE and says why).
func ConformanceRequiredLabels(version string) []string {
	list, _ := conformance.For(version)
	var out []string
	for _, c := range Proofs() {
		if r, ok := list.Find(c.Requirement); ok && r.Level == conformance.Must {
			out = append(out, labels.Requirement(c.Requirement))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
