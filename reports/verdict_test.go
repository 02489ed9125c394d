package reports

import (
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/run"
)

// passing is a run where both paths' allocation and shortage specs passed and the audit is clean.
func passing() ([]types.Report, Record) {
	suite := types.Report{SuiteDescription: "GPU", SuiteSucceeded: true, SpecReports: []types.SpecReport{
		spec("admits a Job", "device-plugin", types.SpecStatePassed, ""),
		spec("admits a Job", "dra", types.SpecStatePassed, ""),
		shortageSpec("diagnoses a shortage", "dra"),
	}}
	rec := record()
	rec.Paths = []PathRecord{{Name: "device-plugin"}, {Name: "dra"}}
	rec.Signoff.Require = []string{"scenario:allocation", "scenario:shortage"}
	rec.LeakAudit = &audit.Result{RunID: "run-1"}
	rec.Results = Results([]types.Report{suite})
	return []types.Report{suite}, rec
}

func shortageSpec(text, path string) types.SpecReport {
	sp := spec(text, path, types.SpecStatePassed, "")
	sp.ContainerHierarchyLabels = [][]string{{"scenario:shortage", "path:" + path}}
	return sp
}

func expectOutcome(t *testing.T, suites []types.Report, rec Record, want Outcome, reason string) Verdict {
	t.Helper()
	v := Decide(suites, rec)
	if v.Outcome != want {
		t.Fatalf("outcome %s, want %s; reasons %q", v.Outcome, want, v.Reasons())
	}
	if reason != "" && !strings.Contains(strings.Join(v.Reasons(), "\n"), reason) {
		t.Errorf("reasons %q lack %q", v.Reasons(), reason)
	}
	wantCode := map[Outcome]int{OutcomeGo: 0, OutcomeNoGo: 1, OutcomeIncomplete: 3}[want]
	if v.ExitCode() != wantCode {
		t.Errorf("exit code %d for %s, want %d", v.ExitCode(), want, wantCode)
	}
	return v
}

func TestVerdictGo(t *testing.T) {
	s, rec := passing()
	expectOutcome(t, s, rec, OutcomeGo, "")
}

func TestVerdictFailedSpecIsNoGo(t *testing.T) {
	s, rec := passing()
	s[0].SpecReports = append(s[0].SpecReports, spec("sees its devices", "dra", types.SpecStateFailed, "boom"))
	expectOutcome(t, s, rec, OutcomeNoGo, "failed: GPU allocation on the dra path sees its devices")
}

func TestVerdictSetupFailureIsNoGo(t *testing.T) {
	_, rec := passing()
	rec.SetupFailure = "Kueue's webhook does not answer"
	expectOutcome(t, nil, rec, OutcomeNoGo, "stopped before its specs: Kueue's webhook does not answer")
}

// A failed suite node whose message is a list names its first item in the NO-GO line, not only the heading.
func TestVerdictSuiteNodeFailureQuotesTheListsFirstItem(t *testing.T) {
	s, rec := passing()
	s[0].SpecReports = append(s[0].SpecReports, types.SpecReport{LeafNodeType: types.NodeTypeSynchronizedBeforeSuite, State: types.SpecStateFailed,
		Failure: types.Failure{Message: "could not delete 1 leftover(s):\n  - NodeFault w1 (run r): stop-node: node w1 was stopped by run r"}})
	expectOutcome(t, s, rec, OutcomeNoGo, "SynchronizedBeforeSuite failed: could not delete 1 leftover(s): - NodeFault w1 (run r): stop-node")
}

func TestVerdictFilteredRunIsIncomplete(t *testing.T) {
	s, rec := passing()
	s[0].SuiteConfig.LabelFilter = "path:dra"
	expectOutcome(t, s, rec, OutcomeIncomplete, "filtered run (label filter path:dra)")
	// Allowed: GO, with the reason still listed.
	rec.Signoff.AllowIncomplete = true
	v := expectOutcome(t, s, rec, OutcomeGo, "filtered run")
	if len(v.Incomplete) == 0 {
		t.Error("allowed incompleteness must stay listed")
	}
}

func TestVerdictRequiredScenarioOrPathNotExercisedIsIncomplete(t *testing.T) {
	s, rec := passing()
	rec.Signoff.Require = append(rec.Signoff.Require, "scenario:preemption")
	rec.NotExercised = []NotExercised{{What: "preemption", Why: "Kueue is absent"}}
	expectOutcome(t, s, rec, OutcomeIncomplete, "required scenario:preemption was not exercised (no passed spec carries the label); preemption: Kueue is absent")

	s, rec = passing()
	rec.Paths = append(rec.Paths, PathRecord{Name: "mig"})
	expectOutcome(t, s, rec, OutcomeIncomplete, "required path:mig was not exercised")
}

func TestVerdictRuntimeFallbackIsIncomplete(t *testing.T) {
	s, rec := passing()
	s[0].SpecReports[0].ReportEntries = types.ReportEntries{{Name: "not exercised: device identity check", Value: types.WrapEntryValue("hostPath pods are forbidden")}}
	expectOutcome(t, s, rec, OutcomeIncomplete, "runtime fallback in \"GPU allocation on the device-plugin path admits a Job\": device identity check: hostPath pods are forbidden")
}

func TestVerdictLeakAudit(t *testing.T) {
	s, rec := passing()
	rec.LeakAudit = nil
	expectOutcome(t, s, rec, OutcomeIncomplete, "leak audit did not run")
	rec.LeakAudit = &audit.Result{Errors: []string{"ResourceFlavors: forbidden"}}
	expectOutcome(t, s, rec, OutcomeIncomplete, "leak audit could not list ResourceFlavors: forbidden")
	rec.LeakAudit = &audit.Result{Ours: []audit.Finding{{Kind: "Namespace", Name: "x"}}}
	expectOutcome(t, s, rec, OutcomeNoGo, "leak audit: 1 object")
}

func TestVerdictBaselineRegressionIsNoGo(t *testing.T) {
	s, rec := passing()
	base := BaselineFrom(rec, "last-good/gpuconform-record.json")
	base.RunID = "run-0"
	rec.Signoff.Baseline = base

	// Unchanged: GO, and the report says so.
	expectOutcome(t, s, rec, OutcomeGo, "")
	if md := RenderMarkdown(s, rec); !strings.Contains(md, "Compared with baseline run `run-0`") || !strings.Contains(md, "Everything that passed in the baseline passes now") {
		t.Errorf("baseline section missing:\n%s", md)
	}

	// A path gone: NO-GO.
	rec.Paths = rec.Paths[:1]
	expectOutcome(t, s, rec, OutcomeNoGo, "path dra was exercised in baseline run run-0 and is absent now")

	// A spec that passed now fails, or is gone from an unfiltered run: NO-GO, shown as a diff.
	s, rec = passing()
	rec.Signoff.Baseline = base
	s[0].SpecReports[1].State = types.SpecStateFailed
	rec.Results = Results(s)
	expectOutcome(t, s, rec, OutcomeNoGo, "passed in baseline run run-0, fails now: GPU allocation on the dra path admits a Job")
	s, rec = passing()
	rec.Signoff.Baseline = base
	delete(rec.Results, "GPU allocation on the dra path admits a Job")
	expectOutcome(t, s, rec, OutcomeNoGo, "passed in baseline run run-0, not run now")

	// Filtered out of this run: not a regression, but INCOMPLETE.
	s[0].SuiteConfig.FocusStrings = []string{"device-plugin"}
	expectOutcome(t, s, rec, OutcomeIncomplete, "filtered run (focus device-plugin)")
}

func TestVerdictRendersOutcome(t *testing.T) {
	s, rec := passing()
	s[0].SuiteConfig.LabelFilter = "path:dra"
	md := RenderMarkdown(s, rec)
	for _, want := range []string{"**INCOMPLETE**", "Exit code 3", "- incomplete: filtered run", "Required: scenario:allocation, scenario:shortage"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestVerdictPreUpgradeWithoutRehearsalIsIncomplete(t *testing.T) {
	s, rec := passing()
	rec.Signoff.PreUpgrade = "scenario:upgrade"
	rec.NotExercised = []NotExercised{{What: "driver-upgrade rehearsal on the canary pool", Why: "it cordons, drains and upgrades the canary pool; run with --disruptive to include it"}}
	expectOutcome(t, s, rec, OutcomeIncomplete, "pre-upgrade signoff without an upgrade rehearsal that passed: it cordons, drains and upgrades the canary pool; run with --disruptive")

	// With a passed rehearsal the same run is GO.
	up := spec("upgrades the canary pool", "device-plugin", types.SpecStatePassed, "")
	up.ContainerHierarchyLabels = [][]string{{"scenario:upgrade"}}
	s[0].SpecReports = append(s[0].SpecReports, up)
	expectOutcome(t, s, rec, OutcomeGo, "")

	// Not a pre-upgrade signoff: the missing rehearsal is not required.
	s, rec = passing()
	expectOutcome(t, s, rec, OutcomeGo, "")
}

// A check that ran as a stand-in is evidence of nothing on GPUs taken as real: INCOMPLETE naming it and
// its fix. On the project's fake GPUs it is listed, and the signoff's first lines count the stand-ins.
func TestVerdictStandIn(t *testing.T) {
	withStandIn := func(fake string) ([]types.Report, Record) {
		s, rec := passing()
		s[0].SpecReports[1].ReportEntries = types.ReportEntries{{Name: run.StandInPrefix + "device test",
			Value: types.WrapEntryValue(run.StandIn{Did: "stand-in (no CUDA driver in the container): ran no kernel", Fix: "NVIDIA_DRIVER_CAPABILITIES=compute"})}}
		rec.Nodes = []NodeRecord{{Name: "w1", FakeGPUs: fake}, {Name: "w2", FakeGPUs: fake}}
		return s, rec
	}
	s, rec := withStandIn("")
	v := expectOutcome(t, s, rec, OutcomeIncomplete,
		`stand-in on GPUs taken as real (no node carries gpuconform.io/fake-device-plugin-version): device test in "GPU allocation on the dra path admits a Job": stand-in (no CUDA driver in the container): ran no kernel; to make it real: NVIDIA_DRIVER_CAPABILITIES=compute`)
	if v.StandInSummary() != "" {
		t.Errorf("real GPUs get no fake-GPU summary: %q", v.StandInSummary())
	}
	// One real node among fakes: real.
	s, rec = withStandIn("label x")
	rec.Nodes[1].FakeGPUs = ""
	expectOutcome(t, s, rec, OutcomeIncomplete, "stand-in on GPUs taken as real")

	s, rec = withStandIn("label gpuconform.io/fake-device-plugin-version=v1")
	v = expectOutcome(t, s, rec, OutcomeGo, "")
	if len(v.StandIns) != 1 || !strings.HasPrefix(v.StandInSummary(), "fake GPUs: 1 checks ran as stand-ins") {
		t.Errorf("stand-ins %q, summary %q", v.StandIns, v.StandInSummary())
	}
	md := RenderMarkdown(s, rec)
	if !strings.Contains(md, "**fake GPUs: 1 checks ran as stand-ins") || !strings.Contains(md, "- stand-in: device test in ") {
		t.Errorf("markdown lacks the stand-in lines:\n%s", md[:min(len(md), 800)])
	}
}

// A required requirement whose only spec found the cluster without the thing (no autoscaler) is
// answered: GO, with the spec listed as not applicable; a spec that skipped itself for another reason
// leaves it INCOMPLETE.
func TestNotApplicableAnswersARequiredRequirement(t *testing.T) {
	s, rec := passing()
	na := spec("scales a GPU pool for a pending pod", "dra", types.SpecStateSkipped, NotApplicablePrefix+" no --autoscaling-pool was given and no node carries an autoscaler's node-group label")
	na.ContainerHierarchyLabels = [][]string{{"scenario:platform"}}
	na.LeafNodeLabels = []string{"conformance:cluster_autoscaling"}
	s[0].SpecReports = append(s[0].SpecReports, na)
	rec.Signoff.Require = append(rec.Signoff.Require, "conformance:cluster_autoscaling")
	v := expectOutcome(t, s, rec, OutcomeGo, "")
	if len(v.NotApplicable) != 1 || !strings.Contains(v.NotApplicable[0], "no --autoscaling-pool was given") {
		t.Errorf("not applicable: %q", v.NotApplicable)
	}
	s[0].SpecReports[len(s[0].SpecReports)-1].Failure.Message = "not exercised: the metrics API did not answer"
	expectOutcome(t, s, rec, OutcomeIncomplete, "required spec not exercised")
}
