package reports

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/gpu"
)

// ObservedSharing summarises the replica IDs the run's specs recorded (gpu.ReplicasEntry): "8 replicas of
// 4 GPUs, up to 2 per GPU"; "" when no spec saw a replica ID. It is what pods were actually given, beside
// the labels' claim, so a cluster labelled time-slicing that hands out whole GPUs (or the reverse) shows.
func ObservedSharing(suites []types.Report) string {
	perGPU := map[string]map[string]bool{} // node/physical GPU → its replica IDs seen
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			for _, e := range sp.ReportEntries {
				if e.Name != gpu.ReplicasEntry {
					continue
				}
				var o gpu.ReplicaObservation
				data, err := json.Marshal(e.Value.GetRawValue())
				if err != nil || json.Unmarshal(data, &o) != nil {
					continue
				}
				for _, id := range o.IDs {
					d := gpu.ParseDeviceID(id)
					if !d.Replicated {
						continue
					}
					key := o.Node + "/" + d.Physical
					if perGPU[key] == nil {
						perGPU[key] = map[string]bool{}
					}
					perGPU[key][id] = true
				}
			}
		}
	}
	if len(perGPU) == 0 {
		return ""
	}
	replicas, most := 0, 0
	for _, ids := range perGPU {
		replicas += len(ids)
		most = max(most, len(ids))
	}
	return fmt.Sprintf("%s of %s, up to %d per GPU", quantity(replicas, "replica"), quantity(len(perGPU), "GPU"), most)
}

// SharingText is the record's sharing line: the mode and replicas the labels claim and, when the run saw
// replica IDs, what pods held: "time-slicing (2 replicas); observed: 8 replicas of 4 GPUs, up to 2 per GPU".
func SharingText(rec Record, suites []types.Report) string {
	text := rec.Sharing.Mode
	if rec.Sharing.Replicas > 0 {
		text += fmt.Sprintf(" (%d replicas)", rec.Sharing.Replicas)
	}
	observed := ObservedSharing(suites)
	if observed == "" {
		observed = rec.ObservedSharing
	}
	if observed != "" {
		text += "; observed: " + observed
	}
	return text
}

func quantity(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// SharingObservations are the run's SharingObservedEntry values (what pods saw of their node's sharing),
// each once, in the order recorded.
func SharingObservations(suites []types.Report) []gpu.SharingObservation {
	var out []gpu.SharingObservation
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			for _, e := range sp.ReportEntries {
				if e.Name != gpu.SharingObservedEntry {
					continue
				}
				var o gpu.SharingObservation
				data, err := json.Marshal(e.Value.GetRawValue())
				if err != nil || json.Unmarshal(data, &o) != nil || slices.Contains(out, o) {
					continue
				}
				out = append(out, o)
			}
		}
	}
	return out
}

// SharingRow is one row of the signoff's "Sharing per node" table: a node's mode on a path from
// evidence, what the run's pods saw there, and what disagrees.
type SharingRow struct {
	Node, Path string
	// Mode is the mode from evidence (NodeSharingMode.Describe), "not discovered" for a node a pod saw
	// that discovery did not read.
	Mode string
	// Seen is what pods saw there ("pod p0: replica 1 of GPU-a"), "" when no spec recorded it.
	Seen string
	// Note is the conflict between labels and evidence and the observations' notes.
	Note string
}

// SharingRows are the record's per-node modes joined with what pods saw (from the suites, else from the
// record), sorted by node and path.
func SharingRows(rec Record, suites []types.Report) []SharingRow {
	seen := sharingSeen(rec, suites)
	type key struct{ node, path string }
	byKey := map[key][]gpu.SharingObservation{}
	for _, o := range seen {
		byKey[key{o.Node, o.Path}] = append(byKey[key{o.Node, o.Path}], o)
	}
	var rows []SharingRow
	done := map[key]bool{}
	add := func(k key, mode, conflict string) {
		var saw, notes []string
		if conflict != "" {
			notes = append(notes, conflict)
		}
		for _, o := range byKey[k] {
			saw = append(saw, fmt.Sprintf("pod %s (%s): %s", o.Pod, o.Mode, o.Saw))
			if o.Note != "" && !slices.Contains(notes, o.Note) {
				notes = append(notes, o.Note)
			}
		}
		rows = append(rows, SharingRow{Node: k.node, Path: k.path, Mode: mode, Seen: strings.Join(saw, "; "), Note: strings.Join(notes, "; ")})
		done[k] = true
	}
	for _, m := range rec.SharingModes {
		add(key{m.Node, m.Path}, m.Describe(), m.Conflict)
	}
	for k := range byKey {
		if !done[k] {
			add(k, "not discovered", "")
		}
	}
	slices.SortFunc(rows, func(a, b SharingRow) int { return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Path, b.Path)) })
	return rows
}

// sharingSeen is what pods saw: the suites' entries, else what the record kept of them.
func sharingSeen(rec Record, suites []types.Report) []gpu.SharingObservation {
	if seen := SharingObservations(suites); len(seen) > 0 {
		return seen
	}
	return rec.SharingSeen
}

// SharingMismatches names each node whose labelled mode differs from its evidence, or whose evidence
// differs from what one of its pods saw: "node w1 (device-plugin): labels say time-slicing, the evidence
// shows exclusive".
func SharingMismatches(rec Record, suites []types.Report) []string {
	var out []string
	modes := map[string]cluster.NodeSharingMode{}
	for _, m := range rec.SharingModes {
		modes[m.Node+"/"+m.Path] = m
		if m.Labelled != "" && m.Labelled != m.Mode {
			out = append(out, fmt.Sprintf("node %s (%s): labels say %s, the evidence shows %s", m.Node, m.Path, m.Labelled, m.Describe()))
		}
	}
	for _, o := range sharingSeen(rec, suites) {
		m, ok := modes[o.Node+"/"+o.Path]
		if !ok || gpu.SeenConsistent(m.Mode, o.Mode) {
			continue
		}
		line := fmt.Sprintf("node %s (%s): pod %s saw %s (%s), the evidence shows %s", o.Node, o.Path, o.Pod, o.Mode, o.Saw, m.Describe())
		if m.Labelled != "" && m.Labelled != m.Mode {
			line += ", the labels " + m.Labelled
		}
		out = append(out, line)
	}
	return out
}
