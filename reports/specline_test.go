package reports

import (
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

func TestSpecLineAndResult(t *testing.T) {
	passed := types.SpecReport{LeafNodeType: types.NodeTypeIt, LeafNodeText: "gets its devices", ContainerHierarchyTexts: []string{"GPU allocation on the dra path"},
		State: types.SpecStatePassed, RunTime: 66 * time.Second}
	if got, want := SpecLine(passed), "[gpuconform] PASSED (1m6s) GPU allocation on the dra path gets its devices"; got != want {
		t.Errorf("SpecLine = %q, want %q", got, want)
	}
	failed := passed
	failed.State, failed.Failure = types.SpecStateFailed, types.Failure{Message: "saw GPU-2\nmore detail"}
	if got, want := SpecLine(failed), "[gpuconform] FAILED (1m6s) GPU allocation on the dra path gets its devices: saw GPU-2"; got != want {
		t.Errorf("SpecLine = %q, want %q", got, want)
	}
	filtered := passed
	filtered.State = types.SpecStateSkipped
	skipped := filtered
	skipped.Failure = types.Failure{Message: "not exercised here"}
	suite := types.SpecReport{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStatePassed}
	for _, c := range []struct {
		sp   types.SpecReport
		want string
	}{{passed, ResultPassed}, {failed, ResultFailed}, {skipped, ResultSkipped}, {filtered, ResultFiltered}, {suite, ""}} {
		if got := SpecResult(c.sp); got != c.want {
			t.Errorf("SpecResult(%s, %v) = %q, want %q", c.sp.LeafNodeType, c.sp.State, got, c.want)
		}
	}
	reps := []types.Report{{SpecReports: types.SpecReports{passed, failed, skipped, filtered, suite}}}
	if p, f, s := Count(reps); p != 1 || f != 1 || s != 1 {
		t.Errorf("Count = %d passed, %d failed, %d skipped; want 1, 1, 1 (filtered and suite nodes not counted)", p, f, s)
	}
}

func TestMeasuredStepsFollowTheDeclaredScenarios(t *testing.T) {
	sp := types.SpecReport{LeafNodeType: types.NodeTypeIt, LeafNodeText: "recovers", LeafNodeLabels: []string{"scenario:recovery"},
		State: types.SpecStatePassed, ReportEntries: types.ReportEntries{{Name: "fault → node NotReady", Value: types.WrapEntryValue("41s")}}}
	reps := []types.Report{{SpecReports: types.SpecReports{sp}}}
	var rec Record
	if md := RenderMarkdown(reps, rec); strings.Contains(md, "fault → node NotReady") {
		t.Error("steps of a scenario not declared measured were listed")
	}
	rec.Signoff.Measured = []string{"scenario:recovery"}
	if md := RenderMarkdown(reps, rec); !strings.Contains(md, "| recovers | fault → node NotReady | 41s |") {
		t.Errorf("the measured scenario's step is missing:\n%s", md)
	}
}
