package reports

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/timeline"
)

// RunSummary is one run of a nightly history: its verdict, its stack and its key timings.
type RunSummary struct {
	Dir     string
	RunID   string
	At      time.Time
	Verdict Outcome
	Passed  int
	Failed  int
	Skipped int
	// Stack is the compatibility record condensed: "Kubernetes" → version, "Kueue" → version,
	// "driver" → the node drivers, "path <name>" → its description.
	Stack map[string]string
	// Timings are, per derived timing, the median and the maximum over every workload of the run.
	Timings map[string][2]time.Duration
	// Results are the leaf specs' results.
	Results map[string]string
	// Changes say what differs from the run before it (none for the first).
	Changes []string
}

// timingNames orders the derived timings in tables.
var timingNames = []string{"admission wait", "pending", "start", "useful work", "idle reservation"}

// ReadRun reads one run's artifacts directory: its record, its Ginkgo report and its timelines.
func ReadRun(dir string) ([]types.Report, Record, error) {
	rec, err := ReadRecord(filepath.Join(dir, RecordFile))
	if err != nil {
		return nil, rec, err
	}
	suites, err := ReadGinkgoJSON(filepath.Join(dir, "gpuconform-report.json"))
	if err != nil && rec.SetupFailure == "" {
		return nil, rec, err
	}
	rec.Timelines, err = timeline.ReadAll(dir)
	return suites, rec, err
}

// History summarises several runs' artifacts, oldest first, each compared with the one before.
func History(dirs []string) ([]RunSummary, error) {
	var runs []RunSummary
	for _, dir := range dirs {
		suites, rec, err := ReadRun(dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		runs = append(runs, summarise(dir, suites, rec))
	}
	slices.SortStableFunc(runs, func(a, b RunSummary) int { return a.At.Compare(b.At) })
	for i := 1; i < len(runs); i++ {
		runs[i].Changes = compareRuns(runs[i-1], runs[i])
	}
	return runs, nil
}

func summarise(dir string, suites []types.Report, rec Record) RunSummary {
	s := RunSummary{Dir: dir, RunID: rec.RunID, At: rec.GeneratedAt, Verdict: Decide(suites, rec).Outcome,
		Stack: map[string]string{"Kubernetes": rec.KubernetesVersion, "Kueue": "absent"}, Results: Results(suites),
		Timings: map[string][2]time.Duration{}}
	s.Passed, s.Failed, s.Skipped = Count(suites)
	if rec.Kueue.Present {
		s.Stack["Kueue"] = rec.Kueue.Version
	}
	var drivers []string
	for _, n := range rec.Nodes {
		if n.Driver != "" && !slices.Contains(drivers, n.Driver) {
			drivers = append(drivers, n.Driver)
		}
	}
	slices.Sort(drivers)
	s.Stack["driver"] = strings.Join(drivers, ", ")
	for _, p := range rec.Paths {
		desc := p.Description
		if p.DriverVersion != "" {
			desc += ", driver " + p.DriverVersion
		}
		s.Stack["path "+p.Name] = desc
	}
	values := map[string][]time.Duration{}
	for _, t := range rec.Timelines {
		for _, w := range t.Workloads {
			d := w.Derived
			for name, v := range map[string]*timeline.Duration{"admission wait": d.AdmissionWait, "pending": d.Pending, "start": d.Start, "useful work": d.UsefulWork, "idle reservation": d.IdleReservation, "recovery": d.Recovery, "teardown": d.Teardown} {
				if v != nil {
					values[name] = append(values[name], time.Duration(*v))
				}
			}
		}
	}
	for name, vs := range values {
		slices.Sort(vs)
		s.Timings[name] = [2]time.Duration{vs[len(vs)/2], vs[len(vs)-1]}
	}
	return s
}

// compareRuns says what changed from prev to cur: the verdict, the stack, spec results, and median
// timings that moved by more than half (and by more than a second).
func compareRuns(prev, cur RunSummary) []string {
	var out []string
	if prev.Verdict != cur.Verdict {
		out = append(out, fmt.Sprintf("verdict %s → %s", prev.Verdict, cur.Verdict))
	}
	out = append(out, diffMaps(prev.Stack, cur.Stack,
		func(k, b string) string { return fmt.Sprintf("%s appeared: %s", k, b) },
		func(k, a string) string { return fmt.Sprintf("%s is gone (was %s)", k, a) },
		func(k, a, b string) string { return fmt.Sprintf("%s %s → %s", k, a, b) })...)
	out = append(out, diffMaps(prev.Results, cur.Results,
		func(n, b string) string { return fmt.Sprintf("new spec (%s): %s", b, n) },
		func(n, a string) string { return fmt.Sprintf("spec no longer run (was %s): %s", a, n) },
		func(n, a, b string) string { return fmt.Sprintf("%s → %s: %s", a, b, n) })...)
	for _, name := range timingNames {
		a, okA := prev.Timings[name]
		b, okB := cur.Timings[name]
		if !okA || !okB {
			continue
		}
		diff := b[0] - a[0]
		if diff < 0 {
			diff = -diff
		}
		if diff > time.Second && a[0] > 0 && diff*2 > a[0] {
			out = append(out, fmt.Sprintf("median %s %s → %s", name, a[0].Round(100*time.Millisecond), b[0].Round(100*time.Millisecond)))
		}
	}
	return out
}

// diffMaps says, key by key in order, what appeared, what is gone and what changed from a to b.
func diffMaps(a, b map[string]string, added, gone func(k, v string) string, changed func(k, was, is string) string) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		was, is := a[k], b[k]
		switch {
		case was == is:
		case was == "":
			out = append(out, added(k, is))
		case is == "":
			out = append(out, gone(k, was))
		default:
			out = append(out, changed(k, was, is))
		}
	}
	return out
}

// RenderHistory renders the runs as Markdown: one row per run with its verdict and key timings, then
// what changed between consecutive runs.
func RenderHistory(runs []RunSummary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# GPU scheduling signoff history (%d runs)\n\n", len(runs))
	b.WriteString("| Run | When | Verdict | Passed/failed/skipped |")
	for _, n := range timingNames {
		fmt.Fprintf(&b, " %s (median / max) |", n)
	}
	b.WriteString("\n|---|---|---|---|" + strings.Repeat("---|", len(timingNames)) + "\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| `%s` | %s | **%s** | %d/%d/%d |", r.RunID, r.At.Format("2006-01-02 15:04"), r.Verdict, r.Passed, r.Failed, r.Skipped)
		for _, n := range timingNames {
			if t, ok := r.Timings[n]; ok {
				fmt.Fprintf(&b, " %s / %s |", t[0].Round(100*time.Millisecond), t[1].Round(100*time.Millisecond))
			} else {
				b.WriteString(" — |")
			}
		}
		b.WriteString("\n")
	}
	for i, r := range runs {
		if i == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## `%s` against `%s`\n\n", r.RunID, runs[i-1].RunID)
		if len(r.Changes) == 0 {
			b.WriteString("Nothing changed: same verdict, stack and results; no median timing moved by half.\n")
		}
		for _, c := range r.Changes {
			fmt.Fprintf(&b, "- %s\n", c)
		}
	}
	return b.String()
}
