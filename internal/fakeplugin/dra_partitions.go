package fakeplugin

import (
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// Partitionable DRA GPUs (KEP 4815, "partitionable devices"), as NVIDIA's DRA driver publishes MIG-capable
// GPUs when it creates MIG devices on demand: every GPU of the DRA half is published whole and as every MIG
// device it could be split into, and the scheduler keeps them apart through shared counters. Each GPU has a
// counter set with one counter per memory slice plus its multiprocessors and memory; the whole GPU consumes
// all of it, each partition the slices of its placement and its share of the rest. So once a partition is
// allocated the whole GPU and every overlapping partition no longer fit, and a claim that together with
// others would exceed a counter waits. The fake serves this in the MIG sharing modes.

// Values of the "type" attribute, NVIDIA's: a whole GPU and a MIG device (partition). The DeviceClasses
// gpu.nvidia.com and mig.nvidia.com select on them.
const (
	DRATypeGPU = "gpu"
	DRATypeMIG = "mig"
)

// Counter names in a GPU's counter set, NVIDIA's: the memory slices (DRAMemorySliceCounter), and one counter
// per capacity of a MIG profile. NVIDIA's driver also counts copy engines, decoders, encoders, JPEG and OFA
// engines; the fake's profiles (fakegpu.H100Profiles) carry none of those, so it counts only these.
const (
	DRACounterMultiprocessors = "multiprocessors"
	DRACounterMemory          = "memory"
)

// DRAMemorySliceCounter is the counter of memory slice k (0-based) in a GPU's counter set; NVIDIA's name.
// Each has the value 1, so two partitions covering one slice can never both be allocated.
func DRAMemorySliceCounter(k int) string { return "memory-slice-" + strconv.Itoa(k) }

// DRACounterSetName is the counter set of the DRA GPU with minor i. It follows NVIDIA's driver
// ("gpu-<minor>-counter-set"), not the "gpu-<minor>-counters" the sharing contract first named: discovery
// reads the name a device consumes from, so real clusters and the fake read alike.
func DRACounterSetName(i int) string { return DRADeviceName(i) + "-counter-set" }

// DRAPartitionName is the device name of the MIG partition at placement pl of the DRA GPU with minor i:
// "gpu-4-mig-3g40gb-4" (profile without dots, then the placement start). NVIDIA's driver puts the GPU
// instance profile ID between them ("gpu-4-mig-3g40gb-9-4"); the fake's profiles have no IDs, and the name
// stays unique without one.
func DRAPartitionName(i int, pl fakegpu.Placement) string {
	return fmt.Sprintf("%s-mig-%s-%d", DRADeviceName(i), strings.ReplaceAll(pl.Profile, ".", ""), pl.Start)
}

// PartitionPlacements lists every MIG device a DRA GPU is published as in the MIG modes: every possible
// placement of every profile but the one that covers the whole GPU (that one is the whole device), in
// profile order. The fake driver's CDI spec and inventory need a MIG device for each, since any of them
// can be prepared.
func PartitionPlacements() []fakegpu.Placement {
	var out []fakegpu.Placement
	for _, prof := range fakegpu.H100Profiles {
		if prof.Slices >= fakegpu.MIGSlices {
			continue
		}
		for _, s := range prof.Starts {
			out = append(out, fakegpu.Placement{Profile: prof.Name, Start: s})
		}
	}
	return out
}

// draPartitionable reports whether the DRA GPUs are published as partitionable (the MIG modes).
func (p *Plugin) draPartitionable() bool { return fakegpu.IsMIG(p.cfg.Sharing) }

// draPartition parses a partition device name of ours back into its GPU's minor and placement; ok is false
// for any name that is not one of PartitionPlacements on some GPU.
func draPartition(name string) (int, fakegpu.Placement, bool) {
	gpu, _, ok := strings.Cut(name, "-mig-")
	if !ok {
		return 0, fakegpu.Placement{}, false
	}
	i, ok := draIndex(gpu)
	if !ok {
		return 0, fakegpu.Placement{}, false
	}
	for _, pl := range PartitionPlacements() {
		if DRAPartitionName(i, pl) == name {
			return i, pl, true
		}
	}
	return 0, fakegpu.Placement{}, false
}

// wholeGPUCounters is the capacity of a GPU's counters: all memory slices, and the multiprocessors and
// memory of the largest profile (NVIDIA's driver takes the maximum over the profiles as well; the whole
// H100's 7g.80gb profile gets fewer SMs than the GPU has, and that is what MIG can hand out).
func wholeGPUCounters() map[string]resourceapi.Counter {
	var sms, mem int64
	for _, prof := range fakegpu.H100Profiles {
		sms = max(sms, int64(prof.Multiprocessors))
		mem = max(mem, int64(prof.MemoryMiB)<<20)
	}
	c := memorySliceCounters(0, fakegpu.MIGSlices)
	c[DRACounterMultiprocessors] = resourceapi.Counter{Value: *resource.NewQuantity(sms, resource.DecimalSI)}
	c[DRACounterMemory] = resourceapi.Counter{Value: *resource.NewQuantity(mem, resource.BinarySI)}
	return c
}

// memorySliceCounters is one counter of value 1 per memory slice in [start, end).
func memorySliceCounters(start, end int) map[string]resourceapi.Counter {
	c := map[string]resourceapi.Counter{}
	for k := start; k < end; k++ {
		c[DRAMemorySliceCounter(k)] = resourceapi.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
	}
	return c
}

// draCounterSet is the counter set of DRA GPU i.
func draCounterSet(i int) resourceapi.CounterSet {
	return resourceapi.CounterSet{Name: DRACounterSetName(i), Counters: wholeGPUCounters()}
}

// partitionDevice describes the MIG partition at placement pl of DRA GPU i with the attributes NVIDIA's
// driver gives a MIG device (type, profile, parentUUID, productName, brand, architecture, driver versions)
// and those the fake adds so a check can tell where a partition sits without parsing its name: uuid (the
// MIG device's, which NVIDIA publishes only for MIG devices that exist; the fake's are stable, so it can),
// parentMinor, placementStart and placementSize. Capacity: its memory and multiprocessors. It consumes its
// placement's memory slices and its share of the GPU's counters, unless counters is false
// (FaultDRAPartitionNoCounters).
func (p *Plugin) partitionDevice(i int, pl fakegpu.Placement, counters bool) resourceapi.Device {
	prof, _ := fakegpu.ProfileByName(pl.Profile)
	parent := p.sliceDevice(i)
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(s)} }
	num := func(n int) resourceapi.DeviceAttribute {
		return resourceapi.DeviceAttribute{IntValue: ptr.To(int64(n))}
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":           str(DRATypeMIG),
		"profile":        str(pl.Profile),
		"uuid":           str(fakegpu.MIGUUID(p.table.uuid(i), pl)),
		"parentUUID":     str(p.table.uuid(i)),
		"parentMinor":    num(i),
		"placementStart": num(pl.Start),
		"placementSize":  num(prof.Slices),
	}
	for _, inherited := range []resourceapi.QualifiedName{"productName", "brand", "architecture", "driverVersion", "cudaDriverVersion"} {
		if a, ok := parent.Attributes[inherited]; ok {
			attrs[inherited] = a
		}
	}
	mem := *resource.NewQuantity(int64(prof.MemoryMiB)<<20, resource.BinarySI)
	sms := *resource.NewQuantity(int64(prof.Multiprocessors), resource.DecimalSI)
	d := resourceapi.Device{
		Name:       DRAPartitionName(i, pl),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			DRACounterMemory:          {Value: mem},
			DRACounterMultiprocessors: {Value: sms},
		},
	}
	if counters {
		start, end := pl.Slices()
		c := memorySliceCounters(start, end)
		c[DRACounterMemory] = resourceapi.Counter{Value: mem}
		c[DRACounterMultiprocessors] = resourceapi.Counter{Value: sms}
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: DRACounterSetName(i), Counters: c}}
	}
	return d
}

// partitionableGPULocked is DRA GPU i as the MIG modes publish it: the whole GPU consuming its entire
// counter set, then one device per partition placement.
func (p *Plugin) partitionableGPULocked(i int) []resourceapi.Device {
	whole := p.sliceDevice(i)
	whole.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: DRACounterSetName(i), Counters: wholeGPUCounters()}}
	devs := []resourceapi.Device{whole}
	counters := !p.faults[FaultDRAPartitionNoCounters]
	for _, pl := range PartitionPlacements() {
		devs = append(devs, p.partitionDevice(i, pl, counters))
	}
	return devs
}

// Limits of the resource.k8s.io/v1 API on one ResourceSlice (k8s.io/api resource/v1 and the API server's
// validation): a slice holds devices or counter sets, never both; at most 8 counter sets; at most 64 devices
// once any of them consumes counters.
const (
	maxCounterSetsPerSlice     = resourceapi.ResourceSliceMaxCounterSets
	maxCountingDevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithTaintsOrConsumesCounters
)

// draSlices lays out the node's pool. Outside the MIG modes it is one slice of devices, as always. In them,
// the counter sets of every DRA GPU come first, in slices of their own (at most 8 each), then the devices,
// each GPU's devices kept together in one slice (14 of them; at most 64 per slice), so a slice shows the
// whole of a GPU and the partitions that consume its counters. An unhealthy GPU's devices stay, tainted, so
// the counter sets never change with health.
func (p *Plugin) draSlices(groups [][]resourceapi.Device) []resourceslice.Slice {
	if !p.draPartitionable() {
		var devs []resourceapi.Device
		for _, g := range groups {
			devs = append(devs, g...)
		}
		return []resourceslice.Slice{{Devices: devs}}
	}
	var out []resourceslice.Slice
	var sets []resourceapi.CounterSet
	for i := p.table.dp; i < len(p.table.uuids); i++ {
		sets = append(sets, draCounterSet(i))
	}
	for len(sets) > 0 {
		n := min(len(sets), maxCounterSetsPerSlice)
		out = append(out, resourceslice.Slice{SharedCounters: sets[:n:n]})
		sets = sets[n:]
	}
	var cur []resourceapi.Device
	for _, g := range groups {
		if len(cur) > 0 && len(cur)+len(g) > maxCountingDevicesPerSlice {
			out = append(out, resourceslice.Slice{Devices: cur})
			cur = nil
		}
		cur = append(cur, g...)
	}
	if len(cur) > 0 {
		out = append(out, resourceslice.Slice{Devices: cur})
	}
	return out
}
