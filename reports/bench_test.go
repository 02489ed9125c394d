package reports

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/poollock"
	"gpuconform.io/gpuconform/framework/timeline"
)

func TestBenchFromARun(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	withRequests := func(sp types.SpecReport, n int64) types.SpecReport {
		sp.ReportEntries = types.ReportEntries{{Name: APIRequestsEntry, Value: types.WrapEntryValue(cluster.Counts{"get pods": n - 1, "create jobs": 1})}}
		return sp
	}
	a := withRequests(spec("admits a Job", "dra", types.SpecStatePassed, ""), 30)
	// It waited 2 s for its pool lock (another process's spec held the path): wall, not the ratio's.
	a.ReportEntries = append(a.ReportEntries, types.ReportEntry{Name: LockWaitEntry, Value: types.WrapEntryValue(2.0)})
	a.RunTime = 14 * time.Second
	b := withRequests(spec("shows no device", "dra", types.SpecStatePassed, ""), 10)
	b.RunTime = 4 * time.Second // no timeline: counted in wall, not in the ratio
	suites := []types.Report{{RunTime: 20 * time.Second, SpecReports: []types.SpecReport{a, b}}}
	rec := record()
	rec.APIRequests = cluster.Counts{"get pods": 40, "list events": 10, "watch pods": 4}
	// Two overlapping workloads (0–6 s and 4–12 s) are 12 s of inherent waiting; w2's pod was deleted at 9 s
	// and gone at 12 s, which is 2 s of teardown beyond its finish.
	rec.Timelines = []timeline.Timeline{{Spec: a.FullText(), Workloads: []timeline.Workload{
		{Name: "w1", Events: []timeline.Event{{At: at(0), Kind: timeline.Created}, {At: at(6), Kind: timeline.Finished}}},
		{Name: "w2", Events: []timeline.Event{{At: at(4), Kind: timeline.Created}, {At: at(9), Kind: timeline.Deleting},
			{At: at(10), Kind: timeline.Finished}, {At: at(12), Kind: timeline.Gone}}},
	}}}
	bench := ComputeBench(suites, rec)
	if len(bench.Rows) != 1 {
		t.Fatalf("rows = %+v", bench.Rows)
	}
	r := bench.Rows[0]
	if r.Scenario != "allocation" || r.Specs != 2 || r.WithTimeline != 1 || r.Inherent != 12*time.Second || r.Teardown != 2*time.Second || r.Wall != 18*time.Second || r.LockWait != 2*time.Second || r.Requests != 40 {
		t.Errorf("row = %+v", r)
	}
	if r.Ratio() != 1 {
		t.Errorf("ratio = %v, want (14 s - 2 s of lock wait) / 12 s", r.Ratio())
	}
	if r.PerSpec() != 20 {
		t.Errorf("requests per spec = %v, want 40 / 2", r.PerSpec())
	}
	md := RenderBench(bench)
	if r.ByKind["get pods"] != 38 || r.ByKind["create jobs"] != 2 {
		t.Errorf("requests by kind = %v", r.ByKind)
	}
	// The run's most sent requests, and the scenario that sent most of each (none for the suite's own).
	if want := []RequestSource{{"get pods", 40, "allocation", 38}, {"list events", 10, "", 0}, {"watch pods", 4, "", 0}}; !slices.Equal(bench.TopRequests, want) {
		t.Errorf("top requests = %+v, want %+v", bench.TopRequests, want)
	}
	for _, want := range []string{"| allocation | 2 (1) | 18s | 2s | 12s (2s) | 1.00 | 1.20 | 40 | 20.0 | 2.50 |", "Whole suite: 20s wall", "54 API requests (2.70/s)",
		"| get pods | 40 | 74% | allocation (38) |", "| list events | 10 | 19% | — |"} {
		if !strings.Contains(md, want) {
			t.Errorf("bench lacks %q:\n%s", want, md)
		}
	}
}

func TestBenchSlowestSteps(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	node := func(typ types.NodeType, from, to int) []types.SpecEvent {
		return []types.SpecEvent{
			{SpecEventType: types.SpecEventNodeStart, NodeType: typ, TimelineLocation: types.TimelineLocation{Time: at(from)}},
			{SpecEventType: types.SpecEventNodeEnd, NodeType: typ, TimelineLocation: types.TimelineLocation{Time: at(to)}, Duration: at(to).Sub(at(from))},
		}
	}
	by := func(ms int, msg string) types.SpecEvent {
		return types.SpecEvent{SpecEventType: types.SpecEventByStart, Message: msg, TimelineLocation: types.TimelineLocation{Time: at(ms)}}
	}
	// events lays the It node's events around its By events, in the order Ginkgo records them.
	events := func(before, it, after []types.SpecEvent, bys ...types.SpecEvent) []types.SpecEvent {
		return slices.Concat(before, it[:1], bys, it[1:], after)
	}

	const submit = "submitting a Job asking for 1 device | then 2 devices\nthrough LocalQueue gpu-queue, and waiting for its pods to be scheduled onto a node"
	// a: a BeforeEach (0–1 s, with a By of its own), the It (1–21 s) with three steps, a DeferCleanup
	// (21–24 s, with a By) and an AfterEach (24–24.5 s). Its workloads live 5–11 s and 14–22 s.
	a := spec("admits a Job asking for 1 device through a LocalQueue — places it on a node with the devices, and completes it", "dra", types.SpecStatePassed, "")
	a.SpecEvents = events(
		slices.Insert(node(types.NodeTypeBeforeEach, 0, 1000), 1, by(500, "labelling the namespace")),
		node(types.NodeTypeIt, 1000, 21000),
		slices.Concat(slices.Insert(node(types.NodeTypeCleanupAfterEach, 21000, 24000), 1, by(22000, "deleting the queue")), node(types.NodeTypeAfterEach, 24000, 24500)),
		by(1000, "creating a LocalQueue"),            // 1–3 s, no workload: 2 s of its own
		by(3000, submit),                             // 3–13 s, 6 s of it the first workload's: 4 s
		by(13000, "waiting for the Job to complete"), // 13–21 s, 7 s of it the second's: 1 s
	)
	// Setup and cleanup: 1 + 3 + 0.5 s, of which the DeferCleanup's first second is the second workload's.

	// b: in another scenario, no timeline, twelve steps of 0.3, 0.6 … 3.6 s, and a BeforeEach of 0.2 s.
	b := spec("shows no device", "device-plugin", types.SpecStatePassed, "")
	b.ContainerHierarchyLabels = [][]string{{"scenario:shortage", "path:device-plugin"}}
	var bys []types.SpecEvent
	ms := 30200
	for i := 1; i <= 12; i++ {
		bys = append(bys, by(ms, fmt.Sprintf("step %d", i)))
		ms += 300 * i
	}
	b.SpecEvents = events(node(types.NodeTypeBeforeEach, 30000, 30200), node(types.NodeTypeIt, 30200, ms), nil, bys...)

	// A skipped spec's steps are not counted.
	skipped := spec("is skipped", "dra", types.SpecStateSkipped, "")
	skipped.SpecEvents = events(nil, node(types.NodeTypeIt, 0, 60000), nil, by(0, "never measured"))

	rec := record()
	rec.Timelines = []timeline.Timeline{{Spec: a.FullText(), Workloads: []timeline.Workload{
		{Name: "w1", Events: []timeline.Event{{At: at(5000), Kind: timeline.Created}, {At: at(11000), Kind: timeline.Finished}}},
		{Name: "w2", Events: []timeline.Event{{At: at(14000), Kind: timeline.Created}, {At: at(22000), Kind: timeline.Finished}}},
	}}}
	bench := ComputeBench([]types.Report{{SpecReports: []types.SpecReport{a, skipped, b}}}, rec)

	type want struct {
		scenario, step    string
		wall, nonInherent time.Duration
	}
	s := time.Second
	wants := []want{
		{"allocation", submit, 10 * s, 4 * s},
		{"shortage", "step 12", 3600 * time.Millisecond, 3600 * time.Millisecond},
		{"allocation", SetupAndCleanup, 4500 * time.Millisecond, 3500 * time.Millisecond},
		{"shortage", "step 11", 3300 * time.Millisecond, 3300 * time.Millisecond},
		{"shortage", "step 10", 3 * s, 3 * s},
		{"shortage", "step 9", 2700 * time.Millisecond, 2700 * time.Millisecond},
		{"shortage", "step 8", 2400 * time.Millisecond, 2400 * time.Millisecond},
		{"shortage", "step 7", 2100 * time.Millisecond, 2100 * time.Millisecond},
		{"allocation", "creating a LocalQueue", 2 * s, 2 * s},
		{"shortage", "step 6", 1800 * time.Millisecond, 1800 * time.Millisecond},
	}
	var got []want
	for _, st := range bench.Slowest {
		got = append(got, want{st.Scenario, st.Step, st.Wall, st.NonInherent})
	}
	if !slices.Equal(got, wants) {
		t.Errorf("slowest steps:\n got %v\nwant %v", got, wants)
	}
	if st := bench.Slowest[0]; st.Spec != a.LeafNodeText || st.Path != "dra" {
		t.Errorf("first step's spec = %q on %q", st.Spec, st.Path)
	}

	// The steps the ranking leaves out are measured too: the It's last By lasts to the It node's end,
	// not to the By in the DeferCleanup; the BeforeEach and DeferCleanup Bys are no steps of their own,
	// and the It's first By came as it started, so there is no BeforeFirstBy step.
	steps := specSteps(a, "allocation", lifetimes(rec.Timelines[0]), 0)
	var names []string
	for _, st := range steps {
		names = append(names, st.Step)
	}
	if !slices.Equal(names, []string{"creating a LocalQueue", submit, "waiting for the Job to complete", SetupAndCleanup}) {
		t.Errorf("a's steps = %q", names)
	}
	if last := steps[2]; last.Wall != 8*s || last.NonInherent != s {
		t.Errorf("last step = %v wall, %v non-inherent; want 13–21 s less the second workload's 14–21 s", last.Wall, last.NonInherent)
	}
	// A spec that waited for its pool lock spent that wait in its BeforeEach: not the suite's own work.
	if setup := specSteps(a, "allocation", lifetimes(rec.Timelines[0]), time.Second)[3]; setup.Wall != steps[3].Wall || setup.NonInherent != steps[3].NonInherent-time.Second {
		t.Errorf("setup with 1 s of lock wait = %v wall, %v non-inherent; want %v and %v", setup.Wall, setup.NonInherent, steps[3].Wall, steps[3].NonInherent-time.Second)
	}

	md := RenderBench(bench)
	for _, want := range []string{
		"Slowest ten steps by time not spent waiting on the cluster (step wall minus the overlap with its workloads' lifetimes, and minus the pool lock waits in it):",
		"| # | Scenario | Path | Spec | Step | Step wall | Non-inherent |",
		"| 1 | allocation | dra | admits a Job asking for 1 device through a LocalQueue — places it on… | " +
			`submitting a Job asking for 1 device \| then 2 devices through LocalQueue gpu-queue, and w… | 10s | 4s |`,
		"| 2 | shortage | device-plugin | shows no device | step 12 | 3.6s | 3.6s |",
		"| 3 | allocation | dra | admits a Job asking for 1 device through a LocalQueue — places it on… | setup and cleanup (BeforeEach, DeferCleanup…) | 4.5s | 3.5s |",
		"| 10 | shortage | device-plugin | shows no device | step 6 | 1.8s | 1.8s |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("bench lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "| 11 |") || strings.Contains(md, "never measured") {
		t.Errorf("bench ranks more than ten steps, or a skipped spec's:\n%s", md)
	}
}

func TestStepsBeforeTheFirstByAndWithoutTheItsEnd(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ev := func(typ types.SpecEventType, node types.NodeType, s int, msg string) types.SpecEvent {
		return types.SpecEvent{SpecEventType: typ, NodeType: node, Message: msg, TimelineLocation: types.TimelineLocation{Time: t0.Add(time.Duration(s) * time.Second)}}
	}
	type step struct {
		name              string
		wall, nonInherent time.Duration
	}
	stepsOf := func(sp types.SpecReport, lives []span) []step {
		var out []step
		for _, st := range specSteps(sp, "allocation", lives, 0) {
			out = append(out, step{st.Step, st.Wall, st.NonInherent})
		}
		return out
	}
	s := time.Second
	lives := []span{{t0.Add(s), t0.Add(3 * s)}}

	// The It's first By comes 4 s after it started, 2 s of them a workload's; the last By lasts to the
	// It's end.
	sp := spec("reads the driver version", "dra", types.SpecStatePassed, "")
	sp.SpecEvents = []types.SpecEvent{ev(types.SpecEventNodeStart, types.NodeTypeIt, 0, ""), ev(types.SpecEventByStart, 0, 4, "reading"),
		ev(types.SpecEventNodeEnd, types.NodeTypeIt, 10, "")}
	if got, want := stepsOf(sp, lives), []step{{BeforeFirstBy, 4 * s, 2 * s}, {"reading", 6 * s, 6 * s}}; !slices.Equal(got, want) {
		t.Errorf("steps = %v, want %v", got, want)
	}
	// A node lease taken in the It (it ended at 3 s, after 1.5 s of waiting) is no work of the step it
	// ended in; a wait in the BeforeEach (at -1 s) is the setup's, not the It's.
	leased := sp
	leased.ReportEntries = types.ReportEntries{
		{Name: LockWaitEntry, Value: types.WrapEntryValue(1.5), TimelineLocation: types.TimelineLocation{Time: t0.Add(3 * s)}},
		{Name: LockWaitEntry, Value: types.WrapEntryValue(7.0), TimelineLocation: types.TimelineLocation{Time: t0.Add(-s)}},
	}
	var got []step
	for _, st := range specSteps(leased, "allocation", lives, 8500*time.Millisecond) {
		got = append(got, step{st.Step, st.Wall, st.NonInherent})
	}
	if want := []step{{BeforeFirstBy, 4 * s, 500 * time.Millisecond}, {"reading", 6 * s, 6 * s}}; !slices.Equal(got, want) {
		t.Errorf("steps with a lease wait in the It = %v, want %v", got, want)
	}
	// Without a By, the whole It is one step.
	sp.SpecEvents = slices.Delete(sp.SpecEvents, 1, 2)
	if got, want := stepsOf(sp, lives), []step{{BeforeFirstBy, 10 * s, 8 * s}}; !slices.Equal(got, want) {
		t.Errorf("steps = %v, want %v", got, want)
	}

	// An interrupted It has no end event: its last step lasts to the next node's start or, with none, to
	// the spec's end; a By in that next node is none of the It's steps.
	sp = spec("is interrupted", "dra", types.SpecStateInterrupted, "")
	sp.EndTime = t0.Add(20 * time.Second)
	sp.SpecEvents = []types.SpecEvent{ev(types.SpecEventNodeStart, types.NodeTypeIt, 0, ""), ev(types.SpecEventByStart, 0, 2, "waiting"),
		ev(types.SpecEventNodeStart, types.NodeTypeCleanupAfterEach, 7, ""), ev(types.SpecEventByStart, 0, 8, "cleaning up")}
	if got, want := stepsOf(sp, nil), []step{{BeforeFirstBy, 2 * s, 2 * s}, {"waiting", 5 * s, 5 * s}}; !slices.Equal(got, want) {
		t.Errorf("steps = %v, want %v", got, want)
	}
	sp.SpecEvents = sp.SpecEvents[:2]
	if got, want := stepsOf(sp, nil), []step{{BeforeFirstBy, 2 * s, 2 * s}, {"waiting", 18 * s, 18 * s}}; !slices.Equal(got, want) {
		t.Errorf("steps = %v, want %v", got, want)
	}
}

// The lock floor adds the specs that run alone (Serial, holds:nodes) to the longer of the node stoppers
// and the busiest path's holders, each less its lock wait; the other specs' work is reported beside it,
// not in it.
func TestBenchLockFloor(t *testing.T) {
	withLabels := func(sp types.SpecReport, run, wait time.Duration, lbls ...string) types.SpecReport {
		sp.LeafNodeLabels = lbls
		sp.RunTime = run
		if wait > 0 {
			sp.ReportEntries = types.ReportEntries{{Name: LockWaitEntry, Value: types.WrapEntryValue(wait.Seconds())}}
		}
		return sp
	}
	upgrade := withLabels(spec("upgrades the canary", "dra", types.SpecStatePassed, ""), 10*time.Second, 0)
	upgrade.IsSerial = true
	specs := []types.SpecReport{
		upgrade,
		withLabels(spec("restarts a kubelet", "dra", types.SpecStatePassed, ""), 20*time.Second, 5*time.Second, labels.HoldsNodes),
		withLabels(spec("fills a node", "dra", types.SpecStatePassed, ""), 18*time.Second, 0, labels.HoldsPath),
		withLabels(spec("runs a gang", "dra", types.SpecStatePassed, ""), 14*time.Second, 2*time.Second, labels.HoldsPath),
		withLabels(spec("fills a node", "device-plugin", types.SpecStatePassed, ""), 12*time.Second, 0, labels.HoldsPath),
		withLabels(spec("shows no device", "device-plugin", types.SpecStatePassed, ""), 9*time.Second, 2*time.Second),
	}
	// holds:node specs count per leased node: w1's two one after another, w2's beside them.
	for _, c := range []struct {
		what, node string
		run        time.Duration
	}{{"preempts", "w1", 10 * time.Second}, {"withdraws a device", "w2", 5 * time.Second}, {"reclaims quota", "w1", 11 * time.Second}} {
		sp := withLabels(spec(c.what, "device-plugin", types.SpecStatePassed, ""), c.run, 0, labels.HoldsNode)
		sp.ReportEntries = append(sp.ReportEntries, types.ReportEntry{Name: poollock.LeaseEntry, Value: types.WrapEntryValue(c.node)})
		specs = append(specs, sp)
	}
	// A leases:nodes spec (a gang) counts on each node it leased.
	gang := withLabels(spec("runs a gang on two nodes", "dra", types.SpecStatePassed, ""), 4*time.Second, 0, labels.LeasesNodes)
	gang.ReportEntries = append(gang.ReportEntries, types.ReportEntry{Name: poollock.LeaseEntry, Value: types.WrapEntryValue("w1")},
		types.ReportEntry{Name: poollock.LeaseEntry, Value: types.WrapEntryValue("w2")})
	specs = append(specs, gang)
	// stops:node specs run one at a time, and each counts on its path as a holder of the path (a failed
	// worker, holds:path too) or of the node it stopped (a kubelet restart).
	restart := withLabels(spec("restarts a kubelet", "dra", types.SpecStatePassed, ""), 8*time.Second, 0, labels.StopsNode)
	restart.ReportEntries = append(restart.ReportEntries, types.ReportEntry{Name: poollock.LeaseEntry, Value: types.WrapEntryValue("w1")})
	specs = append(specs, restart, withLabels(spec("fails a worker", "device-plugin", types.SpecStatePassed, ""), 40*time.Second, 4*time.Second, labels.StopsNode, labels.HoldsPath))
	// The upgrade rehearsal (no path of its own) runs one at a time with the stoppers, and on the
	// known-good node it holds on the path it names; one holding no node of the GPU pool only with them.
	rehearsal := func(lease ...string) types.SpecReport {
		sp := types.SpecReport{ContainerHierarchyLabels: [][]string{{"scenario:upgrade"}}, LeafNodeType: types.NodeTypeIt,
			LeafNodeText: "upgrades the canary pool", State: types.SpecStatePassed, LeafNodeLabels: []string{labels.HoldsCanary}, RunTime: 6 * time.Second}
		if len(lease) == 2 {
			sp.ReportEntries = types.ReportEntries{{Name: poollock.LeaseEntry, Value: types.WrapEntryValue(lease[0])},
				{Name: poollock.LeasePathEntry, Value: types.WrapEntryValue(lease[1])}}
		}
		return sp
	}
	specs = append(specs, rehearsal("w2", "device-plugin"), rehearsal())
	bench := ComputeBench([]types.Report{{RunTime: time.Minute, SpecReports: specs}}, record())
	f := bench.Floor
	if f.Serial != 10*time.Second || f.Nodes != 15*time.Second || f.Shared != 7*time.Second || f.Stops != 56*time.Second ||
		f.Path["dra"] != 30*time.Second || f.Path["device-plugin"] != 48*time.Second || f.Node["dra"]["w1"] != 12*time.Second || f.Node["dra"]["w2"] != 4*time.Second ||
		f.Node["device-plugin"]["w1"] != 21*time.Second || f.Node["device-plugin"]["w2"] != 11*time.Second || len(f.Node["-"]) != 0 {
		t.Errorf("floor = %+v", f)
	}
	if path, held := f.Busiest(); path != "device-plugin" || held != 69*time.Second || f.Total() != 94*time.Second {
		t.Errorf("busiest %s %s, total %s; want device-plugin 69s (48s holding the path, 21s leasing w1), 94s", path, held, f.Total())
	}
	// A rehearsal that lets its locks go before its end counts the time it held them on the node and with
	// the stoppers; the rest of its work runs beside.
	early := rehearsal("w2", "device-plugin")
	early.ReportEntries = append(early.ReportEntries, types.ReportEntry{Name: poollock.LeaseHeldEntry, Value: types.WrapEntryValue(2.5)})
	if f := ComputeBench([]types.Report{{RunTime: time.Minute, SpecReports: []types.SpecReport{early}}}, record()).Floor; f.Node["device-plugin"]["w2"] != 2500*time.Millisecond || f.Stops != 2500*time.Millisecond || f.Shared != 3500*time.Millisecond {
		t.Errorf("a rehearsal that held its locks 2.5s of its 6s: node %s, stops %s, beside %s", f.Node["device-plugin"]["w2"], f.Stops, f.Shared)
	}
	if got := (LockFloor{Stops: 50 * time.Second, Path: map[string]time.Duration{"dra": 10 * time.Second}}).Total(); got != 50*time.Second {
		t.Errorf("stops longer than every path's holders: floor %s, want the stops' 50s", got)
	}
	md := RenderBench(bench)
	if want := "Lock floor: 1m34s. Under the pool locks no run finishes sooner, however many processes it has: Serial specs 10s, specs holding every path 15s, and the longer of the specs stopping a node and the upgrade rehearsal, one at a time (56s), and the busiest path's holders (device-plugin) 1m9s (its holds:path specs, then its busiest node's leases, one after another); the other specs' 7s of work runs beside them."; !strings.Contains(md, want) {
		t.Errorf("bench lacks %q:\n%s", want, md)
	}
	if md := RenderBench(Bench{}); strings.Contains(md, "Lock floor") {
		t.Errorf("a bench without specs has no floor:\n%s", md)
	}
}
