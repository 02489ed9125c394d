package reports

import (
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/timeline"
)

func TestBenchFromARun(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	withRequests := func(sp types.SpecReport, n int64) types.SpecReport {
		sp.ReportEntries = types.ReportEntries{{Name: APIRequestsEntry, Value: types.WrapEntryValue(cluster.Counts{"get": n - 1, "create": 1})}}
		return sp
	}
	a := withRequests(spec("admits a Job", "dra", types.SpecStatePassed, ""), 30)
	a.RunTime = 12 * time.Second
	b := withRequests(spec("shows no device", "dra", types.SpecStatePassed, ""), 10)
	b.RunTime = 4 * time.Second // no timeline: counted in wall, not in the ratio
	suites := []types.Report{{RunTime: 20 * time.Second, SpecReports: []types.SpecReport{a, b}}}
	rec := record()
	rec.APIRequests = cluster.Counts{"get": 50, "watch": 4}
	// Two overlapping workloads (0–6 s and 4–10 s) are 10 s of inherent waiting.
	rec.Timelines = []timeline.Timeline{{Spec: a.FullText(), Workloads: []timeline.Workload{
		{Name: "w1", Events: []timeline.Event{{At: at(0), Kind: timeline.Created}, {At: at(6), Kind: timeline.Finished}}},
		{Name: "w2", Events: []timeline.Event{{At: at(4), Kind: timeline.Created}, {At: at(10), Kind: timeline.Finished}}},
	}}}
	bench := ComputeBench(suites, rec)
	if len(bench.Rows) != 1 {
		t.Fatalf("rows = %+v", bench.Rows)
	}
	r := bench.Rows[0]
	if r.Scenario != "allocation" || r.Specs != 2 || r.WithTimeline != 1 || r.Inherent != 10*time.Second || r.Wall != 16*time.Second || r.Requests != 40 {
		t.Errorf("row = %+v", r)
	}
	if r.Ratio() != 1.2 {
		t.Errorf("ratio = %v, want 12 s / 10 s", r.Ratio())
	}
	if r.PerSpec() != 20 {
		t.Errorf("requests per spec = %v, want 40 / 2", r.PerSpec())
	}
	md := RenderBench(bench)
	for _, want := range []string{"| allocation | 2 (1) | 16s | 10s | 1.20 | 40 | 20.0 | 2.50 |", "Whole suite: 20s wall", "54 API requests (2.70/s)"} {
		if !strings.Contains(md, want) {
			t.Errorf("bench lacks %q:\n%s", want, md)
		}
	}
}
