package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/reports"
)

// Every row is a mode the fake agent serves, named once, with the replicas the mode needs; the
// allocation scenario runs on a time-sliced and a MIG-mixed cluster, as the sharing issue asks.
func TestSharingTable(t *testing.T) {
	names := sharingRows().names()
	if len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
		t.Errorf("sharing rows are not unique: %v", names)
	}
	allocation := map[string]bool{}
	for _, r := range sharingTable() {
		if !slices.Contains(fakegpu.SharingModes, r.Mode.Mode) || r.Mode.Mode == fakegpu.SharingNone {
			t.Errorf("row %s: not a sharing mode of the fake agent", r.Mode)
		}
		replicated := r.Mode.Mode == fakegpu.SharingTimeSlicing || r.Mode.Mode == fakegpu.SharingMPS
		if replicated != (r.Mode.Replicas > 1) {
			t.Errorf("row %s: %d replicas does not fit the mode", r.Mode, r.Mode.Replicas)
		}
		if !slices.Contains(r.Scenarios, "sharing") {
			t.Errorf("row %s does not run the sharing scenario", r.Mode)
		}
		allocation[r.Mode.Mode] = slices.Contains(r.Scenarios, "allocation")
	}
	if !allocation[fakegpu.SharingTimeSlicing] || !allocation[fakegpu.SharingMIGMixed] {
		t.Errorf("the allocation scenario must run time-sliced and MIG-mixed: %v", allocation)
	}
	if !slices.Contains(names, "time-slicing:2:renamed") {
		t.Errorf("no row advertises the replicas under a renamed resource: %v", names)
	}
	if exclusive.String() != "none" || (sharingMode{Mode: "time-slicing", Replicas: 2}).String() != "time-slicing:2" {
		t.Errorf("mode names: %s, %s", exclusive, sharingMode{Mode: "time-slicing", Replicas: 2})
	}
}

// Specs are counted per path and scenario label; skipped specs count in neither column, and the table
// ends with the runner's closing line.
func TestCountAndPrintSharing(t *testing.T) {
	spec := func(state types.SpecState, labels ...string) types.SpecReport {
		return types.SpecReport{LeafNodeType: types.NodeTypeIt, State: state, ContainerHierarchyLabels: [][]string{labels}}
	}
	res := sharingResult{Row: sharingTable()[0], Verdict: "NO-GO", Counts: map[string][2]int{}}
	countSharing(&res, []types.Report{{SpecReports: []types.SpecReport{
		spec(types.SpecStatePassed, "path:dra", "scenario:sharing"),
		spec(types.SpecStatePassed, "path:dra", "scenario:sharing"),
		spec(types.SpecStateFailed, "path:device-plugin", "scenario:sharing"),
		spec(types.SpecStateSkipped, "path:device-plugin", "scenario:allocation"),
	}}})
	if res.Counts["dra sharing"] != [2]int{2, 0} || res.Counts["device-plugin sharing"] != [2]int{0, 1} || len(res.Counts) != 2 {
		t.Errorf("counts = %v", res.Counts)
	}
	var out bytes.Buffer
	printSharing(&out, []sharingResult{res, {Row: sharingTable()[1], Verdict: "INCOMPLETE", OK: true, Counts: map[string][2]int{"dra sharing": {3, 0}}}})
	if !strings.HasSuffix(out.String(), "sharing: 1 passed, 1 failed\n") || !strings.Contains(out.String(), "time-slicing:2  device-plugin") {
		t.Errorf("table:\n%s", out.String())
	}
}

// A filtered run is accepted when the filter is its only gap; a path not exercised, or a failure, is not.
func TestOnlyFiltered(t *testing.T) {
	filtered := "filtered run (label filter scenario:sharing): the signoff covers only the selected specs"
	cases := []struct {
		v    reports.Verdict
		want bool
	}{
		{reports.Verdict{Outcome: reports.OutcomeGo}, true},
		{reports.Verdict{Outcome: reports.OutcomeIncomplete, Incomplete: []string{filtered}}, true},
		{reports.Verdict{Outcome: reports.OutcomeIncomplete, Incomplete: []string{filtered, "required path:dra was not exercised (no passed spec carries the label)"}}, false},
		{reports.Verdict{Outcome: reports.OutcomeNoGo, NoGo: []string{"failed: x"}, Incomplete: []string{filtered}}, false},
	}
	for i, c := range cases {
		if got := onlyFiltered(c.v); got != c.want {
			t.Errorf("case %d (%+v): %v, want %v", i, c.v, got, c.want)
		}
	}
}

// Each mode names the spec it exists for, and a row whose spec did not pass is not OK although its
// scenario label has a passed spec.
func TestSharingRowNeedsItsOwnSpec(t *testing.T) {
	for _, r := range sharingTable() {
		if len(r.Specs) == 0 {
			t.Errorf("row %s names no spec it must pass", r.Mode)
		}
		mig := r.Mode.Mode == fakegpu.SharingMIGSingle || r.Mode.Mode == fakegpu.SharingMIGMixed
		if mig != slices.Contains(r.Specs, specMIGFill) {
			t.Errorf("row %s: MIG fill required %t, want %t", r.Mode, slices.Contains(r.Specs, specMIGFill), mig)
		}
	}
	row := sharingRow{Mode: sharingMode{Mode: fakegpu.SharingMIGMixed, Replicas: 1}, Specs: []string{specMIGFill, specMIGOrWhole}}
	spec := func(text string, state types.SpecState) types.SpecReport {
		return types.SpecReport{LeafNodeType: types.NodeTypeIt, LeafNodeText: text, State: state, ContainerHierarchyTexts: []string{"Sharing"}}
	}
	suites := []types.Report{{SpecReports: []types.SpecReport{
		spec("maps every mig-mixed replica of a full node to one physical GPU", types.SpecStatePassed),
		spec("fills a mig-mixed "+specMIGFill, types.SpecStateSkipped),
		spec(specMIGOrWhole+" none can be had", types.SpecStatePassed),
	}}}
	if got := unpassed(row, suites); !slices.Equal(got, []string{`"` + specMIGFill + `"`}) {
		t.Errorf("unpassed = %q, want the skipped MIG fill only", got)
	}
	suites[0].SpecReports[1].State = types.SpecStatePassed
	if got := unpassed(row, suites); len(got) != 0 {
		t.Errorf("unpassed = %q, want none", got)
	}
}
