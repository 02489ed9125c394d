package reports

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/artifacts"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/labels"
)

// EvidenceDir is where a run's AI Conformance evidence goes, beside the signoff: one page per
// requirement, an index, and the checklist filled in.
const EvidenceDir = "evidence"

// The checklist's status values (the program's own words), and "" where the participant decides.
const (
	StatusImplemented        = "Implemented"
	StatusNotImplemented     = "Not Implemented"
	StatusPartlyImplemented  = "Partially Implemented"
	statusLeftToParticipant  = ""
	evidenceResultProven     = "proven"
	evidenceResultFailed     = "failed"
	evidenceResultPartly     = "partly failed"
	evidenceResultShort      = "passed, not proven"
	evidenceResultNotRun     = "not exercised"
	evidenceResultOutOfScope = "out of scope"
	evidenceResultNA         = "not applicable"
)

// EvidenceSpec is one spec that bears on a requirement, as run.
type EvidenceSpec struct {
	Text   string
	Path   string
	Result string
	// Entries are the spec's report entries (what it saw: devices, versions, workers, samples).
	Entries [][2]string
	// Failure is the failure message of a failed spec, with where it failed.
	Failure string
	// Artifacts is the spec's artifacts directory, relative to the run's.
	Artifacts string
	// JUnitName is the spec's test case name in the run's JUnit report (its anchor in PRODUCT.yaml).
	JUnitName string
	// NotApplicable is why a spec that skipped itself does not apply to the cluster, with the evidence
	// ("" for any other spec).
	NotApplicable string
}

// RequirementEvidence is one requirement of the checklist with what this run showed of it.
type RequirementEvidence struct {
	conformance.Requirement
	// Result is proven, failed, partly failed, not exercised or out of scope.
	Result string
	// Status is the checklist status it earns ("" where the participant must decide).
	Status string
	// How are the claims of the scenarios that prove it: what their specs check.
	How   []conformance.Claim
	Specs []EvidenceSpec
	Notes string
	// Page is the requirement's evidence page, relative to the evidence directory.
	Page string
}

// Evidence is the AI Conformance evidence of one run.
type Evidence struct {
	Version      string
	Profile      string
	Requirements []RequirementEvidence
}

// HasClaims reports whether the run's record carries any requirement claim (an older record does not).
func (e Evidence) HasClaims() bool {
	return slices.ContainsFunc(e.Requirements, func(r RequirementEvidence) bool { return len(r.How) > 0 })
}

// ConformanceEvidence sorts a run's specs under the requirements of its checklist version. A requirement
// is proven only by passed specs that carry its label; one no scenario claims is out of scope, never
// passed; one whose specs did not run says why.
func ConformanceEvidence(suites []types.Report, rec Record) Evidence {
	version := cmp.Or(rec.Signoff.Conformance.Version, conformance.Latest)
	list, err := conformance.For(version)
	if err != nil {
		list, _ = conformance.For(conformance.Latest)
	}
	ev := Evidence{Version: list.Version, Profile: rec.Signoff.Profile}
	standing := standingOf(suites, rec)
	for _, req := range list.Requirements {
		r := RequirementEvidence{Requirement: req, Page: string(req.ID) + ".md"}
		for _, c := range rec.Signoff.Conformance.Claims {
			if c.Requirement == req.ID {
				r.How = append(r.How, c)
			}
		}
		r.Specs = specsWithLabel(suites, labels.RequirementPrefix+string(req.ID))
		r.Result, r.Status, r.Notes = judgeRequirement(rec, r, standing)
		ev.Requirements = append(ev.Requirements, r)
	}
	return ev
}

// runStanding is what a requirement's status needs to know of the whole run besides its own specs: a
// requirement is Implemented only by an unfiltered run whose verdict is GO.
type runStanding struct {
	outcome Outcome
	filter  string
}

func standingOf(suites []types.Report, rec Record) runStanding {
	st := runStanding{outcome: Decide(suites, rec).Outcome}
	for _, s := range suites {
		if f := userFilterOf(s.SuiteConfig, rec.Signoff); f != "" {
			st.filter = f
		}
	}
	return st
}

// shortfall says why passed proving specs do not make a requirement Implemented: proving specs that did
// not run to their end, a filtered run, a verdict other than GO ("" when nothing falls short).
func (st runStanding) shortfall(notRun []string) string {
	var why []string
	if len(notRun) > 0 {
		why = append(why, fmt.Sprintf("%d proving spec(s) not exercised (%s)", len(notRun), strings.Join(notRun, "; ")))
	}
	if st.filter != "" {
		why = append(why, "the run was filtered ("+st.filter+")")
	}
	if st.outcome != OutcomeGo {
		why = append(why, "the run's verdict is "+string(st.outcome))
	}
	return strings.Join(why, "; ")
}

// judgeRequirement is a requirement's result, checklist status and notes, in the checklist's own words:
// Implemented only when every spec that proves it passed in an unfiltered run whose verdict is GO; Not
// Implemented when one of them failed; Partially Implemented, naming what is missing, in between.
func judgeRequirement(rec Record, r RequirementEvidence, st runStanding) (result, status, notes string) {
	var passed, failed, notRun, notApplicable []string
	for _, sp := range r.Specs {
		switch {
		case sp.Result == ResultPassed:
			passed = append(passed, sp.Path)
		case sp.Result == ResultFailed:
			failed = append(failed, sp.Path)
		case sp.NotApplicable != "":
			notApplicable = append(notApplicable, sp.NotApplicable)
		default:
			notRun = append(notRun, sp.Text)
		}
	}
	short := st.shortfall(notRun)
	switch {
	case len(r.How) == 0 && r.OutOfScope != "":
		return evidenceResultOutOfScope, statusLeftToParticipant, "not exercised by gpuconform: " + r.OutOfScope
	case len(r.How) == 0:
		return evidenceResultOutOfScope, statusLeftToParticipant, "no gpuconform scenario claims this requirement"
	case len(failed) > 0 && len(passed) > 0:
		return evidenceResultPartly, StatusNotImplemented, fmt.Sprintf("gpuconform: %d spec(s) failed (%s), %d passed (%s); see the evidence page",
			len(failed), pathList(failed), len(passed), pathList(passed))
	case len(failed) > 0:
		return evidenceResultFailed, StatusNotImplemented, fmt.Sprintf("gpuconform: %d spec(s) failed (%s); see the evidence page", len(failed), pathList(failed))
	case len(passed) > 0 && short != "":
		return evidenceResultShort, StatusPartlyImplemented, fmt.Sprintf("gpuconform: %d spec(s) passed (%s), but %s; see the evidence page",
			len(passed), pathList(passed), short)
	case len(passed) > 0:
		return evidenceResultProven, StatusImplemented, fmt.Sprintf("gpuconform: %d spec(s) passed (%s); see the evidence page for what each saw", len(passed), pathList(passed))
	}
	if len(notApplicable) > 0 && len(notRun) == 0 {
		return judgeNotApplicable(r, notApplicable, st)
	}
	why := requirementNotExercised(rec, r.ID)
	if len(why) == 0 {
		why = []string{"no spec that proves it ran in this run (filtered out, or its scenario was not registered)"}
	}
	return evidenceResultNotRun, statusLeftToParticipant, "not exercised in this gpuconform run: " + strings.Join(why, "; ")
}

// judgeNotApplicable is the status of a requirement whose every proving spec found the cluster without
// what it tests: N/A, with the specs' evidence as notes, only for a conditional MUST (one that binds a
// platform offering the thing) or a SHOULD, and only in an unfiltered run; an unconditional MUST is left
// to the participant with the same evidence.
func judgeNotApplicable(r RequirementEvidence, why []string, st runStanding) (result, status, notes string) {
	because := strings.Join(slices.Compact(why), "; ")
	switch {
	case st.filter != "":
		return evidenceResultNA, statusLeftToParticipant, fmt.Sprintf("gpuconform found it not applicable (%s), but the run was filtered (%s)", because, st.filter)
	case r.Level == conformance.Must && !conformance.Conditional(r.ID):
		return evidenceResultNA, statusLeftToParticipant, "gpuconform found nothing to test (" + because + "), but the checklist makes this MUST unconditional"
	}
	return evidenceResultNA, StatusNA, "gpuconform: not applicable: " + because
}

// requirementNotExercised are the record's reasons why the scenarios claiming id did not run their
// proving specs: what discovery left out for each (its not-exercised entries that name the scenario).
func requirementNotExercised(rec Record, id conformance.ID) []string {
	var out []string
	for _, c := range rec.Signoff.Conformance.Claims {
		if c.Requirement != id {
			continue
		}
		for _, n := range rec.NotExercised {
			if strings.Contains(n.What, c.Scenario) {
				out = append(out, n.What+": "+n.Why)
			}
		}
	}
	return slices.Compact(out)
}

// pathList names the distinct paths of a list of specs' paths.
func pathList(paths []string) string {
	p := slices.Clone(paths)
	slices.Sort(p)
	return strings.Join(slices.Compact(p), ", ")
}

// specsWithLabel are the leaf specs carrying label that ran or were meant to (filtered ones left out).
func specsWithLabel(suites []types.Report, label string) []EvidenceSpec {
	var out []EvidenceSpec
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			res := SpecResult(sp)
			if res == "" || res == ResultFiltered || !slices.Contains(sp.Labels(), label) {
				continue
			}
			e := EvidenceSpec{Text: sp.FullText(), Result: res, Path: pathOf(sp), JUnitName: junitName(sp)}
			if e.Path == "-" {
				e.Path = "cluster-wide" // a spec of the cluster (operator, platform), not of an allocation path
			}
			if why, ok := strings.CutPrefix(firstLine(sp.Failure.Message), NotApplicablePrefix); ok && res == ResultSkipped {
				e.NotApplicable = strings.TrimSpace(why)
			}
			for _, entry := range sp.ReportEntries {
				if entry.Name == APIRequestsEntry || entry.Name == "timeline" {
					continue
				}
				e.Entries = append(e.Entries, [2]string{entry.Name, entry.StringRepresentation()})
			}
			if sp.State.Is(types.SpecStateFailureStates) {
				e.Failure = fmt.Sprintf("%s (%s)", sp.Failure.Message, sp.Failure.Location)
			}
			e.Artifacts = filepath.ToSlash(filepath.Join("..", artifacts.SpecDir("", sp.FullText())))
			out = append(out, e)
		}
	}
	return out
}

// junitName is a spec's test case name in the JUnit report Ginkgo writes with its default settings
// (reporters.GenerateJUnitReport): the leaf node type in brackets, the full text, the labels in brackets.
func junitName(sp types.SpecReport) string {
	name := fmt.Sprintf("[%s] %s", sp.LeafNodeType, sp.FullText())
	if ls := sp.Labels(); len(ls) > 0 {
		name += " [" + strings.Join(ls, ", ") + "]"
	}
	return strings.TrimSpace(name)
}

// WriteEvidence writes the run's evidence directory (README.md, the requirement table, and one page per
// requirement) and the program's submission file filled in (PRODUCT.yaml, beside the JUnit report).
func WriteEvidence(dir string, ev Evidence, rec Record) error {
	out := filepath.Join(dir, EvidenceDir)
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	errs := []error{os.WriteFile(filepath.Join(out, "README.md"), []byte(evidenceIndex(ev, rec)), 0o644)}
	for _, r := range ev.Requirements {
		errs = append(errs, os.WriteFile(filepath.Join(out, r.Page), []byte(evidencePage(r, ev, rec)), 0o644))
	}
	product, err := ProductYAML(ev, rec)
	errs = append(errs, err)
	if err == nil {
		errs = append(errs, os.WriteFile(filepath.Join(dir, ProductFile), product, 0o644))
	}
	return errors.Join(errs...)
}

// evidenceIndex is the evidence directory's README: one row per requirement.
func evidenceIndex(ev Evidence, rec Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Kubernetes AI Conformance evidence (checklist v%s)\n\n", ev.Version)
	fmt.Fprintf(&b, "gpuconform run `%s` against `%s` (Kubernetes %s), profile %s. The checklist filled in is [%s](../%s).\n\n",
		rec.RunID, rec.Context, rec.KubernetesVersion, cmp.Or(ev.Profile, conformance.ProfileSignoff), ProductFile, ProductFile)
	b.WriteString("| Requirement | Level | Result | Checklist status | Specs |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range ev.Requirements {
		fmt.Fprintf(&b, "| [%s](%s) | %s | %s | %s | %d |\n", r.ID, r.Page, r.Level, r.Result, cmp.Or(r.Status, "(left to the participant)"), len(r.Specs))
	}
	b.WriteString("\nA requirement is proven only by passed specs that carry its label (`conformance:<id>`); one that no scenario of gpuconform claims is out of scope and left to the participant, never marked passed.\n")
	return b.String()
}

// evidencePage is one requirement's page: what it asks, how gpuconform checks it, and every spec's
// outcome with what it saw.
func evidencePage(r RequirementEvidence, ev Evidence, rec Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s (%s, %s)\n\n", r.ID, r.Level, r.Section)
	fmt.Fprintf(&b, "Checklist v%s: %s\n\n", ev.Version, cmp.Or(r.Description, r.Summary))
	fmt.Fprintf(&b, "**Result: %s.** Checklist status: %s.\n\n%s\n\n", r.Result, cmp.Or(r.Status, "left to the participant"), r.Notes)
	if len(r.How) > 0 {
		b.WriteString("## How gpuconform checks it\n\n")
		for _, c := range r.How {
			fmt.Fprintf(&b, "- scenario `%s`: %s.\n", c.Scenario, c.How)
		}
		b.WriteString("\n")
	}
	if len(r.Specs) > 0 {
		fmt.Fprintf(&b, "## Specs (run `%s`, context `%s`)\n\n", rec.RunID, rec.Context)
		for _, sp := range r.Specs {
			fmt.Fprintf(&b, "### %s: %s\n\n", sp.Result, sp.Text)
			fmt.Fprintf(&b, "- path: %s\n- artifacts: [%s](%s)\n- JUnit test case: `%s`\n", sp.Path, sp.Artifacts, sp.Artifacts, sp.JUnitName)
			if sp.NotApplicable != "" {
				fmt.Fprintf(&b, "- not applicable: %s\n", sp.NotApplicable)
			}
			for _, e := range sp.Entries {
				if strings.Contains(strings.TrimSpace(e[1]), "\n") {
					fmt.Fprintf(&b, "- %s:\n\n  ```\n  %s\n  ```\n", e[0], strings.ReplaceAll(strings.TrimSpace(e[1]), "\n", "\n  "))
					continue
				}
				fmt.Fprintf(&b, "- %s: %s\n", e[0], oneLine(e[1]))
			}
			if sp.Failure != "" {
				fmt.Fprintf(&b, "\n```\n%s\n```\n", sp.Failure)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// oneLine keeps a report entry on its list item.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
