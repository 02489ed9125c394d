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
// node with a device on the path; on:node shares the path's only (it leases a node when it knows which
// fit); devices:none shares the path's and the stops lock; holds:path takes the path's alone; stops:node
// takes the stops lock alone and shares every path (its own alone with holds:path), and holds the node it
// stops later (Spec.stopping); holds:nodes takes every path's alone.
func TestPoolHoldFollowsTheSpecsLabels(t *testing.T) {
	// w3 has no device on the path; w4, outside the GPU pool, is not the suite's to use.
	dra := &gpu.DRA{Devices: map[string][]string{"w1": {"gpu-0", "gpu-1"}, "w2": {"gpu-0"}, "w3": {}, "w4": {"gpu-0"}}}
	paths := []gpu.Path{dra, &gpu.DevicePlugin{Resource: "nvidia.com/gpu"}}
	b := Base{Paths: paths, GPUPool: []string{"w1", "w2", "w3"}}
	sh, ex := poollock.Shared, poollock.Exclusive
	lk := func(name string, m poollock.Mode) poollock.Lock { return poollock.Lock{Name: name, Mode: m} }
	for _, c := range []struct {
		labels []string
		locks  []poollock.Lock
		lease  []string
	}{
		{[]string{"scenario:allocation", labels.PathDRA}, []poollock.Lock{lk("path-dra", sh), lk("path-dra@w1", sh), lk("path-dra@w2", sh)}, nil},
		{[]string{"scenario:failure", labels.HoldsNode}, []poollock.Lock{lk("path-dra", sh)}, []string{"path-dra@w1", "path-dra@w2"}},
		{[]string{"scenario:allocation", labels.OnNode}, []poollock.Lock{lk("path-dra", sh)}, nil}, // it leases later
		{[]string{"scenario:shortage", labels.NoDevices}, []poollock.Lock{lk(stopsLock, sh), lk("path-dra", sh)}, nil},
		{[]string{"scenario:gang", labels.HoldsPath}, []poollock.Lock{lk("path-dra", ex)}, nil},
		{[]string{"scenario:failure", labels.StopsNode, labels.Disruptive}, []poollock.Lock{lk(stopsLock, ex), lk("path-dra", sh), lk("path-device-plugin", sh)}, nil},
		{[]string{"scenario:failure", labels.StopsNode, labels.HoldsPath}, []poollock.Lock{lk(stopsLock, ex), lk("path-dra", sh), lk("path-device-plugin", sh), lk("path-dra", ex)}, nil},
		{[]string{"scenario:sharing", labels.HoldsNodes}, []poollock.Lock{lk("path-dra", ex), lk("path-device-plugin", ex)}, nil},
	} {
		got := poolHold(c.labels, "dra", b)
		if !slices.Equal(got.locks, c.locks) || !slices.Equal(got.lease, c.lease) {
			t.Errorf("%v: %+v, want locks %v lease %v", c.labels, got, c.locks, c.lease)
		}
	}
	// No node with a device on the path: nothing to lease, the holder holds the path.
	if got := poolHold([]string{labels.HoldsNode}, "device-plugin", b); !slices.Equal(got.locks, []poollock.Lock{lk("path-device-plugin", ex)}) || len(got.lease) != 0 {
		t.Errorf("holds:node without an eligible node: %+v, want the path exclusive", got)
	}
}
