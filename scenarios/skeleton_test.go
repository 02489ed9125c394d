package scenarios

import (
	"slices"
	"testing"

	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/poollock"
)

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

// A spec shares its path's lock; holds:path takes it alone; holds:nodes takes every path's alone (stopping a
// kubelet takes the other path's devices on the node too).
func TestPoolHoldFollowsTheSpecsLabels(t *testing.T) {
	paths := []gpu.Path{&gpu.DRA{}, &gpu.DevicePlugin{}}
	for _, c := range []struct {
		labels []string
		mode   poollock.Mode
		names  []string
	}{
		{[]string{"scenario:allocation", labels.PathDRA}, poollock.Shared, []string{"path-dra"}},
		{[]string{"scenario:gang", labels.HoldsPath}, poollock.Exclusive, []string{"path-dra"}},
		{[]string{"scenario:failure", labels.HoldsNodes, labels.Disruptive}, poollock.Exclusive, []string{"path-dra", "path-device-plugin"}},
	} {
		mode, names := poolHold(c.labels, "dra", paths)
		if mode != c.mode || !slices.Equal(names, c.names) {
			t.Errorf("%v: %s %v, want %s %v", c.labels, mode, names, c.mode, c.names)
		}
	}
}
