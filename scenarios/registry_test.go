package scenarios

import (
	"slices"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/suite"
)

func TestRegistryDeclaresEachScenarioOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Registry {
		if s.Label() != labels.ScenarioPrefix+s.Name || labels.Validate(s.Label()) != nil {
			t.Errorf("scenario %q: label %q is not its declared one", s.Name, s.Label())
		}
		if seen[s.Name] || s.Title == "" || s.register == nil {
			t.Errorf("scenario %q: declared twice, untitled or without specs", s.Name)
		}
		seen[s.Name] = true
	}
}

func TestRequiredLabelsFollowWhatTheRunOffers(t *testing.T) {
	for _, c := range []struct {
		name  string
		facts suite.Facts
		want  []string
	}{
		{"no Kueue, not disruptive", suite.Facts{}, []string{"allocation", "shortage"}},
		{"Kueue without queues to preempt in", suite.Facts{Kueue: true}, []string{"allocation", "gang", "shortage"}},
		{"Kueue with own queues", suite.Facts{Kueue: true, PriorityQueues: true}, []string{"allocation", "gang", "preemption", "shortage"}},
		{"disruptive without a canary pool", suite.Facts{Disruptive: true}, []string{"allocation", "failure", "shortage"}},
		// A fault provider and storage decide single specs: their absence leaves the run INCOMPLETE, it
		// does not exempt it.
		{"disruptive with a canary pool, no fault provider", suite.Facts{Disruptive: true, CanaryPool: true}, []string{"allocation", "failure", "upgrade", "shortage"}},
	} {
		var got []string
		for _, l := range RequiredLabels(c.facts) {
			got = append(got, strings.TrimPrefix(l, labels.ScenarioPrefix))
		}
		slices.Sort(got)
		slices.Sort(c.want)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: required %v, want %v", c.name, got, c.want)
		}
	}
}

func TestUsesAndMeasured(t *testing.T) {
	u := Uses()
	if !u.Kueue || !u.Disruptive || !u.CheckpointStorage || !u.CanaryPool {
		t.Errorf("Uses() = %+v: the preflight would not ask for what the scenarios need", u)
	}
	m := MeasuredLabels()
	for _, s := range []*Scenario{Failure, Preemption, Upgrade} {
		if !slices.Contains(m, s.Label()) {
			t.Errorf("MeasuredLabels() = %v lacks %s", m, s.Label())
		}
	}
	if slices.Contains(m, Allocation.Label()) {
		t.Errorf("MeasuredLabels() = %v lists allocation, which measures no steps", m)
	}
}

func TestConformanceProfileSelectsTheClaimedRequirements(t *testing.T) {
	if got, want := ProfileFilter("1.37"), "conformance:accelerator_metrics || conformance:ai_inference || conformance:ai_service_metrics || conformance:cluster_autoscaling || conformance:driver_runtime_management || conformance:gang_scheduling || conformance:gpu_sharing || conformance:pod_autoscaling || conformance:robust_controller || conformance:secure_accelerator_access"; got != want {
		t.Errorf("ProfileFilter(1.37) = %q, want %q", got, want)
	}
	// Only the MUST ones are required; the SHOULD ones are reported in the checklist.
	if got, want := ConformanceRequiredLabels("1.36"), []string{"conformance:accelerator_metrics", "conformance:ai_inference", "conformance:ai_service_metrics", "conformance:cluster_autoscaling", "conformance:gang_scheduling",
		"conformance:pod_autoscaling", "conformance:robust_controller", "conformance:secure_accelerator_access"}; !slices.Equal(got, want) {
		t.Errorf("ConformanceRequiredLabels = %q, want %q", got, want)
	}
	// 1.34 has dra_support, a MUST there, which the DRA path's allocation specs prove.
	if got := ConformanceRequiredLabels("1.34"); !slices.Contains(got, "conformance:dra_support") || slices.Contains(ConformanceRequiredLabels("1.37"), "conformance:dra_support") {
		t.Errorf("ConformanceRequiredLabels(1.34) = %q: dra_support is a MUST of 1.34 only", got)
	}
	for _, c := range Proofs() {
		if c.How == "" || c.Scenario == "" {
			t.Errorf("claim %+v says not how or by whom", c)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a spec claimed a requirement its scenario does not declare, and nothing stopped it")
		}
	}()
	proves(shortageName, conformance.GangScheduling)
}
