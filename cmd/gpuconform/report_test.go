package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/reports"
)

func writeRun(t *testing.T, dir, recordRun, reportRun string, state types.SpecState) {
	t.Helper()
	rec := reports.Record{RunID: recordRun, LeakAudit: &audit.Result{RunID: recordRun}}
	rec.Signoff.Conformance = reports.ConformanceClaims{Version: "1.37", Claims: []conformance.Claim{
		{Proof: conformance.Proof{Requirement: conformance.SecureAcceleratorAccess, How: "exact devices"}, Scenario: "allocation"}}}
	if _, err := rec.Write(dir); err != nil {
		t.Fatal(err)
	}
	suite := types.Report{SuiteSucceeded: state == types.SpecStatePassed, SpecReports: types.SpecReports{
		{LeafNodeType: types.NodeTypeSynchronizedBeforeSuite, State: types.SpecStatePassed,
			ReportEntries: types.ReportEntries{{Name: reports.RunIDEntry, Value: types.WrapEntryValue(reportRun)}}},
		{LeafNodeType: types.NodeTypeIt, LeafNodeText: "admits a Job", State: state,
			ContainerHierarchyLabels: [][]string{{"scenario:allocation", "scenario:shortage"}}, LeafNodeLabels: []string{"conformance:secure_accelerator_access"}},
	}}
	raw, _ := json.Marshal([]types.Report{suite})
	if err := os.WriteFile(filepath.Join(dir, "gpuconform-report.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReportExitCodeIsTheVerdicts(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	writeRun(t, dir, "run-1", "run-1", types.SpecStatePassed)
	if code := reportCommand(t.Context(), []string{dir}, &out, &errb); code != reports.ExitGo {
		t.Errorf("GO run: exit %d\n%s", code, errb.String())
	}
	writeRun(t, dir, "run-1", "run-1", types.SpecStateFailed)
	errb.Reset()
	if code := reportCommand(t.Context(), []string{dir}, &out, &errb); code != reports.ExitNoGo {
		t.Errorf("failed run: exit %d", code)
	}
	// The reasons reach the stream CI keeps, before the verdict line.
	if got := errb.String(); !strings.Contains(got, "  NO-GO: failed: admits a Job\n") || strings.Index(got, "failed: admits a Job") > strings.Index(got, "verdict: NO-GO") {
		t.Errorf("the failed run's stderr does not give the reason before the verdict:\n%s", got)
	}
	// The evidence follows the report rendered again: the failed spec now says Not Implemented.
	raw, err := os.ReadFile(filepath.Join(dir, reports.ProductFile))
	if err != nil || !strings.Contains(string(raw), `status: "Not Implemented"`) {
		t.Errorf("PRODUCT.yaml after the failed run (%v):\n%s", err, raw)
	}
	// It is not fit to submit: the failed MUST, the metadata nobody gave.
	out.Reset()
	errb.Reset()
	if code := reportCommand(t.Context(), []string{"--check-product", filepath.Join(dir, reports.ProductFile)}, &out, &errb); code != 1 ||
		!strings.Contains(out.String(), "problem: secure_accelerator_access: a MUST must be Implemented (or N/A with notes), not \"Not Implemented\"") ||
		!strings.Contains(out.String(), "problem: metadata platformName is empty") || !strings.Contains(errb.String(), "not fit to submit (checklist v1.37)") {
		t.Errorf("--check-product: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if code := reportCommand(t.Context(), []string{"--check-product"}, &out, &errb); code != 2 {
		t.Errorf("--check-product without a file: exit %d", code)
	}
	// The metadata given afterwards is recorded and written into PRODUCT.yaml.
	meta := filepath.Join(t.TempDir(), "product.yaml")
	if err := os.WriteFile(meta, []byte("platformName: Turbo Encabulator\nvendorName: Yoyodyne\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reportCommand(t.Context(), []string{"--product-metadata", meta, dir}, &out, &errb)
	raw, _ = os.ReadFile(filepath.Join(dir, reports.ProductFile))
	rec, _ := reports.ReadRecord(filepath.Join(dir, reports.RecordFile))
	if !strings.Contains(string(raw), `platformName: "Turbo Encabulator"`) || rec.Signoff.Conformance.Product.VendorName != "Yoyodyne" {
		t.Errorf("--product-metadata: PRODUCT.yaml\n%s\nrecord %+v", raw, rec.Signoff.Conformance.Product)
	}
	if err := os.WriteFile(meta, []byte("platform: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := reportCommand(t.Context(), []string{"--product-metadata", meta, dir}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "the program's keys") {
		t.Errorf("a misspelt metadata key: exit %d, %s", code, errb.String())
	}
}

func TestReportRefusesToMixRuns(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, "run-2", "run-1", types.SpecStatePassed)
	var out, errb bytes.Buffer
	if code := reportCommand(t.Context(), []string{dir}, &out, &errb); code != reports.ExitNoGo || !strings.Contains(errb.String(), "refusing to mix runs") {
		t.Errorf("mixed runs: exit %d, %s", code, errb.String())
	}
}

func TestReportOfARunThatStoppedBeforeItsSpecs(t *testing.T) {
	dir := t.TempDir()
	rec := reports.Record{RunID: "run-3", SetupFailure: "Kueue's webhook does not answer"}
	if _, err := rec.Write(dir); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := reportCommand(t.Context(), []string{dir}, &out, &errb); code != reports.ExitNoGo {
		t.Errorf("exit %d", code)
	}
	if !strings.Contains(out.String(), "**NO-GO**") || !strings.Contains(out.String(), "Kueue's webhook does not answer") {
		t.Errorf("signoff:\n%s", out.String())
	}
}

// bench and report take one directory: --help is their usage, any other flag a usage error, and neither
// is read as a directory named like a flag.
func TestArtifactsCommandsArguments(t *testing.T) {
	for name, cmd := range map[string]func(args []string, stdout, stderr *strings.Builder) int{
		"bench":  func(a []string, o, e *strings.Builder) int { return benchCommand(t.Context(), a, o, e) },
		"report": func(a []string, o, e *strings.Builder) int { return reportCommand(t.Context(), a, o, e) },
	} {
		var out, errb strings.Builder
		if code := cmd([]string{"--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "usage: gpuconform "+name+" [ARTIFACTS_DIR]") {
			t.Errorf("%s --help: exit %d, stdout %q, stderr %q", name, code, out.String(), errb.String())
		}
		out.Reset()
		errb.Reset()
		if code := cmd([]string{"--artifacts=x"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown flag --artifacts=x") {
			t.Errorf("%s --artifacts=x: exit %d, stderr %q", name, code, errb.String())
		}
		errb.Reset()
		if code := cmd([]string{"a", "b"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage:") {
			t.Errorf("%s a b: exit %d, stderr %q", name, code, errb.String())
		}
	}
}
