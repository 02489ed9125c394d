package reports

import (
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
	"golang.org/x/net/html"

	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/timeline"
)

// preemptedRun is a recorded-shape run: one passed and one failed spec, and a timeline in which a
// training Job is preempted by a serving Job and resumes.
func preemptedRun() ([]types.Report, Record) {
	failed := spec("keeps a pod asking for more devices than any node has Pending", "dra", types.SpecStateFailed,
		"gave up after 4s waiting for pod ns/p to run: the diagnosis of Pod ns/p is final\n  Reason:  UntoleratedTaint <script>")
	suite := types.Report{SpecReports: []types.SpecReport{spec("admits a Job", "device-plugin", types.SpecStatePassed, ""), failed}}
	rec := record()
	rec.LeakAudit = &audit.Result{RunID: "run-1"}
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	train := timeline.Workload{Name: "train", Events: []timeline.Event{
		{At: at(0), Kind: timeline.Created}, {At: at(1), Kind: timeline.Admitted}, {At: at(2), Kind: timeline.Scheduled},
		{At: at(3), Kind: timeline.Started}, {At: at(4), Kind: timeline.FirstStep}, {At: at(8), Kind: timeline.Checkpoint, Detail: "step 5"},
		{At: at(10), Kind: timeline.Preempted}, {At: at(11), Kind: timeline.Stopped}, {At: at(20), Kind: timeline.Admitted},
		{At: at(21), Kind: timeline.Scheduled}, {At: at(22), Kind: timeline.Started}, {At: at(22), Kind: timeline.Resumed},
		{At: at(23), Kind: timeline.FirstStep}, {At: at(30), Kind: timeline.Stopped}, {At: at(31), Kind: timeline.Finished},
	}}
	serve := timeline.Workload{Name: "serve", Events: []timeline.Event{
		{At: at(9), Kind: timeline.Created}, {At: at(11), Kind: timeline.Admitted}, {At: at(12), Kind: timeline.Scheduled},
		{At: at(13), Kind: timeline.Started}, {At: at(19), Kind: timeline.Stopped}, {At: at(19), Kind: timeline.Finished},
	}}
	train.Derive()
	serve.Derive()
	rec.Timelines = []timeline.Timeline{{Spec: "preempts training for serving", Namespace: "ns", Start: t0, End: at(31), Workloads: []timeline.Workload{train, serve}}}
	return []types.Report{suite}, rec
}

func TestRenderHTMLIsSelfContainedAndComplete(t *testing.T) {
	suites, rec := preemptedRun()
	page := RenderHTML(suites, rec)
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is fetched: no script, no external stylesheet, image or font.
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "script", "link", "img", "iframe":
				t.Errorf("the page has a <%s>: it must be self-contained", n.Data)
			}
			for _, a := range n.Attr {
				if (a.Key == "src" || a.Key == "href") && a.Val != "" {
					t.Errorf("<%s %s=%q> reaches outside the page", n.Data, a.Key, a.Val)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	for _, want := range []string{
		`<span class="verdict NO-GO">NO-GO</span>`,
		"Compatibility record", "v1.37.2",
		"<h3>preempts training for serving</h3>", "<svg",
		`fill="#3aa655"`, // working
		`fill="#9b59b6"`, // evicted
		"train preempted at", "train checkpoint at", "train resumed at",
		"Failures and their diagnosis", "UntoleratedTaint &lt;script&gt;", // escaped
		"Not exercised", "<b>dra</b>: no ResourceSlice publishes devices",
		"Run parameters", "<th>Filters</th><td>none: every registered spec ran</td>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "UntoleratedTaint <script>") {
		t.Error("a failure message was not escaped")
	}
}

// Each chart is well-formed SVG, and the phases follow the events: the preempted training Job has an
// evicted stretch from the preemption to its re-admission and two working stretches.
func TestGanttPhases(t *testing.T) {
	_, rec := preemptedRun()
	tl := rec.Timelines[0]
	svg := GanttSVG(tl)
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("the chart is not well-formed XML: %v", err)
	}
	count := map[string]int{}
	var evicted Phase
	for _, p := range Phases(tl.Workloads[0], tl.End) {
		count[p.Name]++
		if p.Name == "evicted" && !p.markerOnly {
			evicted = p
		}
	}
	if count["working"] != 2 || count["idle"] != 2 || count["queued"] != 1 || count["checkpoint"] != 1 || count["preempted"] != 1 {
		t.Errorf("phases of the training Job: %v", count)
	}
	if evicted.To.Sub(evicted.From) != 10*time.Second {
		t.Errorf("evicted stretch %s → %s, want the 10 s from preemption to re-admission", evicted.From, evicted.To)
	}
	if d := rec.Timelines[0].Workloads[0].Derived; d.Evictions != 1 || d.UsefulWork == nil || time.Duration(*d.UsefulWork) != 13*time.Second {
		t.Errorf("derived timings: %+v", d)
	}
}

// A pod deleted while running holds its devices until it is gone: the chart draws that stretch as
// stopping, ending the running one, and the derived teardown is its length.
func TestGanttStoppingUntilGone(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	w := timeline.Workload{Name: "held", Events: []timeline.Event{
		{At: t0, Kind: timeline.Created}, {At: t0.Add(time.Second), Kind: timeline.Scheduled},
		{At: t0.Add(3 * time.Second), Kind: timeline.Started}, {At: t0.Add(9 * time.Second), Kind: timeline.Deleting},
		{At: t0.Add(10 * time.Second), Kind: timeline.Stopped}, {At: t0.Add(12500 * time.Millisecond), Kind: timeline.Gone},
	}}
	w.Derive()
	byName := map[string]Phase{}
	for _, p := range Phases(w, t0.Add(20*time.Second)) {
		byName[p.Name] = p
	}
	if r := byName["running"]; !r.To.Equal(t0.Add(9 * time.Second)) {
		t.Errorf("running ends at %s, want the deletion at %s", r.To, t0.Add(9*time.Second))
	}
	if s := byName["stopping"]; !s.From.Equal(t0.Add(9*time.Second)) || !s.To.Equal(t0.Add(12500*time.Millisecond)) {
		t.Errorf("stopping %s → %s, want 9 s → 12.5 s", s.From, s.To)
	}
	if w.Derived.Teardown == nil || time.Duration(*w.Derived.Teardown) != 3500*time.Millisecond {
		t.Errorf("teardown = %s, want 3.5s", w.Derived.Teardown)
	}
}

// A node fault cuts the work: the workload is down from the fault until its replacement is scheduled, and
// the derived recovery runs from the fault to the first resumed step.
func TestGanttNodeFault(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	w := timeline.Workload{Name: "train", Events: []timeline.Event{
		{At: at(0), Kind: timeline.Created}, {At: at(0), Kind: timeline.Admitted}, {At: at(1), Kind: timeline.Scheduled},
		{At: at(2), Kind: timeline.Started}, {At: at(3), Kind: timeline.FirstStep},
		{At: at(13), Kind: timeline.Fault, Object: "Node/w1"}, {At: at(60), Kind: timeline.NodeNotReady},
		{At: at(70), Kind: timeline.PodEvicted}, {At: at(71), Kind: timeline.Scheduled}, {At: at(72), Kind: timeline.Started},
		{At: at(72), Kind: timeline.Resumed}, {At: at(73), Kind: timeline.FirstStep}, {At: at(90), Kind: timeline.Stopped},
		{At: at(91), Kind: timeline.Finished},
	}}
	var down Phase
	for _, p := range Phases(w, at(91)) {
		if p.Name == "down" {
			down = p
		}
	}
	if down.From != at(13) || down.To != at(71) {
		t.Errorf("down %s → %s, want the fault (13 s) → the replacement scheduled (71 s)", down.From, down.To)
	}
	w.Derive()
	if w.Derived.Recovery == nil || time.Duration(*w.Derived.Recovery) != 59*time.Second {
		t.Errorf("recovery = %v, want 59s (fault → resumed)", w.Derived.Recovery)
	}
	if w.Derived.UsefulWork == nil || time.Duration(*w.Derived.UsefulWork) != 27*time.Second {
		t.Errorf("useful work = %v, want 10s before the fault + 17s after", w.Derived.UsefulWork)
	}
}
