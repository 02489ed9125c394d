package scenarios

import (
	"slices"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/framework/config"
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
// takes the stops lock alone and shares every path (its own alone with holds:path), and holds
// the node it stops later (Spec.stopping); holds:nodes takes every path's alone.
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
		{[]string{"scenario:gang", labels.LeasesNodes}, []poollock.Lock{lk("path-dra", sh)}, nil},  // it leases its nodes later
		{[]string{"scenario:shortage", labels.NoDevices}, []poollock.Lock{lk(stopsLock, sh), lk("path-dra", sh)}, nil},
		{[]string{"scenario:gang", labels.HoldsPath}, []poollock.Lock{lk("path-dra", ex)}, nil},
		{[]string{"scenario:failure", labels.StopsNode, labels.Disruptive}, []poollock.Lock{lk(stopsLock, ex), lk("path-dra", sh), lk("path-device-plugin", sh)}, nil},
		{[]string{"scenario:failure", labels.StopsNode, labels.HoldsPath}, []poollock.Lock{lk(stopsLock, ex), lk("path-dra", sh), lk("path-device-plugin", sh), lk("path-dra", ex)}, nil},
		{[]string{"scenario:sharing", labels.HoldsNodes}, []poollock.Lock{lk("path-dra", ex), lk("path-device-plugin", ex)}, nil},
		// A device fault takes the faults lock shared besides its node's lease, or its path (a gang).
		{[]string{"scenario:failure", labels.HoldsNode, labels.FaultsDevice}, []poollock.Lock{lk(faultsLock, sh), lk("path-dra", sh)}, []string{"path-dra@w1", "path-dra@w2"}},
		{[]string{"scenario:gang", labels.HoldsPath, labels.FaultsDevice}, []poollock.Lock{lk(faultsLock, sh), lk("path-dra", ex)}, nil},
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

// The extended-resource-dra path hands out the DRA path's devices: its specs hold the DRA path's locks, and
// a spec holding every path names them once.
func TestExtendedDRAHoldsTheDRAPathsLocks(t *testing.T) {
	dra := &gpu.DRA{Devices: map[string][]string{"w1": {"gpu-0"}, "w2": {"gpu-0"}}}
	ext := &gpu.ExtendedDRA{DRA: &gpu.DRA{Devices: map[string][]string{"w2": {"gpu-0"}}}, Resource: "nvidia.com/gpu"}
	b := Base{Paths: []gpu.Path{&gpu.DevicePlugin{Resource: "nvidia.com/gpu"}, dra, ext}, GPUPool: []string{"w1", "w2"}}
	sh, ex := poollock.Shared, poollock.Exclusive
	lk := func(name string, m poollock.Mode) poollock.Lock { return poollock.Lock{Name: name, Mode: m} }
	if got := poolHold([]string{labels.HoldsNode}, config.PathExtendedDRA, b); !slices.Equal(got.locks, []poollock.Lock{lk("path-dra", sh)}) || !slices.Equal(got.lease, []string{"path-dra@w2"}) {
		t.Errorf("holds:node on the third path: %+v", got)
	}
	if got := poolHold([]string{labels.HoldsNodes}, config.PathExtendedDRA, b); !slices.Equal(got.locks, []poollock.Lock{lk("path-device-plugin", ex), lk("path-dra", ex)}) {
		t.Errorf("holds:nodes: %+v", got)
	}
	// A scenario that declares it does not run there registers nothing on the path, and says why.
	var recorded []string
	b.NotExercised = func(what, why string) { recorded = append(recorded, what+": "+why) }
	if got := b.pathsFor(sharingName); len(got) != 2 || len(recorded) != 1 || !strings.Contains(recorded[0], "extended-resource-dra: sharing: sharing is configured") {
		t.Errorf("pathsFor(sharing) = %v, recorded %q", got, recorded)
	}
	if got := b.pathsFor(allocationName); len(got) != 3 {
		t.Errorf("pathsFor(allocation) = %v", got)
	}
	if why := notOnPath(ext, []any{labels.Of(labels.Scenario(sharingName))}); !strings.Contains(why, "a DRA-served extended resource has none of its own") {
		t.Errorf("notOnPath(sharing) = %q", why)
	}
	for _, p := range []gpu.Path{dra, ext} {
		if why := notOnPath(p, []any{labels.Of(labels.Scenario(failureName))}); why != "" {
			t.Errorf("notOnPath(failure, %s) = %q", p.Name(), why)
		}
	}
}

func TestCanaryHoldTakesTheCanaryAndEnoughKnownGoodDevices(t *testing.T) {
	sh, ex := poollock.Shared, poollock.Exclusive
	lk := func(name string, m poollock.Mode) poollock.Lock { return poollock.Lock{Name: name, Mode: m} }
	first := []poollock.Lock{lk(faultsLock, ex), lk(stopsLock, ex), lk(canaryLock, ex)}
	// The local cluster: the canary (c1) is a pool of its own; w2 has more devices on the first path.
	dp := &gpu.DevicePlugin{Resource: "nvidia.com/gpu", Allocatable: map[string]int64{"w1": 2, "w2": 4, "c1": 4}}
	dra := &gpu.DRA{Devices: map[string][]string{"w1": {"gpu-0"}, "w2": {"gpu-0"}, "c1": {"gpu-0"}}}
	local := Base{Paths: []gpu.Path{dp, dra}, GPUPool: []string{"w1", "w2"}}
	for _, c := range []struct {
		what  string
		b     Base
		need  int64
		locks []poollock.Lock
		good  []string
		// early: what it lets go once it has compared the known-good pool (the faults and stops locks, the
		// known-good nodes, a path held for them alone); never the canary's.
		early []string
	}{
		{"one known-good node has what its pods need", local, 4,
			append(slices.Clone(first), lk("path-device-plugin", sh), lk("path-device-plugin@w2", ex)), []string{"w2"},
			[]string{faultsLock, stopsLock, "path-device-plugin@w2", "path-device-plugin"}},
		{"the known-good node with most devices is short: the next one too", local, 5,
			append(slices.Clone(first), lk("path-device-plugin", sh), lk("path-device-plugin@w2", ex), lk("path-device-plugin@w1", ex)), []string{"w2", "w1"},
			[]string{faultsLock, stopsLock, "path-device-plugin@w2", "path-device-plugin@w1", "path-device-plugin"}},
		// A real cluster where the canary is part of the GPU pool: its node on every path.
		{"the canary is in the GPU pool", Base{Paths: []gpu.Path{dp, dra}, GPUPool: []string{"w1", "w2", "c1"}}, 4,
			append(slices.Clone(first), lk("path-device-plugin", sh), lk("path-device-plugin@c1", ex), lk("path-device-plugin@w2", ex),
				lk("path-dra", sh), lk("path-dra@c1", ex)), []string{"w2"},
			[]string{faultsLock, stopsLock, "path-device-plugin@w2"}},
		// Known-good nodes outside the GPU pool: no other spec uses them, no lock for them.
		{"the known-good pool is not the suite's GPU pool", Base{Paths: []gpu.Path{dp, dra}, GPUPool: []string{"w9"}}, 4, first, []string{"w2"},
			[]string{faultsLock, stopsLock}},
	} {
		got := canaryHold(c.b, []string{"c1"}, []string{"w1", "w2"}, c.need)
		if !slices.Equal(got.locks, c.locks) || !slices.Equal(got.good, c.good) || !slices.Equal(got.early, c.early) {
			t.Errorf("%s: locks %v good %v early %v, want %v %v %v", c.what, got.locks, got.good, got.early, c.locks, c.good, c.early)
		}
	}
	// No known-good node has a device on the first path: nothing for its pods (the rehearsal says so).
	if got := canaryHold(local, []string{"c1"}, []string{"w3"}, 4); len(got.good) != 0 || !slices.Equal(got.locks, first) || !slices.Equal(got.early, []string{faultsLock, stopsLock}) {
		t.Errorf("no known-good device: %+v", got)
	}
}
