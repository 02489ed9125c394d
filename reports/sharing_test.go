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

// sharingModes is a record's per-node modes: w1 time-sliced as labelled, w2 labelled time-slicing but
// advertising whole GPUs, w3 mig-mixed, w4 exclusive, and w1's DRA GPUs partitionable.
func sharingModes() []cluster.NodeSharingMode {
	const pool = "cloud.google.com/gke-nodepool=gpu-a"
	return []cluster.NodeSharingMode{
		{Node: "w1", Path: "device-plugin", Mode: cluster.ModeTimeSlicing, Labelled: cluster.ModeTimeSlicing, Replicas: 2, Pool: pool},
		{Node: "w1", Path: "dra", Mode: cluster.ModePartitionable, Pool: pool, Partitions: []cluster.PartitionableGPU{{Whole: "gpu-0", Partitions: make([]cluster.PartitionDevice, 13)}}},
		{Node: "w2", Path: "device-plugin", Mode: cluster.ModeExclusive, Labelled: cluster.ModeTimeSlicing,
			Conflict: "labels say time-slicing, 2 replicas per GPU, the evidence shows exclusive (the evidence wins)"},
		{Node: "w3", Path: "device-plugin", Mode: cluster.ModeMIGMixed, Labelled: cluster.ModeMIGMixed, WholeGPUs: 2,
			MIG: []cluster.MIGResource{{Resource: "nvidia.com/mig-3g.40gb", Profile: "3g.40gb", Count: 2}}},
		{Node: "w4", Path: "device-plugin", Mode: cluster.ModeExclusive},
	}
}

// seenSpec is a passed spec that recorded what its pods saw of their node's sharing.
func seenSpec(obs ...gpu.SharingObservation) types.SpecReport {
	sp := spec("shares a GPU only as its mode promises", "device-plugin", types.SpecStatePassed, "")
	for _, o := range obs {
		sp.ReportEntries = append(sp.ReportEntries, types.ReportEntry{Name: gpu.SharingObservedEntry, Value: types.WrapEntryValue(o)})
	}
	return sp
}

func TestSharingPerNode(t *testing.T) {
	rec := record()
	rec.Sharing = cluster.Sharing{Mode: "dra-partitionable+mig-mixed+time-slicing", Replicas: 2}
	rec.SharingModes = sharingModes()
	suite := types.Report{SpecReports: []types.SpecReport{seenSpec(
		gpu.SharingObservation{Node: "w1", Path: "device-plugin", Mode: cluster.ModeTimeSlicing, Pod: "p0", Saw: "replica 1 of GPU-a", Note: "no memory or fault isolation"},
		gpu.SharingObservation{Node: "w3", Path: "device-plugin", Mode: gpu.ObservedMIG, Pod: "p1", Saw: "MIG-1 (3g.40gb of GPU-c)"},
		gpu.SharingObservation{Node: "w4", Path: "device-plugin", Mode: cluster.ModeTimeSlicing, Pod: "p2", Saw: "replica 0 of GPU-d", Note: "no memory or fault isolation"},
	)}}
	data, err := json.Marshal([]types.Report{suite})
	if err != nil {
		t.Fatal(err)
	}
	var decoded []types.Report
	if err := json.Unmarshal(data, &decoded); err != nil {
		t.Fatal(err)
	}

	rows := SharingRows(rec, decoded)
	if len(rows) != 5 || rows[0].Node != "w1" || rows[0].Path != "device-plugin" || rows[0].Seen != "pod p0 (time-slicing): replica 1 of GPU-a" || rows[0].Note != "no memory or fault isolation" {
		t.Fatalf("rows = %+v", rows)
	}
	if rows[1].Mode != "dra-partitionable: 1 GPU, 13 partitions" || rows[1].Seen != "" {
		t.Errorf("w1/dra = %+v", rows[1])
	}
	wantMismatches := []string{
		"node w2 (device-plugin): labels say time-slicing, the evidence shows exclusive",
		"node w4 (device-plugin): pod p2 saw time-slicing (replica 0 of GPU-d), the evidence shows exclusive",
	}
	if got := SharingMismatches(rec, decoded); strings.Join(got, "\n") != strings.Join(wantMismatches, "\n") {
		t.Errorf("mismatches = %q, want %q", got, wantMismatches)
	}

	md := RenderMarkdown(decoded, rec)
	for _, want := range []string{
		"### Sharing per node",
		"| Node | Path | Mode from evidence | Seen from a pod | Note |",
		"| w1 | device-plugin | time-slicing, 2 replicas per GPU | pod p0 (time-slicing): replica 1 of GPU-a | no memory or fault isolation |",
		"| w2 | device-plugin | exclusive | not recorded | labels say time-slicing, 2 replicas per GPU, the evidence shows exclusive (the evidence wins) |",
		"| w3 | device-plugin | mig-mixed: 2 whole GPUs, nvidia.com/mig-3g.40gb ×2 (3g.40gb) | pod p1 (mig): MIG-1 (3g.40gb of GPU-c) | – |",
		"- **" + wantMismatches[0] + "**",
		"- **" + wantMismatches[1] + "**",
		// The summary line stays.
		"| Sharing | dra-partitionable+mig-mixed+time-slicing (2 replicas) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the signoff lacks %q:\n%s", want, md)
		}
	}
	html := RenderHTML(decoded, rec)
	for _, want := range []string{"<h3>Sharing per node</h3>", "<td>pod p0 (time-slicing): replica 1 of GPU-a</td>", "<li><b>node w2 (device-plugin): labels say time-slicing, the evidence shows exclusive</b></li>"} {
		if !strings.Contains(html, want) {
			t.Errorf("the HTML signoff lacks %q", want)
		}
	}

	// A record written by WriteSignoff keeps what pods saw, for a report rendered without the specs.
	dir := t.TempDir()
	if err := WriteSignoff(dir, decoded, rec); err != nil {
		t.Fatal(err)
	}
	back, err := ReadRecord(dir + "/" + RecordFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.SharingSeen) != 3 || len(back.SharingModes) != 5 || back.SharingModes[1].Partitions[0].Whole != "gpu-0" {
		t.Fatalf("record read back: seen %+v, modes %+v", back.SharingSeen, back.SharingModes)
	}
	if got := SharingMismatches(back, nil); len(got) != 2 {
		t.Errorf("mismatches from the record alone = %q", got)
	}

	// No modes and nothing seen: no table.
	if md := RenderMarkdown(nil, record()); strings.Contains(md, "Sharing per node") {
		t.Errorf("a record without modes renders the table")
	}
}

func TestVerdictSharingModeChangedFromBaseline(t *testing.T) {
	s, rec := passing()
	rec.SharingModes = sharingModes()
	base := BaselineFrom(rec, "last-good/gpuconform-record.json")
	base.RunID = "run-0"
	rec.Signoff.Baseline = base
	expectOutcome(t, s, rec, OutcomeGo, "")

	// The pool's node was replaced (new name) and its GPUs are no longer sliced; w2 (no pool label) is
	// partitioned now; w4 is gone (not a sharing change).
	rec.SharingModes = sharingModes()[:4]
	rec.SharingModes[0].Node, rec.SharingModes[1].Node = "w1-new", "w1-new"
	rec.SharingModes[0].Mode, rec.SharingModes[0].Replicas = cluster.ModeExclusive, 0
	rec.SharingModes[2].Mode = cluster.ModeMIGSingle
	v := expectOutcome(t, s, rec, OutcomeNoGo, "sharing of pool cloud.google.com/gke-nodepool=gpu-a (node w1-new) on path device-plugin was time-slicing, 2 replicas per device in baseline run run-0, is exclusive now")
	want := []string{
		"sharing of pool cloud.google.com/gke-nodepool=gpu-a (node w1-new) on path device-plugin was time-slicing, 2 replicas per device in baseline run run-0, is exclusive now",
		"sharing of node w2 on path device-plugin was exclusive in baseline run run-0, is mig-single now",
	}
	if strings.Join(v.Baseline, "\n") != strings.Join(want, "\n") {
		t.Errorf("baseline lines = %q, want %q", v.Baseline, want)
	}

	// A baseline taken before records carried modes compares none.
	base.SharingModes = nil
	expectOutcome(t, s, rec, OutcomeGo, "")
}
