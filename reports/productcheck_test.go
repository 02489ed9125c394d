package reports

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/reporters"
	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/conformance"
)

// submissionRun is a GO run that proves every MUST of v1.37 gpuconform claims and finds the conditional
// ones not applicable; its artifacts directory holds Ginkgo's own JUnit report and PRODUCT.yaml with the
// participant's metadata. ai_service_metrics, which no scenario claims, is left as gpuconform leaves it.
func submissionRun(t *testing.T) (dir string, product []byte) {
	t.Helper()
	suites, rec := passing()
	claim := func(id conformance.ID, scenario string) {
		rec.Signoff.Conformance.Claims = append(rec.Signoff.Conformance.Claims,
			conformance.Claim{Proof: conformance.Proof{Requirement: id, How: "checked"}, Scenario: scenario})
	}
	rec.Signoff.Conformance.Version = "1.37"
	for i, id := range []conformance.ID{conformance.SecureAcceleratorAccess, conformance.GangScheduling, conformance.AcceleratorMetrics, conformance.RobustController} {
		sp := spec("proves "+string(id), "dra", types.SpecStatePassed, "")
		sp.LeafNodeLabels = []string{labelOf(id)}
		suites[0].SpecReports = append(suites[0].SpecReports, sp)
		claim(id, []string{"allocation", "gang", "metrics", "operator"}[i])
	}
	for _, id := range []conformance.ID{conformance.ClusterAutoscaling, conformance.PodAutoscaling, conformance.AIInference} {
		sp := spec("scales or routes for "+string(id), "cluster", types.SpecStateSkipped, NotApplicablePrefix+" the cluster offers none of it: evidence")
		sp.LeafNodeLabels = []string{labelOf(id)}
		suites[0].SpecReports = append(suites[0].SpecReports, sp)
		claim(id, "platform")
	}
	rec.Signoff.Conformance.Product = conformance.Metadata{PlatformName: "Turbo Encabulator", PlatformVersion: "v1.7.4", VendorName: "Yoyodyne",
		WebsiteURL: "https://yoyo.dyne/turbo", DocumentationURL: "https://yoyo.dyne/turbo/docs", ProductLogoURL: "https://yoyo.dyne/turbo.svg",
		Description: "A Kubernetes distribution.", ContactEmailAddress: "turbo@yoyo.dyne", K8sConformanceURL: "https://github.com/cncf/k8s-conformance/tree/master/v1.37/turbo"}
	dir = t.TempDir()
	if err := reporters.GenerateJUnitReport(suites[0], filepath.Join(dir, JUnitFile)); err != nil {
		t.Fatal(err)
	}
	ev := ConformanceEvidence(suites, rec)
	if err := WriteEvidence(dir, ev, rec); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, ProductFile))
	if err != nil {
		t.Fatal(err)
	}
	return dir, raw
}

func labelOf(id conformance.ID) string { return "conformance:" + string(id) }

// answer sets a requirement's status, evidence and notes as a participant would in the file.
func answer(t *testing.T, raw []byte, id, status, evidence string) []byte {
	t.Helper()
	s := string(raw)
	i := strings.Index(s, "- id: "+id+"\n")
	if i < 0 {
		t.Fatalf("no %s in:\n%s", id, s)
	}
	j := strings.Index(s[i:], "notes: ")
	end := i + j + strings.Index(s[i+j:], "\n")
	item := s[i:end]
	k := strings.Index(item, "status: ")
	item = item[:k] + "status: \"" + status + "\"\n      evidence:\n        - \"" + evidence + "\"\n      notes: \"answered by the participant\""
	return []byte(s[:i] + item + s[end:])
}

func checkFile(t *testing.T, dir string, raw []byte) ProductCheck {
	t.Helper()
	file := filepath.Join(dir, "copy-"+ProductFile)
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := CheckProduct(file)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheckProduct(t *testing.T) {
	dir, raw := submissionRun(t)
	// As written: every MUST gpuconform claims is answered; ai_service_metrics is the participant's to answer.
	c := checkFile(t, dir, raw)
	if len(c.Problems) != 1 || !strings.Contains(c.Problems[0], `ai_service_metrics: no status`) {
		t.Fatalf("as written, want only ai_service_metrics unanswered: %q", c.Problems)
	}
	good := answer(t, raw, "ai_service_metrics", "Implemented", "https://yoyo.dyne/turbo/docs/monitoring")
	if c := checkFile(t, dir, good); len(c.Problems) != 0 || c.Version != "1.37" {
		t.Fatalf("a complete submission: %q", c.Problems)
	}
	for _, n := range []string{"cluster_autoscaling: a MUST marked N/A", "checked for their form only"} {
		if !strings.Contains(strings.Join(checkFile(t, dir, good).Notes, "\n"), n) {
			t.Errorf("notes lack %q", n)
		}
	}
	gang := "#[It] GPU allocation on the dra path proves gang_scheduling [scenario:allocation, path:dra, conformance:gang_scheduling]"
	for _, bad := range []struct {
		name, from, to, problem string
	}{
		{"a MUST emptied", "status: \"Implemented\"\n      evidence:\n        - \"evidence/gang_scheduling.md\"", "status: \"\"\n      evidence:\n        - \"evidence/gang_scheduling.md\"",
			`gang_scheduling: no status`},
		{"a status misspelled", `status: "Implemented"` + "\n      evidence:\n        - \"evidence/robust_controller.md\"", `status: "Implemeted"` + "\n      evidence:\n        - \"evidence/robust_controller.md\"",
			`robust_controller: status "Implemeted"`},
		{"an evidence link removed", "        - \"" + JUnitFile + gang + "\"\n", "",
			"gang_scheduling: the evidence does not link the test case"},
		{"an evidence link that resolves nowhere", "evidence/gang_scheduling.md", "evidence/gang.md", `gang_scheduling: evidence "evidence/gang.md": not found`},
		{"an anchor naming no test case", gang, "#[It] gang", "no test case of " + JUnitFile + " has that name"},
		{"a description rewritten", "all-or-nothing scheduling", "mostly-all scheduling", "gang_scheduling: the description differs"},
		{"N/A without notes", "notes: \"gpuconform: not applicable: the cluster offers none of it: evidence\"", "notes: \"\"", "N/A needs notes"},
		{"a placeholder left", `vendorName: "Yoyodyne"`, `vendorName: "[Vendor Name]"`, "metadata vendorName is the template's placeholder"},
		{"a malformed k8s conformance URL", "tree/master/v1.37/turbo", "blob/v1.37/turbo", "metadata k8sConformanceUrl"},
		{"a PNG logo", "turbo.svg", "turbo.png", "productLogoUrl https://yoyo.dyne/turbo.png is not an SVG"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			if !strings.Contains(string(good), bad.from) {
				t.Fatalf("the good file lacks %q:\n%s", bad.from, good)
			}
			c := checkFile(t, dir, []byte(strings.Replace(string(good), bad.from, bad.to, 1)))
			if !strings.Contains(strings.Join(c.Problems, "\n"), bad.problem) {
				t.Errorf("problems %q, want one with %q", c.Problems, bad.problem)
			}
		})
	}
	if _, err := CheckProduct(filepath.Join(dir, "absent.yaml")); err == nil {
		t.Error("a missing file passed")
	}
}
