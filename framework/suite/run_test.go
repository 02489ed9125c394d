package suite

import (
	"slices"
	"testing"

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
