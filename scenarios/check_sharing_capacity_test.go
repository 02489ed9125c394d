package scenarios

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
)

func q(s string) *resource.Quantity {
	v := resource.MustParse(s)
	return &v
}

// sharedGPU is a GPU of 80Gi published as the fake agent does with 2 replicas: shares of 40Gi up to the
// whole, a plain claim consuming the whole.
func sharedGPU(value string) cluster.ConsumableDevice {
	return cluster.ConsumableDevice{Name: "gpu-4", UUID: "GPU-aaaa", Capacity: map[string]cluster.ConsumableCapacity{
		"memory": {Value: *q(value), Default: q("80Gi"), Min: q("40Gi"), Max: q("80Gi"), Step: q("40Gi")},
	}}
}

func TestCapacityPlan(t *testing.T) {
	plan, err := planCapacity(sharedGPU("80Gi"), maxCapacityPods)
	if err != nil || plan.Name != "memory" || plan.Request.String() != "40Gi" || plan.Consumed.String() != "40Gi" || plan.Count != 2 {
		t.Errorf("fake's GPU: plan %+v, %v; want 2 claims of 40Gi", plan, err)
	}
	// Overstated twice: twice the claims fit.
	if plan, err := planCapacity(sharedGPU("160Gi"), maxCapacityPods); err != nil || plan.Count != 4 {
		t.Errorf("overstated GPU: plan %+v, %v; want 4 claims", plan, err)
	}
	// Bounded to 2 pods, each of the overstated GPU's claims asks for half of it.
	if plan, err := planCapacity(sharedGPU("160Gi"), 2); err != nil || plan.Request.String() != "80Gi" || plan.Consumed.String() != "80Gi" || plan.Count != 2 {
		t.Errorf("overstated GPU, 2 pods at most: plan %+v, %v; want 2 claims of 80Gi", plan, err)
	}
	// No policy: half the capacity each, two fit.
	free := cluster.ConsumableDevice{Name: "gpu-0", Capacity: map[string]cluster.ConsumableCapacity{"gpu.example.com/memory": {Value: *q("16Gi")}, "cores": {Value: *q("8")}}}
	if plan, err := planCapacity(free, maxCapacityPods); err != nil || plan.Name != "gpu.example.com/memory" || plan.Request.String() != "8Gi" || plan.Count != 2 {
		t.Errorf("no policy: plan %+v, %v; want memory, 2 claims of 8Gi", plan, err)
	}
	// A fine step: more than maxPods would fit, so each asks for more, rounded up to the step.
	fine := cluster.ConsumableDevice{Name: "gpu-1", Capacity: map[string]cluster.ConsumableCapacity{
		"memory": {Value: *q("80Gi"), Default: q("1Gi"), Min: q("1Gi"), Step: q("3Gi")},
	}}
	plan, err = planCapacity(fine, maxCapacityPods)
	if err != nil || plan.Consumed.String() != "10Gi" || plan.Count != 8 {
		t.Errorf("fine step: plan %+v (consumed %s), %v; want 8 claims consuming 10Gi", plan, plan.Consumed.String(), err)
	}
	// Valid values: the request rounds up to the next one.
	values := cluster.ConsumableDevice{Name: "gpu-2", Capacity: map[string]cluster.ConsumableCapacity{
		"memory": {Value: *q("80Gi"), Default: q("20Gi"), ValidValues: []resource.Quantity{*q("20Gi"), *q("40Gi")}},
	}}
	if plan, err := planCapacity(values, maxCapacityPods); err != nil || plan.Consumed.String() != "20Gi" || plan.Count != 4 {
		t.Errorf("valid values: plan %+v, %v; want 4 claims of 20Gi", plan, err)
	}
	if _, ok := consumedBy(values.Capacity["memory"], *q("41Gi")); ok {
		t.Error("a request above every valid value is admitted")
	}
	if got, ok := consumedBy(sharedGPU("80Gi").Capacity["memory"], *q("41Gi")); !ok || got.String() != "80Gi" {
		t.Errorf("41Gi rounds up to %s, %v; want 80Gi", got.String(), ok)
	}
	if _, err := planCapacity(cluster.ConsumableDevice{Name: "gpu-3"}, maxCapacityPods); err == nil || !strings.Contains(err.Error(), "publishes no capacity") {
		t.Errorf("no capacity: %v", err)
	}
}

func TestCapacitySharesAndMemory(t *testing.T) {
	total := *q("80Gi")
	share := func(pod, id, consumed string) capacityShare {
		return capacityShare{Pod: pod, Claim: "ns/" + pod + "-gpus", ShareID: id, Consumed: *q(consumed), Found: true}
	}
	if err := checkShares("gpu-4", "GPU-aaaa", "memory", total, []capacityShare{share("cap-0", "s0", "40Gi"), share("cap-1", "s1", "40Gi")}); err != nil {
		t.Errorf("two shares within capacity: %v", err)
	}
	for why, shares := range map[string][]capacityShare{
		"more than its published capacity 80Gi": {share("cap-0", "s0", "40Gi"), share("cap-1", "s1", "40Gi"), share("cap-2", "s2", "40Gi")},
		"without a share ID":                    {share("cap-0", "", "40Gi")},
		"the same share s0":                     {share("cap-0", "s0", "40Gi"), share("cap-1", "s0", "40Gi")},
		"records no consumed memory":            {{Pod: "cap-0", Claim: "ns/cap-0-gpus", ShareID: "s0"}},
	} {
		if err := checkShares("gpu-4", "GPU-aaaa", "memory", total, shares); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v", why, err)
		}
	}

	// The fake's GPU shows 81559 MiB: its memory capacity may be that, not twice it.
	if err := checkCapacityWithinMemory("w1", "gpu-4", "GPU-aaaa", "memory", *q("81559Mi"), "cap-0", 81559); err != nil {
		t.Errorf("capacity equal to the memory: %v", err)
	}
	err := checkCapacityWithinMemory("w1", "gpu-4", "GPU-aaaa", "memory", *q("163118Mi"), "cap-0", 81559)
	if err == nil || err.Error() != "device gpu-4 (GPU GPU-aaaa) on w1 publishes memory capacity 163118Mi (163118 MiB), but the GPU shows 81559 MiB of memory in pod cap-0: the driver overstates the capacity, so claims share more memory than the GPU has" {
		t.Errorf("overstated capacity: %v", err)
	}

	o := capacityObservation("w1", config.PathDRA, "cap-0", "GPU-aaaa", share("cap-0", "s0", "40Gi"), "memory", total)
	if o.Mode != cluster.ModeConsumable || o.Saw != "share s0 of GPU-aaaa" || o.Note != "shares GPU GPU-aaaa by capacity (memory 40960 MiB of 81920 MiB): no fault isolation" {
		t.Errorf("observation %+v", o)
	}
}

func TestCapacitySharingIsCheckedOnTheDRAPath(t *testing.T) {
	modes := []cluster.NodeSharingMode{
		{Node: "w1", Path: config.PathDRA, Mode: cluster.ModeConsumable, Consumable: []cluster.ConsumableDevice{sharedGPU("80Gi")}},
		{Node: "w1", Path: config.PathDevicePlugin, Mode: cluster.ModeConsumable},
	}
	if chosen, _ := sharingModesOn(modes, config.PathDRA, nil); len(chosen) != 1 || chosen[0].Mode != cluster.ModeConsumable {
		t.Errorf("dra: chosen %+v", chosen)
	}
	if chosen, exclusive := sharingModesOn(modes, config.PathDevicePlugin, nil); len(chosen) != 0 || len(exclusive) != 1 {
		t.Errorf("device-plugin: chosen %+v, not checked %v", chosen, exclusive)
	}
}

func TestShareOfUsesOneUnit(t *testing.T) {
	cases := []struct{ consumed, total, want string }{
		// what the fake's policy step made of half of an H100 on the local cluster
		{"41758208Ki", "81559Mi", "40779 MiB of 81559 MiB"},
		{"4", "8", "4 of 8"},
		{"512Ki", "1Mi", "512Ki of 1Mi"},
		{"1", "1Ki", "1 of 1Ki"},
	}
	for _, c := range cases {
		if got := shareOf(resource.MustParse(c.consumed), resource.MustParse(c.total)); got != c.want {
			t.Errorf("shareOf(%s, %s) = %q, want %q", c.consumed, c.total, got, c.want)
		}
	}
}
