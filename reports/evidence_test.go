package reports

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/conformance"
)

// conformanceRun is a run whose secure-access specs passed on both paths, whose gang spec failed on
// one path and passed on the other, whose metrics spec did not run (no exporter), and whose driver
// spec failed.
func conformanceRun() ([]types.Report, Record) {
	withReq := func(sp types.SpecReport, id conformance.ID) types.SpecReport {
		sp.LeafNodeLabels = []string{"conformance:" + string(id)}
		return sp
	}
	secureDP := withReq(spec("shows no device to a pod that asks for none", "device-plugin", types.SpecStatePassed, ""), conformance.SecureAcceleratorAccess)
	secureDP.ReportEntries = types.ReportEntries{{Name: "evidence: a pod that asked for no device", Value: types.WrapEntryValue("pod p on w1 sees none; device nodes none; nvidia-smi not in the container")},
		{Name: APIRequestsEntry, Value: types.WrapEntryValue("12")}}
	suite := types.Report{SuiteDescription: "GPU", SuiteSucceeded: false, SpecReports: []types.SpecReport{
		secureDP,
		withReq(spec("shows no device to a pod that asks for none", "dra", types.SpecStatePassed, ""), conformance.SecureAcceleratorAccess),
		withReq(spec("admits a gang", "device-plugin", types.SpecStatePassed, ""), conformance.GangScheduling),
		withReq(spec("admits a gang", "dra", types.SpecStateFailed, "gang partly placed"), conformance.GangScheduling),
		withReq(spec("shows the driver", "dra", types.SpecStateFailed, "node w1 advertises driver 550.1 but nvidia-smi prints 551.1"), conformance.DriverRuntimeManagement),
		spec("admits a Job", "dra", types.SpecStatePassed, ""),
	}}
	rec := record()
	rec.NotExercised = []NotExercised{{What: "metrics: accelerator metrics", Why: "no Service is labelled app.kubernetes.io/name=dcgm-exporter"}}
	rec.Signoff.Profile = "ai-conformance"
	rec.Signoff.Conformance = ConformanceClaims{Version: "1.37", Claims: []conformance.Claim{
		{Proof: conformance.Proof{Requirement: conformance.SecureAcceleratorAccess, How: "absence asserted on device nodes"}, Scenario: "allocation"},
		{Proof: conformance.Proof{Requirement: conformance.GangScheduling, How: "all or nothing"}, Scenario: "gang"},
		{Proof: conformance.Proof{Requirement: conformance.AcceleratorMetrics, How: "samples per device"}, Scenario: "metrics"},
		{Proof: conformance.Proof{Requirement: conformance.DriverRuntimeManagement, How: "versions agree"}, Scenario: "driver"},
		{Proof: conformance.Proof{Requirement: conformance.GPUSharing, How: "replicas"}, Scenario: "sharing"},
	}}
	return []types.Report{suite}, rec
}

func TestConformanceEvidenceJudgesEachRequirement(t *testing.T) {
	ev := ConformanceEvidence(conformanceRun())
	if ev.Version != "1.37" || len(ev.Requirements) != 15 {
		t.Fatalf("version %s, %d requirements", ev.Version, len(ev.Requirements))
	}
	want := map[conformance.ID][2]string{
		// Its specs passed, but in a run whose verdict is NO-GO: not proven (a GO run proves it, below).
		conformance.SecureAcceleratorAccess: {evidenceResultShort, StatusPartlyImplemented},
		// One proving spec failed: not implemented, whatever else passed.
		conformance.GangScheduling:           {evidenceResultPartly, StatusNotImplemented},
		conformance.DriverRuntimeManagement:  {evidenceResultFailed, StatusNotImplemented},
		conformance.AcceleratorMetrics:       {evidenceResultNotRun, ""},
		conformance.GPUSharing:               {evidenceResultNotRun, ""},
		conformance.AdvancedInferenceIngress: {evidenceResultOutOfScope, ""},
		conformance.WorkloadSandboxing:       {evidenceResultOutOfScope, ""},
	}
	for _, r := range ev.Requirements {
		w, ok := want[r.ID]
		if !ok {
			if r.Status == StatusImplemented {
				t.Errorf("%s is marked implemented with no claim", r.ID)
			}
			continue
		}
		if r.Result != w[0] || r.Status != w[1] {
			t.Errorf("%s: result %q status %q, want %q %q (notes %q)", r.ID, r.Result, r.Status, w[0], w[1], r.Notes)
		}
		switch r.ID {
		case conformance.AcceleratorMetrics:
			if !strings.Contains(r.Notes, "no Service is labelled app.kubernetes.io/name=dcgm-exporter") {
				t.Errorf("metrics notes say not why: %q", r.Notes)
			}
		case conformance.AdvancedInferenceIngress:
			if !strings.Contains(r.Notes, "not exercised by gpuconform: gpuconform routes inference traffic through the Gateway API's own") {
				t.Errorf("out-of-scope notes: %q", r.Notes)
			}
		case conformance.SecureAcceleratorAccess:
			if len(r.Specs) != 2 || len(r.Specs[0].Entries) != 1 || !strings.Contains(r.Specs[0].Entries[0][1], "device nodes none") {
				t.Errorf("secure access specs %+v", r.Specs)
			}
		}
	}
}

// A requirement is Implemented only by an unfiltered run whose verdict is GO in which every spec that
// proves it passed; a filtered run, a proving spec that skipped itself, or another verdict leave it
// Partially Implemented, naming what falls short.
func TestRequirementStatusFollowsTheChecklistsWords(t *testing.T) {
	cases := []struct {
		name   string
		change func(s []types.Report, rec *Record)
		status string
		notes  string
	}{
		{name: "GO, unfiltered, every proving spec passed", change: func([]types.Report, *Record) {}, status: StatusImplemented},
		{name: "a filtered run", change: func(s []types.Report, _ *Record) { s[0].SuiteConfig.LabelFilter = "path:dra" },
			status: StatusPartlyImplemented, notes: "the run was filtered (label filter path:dra)"},
		{name: "a proving spec skipped itself", change: func(s []types.Report, _ *Record) {
			s[0].SpecReports[1].State, s[0].SpecReports[1].Failure.Message = types.SpecStateSkipped, "not exercised: no helper namespace"
		}, status: StatusPartlyImplemented, notes: "1 proving spec(s) not exercised"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			suites, rec := conformanceRun()
			// Only the secure-access specs and a plain one: a GO run.
			suites[0].SuiteSucceeded, suites[0].SpecReports = true, append(suites[0].SpecReports[:2], suites[0].SpecReports[5])
			rec.Paths, rec.Signoff.Require, rec.NotExercised = nil, nil, nil
			rec.LeakAudit = &audit.Result{}
			c.change(suites, &rec)
			for _, r := range ConformanceEvidence(suites, rec).Requirements {
				if r.ID != conformance.SecureAcceleratorAccess {
					continue
				}
				if r.Status != c.status || !strings.Contains(r.Notes, c.notes) {
					t.Errorf("status %q notes %q, want %q with %q", r.Status, r.Notes, c.status, c.notes)
				}
			}
		})
	}
}

func TestWriteEvidenceAndTheChecklist(t *testing.T) {
	suites, rec := conformanceRun()
	dir := t.TempDir()
	ev := ConformanceEvidence(suites, rec)
	if err := WriteEvidence(dir, ev, rec); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, EvidenceDir, "secure_accelerator_access.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"# secure_accelerator_access (MUST, security)", "**Result: passed, not proven.**", "scenario `allocation`: absence asserted on device nodes",
		"### passed: GPU allocation on the dra path shows no device", "- evidence: a pod that asked for no device: pod p on w1 sees none"} {
		if !strings.Contains(string(page), w) {
			t.Errorf("page lacks %q:\n%s", w, page)
		}
	}
	if strings.Contains(string(page), APIRequestsEntry) {
		t.Error("the page lists the API request count, which proves nothing")
	}
	raw, err := os.ReadFile(filepath.Join(dir, ProductFile))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ReadProduct(raw)
	if err != nil {
		t.Fatalf("PRODUCT.yaml does not read: %v\n%s", err, raw)
	}
	if c.Metadata["kubernetesVersion"] != "v1.37" || len(c.Spec["security"]) != 2 || len(c.Spec["operator"]) != 1 || len(c.Spec["networking"]) != 4 {
		t.Fatalf("PRODUCT.yaml = %+v", c)
	}
	sec := c.Spec["security"][0]
	want, _ := conformance.For("1.37")
	if r, _ := want.Find(conformance.SecureAcceleratorAccess); sec.Description != r.Description || sec.Level != "MUST" {
		t.Errorf("the checklist's own description or level is not kept: %+v", sec)
	}
	if sec.ID != "secure_accelerator_access" || sec.Status != StatusPartlyImplemented || len(sec.Evidence) != 3 || sec.Evidence[0] != "evidence/secure_accelerator_access.md" ||
		sec.Evidence[1] != JUnitFile+"#[It] GPU allocation on the device-plugin path shows no device to a pod that asks for none [scenario:allocation, path:device-plugin, conformance:secure_accelerator_access]" {
		t.Errorf("security item = %+v", sec)
	}
	if ai := c.Spec["networking"][1]; ai.Status != "" || len(ai.Evidence) != 0 || !strings.Contains(ai.Notes, "not exercised by gpuconform") {
		t.Errorf("an out-of-scope requirement = %+v", ai)
	}
	for _, w := range []string{"platformName: \"\" # TODO: name of the product being certified", "repoUrl: \"\" # optional:", "k8sConformanceUrl: \"\" # TODO:",
		"# Hybrid Verification Approach for v1.37:", "# Filled in by gpuconform from run"} {
		if !strings.Contains(string(raw), w) {
			t.Errorf("PRODUCT.yaml lacks %q:\n%s", w, raw)
		}
	}
	if !strings.Contains(string(raw), "accelerators:\n") || strings.Index(string(raw), "accelerators:") > strings.Index(string(raw), "networking:") {
		t.Error("sections out of the checklist's order")
	}
	index, _ := os.ReadFile(filepath.Join(dir, EvidenceDir, "README.md"))
	if !strings.Contains(string(index), "| [gang_scheduling](gang_scheduling.md) | MUST | partly failed | Not Implemented | 2 |") {
		t.Errorf("index:\n%s", index)
	}
	md, html := RenderMarkdown(suites, rec), RenderHTML(suites, rec)
	if !strings.Contains(md, "## Conformance evidence") || !strings.Contains(md, "| [driver_runtime_management](evidence/driver_runtime_management.md) | SHOULD | failed | Not Implemented |") {
		t.Errorf("markdown lacks the evidence table:\n%s", md)
	}
	if !strings.Contains(html, "<h2>Conformance evidence</h2>") || !strings.Contains(html, `<a href="evidence/gang_scheduling.md">gang_scheduling</a>`) {
		t.Error("HTML lacks the Conformance evidence section")
	}
}

func TestConformanceProfileFilterIsNotAFilteredRun(t *testing.T) {
	s, rec := passing()
	rec.Signoff.ProfileFilter = "conformance:secure_accelerator_access"
	s[0].SuiteConfig.LabelFilter = rec.Signoff.ProfileFilter
	expectOutcome(t, s, rec, OutcomeGo, "")
	s[0].SuiteConfig.LabelFilter = "(path:dra) && (" + rec.Signoff.ProfileFilter + ")"
	expectOutcome(t, s, rec, OutcomeIncomplete, "filtered run (label filter (path:dra)")
	// A required requirement no spec proved: INCOMPLETE with its scenario's reason.
	s, rec = conformanceRun()
	s[0].SuiteSucceeded = true
	s[0].SpecReports = s[0].SpecReports[:3]
	rec.Signoff.Require = []string{"conformance:accelerator_metrics"}
	rec.LeakAudit = &audit.Result{RunID: "run-1"}
	expectOutcome(t, s, rec, OutcomeIncomplete, "required conformance:accelerator_metrics was not exercised (no passed spec carries the label); metrics: accelerator metrics: no Service is labelled")
}
