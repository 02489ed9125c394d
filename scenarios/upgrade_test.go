package scenarios

import (
	"slices"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/upgrade"
)

func TestSemverOfDriverVersions(t *testing.T) {
	for in, want := range map[string]string{"550.54.15": "550.54.15", "560.35.03": "560.35.3", "560.35": "560.35.0", "560.35.03-broken": "", "1.2.3.4": ""} {
		if got := semverOf(in); got != want {
			t.Errorf("semverOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDiffStatesNamesWhatChanged(t *testing.T) {
	before := map[string]nodeState{"canary": {Version: "550.54.15", Devices: map[string]int64{"dra": 4}}, "good": {Version: "550.54.15", Devices: map[string]int64{"dra": 4}}}
	after := map[string]nodeState{"canary": {Version: "560.35.03", Devices: map[string]int64{"dra": 3}}, "good": {Version: "550.54.15", Devices: map[string]int64{"dra": 4}}}
	if got := diffStates(before, after); got != "canary: driver 550.54.15 → 560.35.03; canary: dra devices 4 → 3" {
		t.Errorf("diff = %q", got)
	}
	if got := diffStates(before, before); got != "no change" {
		t.Errorf("diff of equal records = %q", got)
	}
}

func TestMaxStepReadsTheLargestStepOfJSONLines(t *testing.T) {
	log := `{"event":"start","steps":1000000}
not json {"step": 99}
{"event":"checkpoint","step":5}
{"event":"checkpoint","step":40,"file":"/x"}
{"event":"checkpoint","step":35}
{"step":"seven"}
`
	if got := maxStep(log); got != 40 {
		t.Errorf("maxStep = %d, want 40", got)
	}
	if got := maxStep("no progress at all\n"); got != 0 {
		t.Errorf("maxStep of a log without steps = %d, want 0", got)
	}
}

// The load's step lines may carry "gflops" (the CUDA FMA kernel the step ran); the window's median is
// what the rehearsal compares, and a first {"event":"gpu"} line says when the GPU work is a stand-in.
// Lines without these fields, or not JSON at all, pass over.
func TestParseLoadLogReadsThroughputAndStandIn(t *testing.T) {
	log := `{"event":"gpu","mode":"cuda","device":"NVIDIA H100 80GB HBM3"}
{"event":"start","steps":1000000}
{"event":"step","step":1,"gflops":50000,"gbps":2900}
{"event":"step","step":2,"gflops":"fast"}
{"event":"checkpoint","step":5}
{"event":"step","step":6,"gflops":51000,"gbps":2950}
{"event":"step","step":7,"gflops":49000}
{"event":"step","step":8,"gflops":12000}
not json {"gflops": 1}
`
	l := parseLoadLog(log)
	if l.maxStep != 8 || l.standIn != "" {
		t.Errorf("maxStep %d standIn %q, want 8 and none", l.maxStep, l.standIn)
	}
	if got := l.medianGFLOPS(5, 8); got != 49000 {
		t.Errorf("median of steps 6..8 = %g, want 49000", got)
	}
	if got := l.medianGFLOPS(5, 7); got != 50000 {
		t.Errorf("median of steps 6..7 = %g, want 50000 (the mean of the middle two)", got)
	}
	if got := l.medianGFLOPS(8, 20); got != 0 {
		t.Errorf("a window without gflops lines = %g, want 0 (the step rate is compared)", got)
	}

	standIn := parseLoadLog(`{"event":"gpu","mode":"stand-in","stand_in":"no CUDA driver in the container: libcuda.so.1: cannot open shared object file"}
{"event":"checkpoint","step":5}
`)
	if standIn.standIn != "no CUDA driver in the container: libcuda.so.1: cannot open shared object file" || standIn.medianGFLOPS(0, 5) != 0 || standIn.maxStep != 5 {
		t.Errorf("stand-in log read as %+v", standIn)
	}
}

func TestRehearsalLogNamesTheCheckThatFailed(t *testing.T) {
	l := &rehearsalLog{}
	l.step = "draining"
	l.checks = []upgrade.AppCheck{{Check: "devices back", Path: "dra", Node: "w3", Result: upgrade.AppCheckPassed},
		{Check: "device identity", Path: "dra", Node: "w3", Result: upgrade.AppCheckFailed}}
	if got := l.failedCheck(); got != `application check "device identity" on the dra path (w3)` {
		t.Errorf("failedCheck = %q", got)
	}
	l.checks[1].Result = upgrade.AppCheckPassed
	if got := l.failedCheck(); got != "" {
		t.Errorf("failedCheck with every check passed = %q", got)
	}
}

// A check whose body ran a stand-in reads so in the rehearsal's table, with what it did, never plainly
// passed.
func TestRehearsalStandInRow(t *testing.T) {
	if got := passedResult("nvidia-smi lists GPU-1"); got != "passed as a stand-in: nvidia-smi lists GPU-1" {
		t.Errorf("stand-in row = %q", got)
	}
	if got := upgrade.ParseAppChecks(upgrade.FormatAppChecks([]upgrade.AppCheck{{Check: "vendor device test", Path: "dra", Result: passedResult("line one\nline two")}})); len(got) != 1 || got[0].Result != "passed as a stand-in: line one line two" {
		t.Errorf("a stand-in row does not read back as one row: %+v", got)
	}
	if got := passedResult(""); got != upgrade.AppCheckPassed {
		t.Errorf("a real pass = %q, want passed", got)
	}
}

// The paths' checks run at once: the rows come in the paths' order, and when one path's check failed,
// the other path's check its failure stopped reads interrupted, so the verdict names the one that failed.
func TestMergePathChecksNamesTheFirstFailure(t *testing.T) {
	dp := &rehearsalLog{checks: []upgrade.AppCheck{{Check: "devices back", Path: "device-plugin", Result: upgrade.AppCheckPassed},
		{Check: "isolation", Path: "device-plugin", Result: upgrade.AppCheckFailed}}}
	dra := &rehearsalLog{checks: []upgrade.AppCheck{{Check: "devices back", Path: "dra", Result: upgrade.AppCheckPassed},
		{Check: "device identity", Path: "dra", Result: upgrade.AppCheckFailed}}}
	l := &rehearsalLog{checks: mergePathChecks([]*rehearsalLog{dp, dra}, 1)}
	if got := l.failedCheck(); got != `application check "device identity" on the dra path ()` {
		t.Errorf("failedCheck = %q, want dra's device identity", got)
	}
	var results []string
	for _, c := range l.checks {
		results = append(results, c.Path+" "+c.Check+": "+c.Result)
	}
	want := []string{"device-plugin devices back: passed", "device-plugin isolation: interrupted", "dra devices back: passed", "dra device identity: FAILED"}
	if !slices.Equal(results, want) {
		t.Errorf("rows = %q, want %q", results, want)
	}
	if got := mergePathChecks([]*rehearsalLog{dp, dra}, -1); got[1].Result != upgrade.AppCheckFailed {
		t.Errorf("without a first failure the rows stay as they are: %+v", got)
	}
}

func TestServingAffinityKeepsThePoolsAndPrefersTheCanary(t *testing.T) {
	a := servingAffinity([]string{"w3"}, []string{"w1", "w2"})
	req := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(req) != 3 {
		t.Fatalf("required terms %v, want one per node of both pools", req)
	}
	pref := a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(pref) != 1 || pref[0].Preference.MatchFields[0].Values[0] != "w3" || pref[0].Weight != 100 {
		t.Errorf("preferred terms %v, want the canary node alone", pref)
	}
}

func TestCanaryGangPlacement(t *testing.T) {
	dp := &gpu.DevicePlugin{Resource: "nvidia.com/gpu"}
	in := UpgradeInput{Canary: []string{"w3"}, KueuePresent: true}
	dp.Allocatable = map[string]int64{"w3": 4}
	in.Paths = []gpu.Path{dp}
	if p, why := canaryGangPlacement(in, dp); p != fixtures.OneNode || why != "" {
		t.Errorf("one node with 4 devices: %q %q, want both workers on it", p, why)
	}
	dp.Allocatable = map[string]int64{"w3": 1}
	if _, why := canaryGangPlacement(in, dp); !strings.Contains(why, "does not fit") {
		t.Errorf("one node with 1 device: why %q", why)
	}
	in.Canary = []string{"w3", "w4"}
	dp.Allocatable = map[string]int64{"w3": 1, "w4": 1}
	if p, _ := canaryGangPlacement(in, dp); p != fixtures.AcrossNodes {
		t.Errorf("two nodes: %q, want across nodes", p)
	}
	in.KueuePresent = false
	if _, why := canaryGangPlacement(in, dp); !strings.Contains(why, "Kueue") {
		t.Errorf("without Kueue: why %q", why)
	}
}

// Paths on one set of devices run their canary checks one after the other; paths on devices of their own
// run beside each other.
func TestByDeviceDomain(t *testing.T) {
	dra := &gpu.DRA{}
	paths := []gpu.Path{&gpu.DevicePlugin{}, dra, &gpu.ExtendedDRA{DRA: dra}}
	if got := byDeviceDomain(paths); len(got) != 2 || !slices.Equal(got[0], []int{0}) || !slices.Equal(got[1], []int{1, 2}) {
		t.Errorf("byDeviceDomain = %v, want [[0] [1 2]]", got)
	}
	if got := byDeviceDomain(paths[:2]); len(got) != 2 {
		t.Errorf("two paths of their own: %v", got)
	}
}

// maxStep is the largest numeric "step" field of the JSON-object lines of log (0 when none has one).
func maxStep(log string) int64 { return parseLoadLog(log).maxStep }
