package scenarios

import (
	"slices"
	"strings"
	"testing"

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
