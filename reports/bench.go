package reports

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/poollock"
	"gpuconform.io/gpuconform/framework/timeline"
	"gpuconform.io/gpuconform/internal/textcut"
)

// APIRequestsEntry names the Ginkgo report entry in which each spec records the API requests it sent.
const APIRequestsEntry = "api requests"

// LockWaitEntry names the report entry in which a spec records, in seconds, how long it waited for its
// pool locks while another process's spec held them (framework/poollock).
const LockWaitEntry = poollock.WaitEntry

// BenchRow is the suite's own cost for one scenario.
type BenchRow struct {
	Scenario string
	Specs    int
	// Wall is the specs' summed run time; Inherent the summed time their workloads needed on the
	// cluster (per spec, the union of its workloads' lifetimes from the timelines).
	Wall, Inherent time.Duration
	// Requests are the API requests the specs sent; ByKind the same by verb and resource.
	Requests int64
	ByKind   cluster.Counts
	// WithTimeline counts the specs that recorded a timeline; TimelineWall is their run time, the
	// numerator of Ratio (specs without workloads have no inherent wait to compare with).
	WithTimeline int
	TimelineWall time.Duration
	// LockWait is the specs' summed wait for their pool locks (several processes); TimelineLockWait the
	// part of it in specs with a timeline. Neither counts against the ratio or the request rate.
	LockWait, TimelineLockWait time.Duration
	// Teardown is the part of Inherent that the workloads' pods spent between their deletion and their
	// end in the API (the devices still held): shown beside Inherent, so that a ratio can be read
	// with and without it.
	Teardown time.Duration
}

// Ratio is wall time over inherent time for the specs with a timeline (0 when none has one).
func (r BenchRow) Ratio() float64 {
	if r.Inherent <= 0 {
		return 0
	}
	return float64(r.TimelineWall-r.TimelineLockWait) / float64(r.Inherent)
}

// RatioBeforeTeardown is Ratio with the pods' teardown left out of the inherent time: what the ratio
// was before the timelines recorded it (0 when nothing else is left).
func (r BenchRow) RatioBeforeTeardown() float64 {
	if r.Inherent-r.Teardown <= 0 {
		return 0
	}
	return float64(r.TimelineWall-r.TimelineLockWait) / float64(r.Inherent-r.Teardown)
}

// Rate is requests per second of wall time not spent waiting for a pool lock.
func (r BenchRow) Rate() float64 {
	if r.Wall-r.LockWait <= 0 {
		return 0
	}
	return float64(r.Requests) / (r.Wall - r.LockWait).Seconds()
}

// PerSpec is requests per spec (0 when the row has no spec).
func (r BenchRow) PerSpec() float64 {
	if r.Specs == 0 {
		return 0
	}
	return float64(r.Requests) / float64(r.Specs)
}

// SetupAndCleanup names the pseudo-step that sums a spec's nodes other than its It: BeforeEach,
// JustBeforeEach, AfterEach, DeferCleanup, ReportAfterEach and the like.
const SetupAndCleanup = "setup and cleanup (BeforeEach, DeferCleanup…)"

// BeforeFirstBy names the pseudo-step from an It node's start to its first By: the whole It node when
// it has none.
const BeforeFirstBy = "the It before its first By"

// SlowestSteps is how many steps Bench ranks.
const SlowestSteps = 10

// BenchStep is one step of a spec: a By inside its It node, or the BeforeFirstBy or SetupAndCleanup
// pseudo-step.
type BenchStep struct {
	Scenario, Path, Spec, Step string
	// Wall is the step's duration: from its By to the It node's next By or, for the last, to the It
	// node's end; for BeforeFirstBy, from the It node's start to its first By; for SetupAndCleanup, the
	// summed durations of the spec's other nodes.
	Wall time.Duration
	// NonInherent is Wall less its overlap with the union of the spec's workloads' lifetimes: the time
	// the step spent on the suite's own work rather than waiting on the cluster.
	NonInherent time.Duration
}

// Bench is the suite's cost, per scenario and in total.
type Bench struct {
	Rows []BenchRow
	// Slowest are the SlowestSteps steps of all specs with the most non-inherent time, the most first.
	Slowest []BenchStep
	// Suite is the whole run: wall time of the suite and every request, discovery and audits included.
	SuiteWall     time.Duration
	SuiteRequests int64
	// Floor is what the pool locks let no run go below, however many processes it has.
	Floor LockFloor
	// TopRequests are the TopRequests kinds of request the whole run sent most, the most first.
	TopRequests []RequestSource
}

// LockFloor splits the specs' work (run time less pool lock waits) by what their locks let run beside
// them (framework/poollock, scenarios' holds:* and stops:node labels). Serial specs and specs that hold
// every path run alone; the specs that hold one path run one at a time on that path, beside the other
// path's; the specs that lease one node of a path run one at a time on that node, beside the other nodes'
// leases; the specs that stop a node run one at a time, each on its path as a holder of the path (a
// failed worker) or of the stopped node (a kubelet restart), and the upgrade rehearsal (holds:canary) with
// them, on the known-good node it holds; the rest share their path with anything but
// a holder. So no run, with any number of processes, finishes in less than Serial + Nodes + the longer of
// Stops and the busiest path's holders (its holds:path specs, then its busiest node's leases): that is
// where the suite's time goes once processes are plentiful, and what finer locks or shorter holders would
// cut. (A stopped node is held on every path; the floor counts it on the spec's own path only, so it
// stays a bound that no run goes below.)
type LockFloor struct {
	Serial, Nodes time.Duration
	// Stops is the work of the stops:node specs, which stop one node at a time, and of the upgrade
	// rehearsal until it lets its locks go, which keeps every node from stopping until then.
	Stops time.Duration
	// Path is the work of the holds:path specs per path; Node the work of the holds:node and leases:nodes
	// specs per path and leased node (a gang's on each of its nodes); Shared the work of every other spec. A stops:node spec's work is in Stops and in Path or
	// Node as well.
	Path   map[string]time.Duration
	Node   map[string]map[string]time.Duration
	Shared time.Duration
}

// Busiest is the path whose holders work longest, with that work: its holds:path specs' and its busiest
// node's leases ("" and 0 when no spec holds a path or a node).
func (f LockFloor) Busiest() (string, time.Duration) {
	name, most := "", time.Duration(0)
	paths := slices.Sorted(maps.Keys(f.Path))
	for p := range f.Node {
		if _, ok := f.Path[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	for _, p := range paths {
		if held := f.Path[p] + slices.Max(append(slices.Collect(maps.Values(f.Node[p])), 0)); held > most {
			name, most = p, held
		}
	}
	return name, most
}

// Total is the floor: Serial + Nodes + the longer of Stops and the busiest path's holders.
func (f LockFloor) Total() time.Duration {
	_, busiest := f.Busiest()
	return f.Serial + f.Nodes + max(f.Stops, busiest)
}

// add counts one spec's work by its locks.
func (f *LockFloor) add(sp types.SpecReport, work time.Duration) {
	specLabels := sp.Labels()
	if f.Path == nil {
		f.Path = map[string]time.Duration{}
	}
	if f.Node == nil {
		f.Node = map[string]map[string]time.Duration{}
	}
	p := pathOf(sp)
	if lp := leasePath(sp); p == "-" && lp != "" {
		p = lp // a spec of no path (the upgrade rehearsal) that holds a node of one
	}
	onNode := func() {
		if f.Node[p] == nil {
			f.Node[p] = map[string]time.Duration{}
		}
		on := work
		if held, ok := leaseHeld(sp); ok && held < work {
			on = held // it let the node go before its end (the upgrade rehearsal)
		}
		for _, n := range leasedNodes(sp) {
			f.Node[p][n] += on
		}
	}
	switch {
	case sp.IsSerial:
		f.Serial += work
	case slices.Contains(specLabels, labels.HoldsNodes):
		f.Nodes += work
	case slices.Contains(specLabels, labels.HoldsCanary):
		// It keeps every node from stopping, so it counts with the stoppers, and on the known-good node it
		// holds (if any is in the GPU pool); once it lets those go, the rest of its work runs beside.
		held := work
		if h, ok := leaseHeld(sp); ok && h < work {
			held = h
			f.Shared += work - h
		}
		f.Stops += held
		if len(leasedNodes(sp)) > 0 {
			onNode()
		}
	case slices.Contains(specLabels, labels.StopsNode):
		f.Stops += work
		if slices.Contains(specLabels, labels.HoldsPath) {
			f.Path[p] += work
		} else {
			onNode()
		}
	case slices.Contains(specLabels, labels.HoldsPath):
		f.Path[p] += work
	case slices.Contains(specLabels, labels.HoldsNode), slices.Contains(specLabels, labels.LeasesNodes):
		onNode() // a leases:nodes spec (a gang) on each node it leased
	default:
		f.Shared += work
	}
}

// leasedNodes are the nodes a holds:node spec (one) or a leases:nodes spec (its gang's) leased, from its
// report entries (none when it leased none: the path had no eligible node, and the spec held the path
// instead).
func leasedNodes(sp types.SpecReport) []string {
	var out []string
	for _, e := range sp.ReportEntries {
		if e.Name == poollock.LeaseEntry {
			out = append(out, e.StringRepresentation())
		}
	}
	return out
}

// leasePath is the path of the node lock a spec leased, from its report entry ("" when none).
func leasePath(sp types.SpecReport) string {
	for _, e := range sp.ReportEntries {
		if e.Name == poollock.LeasePathEntry {
			return e.StringRepresentation()
		}
	}
	return ""
}

// ComputeBench measures a run from its artifacts: specs' run times, steps and request entries from the
// Ginkgo report, inherent waits from the timelines, totals from the record.
func ComputeBench(suites []types.Report, rec Record) Bench {
	lives := map[string][]span{}
	teardowns := map[string]time.Duration{}
	for _, t := range rec.Timelines {
		lives[t.Spec] = lifetimes(t)
		teardowns[t.Spec] = inherent(lives[t.Spec]) - inherent(lifetimes(withoutTeardown(t)))
	}
	rows := map[string]*BenchRow{}
	var b Bench
	var steps []BenchStep
	for _, s := range suites {
		b.SuiteWall += s.RunTime
		for _, sp := range s.SpecReports {
			if sp.LeafNodeType != types.NodeTypeIt || sp.State == types.SpecStateSkipped || sp.State == types.SpecStatePending {
				continue
			}
			scenario := "other"
			for _, l := range sp.Labels() {
				if name, ok := strings.CutPrefix(l, labels.ScenarioPrefix); ok {
					scenario = name
				}
			}
			wait := lockWait(sp)
			b.Floor.add(sp, sp.RunTime-wait)
			steps = append(steps, specSteps(sp, scenario, lives[sp.FullText()], wait)...)
			r := rows[scenario]
			if r == nil {
				r = &BenchRow{Scenario: scenario}
				rows[scenario] = r
			}
			r.Specs++
			r.Wall += sp.RunTime
			r.LockWait += wait
			if life := inherent(lives[sp.FullText()]); life > 0 {
				r.WithTimeline++
				r.Inherent += life
				r.Teardown += teardowns[sp.FullText()]
				r.TimelineWall += sp.RunTime
				r.TimelineLockWait += wait
			}
			for _, e := range sp.ReportEntries {
				if e.Name != APIRequestsEntry {
					continue
				}
				var c cluster.Counts
				if data, err := json.Marshal(e.Value.GetRawValue()); err == nil && json.Unmarshal(data, &c) == nil {
					r.Requests += c.Total()
					if r.ByKind == nil {
						r.ByKind = cluster.Counts{}
					}
					for k, n := range c {
						r.ByKind[k] += n
					}
				}
			}
		}
	}
	for _, r := range rows {
		b.Rows = append(b.Rows, *r)
	}
	slices.SortFunc(b.Rows, func(x, y BenchRow) int { return cmp.Compare(x.Scenario, y.Scenario) })
	slices.SortStableFunc(steps, func(x, y BenchStep) int {
		return cmp.Or(cmp.Compare(y.NonInherent, x.NonInherent), cmp.Compare(y.Wall, x.Wall))
	})
	b.Slowest = steps[:min(len(steps), SlowestSteps)]
	b.SuiteRequests = rec.APIRequests.Total()
	for _, kind := range rec.APIRequests.Top(TopRequests) {
		src := RequestSource{Kind: kind, Count: rec.APIRequests[kind]}
		for _, r := range b.Rows {
			if n := r.ByKind[kind]; n > src.ScenarioCount {
				src.Scenario, src.ScenarioCount = r.Scenario, n
			}
		}
		b.TopRequests = append(b.TopRequests, src)
	}
	return b
}

// TopRequests is how many kinds of request Bench ranks.
const TopRequests = 10

// RequestSource is one kind of request ("verb resource", cluster.Counts) the run sent most, and the
// scenario whose specs sent the most of it.
type RequestSource struct {
	Kind          string
	Count         int64
	Scenario      string
	ScenarioCount int64
}

// leaseHeld is how long a spec that let its locks go before its end held them (poollock's
// LeaseHeldEntry); false when it kept them to its end.
func leaseHeld(sp types.SpecReport) (time.Duration, bool) {
	for _, e := range sp.ReportEntries {
		if e.Name != poollock.LeaseHeldEntry {
			continue
		}
		if d, ok := entrySeconds(e); ok {
			return d, true
		}
	}
	return 0, false
}

// entrySeconds reads a report entry whose value is a number of seconds.
func entrySeconds(e types.ReportEntry) (time.Duration, bool) {
	var secs float64
	if data, err := json.Marshal(e.Value.GetRawValue()); err != nil || json.Unmarshal(data, &secs) != nil {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

// lockWait is how long the spec waited for its pool locks: the sum of its LockWaitEntry entries (an
// on:node spec waits for its path in its set-up and for its node lease later; 0 without one).
func lockWait(sp types.SpecReport) time.Duration {
	var total time.Duration
	for _, e := range sp.ReportEntries {
		if e.Name != LockWaitEntry {
			continue
		}
		if d, ok := entrySeconds(e); ok {
			total += d
		}
	}
	return total
}

// lockWaitsBetween are the spec's pool lock waits recorded from–to (each entry is recorded as its wait
// ends).
func lockWaitsBetween(sp types.SpecReport, from, to time.Time) []time.Duration {
	var out []time.Duration
	for _, e := range sp.ReportEntries {
		at := e.TimelineLocation.Time
		if at.IsZero() {
			at = e.Time
		}
		if e.Name != LockWaitEntry || at.Before(from) || !at.Before(to) {
			continue
		}
		if d, ok := entrySeconds(e); ok {
			out = append(out, d)
		}
	}
	return out
}

// specSteps are the spec's steps, each measured against lives, the union of its workloads' lifetimes:
// the BeforeFirstBy step when it lasts at all; every By recorded while its It node ran, lasting to the It
// node's next By or, for the last, to the It node's end (when the report lacks that end, to the next
// node's start or the spec's end); and, when it has any, one SetupAndCleanup step summing its other
// nodes, each from its end event's Duration. A pool lock wait is no step's own work: one that ended
// inside a step of the It (an on:node lease, a stops:node hold) comes off that step's non-inherent time,
// the rest of lockWait (spent in the BeforeEach) off the SetupAndCleanup step's.
func specSteps(sp types.SpecReport, scenario string, lives []span, lockWait time.Duration) []BenchStep {
	var bys []types.SpecEvent
	var itStart, itEnd time.Time
	inIt := false
	setup := BenchStep{Scenario: scenario, Path: pathOf(sp), Spec: sp.LeafNodeText, Step: SetupAndCleanup}
	nodes := 0
	for _, e := range sp.SpecEvents {
		at := e.TimelineLocation.Time
		switch e.SpecEventType {
		case types.SpecEventNodeStart:
			if inIt && itEnd.IsZero() {
				itEnd = at // the It node's end is missing: it ended no later than this node began
			}
			if inIt = e.NodeType == types.NodeTypeIt; inIt {
				itStart = at
			}
		case types.SpecEventNodeEnd:
			if e.NodeType == types.NodeTypeIt {
				inIt, itEnd = false, at
				continue
			}
			setup.Wall += e.Duration
			setup.NonInherent += e.Duration - overlap(lives, at.Add(-e.Duration), at)
			nodes++
		case types.SpecEventByStart:
			if inIt {
				bys = append(bys, e)
			}
		}
	}
	if itEnd.IsZero() {
		itEnd = sp.EndTime
	}
	if !itStart.IsZero() {
		bys = slices.Insert(bys, 0, types.SpecEvent{Message: BeforeFirstBy, TimelineLocation: types.TimelineLocation{Time: itStart}})
	}
	var steps []BenchStep
	for i, by := range bys {
		from, to := by.TimelineLocation.Time, itEnd
		if i+1 < len(bys) {
			to = bys[i+1].TimelineLocation.Time
		}
		if to.Before(from) {
			to = from
		}
		wall := to.Sub(from)
		if wall == 0 && by.SpecEventType != types.SpecEventByStart {
			continue // the It's first By came as it started
		}
		step := BenchStep{Scenario: scenario, Path: setup.Path, Spec: sp.LeafNodeText, Step: by.Message,
			Wall: wall, NonInherent: wall - overlap(lives, from, to)}
		for _, w := range lockWaitsBetween(sp, from, to) {
			w = min(w, step.NonInherent, lockWait)
			step.NonInherent -= w
			lockWait -= w
		}
		steps = append(steps, step)
	}
	if nodes > 0 {
		setup.NonInherent = max(setup.NonInherent-lockWait, 0)
		steps = append(steps, setup)
	}
	return steps
}

// overlap is how much of the stretch from–to the disjoint spans cover.
func overlap(spans []span, from, to time.Time) time.Duration {
	var total time.Duration
	for _, s := range spans {
		lo, hi := s.from, s.to
		if from.After(lo) {
			lo = from
		}
		if to.Before(hi) {
			hi = to
		}
		if hi.After(lo) {
			total += hi.Sub(lo)
		}
	}
	return total
}

// span is a stretch of time.
type span struct{ from, to time.Time }

// lifetimes are the spec's workloads' lifetimes, each from the workload's first event to its last,
// merged into their union: sorted, disjoint spans, overlapping stretches counted once.
func lifetimes(t timeline.Timeline) []span {
	var spans []span
	for _, w := range t.Workloads {
		if len(w.Events) == 0 {
			continue
		}
		from, to := w.Events[0].At, w.Events[0].At
		for _, e := range w.Events {
			if e.At.Before(from) {
				from = e.At
			}
			if e.At.After(to) {
				to = e.At
			}
		}
		spans = append(spans, span{from, to})
	}
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	var union []span
	for _, s := range spans {
		if n := len(union); n > 0 && !s.from.After(union[n-1].to) {
			if s.to.After(union[n-1].to) {
				union[n-1].to = s.to
			}
			continue
		}
		union = append(union, s)
	}
	return union
}

// withoutTeardown is t less its pods' deletion and end events.
func withoutTeardown(t timeline.Timeline) timeline.Timeline {
	out := t
	out.Workloads = nil
	for _, w := range t.Workloads {
		w.Events = slices.DeleteFunc(slices.Clone(w.Events), func(e timeline.Event) bool {
			return e.Kind == timeline.Deleting || e.Kind == timeline.Gone
		})
		out.Workloads = append(out.Workloads, w)
	}
	return out
}

// inherent is the time the disjoint spans cover: for a spec's lifetimes, the union of its workloads'
// lifetimes.
func inherent(spans []span) time.Duration {
	var total time.Duration
	for _, s := range spans {
		total += s.to.Sub(s.from)
	}
	return total
}

// RenderBench renders the cost table; the goals are printed beside the figures, never asserted.
func RenderBench(b Bench) string {
	var s strings.Builder
	s.WriteString("| Scenario | Specs (with timeline) | Wall | Pool lock waits | Inherent waits (of which teardown) | (Wall − lock waits) / inherent (goal ≤ 1.3) | The same without teardown | API requests | Requests/spec | Requests/s (goal ≤ 1) |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range b.Rows {
		ratio := "—"
		if r.Ratio() > 0 {
			ratio = fmt.Sprintf("%.2f", r.Ratio())
		}
		before := "—"
		if r.RatioBeforeTeardown() > 0 {
			before = fmt.Sprintf("%.2f", r.RatioBeforeTeardown())
		}
		fmt.Fprintf(&s, "| %s | %d (%d) | %s | %s | %s (%s) | %s | %s | %d | %.1f | %.2f |\n", r.Scenario, r.Specs, r.WithTimeline,
			r.Wall.Round(time.Second), r.LockWait.Round(time.Second), r.Inherent.Round(time.Second), r.Teardown.Round(time.Second), ratio, before, r.Requests, r.PerSpec(), r.Rate())
	}
	rate := 0.0
	if b.SuiteWall > 0 {
		rate = float64(b.SuiteRequests) / b.SuiteWall.Seconds()
	}
	fmt.Fprintf(&s, "\nWhole suite: %s wall (goal ≤ 10 min on the local cluster), %d API requests (%.2f/s).\n", b.SuiteWall.Round(time.Second), b.SuiteRequests, rate)
	if f := b.Floor; f.Total() > 0 || f.Shared > 0 {
		path, held := f.Busiest()
		fmt.Fprintf(&s, "\nLock floor: %s. Under the pool locks no run finishes sooner, however many processes it has: Serial specs %s, specs holding every path %s, and the longer of the specs stopping a node and the upgrade rehearsal, one at a time (%s), and the busiest path's holders (%s) %s (its holds:path specs, then its busiest node's leases, one after another); the other specs' %s of work runs beside them.\n",
			f.Total().Round(time.Second), f.Serial.Round(time.Second), f.Nodes.Round(time.Second), f.Stops.Round(time.Second), cmp.Or(path, "none"), held.Round(time.Second), f.Shared.Round(time.Second))
	}
	if len(b.TopRequests) > 0 {
		s.WriteString("\nThe requests the run sent most (verb and resource; the whole run, discovery and audits included), and the scenario whose specs sent the most of each:\n\n")
		s.WriteString("| Request | Count | Share | Scenario sending most |\n|---|---|---|---|\n")
		for _, t := range b.TopRequests {
			top := "—"
			if t.Scenario != "" {
				top = fmt.Sprintf("%s (%d)", t.Scenario, t.ScenarioCount)
			}
			fmt.Fprintf(&s, "| %s | %d | %.0f%% | %s |\n", cell(t.Kind), t.Count, 100*float64(t.Count)/float64(max(b.SuiteRequests, 1)), top)
		}
	}
	if len(b.Slowest) == 0 {
		return s.String()
	}
	s.WriteString("\nSlowest ten steps by time not spent waiting on the cluster (step wall minus the overlap with its workloads' lifetimes, and minus the pool lock waits in it):\n\n")
	s.WriteString("| # | Scenario | Path | Spec | Step | Step wall | Non-inherent |\n|---|---|---|---|---|---|---|\n")
	for i, st := range b.Slowest {
		fmt.Fprintf(&s, "| %d | %s | %s | %s | %s | %s | %s |\n", i+1, cell(st.Scenario), cell(st.Path),
			cell(textcut.Head(oneLine(st.Spec), 70)), cell(textcut.Head(oneLine(st.Step), 90)),
			st.Wall.Round(100*time.Millisecond), st.NonInherent.Round(100*time.Millisecond))
	}
	return s.String()
}
