package upgrade

import (
	"slices"
	"strings"
	"testing"
	"time"

	"gpuconform.io/gpuconform/internal/clockreasons"
)

// Lines as `nvidia-smi --query-gpu=index,uuid,clocks.sm,clocks.max.sm,clocks.mem,pstate,power.draw,
// power.limit,clocks_event_reasons.active --format=csv,noheader,nounits` prints them.
const (
	fullLine     = "0, GPU-aaaa, 1980, 1980, 2619, P0, 412.38, 700.00, 0x0000000000000000\n"
	slowLine     = "0, GPU-bbbb, 495, 1980, 2619, P8, 86.25, 700.00, 0x0000000000000008\n"
	idleLine     = "0, GPU-cccc, 345, 1980, 2619, P0, 69.50, 700.00, 0x0000000000000001\n"
	thermalLine  = "0, GPU-dddd, 1755, 1980, 2619, P0, 650.00, 700.00, 0x0000000000000020\n"
	powerCapLine = "0, GPU-eeee, 1830, 1980, 2619, P0, 699.10, 700.00, 0x0000000000000004\n"
)

func mustParse(t *testing.T, out string) []GPUClocks {
	t.Helper()
	g, err := ParseClocks(out)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestParseClocks(t *testing.T) {
	g := mustParse(t, slowLine+"1, GPU-ffff, [N/A], [N/A], [N/A], P0, [N/A], [N/A], [N/A]\n")
	want := GPUClocks{Index: "0", UUID: "GPU-bbbb", SMMHz: 495, MaxSMMHz: 1980, MemMHz: 2619, PState: "P8", PowerDrawW: 86.25, PowerLimitW: 700, Reasons: clockreasons.HWSlowdown, ReasonsKnown: true}
	if len(g) != 2 || g[0] != want {
		t.Fatalf("parsed %+v, want first %+v", g, want)
	}
	if _, ok := g[1].SMRatio(); ok || g[1].ReasonsKnown || g[1].PowerDrawW != -1 {
		t.Errorf("[N/A] cells must read as not reported: %+v", g[1])
	}
	// With units (a query without nounits) the values are the same.
	if u := mustParse(t, "0, GPU-bbbb, 495 MHz, 1980 MHz, 2619 MHz, P8, 86.25 W, 700.00 W, 0x0000000000000008"); u[0] != want {
		t.Errorf("with units: %+v", u[0])
	}
	for _, bad := range []string{"", "0, GPU-bbbb, 495\n", "No devices were found"} {
		if _, err := ParseClocks(bad); err == nil {
			t.Errorf("ParseClocks(%q) took it", bad)
		}
	}
	if got := ClockQuery(true); !strings.Contains(got[1], LegacyReasonsField) || strings.Contains(got[1], ReasonsField) || got[2] != "--format=csv,noheader,nounits" {
		t.Errorf("legacy query %q", got)
	}
	if !RefusedField("Field \"clocks_event_reasons.active\" is not a valid field to query.\n\n", ReasonsField) {
		t.Error("the real tool's refusal of a field was not recognised")
	}
	if got := clockreasons.Names(clockreasons.HWSlowdown | clockreasons.GPUIdle | 0x1000); !slices.Equal(got, []string{"GPU Idle", "HW Slowdown", "reason 0x1000"}) {
		t.Errorf("ReasonNames = %q", got)
	}
}

// load is a measurement whose step rates are equal, so only the clocks (or the throughput) decide.
func load(t *testing.T, canary, good string, more ...string) Load {
	t.Helper()
	l := Load{Workload: "the training loop", CanaryNode: "w3", KnownGoodNode: "w1", MinRatio: 0.8, Window: 30 * time.Second,
		CanaryRate: 9.8, GoodRate: 9.8, CanarySteps: 294, KnownGoodSteps: 294}
	l.Clocks = append(l.Clocks, ClockSample{Canary: mustParse(t, canary), KnownGood: mustParse(t, good)})
	for i := 0; i+1 < len(more); i += 2 {
		l.Clocks = append(l.Clocks, ClockSample{Canary: mustParse(t, more[i]), KnownGood: mustParse(t, more[i+1])})
	}
	return l
}

func TestClocksComparison(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    Load
		says []string // "" fails nothing
	}{
		{name: "slow clocks caught", l: load(t, slowLine, fullLine, slowLine, fullLine),
			says: []string{"representative load: the upgraded canary w3 runs its GPU at 495 of 1980 MHz (pstate P8, HW Slowdown active, clocks_event_reasons.active 0x0000000000000008",
				"the known-good w1 at 1980 of 1980 MHz (pstate P0, no clock event reason active",
				"clocks.sm below 0.80 of clocks.max.sm on the canary only", "HW Slowdown active on the canary only"}},
		{name: "a throttle reason the known-good has not, at full enough clocks", l: load(t, thermalLine, fullLine),
			says: []string{"runs its GPU at 1755 of 1980 MHz", "SW Thermal Slowdown active on the canary only"}},
		{name: "the same reason on both sides", l: load(t, powerCapLine, powerCapLine)},
		{name: "both idle: the load does not drive the GPU (a stand-in), nothing to hold against the canary", l: load(t, idleLine, idleLine)},
		{name: "a reason in one reading only is passing, not a finding", l: load(t, powerCapLine, fullLine, fullLine, fullLine)},
		{name: "healthy", l: load(t, fullLine, fullLine)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.l.Failure()
			if len(tc.says) == 0 {
				if f != "" {
					t.Errorf("failure %q, want none", f)
				}
				return
			}
			for _, s := range tc.says {
				if !strings.Contains(f, s) {
					t.Errorf("failure %q does not say %q", f, s)
				}
			}
			if !strings.Contains(tc.l.String(), "FAILED: the upgraded canary w3") {
				t.Errorf("the report entry does not show the finding: %s", tc.l.String())
			}
		})
	}
}

// nvidia-smi that could not answer in a load container leaves the clocks not compared, said so in the
// entry, and never counts as a pass of the clocks: the step rate alone decides.
func TestClocksNotCompared(t *testing.T) {
	l := load(t, slowLine, fullLine)
	l.ClocksNotCompared = `nvidia-smi in the load's container on w3 could not run: exec: "nvidia-smi": executable file not found in $PATH`
	if f := l.Failure(); f != "" {
		t.Errorf("failure %q: clocks not compared must not fail the canary on them", f)
	}
	if s := l.String(); !strings.Contains(s, "GPU clocks not compared: nvidia-smi in the load's container on w3 could not run") {
		t.Errorf("entry %q does not say why the clocks were not compared", s)
	}
	l.Clocks = nil
	l.ClocksNotCompared = ""
	if s := l.String(); !strings.Contains(s, "GPU clocks not compared: not read") {
		t.Errorf("entry %q: no reading must read as not compared", s)
	}
	l.CanaryRate = 2.45
	if f := l.Failure(); !strings.Contains(f, "progresses at 0.25 of the known-good pool's rate (2.45 against 9.80 steps/s; minimum ratio 0.80)") {
		t.Errorf("failure %q, want the step rate's", f)
	}
}

// When both sides' step lines carry "gflops", their medians are compared, not the step rate; otherwise
// the step rate, named a stand-in when the load said it ran without a CUDA driver.
func TestThroughputPreferredOverSteps(t *testing.T) {
	l := load(t, fullLine, fullLine)
	l.CanaryGFLOPS, l.GoodGFLOPS = 12000, 48000
	if f := l.Failure(); !strings.Contains(f, "the upgraded canary w3 reaches 0.25 of the known-good pool's GPU throughput (12000.0 against 48000.0 GFLOP/s") {
		t.Errorf("equal step rates, a quarter of the GFLOP/s: failure %q", f)
	}
	if s := l.String(); !strings.Contains(s, "compared GPU throughput (median GFLOP/s of the window's steps): ratio 0.25 (minimum 0.80)") {
		t.Errorf("entry %q", s)
	}
	l.CanaryGFLOPS, l.CanaryRate = 47000, 2.45 // the step rate would fail; the GPU throughput decides
	if f := l.Failure(); f != "" {
		t.Errorf("GFLOP/s at 0.98: failure %q", f)
	}

	l = load(t, fullLine, fullLine)
	const workload = "stand-in (no CUDA driver in the container): libcuda.so.1: cannot open shared object file: each step waits its duration; no GPU work is measured"
	l.CanaryStandIn, l.GoodStandIn = workload, workload
	if s := l.String(); !strings.Contains(s, "; stand-in (no CUDA driver in the container): compared wall-clock step rate, which GPU speed does not change "+
		"[libcuda.so.1: cannot open shared object file: each step waits its duration; no GPU work is measured]: ratio 1.00") {
		t.Errorf("entry %q", s)
	}
	l.CanaryStandIn, l.GoodStandIn = "no CUDA here", ""
	if s := l.Compared(); s != "stand-in (no CUDA here): compared wall-clock step rate, which GPU speed does not change" {
		t.Errorf("a load of its own that says only why: %q", s)
	}
	l.CanaryStandIn = ""
	if s := l.Compared(); s != `compared the step rate (the load's step lines carry no "gflops")` {
		t.Errorf("a load that says nothing: %q", s)
	}
	l.CanaryGFLOPS = 3 // one side alone carries gflops: the step rate is compared
	if l.Throughput() || l.Ratio() != 1 {
		t.Errorf("one side's gflops: throughput %t ratio %g", l.Throughput(), l.Ratio())
	}

	l = load(t, fullLine, fullLine)
	l.CanaryStandIn, l.GoodGFLOPS = workload, 48000
	if f := l.Failure(); !strings.Contains(f, "runs the load's GPU work as a stand-in ("+workload+") while the known-good w1 runs it on its GPU") {
		t.Errorf("a canary that lost its CUDA driver: failure %q", f)
	}
}
