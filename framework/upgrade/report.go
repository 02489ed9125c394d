package upgrade

import (
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
	AppCheckPassed        = "passed"
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
// known-good node at the same time, its progress in steps over the same window.
type Load struct {
	Workload             string
	CanaryNode           string
	KnownGoodNode        string
	CanarySteps          int64
	KnownGoodSteps       int64
	Window               time.Duration
	MinRatio             float64
	CanaryRate, GoodRate float64
}

// Ratio is the canary's progress rate over the known-good pool's (0 when the known-good pool made none).
func (l Load) Ratio() float64 {
	if l.GoodRate <= 0 {
		return 0
	}
	return l.CanaryRate / l.GoodRate
}

// Passed reports whether the canary kept at least MinRatio of the known-good pool's rate.
func (l Load) Passed() bool { return l.GoodRate > 0 && l.Ratio() >= l.MinRatio }

func (l Load) String() string {
	return fmt.Sprintf("%s: canary %s %.2f steps/s (%d steps), known-good %s %.2f steps/s (%d steps) over %s; ratio %.2f (minimum %.2f)",
		l.Workload, l.CanaryNode, l.CanaryRate, l.CanarySteps, l.KnownGoodNode, l.GoodRate, l.KnownGoodSteps, l.Window.Round(100*time.Millisecond), l.Ratio(), l.MinRatio)
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
