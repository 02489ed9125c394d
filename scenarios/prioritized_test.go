package scenarios

import (
	"maps"
	"slices"
	"testing"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
)

// The MIG-else-whole claim needs a pool node on the path whose GPU is published both whole and as
// partitions; a node with partitions but no whole device, another path's, or one outside the pool is not one.
func TestPartitionableWithWhole(t *testing.T) {
	whole := cluster.PartitionableGPU{Whole: "gpu-4", UUID: "GPU-a", Partitions: []cluster.PartitionDevice{{Name: "gpu-4-mig-1g10gb-0"}}}
	partsOnly := cluster.PartitionableGPU{UUID: "GPU-b", Partitions: []cluster.PartitionDevice{{Name: "gpu-5-mig-1g10gb-0"}}}
	modes := []cluster.NodeSharingMode{
		{Node: "w1", Path: "dra", Mode: cluster.ModePartitionable, Partitions: []cluster.PartitionableGPU{partsOnly, whole}},
		{Node: "w2", Path: "dra", Mode: cluster.ModePartitionable, Partitions: []cluster.PartitionableGPU{partsOnly}},
		{Node: "w3", Path: "dra", Mode: cluster.ModePartitionable, Partitions: []cluster.PartitionableGPU{whole}},
		{Node: "w1", Path: "device-plugin", Mode: cluster.ModeMIGMixed},
		{Node: "w4", Path: "dra", Mode: "exclusive"},
	}
	got := partitionableWithWhole(modes, "dra", []string{"w1", "w2", "w4"})
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, []string{"w1"}) {
		t.Errorf("partitionableWithWhole = %v, want w1 alone (w2 has no whole device, w3 is outside the pool)", keys)
	}
	if got := partitionableWithWhole(modes, "device-plugin", []string{"w1"}); len(got) != 0 {
		t.Errorf("device-plugin: %v", got)
	}
}

func TestDescribeAlternatives(t *testing.T) {
	got := describeAlternatives([]fixtures.Alternative{{Name: "mig", DeviceClass: "mig.nvidia.com", Count: 1, Selector: "x == 'y'"}, {Name: "whole", DeviceClass: "gpu.nvidia.com", Count: 1}})
	if want := "mig (mig.nvidia.com, 1, x == 'y') then whole (gpu.nvidia.com, 1)"; got != want {
		t.Errorf("describeAlternatives = %q, want %q", got, want)
	}
}
