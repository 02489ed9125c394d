package reports

import (
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
	corev1 "k8s.io/api/core/v1"

	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/upgrade"
)

func spec(text, path string, state types.SpecState, msg string) types.SpecReport {
	return types.SpecReport{
		ContainerHierarchyTexts:  []string{"GPU allocation on the " + path + " path"},
		ContainerHierarchyLabels: [][]string{{"scenario:allocation", "path:" + path}},
		LeafNodeType:             types.NodeTypeIt, LeafNodeText: text, State: state, RunTime: 3 * time.Second,
		Failure: types.Failure{Message: msg},
	}
}

func record() Record {
	caps := cluster.Capabilities{ServerVersion: "v1.37.2", Kueue: cluster.KueueInfo{Present: true, Version: "v0.17.0"},
		Sharing: cluster.Sharing{Mode: "exclusive"}, NotExercised: map[string]string{"dra": "no ResourceSlice publishes devices"},
		Nodes: []cluster.NodeInfo{{Name: "w1", Product: "Fake-GPU", Driver: "550.1", Kernel: "6.1", DevicePluginDevices: 4}}}
	return NewRecord("run-1", "kind-gpuconform", "https://127.0.0.1:6443", caps, nil)
}

func TestGoVerdict(t *testing.T) {
	suite := types.Report{SuiteDescription: "GPU", SuiteSucceeded: true, SpecReports: []types.SpecReport{
		spec("admits a Job asking for 1 device", "device-plugin", types.SpecStatePassed, ""),
	}}
	rec := record()
	rec.LeakAudit = &audit.Result{RunID: "run-1"}
	rec.NodeMonitorGracePeriod = "20s (kube-controller-manager --node-monitor-grace-period, pod kcm)"
	md := RenderMarkdown([]types.Report{suite}, rec)
	for _, want := range []string{"**GO**", "| Kubernetes | v1.37.2 |", "| Node monitor grace period | 20s (kube-controller-manager --node-monitor-grace-period, pod kcm) |", "| Kueue | v0.17.0 |", "| device-plugin | GPU allocation on the device-plugin path admits a Job asking for 1 device | passed |",
		"**dra**: no ResourceSlice publishes devices", "Nothing labelled by this run is left", "| w1 | Fake-GPU | 550.1 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestNoGoWithEvidence(t *testing.T) {
	failed := spec("shows a running pod exactly the 2 devices the kubelet allocated to it", "device-plugin", types.SpecStateFailed,
		"container saw [GPU-a] but kubelet pod-resources API on w1 allocated [GPU-a GPU-b]")
	failed.ReportEntries = types.ReportEntries{{Name: "artifacts", Value: types.WrapEntryValue("_artifacts/specs/x")}}
	suite := types.Report{SuiteSucceeded: false, SpecReports: []types.SpecReport{failed}}
	rec := record()
	rec.LeakAudit = &audit.Result{RunID: "run-1", Ours: []audit.Finding{{Kind: "Namespace", Name: "gpuconform-alloc-x", Run: "run-1"}}}
	md := RenderMarkdown([]types.Report{suite}, rec)
	for _, want := range []string{"**NO-GO**", "**failed**", "## Evidence for failures", "container saw [GPU-a] but", "artifacts: _artifacts/specs/x", "left behind: Namespace gpuconform-alloc-x", "leak audit: 1 object"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestNothingRanIsNoGo(t *testing.T) {
	v := Decide([]types.Report{{SuiteSucceeded: true}}, record())
	if v.Go() || v.ExitCode() != ExitNoGo || !strings.Contains(strings.Join(v.Reasons(), ";"), "no spec passed") {
		t.Errorf("an empty run must be no-go: %+v", v)
	}
}

func TestCountLeafSpecs(t *testing.T) {
	suite := types.Report{SpecReports: types.SpecReports{
		spec("a", "dra", types.SpecStatePassed, ""),
		spec("b", "dra", types.SpecStateFailed, "boom"),
		spec("c", "dra", types.SpecStatePanicked, "panic"),
		{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStatePassed},
	}}
	p, f, s := Count([]types.Report{suite})
	if p != 1 || f != 2 || s != 0 {
		t.Errorf("Count = %d passed, %d failed, %d skipped; want 1, 2, 0", p, f, s)
	}
}

func TestFeatureGatesTable(t *testing.T) {
	rec := record()
	md := RenderMarkdown(nil, rec)
	if !strings.Contains(md, "| Feature gates | not recorded (see notes) |") {
		t.Errorf("no gates must say so:\n%s", md)
	}
	rec.Notes = []string{"feature gates of kube-apiserver not recorded: forbidden"}
	if md := RenderMarkdown(nil, rec); !strings.Contains(md, "## Notes") || !strings.Contains(md, "- feature gates of kube-apiserver not recorded: forbidden") {
		t.Errorf("notes not rendered:\n%s", md)
	}
	rec.Notes = nil
	rec.FeatureGates = []cluster.FeatureGate{
		{Component: "kube-apiserver", Name: "DynamicResourceAllocation", Enabled: true},
		{Component: "kube-apiserver", Name: "DRAPrioritizedList", Stage: "BETA", Enabled: false},
		{Component: "kubelet/w1", Name: "DynamicResourceAllocation", Enabled: true},
		{Component: "kubelet/w1", Name: "KubeletPodResourcesGet", Stage: "BETA", Enabled: true},
	}
	md = RenderMarkdown(nil, rec)
	for _, want := range []string{
		"| Feature gate | Stage | kube-apiserver | kubelet/w1 |",
		"| DRAPrioritizedList | BETA | off | – |",
		"| DynamicResourceAllocation | GA | on | on |",
		"| KubeletPodResourcesGet | BETA | – | on |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestRenderRunParameters(t *testing.T) {
	rec := Record{RunID: "r1"}
	rec.Parameters = Parameters{TimeoutProfile: "real", TimeoutProfileWhy: "auto: not a kind cluster", Namespace: "team-a", LocalQueue: "gpus",
		GPUPool: []string{"w1", "w2"}, Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}}
	gpu := corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
	rec.Taints.Dedication, rec.Taints.Tolerated = []corev1.Taint{gpu}, []corev1.Taint{gpu}
	rec.Taints.Excluding = map[string][]corev1.Taint{"w3": {{Key: "maintenance", Effect: corev1.TaintEffectNoExecute}}}
	filtered := []types.Report{{SuiteConfig: types.SuiteConfig{LabelFilter: "path:dra"}}}
	md := RenderMarkdown(filtered, rec)
	for _, want := range []string{
		"| Filters | label filter path:dra |",
		"| Timeout profile | real (auto: not a kind cluster) |",
		"| Namespace | team-a (team-namespace mode",
		"| Queues | gpus |",
		"| Tolerated automatically | nvidia.com/gpu=present:NoSchedule |",
		"| Left out: w3 | untolerated maintenance:NoExecute |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("signoff lacks %q", want)
		}
	}
}

func TestRenderUpgradeRehearsal(t *testing.T) {
	up := spec("upgrades the canary pool", "device-plugin", types.SpecStateFailed, "container saw [GPU-1] but the kubelet allocated [GPU-0]")
	entry := func(name, v string) types.ReportEntry {
		return types.ReportEntry{Name: name, Value: types.WrapEntryValue(v)}
	}
	up.ReportEntries = types.ReportEntries{
		entry(upgrade.AppCheckEntry, upgrade.FormatAppChecks([]upgrade.AppCheck{{Check: "devices back", Path: "device-plugin", Node: "w3", Result: upgrade.AppCheckPassed},
			{Check: "device identity", Path: "device-plugin", Node: "w3", Result: upgrade.AppCheckFailed}})),
		entry(upgrade.ReserveEntry, "Deployment ns/serving (2 replicas): fewest available 1"),
		entry("record diff", "w3: driver 550.54.15 → 560.35.03-wrong-ids"),
		entry(upgrade.VerdictEntry, `upgrade from 550.54.15 to 560.35.03-wrong-ids on pool w3: NO-GO (failed: application check "device identity" on the device-plugin path (w3))`),
	}
	suite := types.Report{SuiteDescription: "GPU", SpecReports: []types.SpecReport{up}}
	rec := record()
	md := RenderMarkdown([]types.Report{suite}, rec)
	for _, want := range []string{"## Upgrade rehearsal", `NO-GO (failed: application check "device identity"`,
		"| device identity | device-plugin | w3 | FAILED |", "| devices back | device-plugin | w3 | passed |",
		"- Serving reserve through the drain: Deployment ns/serving", "- Record diff (canary before/after): w3: driver 550.54.15 → 560.35.03-wrong-ids"} {
		if !strings.Contains(md, want) {
			t.Errorf("signoff lacks %q:\n%s", want, md)
		}
	}
	html := RenderHTML([]types.Report{suite}, rec)
	if !strings.Contains(html, "<td>device identity</td><td>device-plugin</td><td>w3</td><td>FAILED</td>") {
		t.Errorf("the HTML signoff lacks the application check table")
	}
}
