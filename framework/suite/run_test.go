package suite

import (
	"slices"
	"testing"
	"time"

	"gpuconform.io/gpuconform/framework/cluster"
)

// The record carries discovery's notes and the run's own (feature gates, what the stack-ready wait waited
// for), in that order; neither replaces the other.
func TestRecordNotesKeepDiscoverysNotes(t *testing.T) {
	for _, tc := range []struct {
		name            string
		discovery, runs []string
		want            []string
	}{
		{name: "both", discovery: []string{"cannot list DeviceClasses: forbidden"}, runs: []string{"device plugin on w1 re-registered 3s after the run started"},
			want: []string{"cannot list DeviceClasses: forbidden", "device plugin on w1 re-registered 3s after the run started"}},
		{name: "discovery only", discovery: []string{"cannot list ResourceSlices: forbidden"}, want: []string{"cannot list ResourceSlices: forbidden"}},
		{name: "run only", runs: []string{"feature gates unreadable"}, want: []string{"feature gates unreadable"}},
		{name: "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Run{Caps: cluster.Capabilities{Notes: slices.Clip(tc.discovery)}, Notes: tc.runs}
			got := r.RecordNotes()
			if !slices.Equal(got, tc.want) {
				t.Errorf("RecordNotes() = %q, want %q", got, tc.want)
			}
			if len(tc.discovery) > 0 {
				got[0] = "changed"
				if r.Caps.Notes[0] == "changed" {
					t.Error("RecordNotes shares discovery's backing array")
				}
			}
		})
	}
}

// The stack-ready wait ends at once on a ready stack, and on a settled broken path only once the same
// finding has stood for cluster.SettledFor; a changed finding or a failed check starts the clock again.
func TestSettlingDone(t *testing.T) {
	t0 := time.Date(2026, 4, 10, 10, 0, 0, 0, time.UTC)
	at := t0.Add
	const broken, other = "dra: DeviceClass gpu.nvidia.com selects 0 of 8", "dra: DRA driver gpu.nvidia.com publishes ResourceSlices, but no plugin pod"
	type poll struct {
		at       time.Duration
		ready    bool
		findings string
		done     bool
	}
	for name, polls := range map[string][]poll{
		"ready, nothing settled": {{0, true, "", true}},
		"not ready":              {{0, false, "", false}, {time.Hour, false, "", false}},
		"a settled finding that stands": {
			{0, true, broken, false}, {5 * time.Second, true, broken, false}, {cluster.SettledFor, true, broken, true}},
		"a finding that changes starts again": {
			{0, true, broken, false}, {20 * time.Second, true, other, false}, {40 * time.Second, true, other, false}, {50 * time.Second, true, other, true}},
		"a failed check in between starts again": {
			{0, true, broken, false}, {20 * time.Second, false, broken, false}, {40 * time.Second, true, broken, false}, {70 * time.Second, true, broken, true}},
		"a settled finding that clears": {{0, true, broken, false}, {5 * time.Second, true, "", true}},
	} {
		var s settling
		for i, p := range polls {
			if got := s.done(at(p.at), p.ready, p.findings); got != p.done {
				t.Errorf("%s: poll %d at %s: done = %v, want %v", name, i, p.at, got, p.done)
			}
		}
	}
}

// Processes whose discovery differs only in its notes (one looked while a plugin pod was not Ready yet)
// build the same spec tree; a difference in what discovery found does not.
func TestSameDiscoveryIgnoresNotes(t *testing.T) {
	r := &Run{Caps: cluster.Capabilities{ServerVersion: "v1.37.2", Notes: []string{"DRA driver d publishes ResourceSlices, but no plugin pod is Ready on node(s) w1"}}}
	if err := r.SameDiscovery(2, cluster.Capabilities{ServerVersion: "v1.37.2"}); err != nil {
		t.Errorf("notes alone differ: %v", err)
	}
	if err := r.SameDiscovery(2, cluster.Capabilities{ServerVersion: "v1.37.3"}); err == nil {
		t.Error("a different server version must differ")
	}
	if len(r.Caps.Notes) != 1 {
		t.Errorf("the comparison changed the run's own notes: %q", r.Caps.Notes)
	}
}
