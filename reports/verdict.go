package reports

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/upgrade"
)

// Outcome is the signoff answer.
type Outcome string

// The three outcomes. GO: everything the signoff covers was exercised and passed. NO-GO: something
// failed, or regressed against the baseline. INCOMPLETE: nothing failed, but the run did not exercise
// what the signoff covers (a filtered run, a required path or scenario not exercised, a check that fell
// back at run time), and the user did not allow that.
const (
	OutcomeGo         Outcome = "GO"
	OutcomeNoGo       Outcome = "NO-GO"
	OutcomeIncomplete Outcome = "INCOMPLETE"
)

// Exit codes of `gpuconform run` and `gpuconform report`, one per outcome; 2 is kept for usage errors.
const (
	ExitGo         = 0
	ExitNoGo       = 1
	ExitIncomplete = 3
)

// Signoff is the policy a run's verdict is decided with; it travels in the record, so a report rendered
// again offline decides the same.
type Signoff struct {
	// Require are labels (path:X, scenario:Y) that must each have at least one passed spec.
	Require []string `json:"require"`
	// AllowIncomplete turns INCOMPLETE into GO (the reasons stay listed).
	AllowIncomplete bool `json:"allowIncomplete,omitempty"`
	// Measured are the labels of the scenarios whose measured steps the report lists (their
	// declarations say so: scenarios.Scenario.Measured).
	Measured []string `json:"measured,omitempty"`
	// Baseline is the condensed record of an earlier run to compare with; nil when none was given.
	Baseline *Baseline `json:"baseline,omitempty"`
	// Profile is the run's profile ("signoff", "ai-conformance-1.37", …); ProfileFilter is the label
	// filter the profile itself set, which does not make the run a filtered one (a user's filter on top
	// does).
	Profile       string `json:"profile,omitempty"`
	ProfileFilter string `json:"profileFilter,omitempty"`
	// Conformance are the requirements the scenarios claim to prove and the checklist version the
	// evidence is written for.
	Conformance ConformanceClaims `json:"conformance"`
	// PreUpgrade is the label of the upgrade rehearsal when the run is a pre-upgrade signoff ("": it is
	// not): without a passed spec carrying it the run is INCOMPLETE, whatever else passed.
	PreUpgrade string `json:"preUpgrade,omitempty"`
}

// ConformanceClaims are the registry's AI Conformance claims and the checklist version of the run.
type ConformanceClaims struct {
	Version string              `json:"version"`
	Claims  []conformance.Claim `json:"claims,omitempty"`
	// Product is the submission's metadata the participant gave (PRODUCT.yaml's metadata section).
	Product conformance.Metadata `json:"product,omitzero"`
}

// Baseline is what a later run is compared with: the paths an earlier run exercised, its spec results and
// the sharing mode of each of its nodes.
type Baseline struct {
	RunID   string            `json:"runID"`
	Source  string            `json:"source"`
	Paths   []string          `json:"paths"`
	Results map[string]string `json:"results"`
	// SharingModes are the earlier run's per-node modes from evidence; empty for a baseline taken before
	// the record carried them, which then compares nothing.
	SharingModes []BaselineSharing `json:"sharingModes,omitempty"`
}

// BaselineSharing is one node's sharing mode on one path in a baseline.
type BaselineSharing struct {
	Node string `json:"node"`
	// Pool is the node's pool label ("<label>=<value>", cluster.PoolLabels), "" when it has none: nodes of
	// a managed pool are replaced between runs, so such a node is compared by its pool.
	Pool string `json:"pool,omitempty"`
	Path string `json:"path"`
	// Mode is the mode with what makes it that mode ("time-slicing, 2 replicas per GPU").
	Mode string `json:"mode"`
}

// BaselineFrom condenses a record into a baseline.
func BaselineFrom(r Record, source string) *Baseline {
	b := &Baseline{RunID: r.RunID, Source: source, Results: r.Results}
	for _, p := range r.Paths {
		b.Paths = append(b.Paths, p.Name)
	}
	for _, m := range r.SharingModes {
		b.SharingModes = append(b.SharingModes, BaselineSharing{Node: m.Node, Pool: m.Pool, Path: m.Path, Mode: sharingModeKey(m)})
	}
	return b
}

// sharingModeKey is what a baseline compares of a node's mode: the mode, and the replicas a GPU is shared
// by (a change of replicas changes what each pod gets); MIG device counts are left out, since an
// unhealthy device lowers them without any change of configuration.
func sharingModeKey(m cluster.NodeSharingMode) string {
	if m.Replicas > 1 {
		return fmt.Sprintf("%s, %d replicas per device", m.Mode, m.Replicas)
	}
	return m.Mode
}

// sharingChanges are the NO-GO lines for nodes (or pools) whose sharing mode on a path differs from the
// baseline's; a node or pool absent now is not compared (the paths and results say what is missing).
func sharingChanges(b *Baseline, now []cluster.NodeSharingMode) []string {
	type key struct{ who, path string }
	who := func(node, pool string) string { return cmp.Or(pool, node) }
	before, after := map[key][]string{}, map[key][]string{}
	nodes := map[key][]string{}
	for _, m := range b.SharingModes {
		k := key{who(m.Node, m.Pool), m.Path}
		if !slices.Contains(before[k], m.Mode) {
			before[k] = append(before[k], m.Mode)
		}
	}
	for _, m := range now {
		k := key{who(m.Node, m.Pool), m.Path}
		mode := sharingModeKey(m)
		if !slices.Contains(after[k], mode) {
			after[k] = append(after[k], mode)
		}
		if b := before[k]; len(b) > 0 && !slices.Contains(b, mode) && !slices.Contains(nodes[k], m.Node) {
			nodes[k] = append(nodes[k], m.Node)
		}
	}
	keys := make([]key, 0, len(before))
	for k := range before {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.who, b.who), cmp.Compare(a.path, b.path)) })
	var out []string
	for _, k := range keys {
		now := after[k]
		if len(now) == 0 {
			continue
		}
		slices.Sort(now)
		was := slices.Sorted(slices.Values(before[k]))
		if slices.Equal(was, now) {
			continue
		}
		subject := "node " + k.who
		if strings.Contains(k.who, "=") {
			subject = fmt.Sprintf("pool %s (node %s)", k.who, strings.Join(nodes[k], ", "))
		}
		out = append(out, fmt.Sprintf("sharing of %s on path %s was %s in baseline run %s, is %s now",
			subject, k.path, strings.Join(was, " and "), b.RunID, strings.Join(now, " and ")))
	}
	return out
}

// Spec result values in Record.Results.
const (
	ResultPassed  = "passed"
	ResultFailed  = "failed"
	ResultSkipped = "skipped"
	// ResultFiltered is a spec the run's filters left out (SpecResult only; Results counts it skipped).
	ResultFiltered = "filtered"
	// ResultInterrupted is a spec an interruption of the run cut short (a signal, the run's own timeout):
	// not a finding, and Count counts it with the skipped ones.
	ResultInterrupted = "interrupted"
)

// SpecResult is the one tally of a spec's state: passed, failed (any failure state), skipped (skipped by
// the spec itself, or pending) or filtered (left out by the run's filters); "" for a node that is not a
// leaf spec.
func SpecResult(sp types.SpecReport) string {
	switch {
	case sp.LeafNodeType != types.NodeTypeIt:
		return ""
	case sp.State == types.SpecStatePassed:
		return ResultPassed
	case cutByInterruption(sp):
		return ResultInterrupted
	case sp.State.Is(types.SpecStateFailureStates):
		return ResultFailed
	case sp.State == types.SpecStatePending || (sp.State == types.SpecStateSkipped && sp.Failure.Message != ""):
		return ResultSkipped
	default:
		return ResultFiltered
	}
}

// Results maps each leaf spec's full text to its result; a filtered-out spec counts as skipped there (a
// baseline compares what ran).
func Results(suites []types.Report) map[string]string {
	out := map[string]string{}
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			switch res := SpecResult(sp); res {
			case "":
			case ResultFiltered:
				out[sp.FullText()] = ResultSkipped
			default:
				out[sp.FullText()] = res
			}
		}
	}
	return out
}

// Verdict is the signoff answer with its reasons.
type Verdict struct {
	Outcome Outcome
	// NoGo are the reasons for NO-GO.
	NoGo []string
	// Incomplete are the reasons the run does not cover the whole signoff (listed even when allowed).
	Incomplete []string
	// Baseline are the differences from the baseline run, one line each.
	Baseline []string
	// NotApplicable are the required specs that skipped themselves because the cluster lacks what they
	// test, with the evidence ("not applicable: …"): listed, and no reason for INCOMPLETE.
	NotApplicable []string
	// StandIns are the checks of passed specs that could not do the real thing (run.StandInPrefix entries),
	// each "<check> in "<spec>": <what it did>; to make it real: <fix>". On fake GPUs they are listed (GO
	// there means the plumbing works); on real GPUs each is also a reason for INCOMPLETE.
	StandIns []string
	// FakeGPUs is true when every GPU node is one of the project's fakes (Record.GPUsFake).
	FakeGPUs bool
}

// Go is true for a GO verdict.
func (v Verdict) Go() bool { return v.Outcome == OutcomeGo }

// ExitCode is the process exit code that matches the verdict.
func (v Verdict) ExitCode() int {
	switch v.Outcome {
	case OutcomeGo:
		return ExitGo
	case OutcomeIncomplete:
		return ExitIncomplete
	}
	return ExitNoGo
}

// Reasons lists every reason in the order the report shows them.
func (v Verdict) Reasons() []string {
	out := slices.Clone(v.NoGo)
	for _, r := range v.Incomplete {
		out = append(out, "incomplete: "+r)
	}
	return out
}

// Decide applies the verdict policy to a run: its Ginkgo reports and its record (which carries the policy).
// It reads straight down, one pass per part of the policy: how the run started, what each spec found,
// the leak audit, the required labels, the pre-upgrade rehearsal, the baseline, then the outcome.
func Decide(suites []types.Report, rec Record) Verdict {
	v := Verdict{FakeGPUs: rec.GPUsFake()}
	refused := refusals(suites)
	v.setup(rec, refused)
	stop := interruptionOf(suites)
	// A run that stopped early lists why once, not every requirement its stop left unexercised.
	found := specFindings{stopped: rec.SetupFailure != "" || len(refused) > 0 || stop.cause != "",
		passed: map[string]bool{}, notApplicable: map[string]bool{}}
	for _, s := range suites {
		v.suite(s, rec, len(refused) > 0)
		for _, sp := range s.SpecReports {
			if !stop.cut(sp) { // a spec the interruption cut is its doing, not a finding: counted in its reason
				v.spec(sp, rec, &found)
			}
		}
	}
	if stop.cause != "" {
		v.Incomplete = append(v.Incomplete, stop.reason(rec))
	}
	if found.ran == 0 && !found.stopped {
		v.NoGo = append(v.NoGo, "no spec passed (nothing was exercised)")
	}
	v.leakAudit(rec, found.ran)
	if !found.stopped {
		v.requirements(rec, found)
	}
	if b := rec.Signoff.Baseline; b != nil {
		v.baseline(b, suites, rec, stop.cause != "")
	}
	v.Outcome = outcome(v, rec.Signoff.AllowIncomplete)
	return v
}

// specFindings is what the passes over the specs found, for the requirement pass.
type specFindings struct {
	// stopped: the run stopped early (setup failed or was refused, or the run was interrupted).
	stopped bool
	// ran counts the specs that passed.
	ran int
	// passed are the labels of passed specs.
	passed map[string]bool
	// notApplicable are the labels of specs that found the cluster without what they test: a required
	// scenario or requirement label they carry is answered (listed as not applicable), a path label is not.
	notApplicable map[string]bool
}

// setup: a run that refused to start is INCOMPLETE, one that stopped before its specs NO-GO.
func (v *Verdict) setup(rec Record, refused []string) {
	switch {
	case rec.SetupFailure != "" && rec.SetupRefused:
		v.Incomplete = append(v.Incomplete, "the run refused to start: "+rec.SetupFailure)
	case rec.SetupFailure != "":
		v.NoGo = append(v.NoGo, "the run stopped before its specs: "+rec.SetupFailure)
	}
	for _, r := range refused {
		v.Incomplete = append(v.Incomplete, "the run refused to start: "+r)
	}
}

// suite: a suite that did not succeed for an unexplained reason is NO-GO; a filtered one INCOMPLETE.
func (v *Verdict) suite(s types.Report, rec Record, refused bool) {
	if !s.SuiteSucceeded && !explained(s.SpecialSuiteFailureReasons, refused) {
		v.NoGo = append(v.NoGo, fmt.Sprintf("suite %q did not succeed", s.SuiteDescription))
	}
	if f := userFilterOf(s.SuiteConfig, rec.Signoff); f != "" {
		v.Incomplete = append(v.Incomplete, "filtered run ("+f+"): the signoff covers only the selected specs")
	}
}

// spec: a failed node is NO-GO; a skipped required spec is INCOMPLETE unless not applicable; a passed
// spec's labels count, and its report entries may say it fell back or ran as a stand-in.
func (v *Verdict) spec(sp types.SpecReport, rec Record, found *specFindings) {
	failed := sp.State.Is(types.SpecStateFailureStates)
	if sp.LeafNodeType != types.NodeTypeIt {
		if failed {
			v.NoGo = append(v.NoGo, fmt.Sprintf("%s failed: %s", sp.LeafNodeType, firstLine(sp.Failure.Message)))
		}
		return
	}
	if failed {
		v.NoGo = append(v.NoGo, "failed: "+sp.FullText())
	}
	if SpecResult(sp) == ResultSkipped {
		if !found.stopped && required(sp, rec) {
			v.skippedRequired(sp)
		}
		if strings.HasPrefix(firstLine(sp.Failure.Message), NotApplicablePrefix) {
			for _, l := range sp.Labels() {
				found.notApplicable[l] = !strings.HasPrefix(l, "path:")
			}
		}
	}
	if sp.State != types.SpecStatePassed {
		return
	}
	found.ran++
	for _, l := range sp.Labels() {
		found.passed[l] = true
	}
	for _, e := range sp.ReportEntries {
		if after, ok := strings.CutPrefix(e.Name, "not exercised:"); ok {
			v.Incomplete = append(v.Incomplete, fmt.Sprintf("runtime fallback in %q: %s: %s", sp.FullText(), strings.TrimSpace(after), e.StringRepresentation()))
		}
		if check, ok := strings.CutPrefix(e.Name, run.StandInPrefix); ok {
			v.standIn(fmt.Sprintf("%s in %q: %s", check, sp.FullText(), e.StringRepresentation()))
		}
		if e.Name == upgrade.AppCheckEntry {
			v.NotApplicable = append(v.NotApplicable, notApplicableChecks(e.StringRepresentation())...)
		}
	}
}

// leakAudit: objects of the run left on the cluster are NO-GO; an audit that did not run or could not
// list a kind, INCOMPLETE.
func (v *Verdict) leakAudit(rec Record, ran int) {
	switch {
	case rec.LeakAudit == nil && rec.SetupFailure == "" && ran > 0:
		v.Incomplete = append(v.Incomplete, "the leak audit did not run: the cluster was not checked for objects this run left")
	case rec.LeakAudit != nil && !rec.LeakAudit.Clean():
		v.NoGo = append(v.NoGo, fmt.Sprintf("leak audit: %d object(s) of this run left on the cluster", len(rec.LeakAudit.Ours)))
	case rec.LeakAudit != nil && len(rec.LeakAudit.Errors) > 0:
		v.Incomplete = append(v.Incomplete, "leak audit could not list "+strings.Join(rec.LeakAudit.Errors, "; ")+": nothing is known about those kinds")
	}
}

// requirements: each required label, and each discovered path, needs a passed spec (or, for a scenario
// or requirement label, one that found it not applicable); a pre-upgrade signoff needs its rehearsal.
func (v *Verdict) requirements(rec Record, found specFindings) {
	require := slices.Clone(rec.Signoff.Require)
	for _, p := range rec.Paths {
		require = append(require, "path:"+p.Name)
	}
	slices.Sort(require)
	for _, r := range slices.Compact(require) {
		if !found.passed[r] && !found.notApplicable[r] {
			v.Incomplete = append(v.Incomplete, fmt.Sprintf("required %s was not exercised (no passed spec carries the label)%s", r, whyNotExercised(rec, r)))
		}
	}
	if l := rec.Signoff.PreUpgrade; l != "" && !found.passed[l] {
		v.Incomplete = append(v.Incomplete, "pre-upgrade signoff without an upgrade rehearsal that passed: "+rehearsalMissing(rec))
	}
}

// baseline: a path or a passed spec of the baseline run that is gone or fails now, or a sharing mode that
// changed, is NO-GO. A spec not run now counts only in an unfiltered, uninterrupted run.
func (v *Verdict) baseline(b *Baseline, suites []types.Report, rec Record, interrupted bool) {
	now := map[string]bool{}
	for _, p := range rec.Paths {
		now[p.Name] = true
	}
	for _, p := range b.Paths {
		if !now[p] {
			v.Baseline = append(v.Baseline, fmt.Sprintf("path %s was exercised in baseline run %s and is absent now", p, b.RunID))
		}
	}
	filtered := slices.ContainsFunc(suites, func(s types.Report) bool { return filterOf(s.SuiteConfig) != "" })
	for _, name := range slices.Sorted(maps.Keys(b.Results)) {
		if b.Results[name] != ResultPassed {
			continue
		}
		switch got, ok := rec.Results[name]; {
		case got == ResultFailed:
			v.Baseline = append(v.Baseline, fmt.Sprintf("passed in baseline run %s, fails now: %s", b.RunID, name))
		case (!ok || got == ResultSkipped || got == ResultInterrupted) && !filtered && !interrupted:
			v.Baseline = append(v.Baseline, fmt.Sprintf("passed in baseline run %s, not run now: %s", b.RunID, name))
		}
	}
	v.Baseline = append(v.Baseline, sharingChanges(b, rec.SharingModes)...)
	v.NoGo = append(v.NoGo, v.Baseline...)
}

// outcome: any NO-GO reason is NO-GO; any INCOMPLETE one is INCOMPLETE unless the policy allows it.
func outcome(v Verdict, allowIncomplete bool) Outcome {
	switch {
	case len(v.NoGo) > 0:
		return OutcomeNoGo
	case len(v.Incomplete) > 0 && !allowIncomplete:
		return OutcomeIncomplete
	}
	return OutcomeGo
}

// standIn records a check that ran as a stand-in: never evidence on real GPUs.
func (v *Verdict) standIn(line string) {
	if slices.Contains(v.StandIns, line) {
		return
	}
	v.StandIns = append(v.StandIns, line)
	if !v.FakeGPUs {
		v.Incomplete = append(v.Incomplete, "stand-in on GPUs taken as real (no node carries "+cluster.LabelFakeGPUs+"): "+line)
	}
}

// StandInSummary is the signoff's first line about stand-ins on fake GPUs ("" when there are none or the
// GPUs are real, where each is an INCOMPLETE reason instead).
func (v Verdict) StandInSummary() string {
	if !v.FakeGPUs || len(v.StandIns) == 0 {
		return ""
	}
	return fmt.Sprintf("fake GPUs: %d checks ran as stand-ins (no CUDA driver in their containers); GO here means the plumbing works, not that GPU work was measured", len(v.StandIns))
}

// NotApplicablePrefix starts the Skip message of a spec that does not apply to the cluster (what it tests
// is absent, as the record shows): such a skip of a required spec does not make the run INCOMPLETE.
// Every other skip of a required spec ("not exercised: …", a pending spec) does.
const NotApplicablePrefix = "not applicable:"

// required reports whether sp carries a label the signoff requires (a required scenario's, a discovered
// path's, a required requirement's): every spec a required scenario registers is required, not only
// one of them.
func required(sp types.SpecReport, rec Record) bool {
	ls := sp.Labels()
	if slices.ContainsFunc(rec.Signoff.Require, func(r string) bool { return !strings.HasPrefix(r, "path:") && slices.Contains(ls, r) }) {
		return true
	}
	return rec.Signoff.PreUpgrade != "" && slices.Contains(ls, rec.Signoff.PreUpgrade)
}

// skippedRequired records a required spec that did not run to its end: not applicable (listed), or not
// exercised (INCOMPLETE), with the spec's own reason.
func (v *Verdict) skippedRequired(sp types.SpecReport) {
	why := firstLine(sp.Failure.Message)
	if after, ok := strings.CutPrefix(why, NotApplicablePrefix); ok {
		v.NotApplicable = append(v.NotApplicable, fmt.Sprintf("%s: %s", sp.FullText(), strings.TrimSpace(after)))
		return
	}
	if sp.State == types.SpecStatePending {
		why = "the spec is pending"
	}
	v.Incomplete = append(v.Incomplete, fmt.Sprintf("required spec not exercised: %s: %s", sp.FullText(), cmp.Or(why, "skipped")))
}

// notApplicableChecks are the upgrade rehearsal's application checks that did not apply to the canary
// pool, with the reason its log gave: listed beside the verdict, so that a check that never ran is seen.
func notApplicableChecks(entry string) []string {
	var out []string
	for _, c := range upgrade.ParseAppChecks(entry) {
		if why, ok := strings.CutPrefix(c.Result, upgrade.AppCheckNotApplicable+": "); ok {
			out = append(out, fmt.Sprintf("upgrade rehearsal's application check %q on the %s path: %s", c.Check, c.Path, why))
		}
	}
	return out
}

// userFilterOf describes the filters a user put on the run: the profile's own label filter is the profile's
// definition, not a filter of it.
func userFilterOf(c types.SuiteConfig, s Signoff) string {
	if s.ProfileFilter != "" && c.LabelFilter == s.ProfileFilter {
		c.LabelFilter = ""
	}
	return filterOf(c)
}

// filterOf describes the spec filters of a Ginkgo run, "" when every spec was selected.
func filterOf(c types.SuiteConfig) string {
	var parts []string
	if c.LabelFilter != "" {
		parts = append(parts, "label filter "+c.LabelFilter)
	}
	for _, f := range c.FocusStrings {
		parts = append(parts, "focus "+f)
	}
	for _, f := range c.SkipStrings {
		parts = append(parts, "skip "+f)
	}
	for _, f := range c.FocusFiles {
		parts = append(parts, "focus file "+f)
	}
	for _, f := range c.SkipFiles {
		parts = append(parts, "skip file "+f)
	}
	return strings.Join(parts, ", ")
}

// whyNotExercised finds the record's reason for a label that was not exercised, if it has one; for a
// requirement's label, its scenarios' reasons.
func whyNotExercised(rec Record, label string) string {
	if id, ok := strings.CutPrefix(label, labels.RequirementPrefix); ok {
		if why := requirementNotExercised(rec, conformance.ID(id)); len(why) > 0 {
			return "; " + strings.Join(why, "; ")
		}
		return ""
	}
	_, name, _ := strings.Cut(label, ":")
	for _, n := range rec.NotExercised {
		if n.What == name {
			return fmt.Sprintf("; %s: %s", n.What, n.Why)
		}
	}
	return ""
}

// RunIDEntry is the name of the report entry through which the suite writes its run ID into the Ginkgo
// report, so a report and a record of different runs are never rendered together.
const RunIDEntry = "gpuconform run"

// ReportRunID returns the run ID the suite wrote into a Ginkgo report, "" when none.
func ReportRunID(suites []types.Report) string {
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			for _, e := range sp.ReportEntries {
				if e.Name == RunIDEntry {
					return strings.Trim(e.StringRepresentation(), `"`)
				}
			}
		}
	}
	return ""
}

// rehearsalMissing says why a pre-upgrade signoff has no passed rehearsal: what the run recorded about
// the upgrade rehearsal not being registered, else that it did not run.
func rehearsalMissing(rec Record) string {
	var why []string
	for _, n := range rec.NotExercised {
		if strings.Contains(n.What, "upgrade rehearsal") {
			why = append(why, n.Why)
		}
	}
	if len(why) == 0 {
		return "the rehearsal did not run (filtered out, or it failed)"
	}
	return strings.Join(why, "; ")
}
