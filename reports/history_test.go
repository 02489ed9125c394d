package reports

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/timeline"
)

// writeRun writes the artifacts of one run as the suite does: record, Ginkgo report, one timeline.
func writeRun(t *testing.T, dir, runID string, at time.Time, kube string, state types.SpecState, start time.Duration) {
	t.Helper()
	rec := record()
	rec.RunID, rec.GeneratedAt, rec.KubernetesVersion = runID, at, kube
	rec.LeakAudit = &audit.Result{RunID: runID}
	sp := spec("admits a Job", "device-plugin", state, "")
	suites := []types.Report{{SpecReports: []types.SpecReport{sp}, SuiteSucceeded: state == types.SpecStatePassed}}
	rec.Results = Results(suites)
	if _, err := rec.Write(dir); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(suites)
	if err := os.WriteFile(filepath.Join(dir, "gpuconform-report.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	w := timeline.Workload{Name: "probe", Events: []timeline.Event{{At: at, Kind: timeline.Created}, {At: at.Add(time.Second), Kind: timeline.Scheduled}, {At: at.Add(time.Second + start), Kind: timeline.Started}}}
	w.Derive()
	if _, err := (timeline.Timeline{Spec: "s", Workloads: []timeline.Workload{w}}).Write(filepath.Join(dir, "specs", "s")); err != nil {
		t.Fatal(err)
	}
}

func TestHistoryComparesConsecutiveRuns(t *testing.T) {
	base := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	// Given out of order: the history sorts by time.
	writeRun(t, dirs[2], "night-3", base.Add(48*time.Hour), "v1.37.3", types.SpecStateFailed, 9*time.Second)
	writeRun(t, dirs[0], "night-1", base, "v1.37.2", types.SpecStatePassed, 2*time.Second)
	writeRun(t, dirs[1], "night-2", base.Add(24*time.Hour), "v1.37.2", types.SpecStatePassed, 2*time.Second)
	runs, err := History([]string{dirs[2], dirs[0], dirs[1]})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || runs[0].RunID != "night-1" || runs[2].RunID != "night-3" {
		t.Fatalf("runs out of order: %+v", runs)
	}
	if len(runs[1].Changes) != 0 {
		t.Errorf("night-2 changed nothing, got %q", runs[1].Changes)
	}
	changes := strings.Join(runs[2].Changes, "\n")
	for _, want := range []string{"verdict GO → NO-GO", "Kubernetes v1.37.2 → v1.37.3", "passed → failed: GPU allocation on the device-plugin path admits a Job", "median start 2s → 9s"} {
		if !strings.Contains(changes, want) {
			t.Errorf("changes lack %q:\n%s", want, changes)
		}
	}
	md := RenderHistory(runs)
	for _, want := range []string{"(3 runs)", "| `night-1` | 2026-12-01 02:00 | **GO** | 1/0/0 |", "2s / 2s", "## `night-3` against `night-2`", "Nothing changed"} {
		if !strings.Contains(md, want) {
			t.Errorf("history lacks %q:\n%s", want, md)
		}
	}
}
