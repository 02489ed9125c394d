package reports

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/gpu"
)

// replicaSpec is a passed spec that recorded what the kubelet gave its pods.
func replicaSpec(obs ...gpu.ReplicaObservation) types.SpecReport {
	sp := spec("shows a running pod exactly the 1 device the kubelet allocated to it", "device-plugin", types.SpecStatePassed, "")
	for _, o := range obs {
		sp.ReportEntries = append(sp.ReportEntries, types.ReportEntry{Name: gpu.ReplicasEntry, Value: types.WrapEntryValue(o)})
	}
	return sp
}

func TestSharingLine(t *testing.T) {
	rec := record()
	rec.Sharing = cluster.Sharing{Mode: "time-slicing", Replicas: 2}
	suite := types.Report{SpecReports: []types.SpecReport{
		replicaSpec(gpu.ReplicaObservation{Node: "w1", IDs: []string{"GPU-a::0"}}),
		replicaSpec(gpu.ReplicaObservation{Node: "w1", IDs: []string{"GPU-a::1"}}, gpu.ReplicaObservation{Node: "w1", IDs: []string{"GPU-b::0", "GPU-a::0"}}),
		replicaSpec(gpu.ReplicaObservation{Node: "w2", IDs: []string{"GPU-c::1"}}),
	}}
	// A report read back from the artifacts (gpuconform report) says the same as the live one.
	data, err := json.Marshal([]types.Report{suite})
	if err != nil {
		t.Fatal(err)
	}
	var decoded []types.Report
	if err := json.Unmarshal(data, &decoded); err != nil {
		t.Fatal(err)
	}
	want := "time-slicing (2 replicas); observed: 4 replicas of 3 GPUs, up to 2 per GPU"
	for name, suites := range map[string][]types.Report{"live": {suite}, "from JSON": decoded} {
		if got := SharingText(rec, suites); got != want {
			t.Errorf("%s: sharing line %q, want %q", name, got, want)
		}
	}
	if md := RenderMarkdown(decoded, rec); !strings.Contains(md, "| Sharing | "+want+" |") {
		t.Errorf("the signoff lacks the sharing line %q", want)
	}
	if html := RenderHTML(decoded, rec); !strings.Contains(html, want) {
		t.Errorf("the HTML signoff lacks the sharing line %q", want)
	}

	// Whole GPUs only: the labels' claim alone, as before.
	rec.Sharing = cluster.Sharing{Mode: "exclusive"}
	if got := SharingText(rec, []types.Report{{SpecReports: []types.SpecReport{replicaSpec()}}}); got != "exclusive" {
		t.Errorf("no replicas observed: %q, want %q", got, "exclusive")
	}
	// A record written by WriteSignoff keeps the observation for a report rendered without the specs.
	rec.ObservedSharing = "1 replica of 1 GPU, up to 1 per GPU"
	if got := SharingText(rec, nil); got != "exclusive; observed: 1 replica of 1 GPU, up to 1 per GPU" {
		t.Errorf("from the record: %q", got)
	}
}
