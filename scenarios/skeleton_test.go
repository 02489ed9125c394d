package scenarios

import "testing"

// A path the team's ClusterQueue does not cover submits nothing through Kueue; the others do when Kueue
// is usable at all.
func TestQueued(t *testing.T) {
	b := Base{QueueGaps: map[string]string{"dra": "ClusterQueue team does not cover example.com/gpu (covered: cpu, memory, nvidia.com/gpu)"}}
	for _, c := range []struct {
		kueue bool
		path  string
		want  bool
	}{
		{true, "device-plugin", true},
		{true, "dra", false},
		{false, "device-plugin", false},
	} {
		if got := b.queued(c.kueue, c.path); got != c.want {
			t.Errorf("queued(%v, %s) = %v, want %v", c.kueue, c.path, got, c.want)
		}
	}
	if !(Base{}).queued(true, "dra") {
		t.Error("without gaps (own queues) every path is queued")
	}
}
