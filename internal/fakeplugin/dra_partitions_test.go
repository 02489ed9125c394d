package fakeplugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// partitionableAgent is an agent on node-a with 4 device-plugin GPUs and dra DRA GPUs (minors 4..) in
// the given sharing mode, with the fake driver's CDI on.
func partitionableAgent(t *testing.T, mode string, dra int) *Plugin {
	t.Helper()
	cfg := cdiConfig(t, dra)
	cfg.Sharing = mode
	if mode == fakegpu.SharingTimeSlicing || mode == fakegpu.SharingMPS {
		cfg.Replicas = 2 // the sharing modes need replicas to share
	}
	return mustNew(t, cfg)
}

// sliceDevicesLocked is the agent's device list, flat, as the older tests read it.
func (p *Plugin) sliceDevicesLocked() ([]resourceapi.Device, <-chan struct{}) { //nolint:unparam // the signature faults_test.go reads it with
	groups, changed := p.sliceDeviceGroupsLocked()
	var devs []resourceapi.Device
	for _, g := range groups {
		devs = append(devs, g...)
	}
	return devs, changed
}

// poolOf is the agent's pool as it would publish it now.
func poolOf(p *Plugin) []resourceslice.Slice {
	p.mu.Lock()
	groups, _ := p.sliceDeviceGroupsLocked()
	p.mu.Unlock()
	return p.draSlices(groups)
}

// checkPool applies the rules the API server (pkg/apis/resource/validation) and the ResourceSlice
// controller (validatePool) apply to a pool's slices, and returns every device by name and every counter
// set by name.
func checkPool(t *testing.T, pool []resourceslice.Slice) (map[string]resourceapi.Device, map[string]resourceapi.CounterSet) {
	t.Helper()
	devs := map[string]resourceapi.Device{}
	sets := map[string]resourceapi.CounterSet{}
	for n, sl := range pool {
		if len(sl.Devices) > 0 && len(sl.SharedCounters) > 0 {
			t.Errorf("slice %d holds devices and counter sets; the API allows only one of them", n)
		}
		if len(sl.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
			t.Errorf("slice %d holds %d counter sets, more than %d", n, len(sl.SharedCounters), resourceapi.ResourceSliceMaxCounterSets)
		}
		counting := slices.ContainsFunc(sl.Devices, func(d resourceapi.Device) bool { return len(d.ConsumesCounters) > 0 })
		if limit := resourceapi.ResourceSliceMaxDevices; len(sl.Devices) > limit || counting && len(sl.Devices) > resourceapi.ResourceSliceMaxDevicesWithTaintsOrConsumesCounters {
			t.Errorf("slice %d holds %d devices (consuming counters: %v), over the API's limit", n, len(sl.Devices), counting)
		}
		for _, cs := range sl.SharedCounters {
			if _, dup := sets[cs.Name]; dup {
				t.Errorf("counter set %s published twice in the pool", cs.Name)
			}
			sets[cs.Name] = cs
			if errs := validation.IsDNS1123Label(cs.Name); len(errs) > 0 {
				t.Errorf("counter set name %s: %v", cs.Name, errs)
			}
			if len(cs.Counters) == 0 || len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
				t.Errorf("counter set %s has %d counters", cs.Name, len(cs.Counters))
			}
			for c := range cs.Counters {
				if errs := validation.IsDNS1123Label(c); len(errs) > 0 {
					t.Errorf("counter name %s: %v", c, errs)
				}
			}
		}
		for _, d := range sl.Devices {
			if _, dup := devs[d.Name]; dup {
				t.Errorf("device %s published twice in the pool", d.Name)
			}
			devs[d.Name] = d
			if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
				t.Errorf("device name %s: %v", d.Name, errs)
			}
			if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
				t.Errorf("device %s has %d attributes and capacities", d.Name, n)
			}
			for a, v := range d.Attributes {
				if len(a) > resourceapi.DeviceMaxIDLength {
					t.Errorf("device %s: attribute name %s is too long", d.Name, a)
				}
				if v.StringValue != nil && len(*v.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
					t.Errorf("device %s: attribute %s is too long", d.Name, a)
				}
			}
			if len(d.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
				t.Errorf("device %s consumes from %d counter sets", d.Name, len(d.ConsumesCounters))
			}
		}
	}
	// Cross references, as the ResourceSlice controller and the allocator check them.
	for _, d := range devs {
		for _, c := range d.ConsumesCounters {
			cs, ok := sets[c.CounterSet]
			if !ok {
				t.Errorf("device %s consumes from counter set %s, which the pool does not publish", d.Name, c.CounterSet)
				continue
			}
			for name, v := range c.Counters {
				have, ok := cs.Counters[name]
				if !ok || v.Value.Cmp(have.Value) > 0 {
					t.Errorf("device %s consumes %s=%s of counter set %s, which has %v", d.Name, name, v.Value.String(), cs.Name, have.Value.String())
				}
			}
		}
	}
	return devs, sets
}

// fits reports whether the devices can be allocated together: their consumption of every counter, summed,
// stays within the counter sets, as the scheduler's allocator decides.
func fits(sets map[string]resourceapi.CounterSet, devs ...resourceapi.Device) bool {
	used := map[string]map[string]*resource.Quantity{}
	for _, d := range devs {
		for _, c := range d.ConsumesCounters {
			if used[c.CounterSet] == nil {
				used[c.CounterSet] = map[string]*resource.Quantity{}
			}
			for name, v := range c.Counters {
				if used[c.CounterSet][name] == nil {
					used[c.CounterSet][name] = resource.NewQuantity(0, resource.DecimalSI)
				}
				used[c.CounterSet][name].Add(v.Value)
			}
		}
	}
	for set, counters := range used {
		for name, q := range counters {
			if q.Cmp(sets[set].Counters[name].Value) > 0 {
				return false
			}
		}
	}
	return true
}

func TestPartitionPlacementsAreEveryPlacementOfEveryProfileButTheWholeGPU(t *testing.T) {
	got := PartitionPlacements()
	// H100 80GB: 7 × 1g.10gb, 3 × 2g.20gb, 2 × 3g.40gb, 1 × 4g.40gb; 7g.80gb is the whole GPU.
	want := map[string]int{"1g.10gb": 7, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1}
	have := map[string]int{}
	for _, pl := range got {
		have[pl.Profile]++
		if _, end := pl.Slices(); end > fakegpu.MIGSlices {
			t.Errorf("placement %+v ends past the GPU's %d slices", pl, fakegpu.MIGSlices)
		}
	}
	if fmt.Sprint(have) != fmt.Sprint(want) {
		t.Errorf("placements per profile = %v, want %v", have, want)
	}
	for _, pl := range got {
		name := DRAPartitionName(4, pl)
		i, back, ok := draPartition(name)
		if !ok || i != 4 || back != pl {
			t.Errorf("draPartition(%s) = %d, %+v, %v; want 4, %+v", name, i, back, ok, pl)
		}
	}
	if n := DRAPartitionName(4, fakegpu.Placement{Profile: "3g.40gb", Start: 4}); n != "gpu-4-mig-3g40gb-4" {
		t.Errorf("partition name = %s, want the contract's gpu-4-mig-3g40gb-4", n)
	}
	for _, bad := range []string{"gpu-4", "gpu-4-mig-7g80gb-0", "gpu-4-mig-3g40gb-2", "gpu-4-mig-3g.40gb-0", "gpu-x-mig-1g10gb-0", "gpu-4-mig-1g10gb-07", "nvme-0-mig-1g10gb-0"} {
		if _, _, ok := draPartition(bad); ok {
			t.Errorf("draPartition(%s) accepted a name that is no partition", bad)
		}
	}
}

// In the MIG modes each DRA GPU is published whole and as all its partitions, in a pool the API server
// accepts: counter sets in their own slice, each GPU's devices together.
func TestMIGModesPublishPartitionableGPUs(t *testing.T) {
	for _, mode := range []string{fakegpu.SharingMIGSingle, fakegpu.SharingMIGMixed} {
		t.Run(mode, func(t *testing.T) {
			p := partitionableAgent(t, mode, 4)
			pool := poolOf(p)
			devs, sets := checkPool(t, pool)
			if len(pool) != 2 || len(pool[0].SharedCounters) != 4 || len(pool[1].Devices) != 4*14 {
				t.Fatalf("pool: %d slices (want 2: 4 counter sets, then 56 devices)", len(pool))
			}
			for i := 4; i < 8; i++ {
				cs, ok := sets[DRACounterSetName(i)]
				if !ok {
					t.Fatalf("no counter set %s (have %v)", DRACounterSetName(i), slices.Sorted(maps.Keys(sets)))
				}
				for k := range fakegpu.MIGSlices {
					if v := cs.Counters["memory-slice-"+strconv.Itoa(k)].Value; v.Value() != 1 {
						t.Errorf("%s: memory-slice-%d = %s, want 1", cs.Name, k, v.String())
					}
				}
				if v := cs.Counters[DRACounterMultiprocessors].Value; v.Value() != 112 {
					t.Errorf("%s: multiprocessors = %s, want the 7g.80gb profile's 112", cs.Name, v.String())
				}
				whole := devs[DRADeviceName(i)]
				if typ := whole.Attributes["type"].StringValue; typ == nil || *typ != DRATypeGPU {
					t.Errorf("%s: type %v, want gpu", whole.Name, typ)
				}
				if len(whole.ConsumesCounters) != 1 || whole.ConsumesCounters[0].CounterSet != cs.Name || len(whole.ConsumesCounters[0].Counters) != len(cs.Counters) {
					t.Errorf("%s consumes %+v, want all of %s", whole.Name, whole.ConsumesCounters, cs.Name)
				}
				parent := p.PhysicalUUIDs()[i]
				for _, pl := range PartitionPlacements() {
					d, ok := devs[DRAPartitionName(i, pl)]
					if !ok {
						t.Errorf("partition %s is not published", DRAPartitionName(i, pl))
						continue
					}
					prof, _ := fakegpu.ProfileByName(pl.Profile)
					wantAttrs := map[string]string{
						"type": "mig", "profile": pl.Profile, "uuid": fakegpu.MIGUUID(parent, pl), "parentUUID": parent,
						"parentMinor": strconv.Itoa(i), "placementStart": strconv.Itoa(pl.Start), "placementSize": strconv.Itoa(prof.Slices),
						"productName": p.cfg.Product,
					}
					for a, want := range wantAttrs {
						if got := attrString(d.Attributes[resourceapi.QualifiedName(a)]); got != want {
							t.Errorf("%s: %s = %q, want %q", d.Name, a, got, want)
						}
					}
					if m := d.Capacity["memory"].Value; m.Value() != int64(prof.MemoryMiB)<<20 {
						t.Errorf("%s: memory %s, want %dMi", d.Name, m.String(), prof.MemoryMiB)
					}
					start, end := pl.Slices()
					var consumed []string
					for c := range d.ConsumesCounters[0].Counters {
						if strings.HasPrefix(c, "memory-slice-") {
							consumed = append(consumed, c)
						}
					}
					slices.Sort(consumed)
					var want []string
					for k := start; k < end; k++ {
						want = append(want, DRAMemorySliceCounter(k))
					}
					if d.ConsumesCounters[0].CounterSet != cs.Name || !slices.Equal(consumed, want) {
						t.Errorf("%s consumes slices %v of %s, want %v of %s", d.Name, consumed, d.ConsumesCounters[0].CounterSet, want, cs.Name)
					}
				}
			}
		})
	}
}

// The counters do what MIG's geometry says: two partitions of one GPU fit together exactly when their
// placements do not overlap, the whole GPU fits with none of its partitions, and partitions of two GPUs
// never compete.
func TestCountersKeepOverlappingPartitionsApart(t *testing.T) {
	p := partitionableAgent(t, fakegpu.SharingMIGMixed, 2)
	devs, sets := checkPool(t, poolOf(p))
	pls := PartitionPlacements()
	for _, a := range pls {
		da := devs[DRAPartitionName(4, a)]
		if fits(sets, devs[DRADeviceName(4)], da) {
			t.Errorf("the whole gpu-4 and its partition %s fit together", da.Name)
		}
		if !fits(sets, devs[DRADeviceName(5)], da) {
			t.Errorf("the whole gpu-5 and gpu-4's partition %s do not fit together", da.Name)
		}
		for _, b := range pls {
			if a == b {
				continue
			}
			db := devs[DRAPartitionName(4, b)]
			if got := fits(sets, da, db); got == a.Overlaps(b) {
				t.Errorf("%s and %s fit together: %v; their placements overlap: %v", da.Name, db.Name, got, a.Overlaps(b))
			}
		}
	}
	// A full valid geometry (the mixed layout's GPU 3: 3 × 2g.20gb + 1g.10gb) fits; one more 1g does not.
	layout := []resourceapi.Device{devs["gpu-4-mig-2g20gb-0"], devs["gpu-4-mig-2g20gb-2"], devs["gpu-4-mig-2g20gb-4"], devs["gpu-4-mig-1g10gb-6"]}
	if !fits(sets, layout...) || fits(sets, append(layout, devs["gpu-4-mig-1g10gb-0"])...) {
		t.Error("the counters do not admit exactly a full MIG geometry")
	}
}

// Outside the MIG modes nothing changes: one slice, whole GPUs, no counters.
func TestOtherModesPublishWholeGPUsOnly(t *testing.T) {
	for _, mode := range []string{"", fakegpu.SharingNone, fakegpu.SharingTimeSlicing, fakegpu.SharingMPS} {
		p := partitionableAgent(t, mode, 2)
		pool := poolOf(p)
		if len(pool) != 1 || len(pool[0].SharedCounters) != 0 || !slices.Equal(sliceNames(pool[0].Devices), []string{"gpu-4", "gpu-5"}) {
			t.Errorf("mode %q: pool %+v, want one slice with gpu-4 and gpu-5", mode, pool)
			continue
		}
		for _, d := range pool[0].Devices {
			if len(d.ConsumesCounters) > 0 || attrString(d.Attributes["type"]) != DRATypeGPU {
				t.Errorf("mode %q: %s consumes %v, type %q", mode, d.Name, d.ConsumesCounters, attrString(d.Attributes["type"]))
			}
		}
	}
}

// Under dra-partition-no-counters the partitions consume nothing, so the scheduler may hand out a GPU and
// its partitions together; the pool stays valid.
func TestPartitionNoCountersFault(t *testing.T) {
	p := partitionableAgent(t, fakegpu.SharingMIGSingle, 2)
	p.mu.Lock()
	p.faults[FaultDRAPartitionNoCounters] = true
	p.mu.Unlock()
	devs, sets := checkPool(t, poolOf(p))
	if len(devs) != 2*14 {
		t.Fatalf("%d devices, want 28", len(devs))
	}
	for name, d := range devs {
		_, _, partition := draPartition(name)
		if partition == (len(d.ConsumesCounters) > 0) {
			t.Errorf("%s consumes %v (a partition: %v); under the fault only whole GPUs consume", name, d.ConsumesCounters, partition)
		}
	}
	if !fits(sets, devs["gpu-4"], devs["gpu-4-mig-3g40gb-0"], devs["gpu-4-mig-4g40gb-0"]) {
		t.Error("under the fault a GPU and its overlapping partitions should fit together")
	}
}

// Many DRA GPUs spread over several slices within the API's limits; an unhealthy GPU's partitions are
// tainted with it; the phantom consumes nothing.
func TestPartitionablePoolStaysWithinTheAPIsLimits(t *testing.T) {
	p := partitionableAgent(t, fakegpu.SharingMIGMixed, 10)
	p.SetUnhealthyFromAnnotation("6")
	p.mu.Lock()
	p.faults[FaultPhantomSliceDevice] = true
	p.mu.Unlock()
	pool := poolOf(p)
	devs, sets := checkPool(t, pool)
	if len(sets) != 10 || len(devs) != 10*14+1 {
		t.Errorf("%d counter sets and %d devices, want 10 and %d", len(sets), len(devs), 10*14+1)
	}
	for _, name := range []string{"gpu-6", "gpu-6-mig-1g10gb-0"} {
		if d := devs[name]; len(d.Taints) != 1 || d.Taints[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
			t.Errorf("%s of unhealthy gpu-6 has taints %v, want one NoSchedule", name, d.Taints)
		}
	}
	if d := devs["gpu-5"]; len(d.Taints) != 0 {
		t.Errorf("healthy gpu-5 has taints %v", d.Taints)
	}
	if d, ok := devs[DRADeviceName(14)]; !ok || len(d.ConsumesCounters) > 0 {
		t.Errorf("phantom gpu-14: published %v, consumes %v; want published, consuming nothing", ok, d.ConsumesCounters)
	}
	// Each GPU's devices are in one slice.
	where := map[string]int{}
	for n, sl := range pool {
		for _, d := range sl.Devices {
			gpu, _, _ := strings.Cut(d.Name, "-mig-")
			if s, seen := where[gpu]; seen && s != n {
				t.Errorf("devices of %s in slices %d and %d", gpu, s, n)
			}
			where[gpu] = n
		}
	}
}

func TestPreparePartitionHandsTheKubeletItsMIGDevice(t *testing.T) {
	p := partitionableAgent(t, fakegpu.SharingMIGMixed, 2)
	res := p.prepareClaim(claim("gpu-5-mig-3g40gb-4", "gpu-4"))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	mig := fakegpu.MIGUUID(p.PhysicalUUIDs()[5], fakegpu.Placement{Profile: "3g.40gb", Start: 4})
	want := []kubeletplugin.Device{
		{Requests: []string{"gpus"}, PoolName: "node-a", DeviceName: "gpu-5-mig-3g40gb-4", CDIDeviceIDs: []string{CDIMIGDeviceName(mig)}},
		{Requests: []string{"gpus"}, PoolName: "node-a", DeviceName: "gpu-4", CDIDeviceIDs: []string{CDIDeviceName(4)}},
	}
	if fmt.Sprint(res.Devices) != fmt.Sprint(want) {
		t.Errorf("prepared %+v, want %+v", res.Devices, want)
	}
	for _, bad := range []string{"gpu-6-mig-1g10gb-0", "gpu-1-mig-1g10gb-0", "gpu-4-mig-7g80gb-0", "gpu-4-mig-3g40gb-2"} {
		if res := p.prepareClaim(claim(bad)); res.Err == nil {
			t.Errorf("prepare of %s succeeded", bad)
		}
	}
	// Under wrong-ids the partition is the same placement on another GPU.
	p.SetFaultsFromAnnotation(string(FaultWrongIDs))
	res = p.prepareClaim(claim("gpu-4-mig-1g10gb-2"))
	if res.Err != nil || len(res.Devices) != 1 {
		t.Fatalf("prepare under wrong-ids: %+v", res)
	}
	right := CDIMIGDeviceName(fakegpu.MIGUUID(p.PhysicalUUIDs()[4], fakegpu.Placement{Profile: "1g.10gb", Start: 2}))
	if got := res.Devices[0].CDIDeviceIDs; len(got) != 1 || got[0] == right {
		t.Errorf("under wrong-ids the claim got %v, the right MIG device %s", got, right)
	}
}

func TestPartitionsAreRefusedOutsideTheMIGModes(t *testing.T) {
	p := partitionableAgent(t, fakegpu.SharingNone, 2)
	res := p.prepareClaim(claim("gpu-4-mig-1g10gb-0"))
	if res.Err == nil || !strings.Contains(res.Err.Error(), "whole GPUs only") {
		t.Errorf("prepare of a partition on a node without them: %v", res.Err)
	}
	if res := p.prepareClaim(claim("gpu-4")); res.Err != nil || len(res.Devices) != 1 || res.Devices[0].CDIDeviceIDs[0] != CDIDeviceName(4) {
		t.Errorf("prepare of a whole GPU: %+v", res)
	}
}

func TestUnprepareOfAPartitionClaimSucceeds(t *testing.T) {
	p := partitionableAgent(t, fakegpu.SharingMIGSingle, 2)
	c := claim("gpu-4-mig-2g20gb-2")
	if res := p.prepareClaim(c); res.Err != nil {
		t.Fatal(res.Err)
	}
	out, err := draPlugin{p}.UnprepareResourceClaims(t.Context(), []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID}})
	if err != nil || len(out) != 1 || out[c.UID] != nil {
		t.Errorf("unprepare: %v, %v", out, err)
	}
}

// End to end against a fake API server: in a MIG mode the node's pool is two ResourceSlices, the counter
// sets and the devices.
func TestServeDRAPublishesThePartitionablePool(t *testing.T) {
	cfg := testConfig(t, shortDir(t), "node-a")
	cfg.DRADevices = 2
	cfg.Sharing = fakegpu.SharingMIGMixed
	cfg.KubeletRegistryDir, cfg.KubeletPluginsDir = shortDir(t), shortDir(t)
	cfg.DRAUnregistered = true
	p := mustNew(t, cfg)
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-a-uid"}})
	var n atomic.Int64
	kube.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice); ok && s.Name == "" {
			s.Name = s.GenerateName + strconv.FormatInt(n.Add(1), 10)
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- p.ServeDRA(ctx, kube) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeDRA: %v", err)
		}
	})
	eventually(t, "a counter slice and a device slice for node-a", func() bool {
		list, err := kube.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
		if err != nil || len(list.Items) != 2 {
			return false
		}
		var sets, devs int
		for _, sl := range list.Items {
			if *sl.Spec.NodeName != "node-a" || sl.Spec.Pool.ResourceSliceCount != 2 {
				return false
			}
			sets += len(sl.Spec.SharedCounters)
			devs += len(sl.Spec.Devices)
		}
		return sets == 2 && devs == 28
	})
}

func attrString(a resourceapi.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10)
	case a.VersionValue != nil:
		return *a.VersionValue
	case a.BoolValue != nil:
		return strconv.FormatBool(*a.BoolValue)
	}
	return ""
}

func TestNoSubrequestsRefusesOnlyAnAlternativesDevice(t *testing.T) {
	p := partitionableAgent(t, fakegpu.SharingNone, 2)
	sub := claim("gpu-4")
	sub.Status.Allocation.Devices.Results[0].Request = "gpus/one"
	if res := p.prepareClaim(sub); res.Err != nil || len(res.Devices) != 1 || res.Devices[0].Requests[0] != "gpus/one" {
		t.Fatalf("a sub-request's device without the fault: %+v", res)
	}
	p.SetFaultsFromAnnotation(string(FaultDRANoSubrequests))
	res := p.prepareClaim(sub)
	if res.Err == nil || !strings.Contains(res.Err.Error(), `has no request "gpus/one"`) {
		t.Errorf("under %s a sub-request's device was prepared: %+v", FaultDRANoSubrequests, res)
	}
	if res := p.prepareClaim(claim("gpu-4")); res.Err != nil {
		t.Errorf("under %s a plain request's device was refused: %v", FaultDRANoSubrequests, res.Err)
	}
}

func TestNoAdminAccessRefusesOnlyAnAdminAccessDevice(t *testing.T) {
	p := partitionableAgent(t, fakegpu.SharingNone, 2)
	admin := claim("gpu-4")
	admin.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	if res := p.prepareClaim(admin); res.Err != nil {
		t.Fatalf("an admin-access device without the fault: %v", res.Err)
	}
	p.SetFaultsFromAnnotation(string(FaultDRANoAdminAccess))
	if res := p.prepareClaim(admin); res.Err == nil || !strings.Contains(res.Err.Error(), "is in use by another claim") {
		t.Errorf("under %s an admin-access device was prepared: %+v", FaultDRANoAdminAccess, res)
	}
	if res := p.prepareClaim(claim("gpu-4")); res.Err != nil {
		t.Errorf("under %s a plain claim's device was refused: %v", FaultDRANoAdminAccess, res.Err)
	}
}
