package upgrade

import (
	"cmp"
	"fmt"
	"strings"
	"time"
)

// Report entries of the rehearsal that the signoff's upgrade section shows beside the verdict.
const (
	// AppCheckEntry holds the application check on the upgraded canary (FormatAppChecks).
	AppCheckEntry = "upgrade application check"
	// LoadEntry holds the representative load's rates on the two pools and their ratio (Load.String).
	LoadEntry = "upgrade representative load"
	// ReserveEntry holds the serving reserve during the drain (Reserve.String).
	ReserveEntry = "upgrade serving reserve"
)

// Results of an application check row.
const (
	AppCheckPassed = "passed"
	// AppCheckStandIn is a check that passed doing less than the real thing (run.StandIn): the row says
	// what it did, and the verdict counts the stand-in.
	AppCheckStandIn       = "passed as a stand-in"
	AppCheckFailed        = "FAILED"
	AppCheckNotApplicable = "not applicable"
	// AppCheckInterrupted is a check another path's failed check stopped (the paths' checks run at once).
	AppCheckInterrupted = "interrupted"
)

// AppCheck is one row of the application check on the upgraded canary pool.
type AppCheck struct {
	Check, Path, Node, Result string
}

// FormatAppChecks renders the rows one per line, "check | path | node | result", as the report entry's
// value; ParseAppChecks reads them back.
func FormatAppChecks(rows []AppCheck) string {
	lines := make([]string, 0, len(rows))
	for _, r := range rows {
		lines = append(lines, strings.Join([]string{r.Check, r.Path, orDash(r.Node), r.Result}, " | "))
	}
	return strings.Join(lines, "\n")
}

// ParseAppChecks reads FormatAppChecks' text back (a report entry's value, possibly JSON-quoted).
func ParseAppChecks(text string) []AppCheck {
	var out []AppCheck
	for line := range strings.SplitSeq(strings.Trim(strings.TrimSpace(text), `"`), "\n") {
		f := strings.SplitN(line, " | ", 4)
		if len(f) != 4 {
			continue
		}
		out = append(out, AppCheck{Check: f[0], Path: f[1], Node: f[2], Result: f[3]})
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Load is the representative load's measurement: the same load on an upgraded canary node and on a
// known-good node at the same time, its progress over the same window, its GPU throughput where the
// load reports one, and the clocks of the two loads' GPUs.
type Load struct {
	Workload             string
	CanaryNode           string
	KnownGoodNode        string
	CanarySteps          int64
	KnownGoodSteps       int64
	Window               time.Duration
	MinRatio             float64
	CanaryRate, GoodRate float64 // steps/s
	// CanaryGFLOPS and GoodGFLOPS are the median GPU throughput of the step lines in the window (their
	// "gflops"); 0 when that side's lines carry none.
	CanaryGFLOPS, GoodGFLOPS float64
	// CanaryStandIn and GoodStandIn say why that side's load ran its GPU work as a stand-in (its
	// {"event":"gpu","mode":"stand-in","stand_in":...} line); "" when it ran on the GPU or did not say.
	CanaryStandIn, GoodStandIn string
	// Clocks are the readings of the two loads' GPUs (nvidia-smi in the load containers) during the window.
	Clocks []ClockSample
	// ClocksNotCompared says why the GPUs' clocks were not compared; "" when they were.
	ClocksNotCompared string
}

// Throughput reports whether both sides' step lines carried a GPU throughput, so the GFLOP/s are compared
// rather than the step rate.
func (l Load) Throughput() bool { return l.CanaryGFLOPS > 0 && l.GoodGFLOPS > 0 }

// Ratio is the canary's median GFLOP/s over the known-good's when both report one, else its step rate
// over the known-good's (0 when the known-good made no progress).
func (l Load) Ratio() float64 {
	if l.Throughput() {
		return l.CanaryGFLOPS / l.GoodGFLOPS
	}
	if l.GoodRate <= 0 {
		return 0
	}
	return l.CanaryRate / l.GoodRate
}

// Compared says what Ratio compares, and for the step rate whether that is a stand-in.
func (l Load) Compared() string {
	switch standIn := cmp.Or(l.CanaryStandIn, l.GoodStandIn); {
	case l.Throughput():
		return "compared GPU throughput (median GFLOP/s of the window's steps)"
	case standIn != "":
		// The workload's sentence reads "stand-in (no CUDA driver in the container): <the loader's answer>…";
		// a load of its own may say only why.
		head, rest := "stand-in ("+standIn+")", ""
		if strings.HasPrefix(standIn, "stand-in (") {
			if i := strings.Index(standIn, ")"); i > 0 {
				head, rest = standIn[:i+1], strings.TrimLeft(standIn[i+1:], ": ")
			}
		}
		s := head + ": compared wall-clock step rate, which GPU speed does not change"
		if rest != "" {
			s += " [" + rest + "]"
		}
		return s
	}
	return `compared the step rate (the load's step lines carry no "gflops")`
}

// ClockFinding is what the clocks comparison holds against the canary ("" when nothing): a canary GPU
// below MinRatio of its maximum SM clock while the known-good's is not, or with a slowdown reason active
// that the known-good's has not, in every reading (a passing moment of power capping is not a finding).
func (l Load) ClockFinding() string {
	if l.ClocksNotCompared != "" || len(l.Clocks) == 0 {
		return ""
	}
	var last string
	for _, s := range l.Clocks {
		if last = s.finding(l.CanaryNode, l.KnownGoodNode, l.MinRatio); last == "" {
			return ""
		}
	}
	return last
}

// Failure is why the canary fails the representative load ("" when it passes): its GPU's clocks, a
// load that runs its GPU work on the known-good pool and only a stand-in on the canary, no progress to
// compare with, or a ratio below MinRatio.
func (l Load) Failure() string {
	const prefix = "representative load: "
	if f := l.ClockFinding(); f != "" {
		return prefix + f
	}
	if l.CanaryStandIn != "" && l.GoodStandIn == "" && l.GoodGFLOPS > 0 {
		return fmt.Sprintf(prefix+"the upgraded canary %s runs the load's GPU work as a stand-in (%s) while the known-good %s runs it on its GPU (%.1f GFLOP/s)",
			l.CanaryNode, l.CanaryStandIn, l.KnownGoodNode, l.GoodGFLOPS)
	}
	if l.GoodRate <= 0 {
		return fmt.Sprintf(prefix+"the load made no progress on the known-good %s in %s: it cannot be compared", l.KnownGoodNode, l.Window.Round(100*time.Millisecond))
	}
	if l.Ratio() >= l.MinRatio {
		return ""
	}
	if l.Throughput() {
		return fmt.Sprintf(prefix+"the upgraded canary %s reaches %.2f of the known-good pool's GPU throughput (%.1f against %.1f GFLOP/s, medians of the window; minimum ratio %.2f)",
			l.CanaryNode, l.Ratio(), l.CanaryGFLOPS, l.GoodGFLOPS, l.MinRatio)
	}
	return fmt.Sprintf(prefix+"the upgraded canary %s progresses at %.2f of the known-good pool's rate (%.2f against %.2f steps/s; minimum ratio %.2f)",
		l.CanaryNode, l.Ratio(), l.CanaryRate, l.GoodRate, l.MinRatio)
}

// Passed reports whether the canary passed the representative load (Failure is empty).
func (l Load) Passed() bool { return l.Failure() == "" }

func (l Load) String() string {
	side := func(node string, gflops, rate float64, steps int64) string {
		s := fmt.Sprintf("%s %.2f steps/s (%d steps)", node, rate, steps)
		if gflops > 0 {
			s = fmt.Sprintf("%s %.1f GFLOP/s median, %.2f steps/s (%d steps)", node, gflops, rate, steps)
		}
		return s
	}
	return fmt.Sprintf("%s: canary %s, known-good %s over %s; %s: ratio %.2f (minimum %.2f); %s",
		l.Workload, side(l.CanaryNode, l.CanaryGFLOPS, l.CanaryRate, l.CanarySteps), side(l.KnownGoodNode, l.GoodGFLOPS, l.GoodRate, l.KnownGoodSteps),
		l.Window.Round(100*time.Millisecond), l.Compared(), l.Ratio(), l.MinRatio, l.clocksSummary())
}

// clocksSummary is the clocks comparison as the report entry shows it: the last reading of each side,
// and the finding, or why the clocks were not compared.
func (l Load) clocksSummary() string {
	switch {
	case l.ClocksNotCompared != "":
		return "GPU clocks not compared: " + l.ClocksNotCompared
	case len(l.Clocks) == 0:
		return "GPU clocks not compared: not read"
	}
	last := l.Clocks[len(l.Clocks)-1]
	describe := func(gs []GPUClocks) string {
		out := make([]string, 0, len(gs))
		for _, g := range gs {
			out = append(out, g.Describe())
		}
		return orDash(strings.Join(out, "; "))
	}
	s := fmt.Sprintf("GPU clocks (nvidia-smi in the load containers, %d reading(s)): canary %s at %s, known-good %s at %s",
		len(l.Clocks), l.CanaryNode, describe(last.Canary), l.KnownGoodNode, describe(last.KnownGood))
	if f := l.ClockFinding(); f != "" {
		return s + "; FAILED: " + f
	}
	return s
}

// Sample is the serving Deployment's available replicas at a moment of the rehearsal.
type Sample struct {
	At        time.Duration // since the reserve was first observed
	Available int32
}

// Reserve is the serving reserve kept through the drain of the canary pool.
type Reserve struct {
	Deployment, Budget string
	Replicas           int32
	MinAvailable       int32
	// OnCanary are the replicas that ran on the canary pool before the drain (the ones it moved).
	OnCanary []string
	Samples  []Sample
	// Refused is how often the Eviction API refused an eviction for the budget; Waited how long the drain
	// waited for it to allow one.
	Refused int
	Waited  time.Duration
}

// Min is the fewest available replicas observed (-1 with no sample).
func (r Reserve) Min() int32 {
	if len(r.Samples) == 0 {
		return -1
	}
	m := r.Samples[0].Available
	for _, s := range r.Samples[1:] {
		m = min(m, s.Available)
	}
	return m
}

// Breach is the first sample below the budget's minimum, and whether there is one.
func (r Reserve) Breach() (Sample, bool) {
	for _, s := range r.Samples {
		if s.Available < r.MinAvailable {
			return s, true
		}
	}
	return Sample{}, false
}

func (r Reserve) String() string {
	series := make([]string, 0, len(r.Samples))
	for _, s := range r.Samples {
		series = append(series, fmt.Sprintf("%s=%d", s.At.Round(100*time.Millisecond), s.Available))
	}
	return fmt.Sprintf("Deployment %s (%d replicas, %s on the canary pool) with PodDisruptionBudget %s (minAvailable %d): fewest available %d; the drain waited %s on the budget (%d eviction(s) refused); available over time: %s",
		r.Deployment, r.Replicas, orDash(strings.Join(r.OnCanary, ", ")), r.Budget, r.MinAvailable, r.Min(), r.Waited.Round(100*time.Millisecond), r.Refused, strings.Join(series, " "))
}
