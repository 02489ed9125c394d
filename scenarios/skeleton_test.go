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

// A spec shares its path's lock and every node's of the path; holds:node shares the path's and leases one
// node with a device on the path; on:node shares the path's only (it leases a node when it knows which fit); holds:path takes the path's alone; holds:nodes takes every path's alone
// (stopping a kubelet takes the other path's devices on the node too).
func TestPoolHoldFollowsTheSpecsLabels(t *testing.T) {
	// w3 has no device on the path; w4, outside the GPU pool, is not the suite's to use.
	dra := &gpu.DRA{Devices: map[string][]string{"w1": {"gpu-0", "gpu-1"}, "w2": {"gpu-0"}, "w3": {}, "w4": {"gpu-0"}}}
	paths := []gpu.Path{dra, &gpu.DevicePlugin{Resource: "nvidia.com/gpu"}}
	b := Base{Paths: paths, GPUPool: []string{"w1", "w2", "w3"}}
	for _, c := range []struct {
		labels []string
		want   poolPlan
	}{
		{[]string{"scenario:allocation", labels.PathDRA}, poolPlan{poollock.Shared, []string{"path-dra", "path-dra@w1", "path-dra@w2"}, nil}},
		{[]string{"scenario:failure", labels.HoldsNode}, poolPlan{poollock.Shared, []string{"path-dra"}, []string{"path-dra@w1", "path-dra@w2"}}},
		{[]string{"scenario:allocation", labels.OnNode}, poolPlan{poollock.Shared, []string{"path-dra"}, nil}}, // it leases later
		{[]string{"scenario:shortage", labels.NoDevices}, poolPlan{poollock.Shared, []string{"path-dra"}, nil}},
		{[]string{"scenario:gang", labels.HoldsPath}, poolPlan{poollock.Exclusive, []string{"path-dra"}, nil}},
		{[]string{"scenario:failure", labels.HoldsNodes, labels.Disruptive}, poolPlan{poollock.Exclusive, []string{"path-dra", "path-device-plugin"}, nil}},
	} {
		got := poolHold(c.labels, "dra", b)
		if got.mode != c.want.mode || !slices.Equal(got.names, c.want.names) || !slices.Equal(got.lease, c.want.lease) {
			t.Errorf("%v: %+v, want %+v", c.labels, got, c.want)
		}
	}
	// No node with a device on the path: nothing to lease, the holder holds the path.
	if got := poolHold([]string{labels.HoldsNode}, "device-plugin", b); got.mode != poollock.Exclusive || len(got.lease) != 0 {
		t.Errorf("holds:node without an eligible node: %+v, want the path exclusive", got)
	}
}
