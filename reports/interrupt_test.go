package reports

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/upgrade"
)

// entry is a report entry as Ginkgo stores a string value.
func entry(name, value string) types.ReportEntry {
	return types.ReportEntry{Name: name, Value: types.WrapEntryValue(value)}
}

func TestVerdictInterruptions(t *testing.T) {
	rehearsal := func(state types.SpecState, msg string) types.SpecReport {
		sp := spec("rolls the canary's driver and back", "device-plugin", state, msg)
		sp.ReportEntries = types.ReportEntries{entry(RestoredEntry, "canary gpuconform-worker3 rolled back to 550.54.15")}
		return sp
	}
	notRun := spec("sees its devices", "device-plugin", types.SpecStateSkipped, "interrupted by user")
	cases := []struct {
		name    string
		reasons []string
		specs   []types.SpecReport
		leaks   *audit.Result
		want    Outcome
		says    []string
	}{
		{name: "SIGINT during the rehearsal is INCOMPLETE with what the cleanup restored",
			reasons: []string{ginkgoInterruptedBySignal}, specs: []types.SpecReport{rehearsal(types.SpecStateInterrupted, "interrupted by user"), notRun},
			leaks: &audit.Result{}, want: OutcomeIncomplete,
			says: []string{"interrupted by a signal (SIGINT or SIGTERM): 1 spec(s)", "1 not run", "restored: canary gpuconform-worker3 rolled back to 550.54.15", "leak audit found nothing"}},
		{name: "a spec that failed before the signal is still NO-GO",
			reasons: []string{ginkgoInterruptedBySignal}, specs: []types.SpecReport{spec("admits a Job", "dra", types.SpecStateFailed, "boom"), rehearsal(types.SpecStateInterrupted, "")},
			leaks: &audit.Result{}, want: OutcomeNoGo, says: []string{"failed: GPU allocation on the dra path admits a Job", "interrupted by a signal"}},
		{name: "the run's own timeout is INCOMPLETE",
			reasons: []string{ginkgoSuiteTimeout}, specs: []types.SpecReport{rehearsal(types.SpecStateTimedout, "A suite timeout occurred")},
			leaks: &audit.Result{}, want: OutcomeIncomplete, says: []string{"interrupted by the run's own timeout (--timeout)"}},
		{name: "a spec's own timeout is a finding",
			specs: []types.SpecReport{rehearsal(types.SpecStateTimedout, "A spec timeout occurred")},
			leaks: &audit.Result{}, want: OutcomeNoGo, says: []string{"failed: "}},
		{name: "an interrupted run whose leak audit did not run says to check the cluster",
			reasons: []string{ginkgoInterruptedBySignal}, specs: []types.SpecReport{rehearsal(types.SpecStateInterrupted, "")},
			want: OutcomeIncomplete, says: []string{"gpuconform cleanup restores"}},
		{name: "an interruption that left objects is NO-GO for the leak",
			reasons: []string{ginkgoInterruptedBySignal}, specs: []types.SpecReport{rehearsal(types.SpecStateInterrupted, "")},
			leaks: &audit.Result{Ours: []audit.Finding{{Kind: "Namespace", Name: "gpuconform-x", Run: "run-1"}}}, want: OutcomeNoGo, says: []string{"leak audit: 1 object(s)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, rec := passing()
			rec.Signoff.Require = nil
			rec.Paths = nil
			rec.LeakAudit = c.leaks
			s := []types.Report{{SuiteDescription: "GPU", SuiteSucceeded: len(c.reasons) == 0 && c.want == OutcomeGo,
				SpecialSuiteFailureReasons: c.reasons, SpecReports: c.specs}}
			v := expectOutcome(t, s, rec, c.want, "")
			for _, w := range c.says {
				if !strings.Contains(strings.Join(v.Reasons(), "\n"), w) {
					t.Errorf("reasons %q lack %q", v.Reasons(), w)
				}
			}
			if c.want != OutcomeNoGo && strings.Contains(strings.Join(v.NoGo, "\n"), "did not succeed") {
				t.Errorf("an interruption is not a suite failure: %q", v.NoGo)
			}
		})
	}
}

// An interrupted run compared with a baseline: what the interruption kept from running is not a
// regression, what failed before it still is.
func TestVerdictInterruptedAgainstBaseline(t *testing.T) {
	s, rec := passing()
	rec.Signoff.Baseline = BaselineFrom(rec, "base.json")
	s[0].SuiteSucceeded, s[0].SpecialSuiteFailureReasons = false, []string{ginkgoInterruptedBySignal}
	s[0].SpecReports[1].State = types.SpecStateInterrupted
	s[0].SpecReports[2].State, s[0].SpecReports[2].Failure.Message = types.SpecStateSkipped, "interrupted by user"
	rec.Results = Results(s)
	v := expectOutcome(t, s, rec, OutcomeIncomplete, "interrupted by a signal")
	if len(v.Baseline) != 0 {
		t.Errorf("specs the interruption kept from running are not regressions: %q", v.Baseline)
	}
	if got := rec.Results["GPU allocation on the dra path admits a Job"]; got != ResultInterrupted {
		t.Errorf("result %q, want %q", got, ResultInterrupted)
	}
	if p, f, sk := Count(s); p != 1 || f != 0 || sk != 2 {
		t.Errorf("count %d passed, %d failed, %d skipped; want 1, 0, 2", p, f, sk)
	}
}

func TestVerdictRefusals(t *testing.T) {
	t.Run("a setup that refused (another live run) is INCOMPLETE, not 'no spec passed'", func(t *testing.T) {
		_, rec := passing()
		setup := types.SpecReport{LeafNodeType: types.NodeTypeSynchronizedBeforeSuite, State: types.SpecStateSkipped,
			Failure:       types.Failure{Message: "waited 2m0s for other gpuconform runs"},
			ReportEntries: types.ReportEntries{entry(RefusedEntry, "waited 2m0s for other gpuconform runs on this cluster: run r0 on host h (pid 1)")}}
		skipped := spec("admits a Job", "dra", types.SpecStateSkipped, "Spec skipped because Skip() was called in BeforeSuite")
		s := []types.Report{{SuiteDescription: "GPU", SuiteSucceeded: true, SpecialSuiteFailureReasons: []string{ginkgoSkippedInBeforeSuite},
			SpecReports: []types.SpecReport{setup, skipped}}}
		v := expectOutcome(t, s, rec, OutcomeIncomplete, "the run refused to start: waited 2m0s for other gpuconform runs on this cluster: run r0")
		for _, r := range v.Reasons() {
			if strings.Contains(r, "required ") || strings.Contains(r, "no spec passed") {
				t.Errorf("a refusal lists only itself, got %q", r)
			}
		}
	})
	t.Run("a setup refusal before the specs (the namespace cannot hold a pod) is INCOMPLETE", func(t *testing.T) {
		_, rec := passing()
		rec.SetupFailure, rec.SetupRefused = "refusing to start: namespace team-a cannot hold one pod", true
		expectOutcome(t, nil, rec, OutcomeIncomplete, "the run refused to start: refusing to start: namespace team-a")
	})
	t.Run("a skip in setup without a refusal is still a failure of the suite", func(t *testing.T) {
		s, rec := passing()
		s[0].SuiteSucceeded, s[0].SpecialSuiteFailureReasons = false, []string{ginkgoSkippedInBeforeSuite}
		expectOutcome(t, s, rec, OutcomeNoGo, "did not succeed")
	})
}

// Every spec of a required scenario is required: one that skipped itself at run time makes the run
// INCOMPLETE with its reason; one that does not apply to the cluster (its Skip says "not applicable:"
// with the evidence) is listed and keeps GO; a skip in a scenario nobody requires changes nothing.
func TestVerdictSkippedRequiredSpecs(t *testing.T) {
	skipped := func(scenario, msg string, state types.SpecState) types.SpecReport {
		sp := spec("resumes from its checkpoint", "dra", state, msg)
		sp.ContainerHierarchyLabels = [][]string{{scenario, "path:dra"}}
		return sp
	}
	cases := []struct {
		name string
		sp   types.SpecReport
		want Outcome
		says string
	}{
		{name: "Skip in a required spec", sp: skipped("scenario:shortage", "not exercised: no storage that outlives a node", types.SpecStateSkipped),
			want: OutcomeIncomplete, says: "required spec not exercised: GPU allocation on the dra path resumes from its checkpoint: not exercised: no storage that outlives a node"},
		{name: "a pending required spec", sp: skipped("scenario:allocation", "", types.SpecStatePending),
			want: OutcomeIncomplete, says: "the spec is pending"},
		{name: "not applicable, with its evidence", sp: skipped("scenario:shortage", "not applicable: no node of the GPU pool runs MPS (record: sharing none)", types.SpecStateSkipped),
			want: OutcomeGo, says: "not applicable: GPU allocation on the dra path resumes from its checkpoint: no node of the GPU pool runs MPS"},
		{name: "a skip outside the required scenarios", sp: skipped("scenario:metrics", "not exercised: no exporter", types.SpecStateSkipped),
			want: OutcomeGo},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, rec := passing()
			s[0].SpecReports = append(s[0].SpecReports, c.sp)
			v := Decide(s, rec)
			if v.Outcome != c.want {
				t.Fatalf("outcome %s, want %s: %q", v.Outcome, c.want, v.Reasons())
			}
			all := strings.Join(append(v.Reasons(), prefixed("not applicable: ", v.NotApplicable)...), "\n")
			if c.says != "" && !strings.Contains(all, c.says) {
				t.Errorf("the verdict lacks %q:\n%s", c.says, all)
			}
			if md := RenderMarkdown(s, rec); c.says != "" && !strings.Contains(md, c.says) {
				t.Errorf("the signoff lacks %q", c.says)
			}
		})
	}
}

func prefixed(p string, l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = p + s
	}
	return out
}

// The upgrade rehearsal's application checks that did not apply to the canary are listed beside the
// verdict with their reason, and do not change it.
func TestVerdictListsNotApplicableAppChecks(t *testing.T) {
	s, rec := passing()
	s[0].SpecReports[0].ReportEntries = types.ReportEntries{entry(upgrade.AppCheckEntry, upgrade.FormatAppChecks([]upgrade.AppCheck{
		{Check: "device identity", Path: "dra", Node: "w3", Result: upgrade.AppCheckPassed},
		{Check: "sharing", Path: "dra", Result: upgrade.AppCheckNotApplicable + ": the canary pool shares no GPU"},
	}))}
	v := expectOutcome(t, s, rec, OutcomeGo, "")
	if len(v.NotApplicable) != 1 || !strings.Contains(v.NotApplicable[0], `application check "sharing" on the dra path: the canary pool shares no GPU`) {
		t.Errorf("not applicable: %q", v.NotApplicable)
	}
}

// A run that stopped before its specs keeps what discovery had read, and the filters it was given: its
// signoff does not say "Kubernetes unknown" or "Filters: none" for a cluster it reached.
func TestSetupFailureKeepsWhatDiscoveryRead(t *testing.T) {
	rec := record()
	rec.Parameters.Filters = "label filter scenario:allocation"
	dir := t.TempDir()
	if err := WriteSetupFailure(dir, rec, errors.New("GPU stack not ready: Kueue's webhook does not answer")); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "signoff.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"v1.37.2", "v0.17.0", "label filter scenario:allocation", "NO-GO", "Kueue's webhook does not answer"} {
		if !strings.Contains(string(md), w) {
			t.Errorf("the setup failure's signoff lacks %q:\n%s", w, md)
		}
	}
}
