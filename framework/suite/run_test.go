package suite

import (
	"testing"
	"time"

	"gpuconform.io/gpuconform/framework/cluster"
)

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
