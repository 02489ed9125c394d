package cluster

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/internal/fakegpu"
)

const product = "NVIDIA-H100-80GB-HBM3"

// gfd is the labels GPU Feature Discovery writes on a node of 4 H100s in mode, as the fake agent writes
// them (the contract of issue 23), with replicas for time-slicing and MPS.
func gfd(mode string, replicas int) map[string]string {
	l := map[string]string{LabelGPUProduct: product, LabelGPUCount: "4", LabelSharingStrategy: "none", LabelSharingReplicas: "1"}
	switch mode {
	case fakegpu.SharingTimeSlicing, fakegpu.SharingMPS:
		l[LabelSharingStrategy], l[LabelSharingReplicas] = mode, strconv.Itoa(replicas)
		l[LabelGPUProduct] = product + "-SHARED"
	case fakegpu.SharingMIGSingle:
		l[LabelMIGStrategy], l["nvidia.com/mig.capable"] = "single", "true"
		l[LabelGPUProduct] = fakegpu.MIGProduct(product, "3g.40gb")
		l[LabelGPUCount], l[LabelGPUMemory] = "8", "40960"
	case fakegpu.SharingMIGMixed:
		l[LabelMIGStrategy], l["nvidia.com/mig.capable"] = "mixed", "true"
		l[LabelGPUCount] = "2"
		for _, p := range []string{"3g.40gb", "2g.20gb", "1g.10gb"} {
			prof, _ := fakegpu.ProfileByName(p)
			l["nvidia.com/mig-"+p+".memory"] = strconv.Itoa(prof.MemoryMiB)
		}
		l["nvidia.com/mig-3g.40gb.count"], l["nvidia.com/mig-2g.20gb.count"], l["nvidia.com/mig-1g.10gb.count"] = "2", "3", "1"
	}
	return l
}

// renamed is l as GFD writes it when the device plugin renames the shared resource: no -SHARED suffix.
func renamed(l map[string]string) map[string]string {
	l[LabelGPUProduct] = strings.TrimSuffix(l[LabelGPUProduct], SharedProductSuffix)
	return l
}

// timeSlicedMixed is a mig-mixed node whose whole GPUs and MIG devices are each time-sliced twice.
func timeSlicedMixed() map[string]string {
	l := gfd(fakegpu.SharingMIGMixed, 1)
	l[LabelSharingStrategy], l[LabelSharingReplicas] = "time-slicing", "2"
	for _, p := range []string{"3g.40gb", "2g.20gb", "1g.10gb"} {
		l["nvidia.com/mig-"+p+".replicas"] = "2"
	}
	return l
}

// mixedAlloc is what a mig-mixed node of 4 H100s advertises (fakegpu.MixedLayouts).
var mixedAlloc = map[string]int64{"nvidia.com/gpu": 2, fakegpu.MIGResource("3g.40gb"): 2, fakegpu.MIGResource("2g.20gb"): 3, fakegpu.MIGResource("1g.10gb"): 1}

func TestDiscoverSharingModesDevicePlugin(t *testing.T) {
	withParent := maps.Clone(mixedAlloc)
	withParent["nvidia.com/gpu"] = 4 // mig-with-parent: the split GPUs also advertised whole
	cases := []struct {
		name     string
		labels   map[string]string
		alloc    map[string]int64
		mode     string
		replicas int
		conflict string // "" = none; else a substring
	}{
		{"exclusive", gfd(fakegpu.SharingNone, 1), map[string]int64{"nvidia.com/gpu": 4}, ModeExclusive, 0, ""},
		{"exclusive, one GPU unhealthy", gfd(fakegpu.SharingNone, 1), map[string]int64{"nvidia.com/gpu": 3}, ModeExclusive, 0, ""},
		{"time-slicing", gfd(fakegpu.SharingTimeSlicing, 2), map[string]int64{"nvidia.com/gpu": 8}, ModeTimeSlicing, 2, ""},
		{"time-slicing, one GPU unhealthy", gfd(fakegpu.SharingTimeSlicing, 2), map[string]int64{"nvidia.com/gpu": 6}, ModeTimeSlicing, 2, ""},
		{"mps", gfd(fakegpu.SharingMPS, 4), map[string]int64{"nvidia.com/gpu": 16}, ModeMPS, 4, ""},
		{"extra-replica fault", gfd(fakegpu.SharingTimeSlicing, 2), map[string]int64{"nvidia.com/gpu": 12}, ModeTimeSlicing, 3,
			"labels say 2 replicas per GPU, 3 are advertised per GPU (the evidence wins)"},
		{"labels stale: sliced but whole GPUs advertised", gfd(fakegpu.SharingTimeSlicing, 2), map[string]int64{"nvidia.com/gpu": 4}, ModeExclusive, 0,
			"labels say time-slicing, 2 replicas per GPU, the evidence shows exclusive"},
		{"labels say none, replicas advertised", gfd(fakegpu.SharingNone, 1), map[string]int64{"nvidia.com/gpu": 8}, ModeTimeSlicing, 2,
			"labels say exclusive, the evidence shows time-slicing, 2 replicas per GPU"},
		{"no labels at all: nothing to disagree with", nil, map[string]int64{"nvidia.com/gpu": 4}, ModeExclusive, 0, ""},
		{"no count label: replicas from the labels", map[string]string{LabelSharingStrategy: "time-slicing", LabelSharingReplicas: "2"}, map[string]int64{"nvidia.com/gpu": 8}, ModeTimeSlicing, 2, ""},
		{"mig-single", gfd(fakegpu.SharingMIGSingle, 1), map[string]int64{"nvidia.com/gpu": 8}, ModeMIGSingle, 0, ""},
		{"mig.strategy single without MIG devices", func() map[string]string {
			l := gfd(fakegpu.SharingNone, 1)
			l[LabelMIGStrategy] = "single"
			return l
		}(), map[string]int64{"nvidia.com/gpu": 4}, ModeExclusive, 0, "labels say mig-single, the evidence shows exclusive"},
		{"mig-mixed", gfd(fakegpu.SharingMIGMixed, 1), mixedAlloc, ModeMIGMixed, 0, ""},
		{"mig-with-parent fault", gfd(fakegpu.SharingMIGMixed, 1), withParent, ModeMIGMixed, 0,
			"nvidia.com/gpu advertises 4 devices where GFD counts 2 whole GPUs"},
		{"MIG resources where the labels say single", func() map[string]string {
			l := gfd(fakegpu.SharingMIGMixed, 1)
			l[LabelMIGStrategy] = "single"
			return l
		}(), mixedAlloc, ModeMIGMixed, 0, "labels say mig-single, the evidence shows mig-mixed"},
		// NVIDIA's renameByDefault: the shared resource is nvidia.com/gpu.shared, GFD labels stay on
		// nvidia.com/gpu.* and drop the -SHARED product suffix; nvidia.com/gpu is left at 0.
		{"time-slicing renamed", renamed(gfd(fakegpu.SharingTimeSlicing, 2)), map[string]int64{"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 8}, ModeTimeSlicing, 2, ""},
		{"mps renamed", renamed(gfd(fakegpu.SharingMPS, 2)), map[string]int64{"nvidia.com/gpu.shared": 8}, ModeMPS, 2, ""},
		{"labels say time-slicing, nothing advertised: no evidence, no conflict", gfd(fakegpu.SharingTimeSlicing, 2), map[string]int64{"nvidia.com/gpu": 0}, ModeTimeSlicing, 2, ""},
		{"time-sliced mig-single, not renamed", func() map[string]string {
			l := gfd(fakegpu.SharingMIGSingle, 1)
			l[LabelGPUProduct] += SharedProductSuffix
			l[LabelSharingStrategy], l[LabelSharingReplicas] = "time-slicing", "2"
			return l
		}(), map[string]int64{"nvidia.com/gpu": 16}, ModeMIGSingle, 2, ""},
		{"time-sliced mig-mixed, renamed", timeSlicedMixed(), map[string]int64{"nvidia.com/gpu.shared": 4, "nvidia.com/mig-3g.40gb.shared": 4, "nvidia.com/mig-2g.20gb.shared": 6, "nvidia.com/mig-1g.10gb.shared": 2}, ModeMIGMixed, 2, ""},
		{"another vendor's resource", nil, map[string]int64{"amd.com/gpu": 8}, ModeExclusive, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := DiscoverSharingModes([]corev1.Node{*gpuNode("w1", c.labels, c.alloc)}, nil, "")
			if len(got) != 1 {
				t.Fatalf("modes = %+v, want one (device-plugin)", got)
			}
			m := got[0]
			if m.Node != "w1" || m.Path != config.PathDevicePlugin || m.Mode != c.mode || m.Replicas != c.replicas {
				t.Errorf("mode = %s/%s %s ×%d, want %s ×%d (%+v)", m.Node, m.Path, m.Mode, m.Replicas, c.mode, c.replicas, m)
			}
			if c.conflict == "" && m.Conflict != "" || c.conflict != "" && !strings.Contains(m.Conflict, c.conflict) {
				t.Errorf("conflict = %q, want %q", m.Conflict, c.conflict)
			}
			if len(m.Evidence) == 0 {
				t.Errorf("no evidence recorded: %+v", m)
			}
		})
	}
}

// Counts come from the resource that carries the devices, whatever its name, and MIG replicas per resource.
func TestDiscoverSharingModesRenamedResources(t *testing.T) {
	got := DiscoverSharingModes([]corev1.Node{
		*gpuNode("a-ts", renamed(gfd(fakegpu.SharingTimeSlicing, 2)), map[string]int64{"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 8}),
		*gpuNode("b-mixed", timeSlicedMixed(), map[string]int64{"nvidia.com/gpu.shared": 4, "nvidia.com/mig-3g.40gb.shared": 4, "nvidia.com/mig-1g.10gb": 1}),
		*gpuNode("c-single", func() map[string]string {
			l := gfd(fakegpu.SharingMIGSingle, 1)
			l[LabelGPUProduct] += SharedProductSuffix
			return l
		}(), map[string]int64{"nvidia.com/gpu": 16}),
		*gpuNode("d-amd", nil, map[string]int64{"amd.com/gpu": 8}),
	}, nil, "")
	if len(got) != 4 {
		t.Fatalf("modes = %+v", got)
	}
	ts, mixed, single, amd := got[0], got[1], got[2], got[3]
	if ts.Resource != "nvidia.com/gpu.shared" || ts.Describe() != "time-slicing, 2 replicas per GPU" || !strings.Contains(strings.Join(ts.Evidence, ", "), "8 devices for nvidia.com/gpu.count=4: 2 per GPU") {
		t.Errorf("renamed time-slicing = %+v", ts)
	}
	want := []MIGResource{
		{Resource: "nvidia.com/mig-1g.10gb", Profile: "1g.10gb", Count: 1, MemoryMiB: 10240},
		{Resource: "nvidia.com/mig-3g.40gb.shared", Profile: "3g.40gb", Count: 4, MemoryMiB: 40960, Replicas: 2},
	}
	if fmt.Sprint(mixed.MIG) != fmt.Sprint(want) || mixed.Resource != "nvidia.com/gpu.shared" || mixed.WholeGPUs != 4 || mixed.WholeReplicas != 2 || mixed.Conflict != "" || mixed.Replicas != 2 {
		t.Errorf("time-sliced mig-mixed = %+v, want MIG %v, 4 whole-GPU replicas and no conflict", mixed, want)
	}
	// GFD's -SHARED after the profile is not part of it, and the MIG devices are advertised twice each.
	if len(single.MIG) != 1 || single.MIG[0].Profile != "3g.40gb" || single.MIG[0].Replicas != 2 || single.Mode != ModeMIGSingle {
		t.Errorf("time-sliced mig-single = %+v", single)
	}
	if amd.Resource != "amd.com/gpu" || amd.Mode != ModeExclusive {
		t.Errorf("vendor resource = %+v", amd)
	}
}

// The MIG resources carry their profile and the memory GFD labels, and mig-single's one resource its
// product's profile.
func TestDiscoverSharingModesMIGResources(t *testing.T) {
	nodes := []corev1.Node{
		*gpuNode("mixed", gfd(fakegpu.SharingMIGMixed, 1), mixedAlloc),
		*gpuNode("single", gfd(fakegpu.SharingMIGSingle, 1), map[string]int64{"nvidia.com/gpu": 8}),
		*gpuNode("unlabelled", nil, map[string]int64{"nvidia.com/mig-1g.5gb": 7}),
		*gpuNode("cpu", nil, nil),
	}
	got := DiscoverSharingModes(nodes, nil, "")
	if len(got) != 3 {
		t.Fatalf("modes = %+v, want mixed, single and unlabelled (not the CPU node)", got)
	}
	mixed, single, unlabelled := got[0], got[1], got[2]
	want := []MIGResource{
		{Resource: "nvidia.com/mig-1g.10gb", Profile: "1g.10gb", Count: 1, MemoryMiB: 10240},
		{Resource: "nvidia.com/mig-2g.20gb", Profile: "2g.20gb", Count: 3, MemoryMiB: 20480},
		{Resource: "nvidia.com/mig-3g.40gb", Profile: "3g.40gb", Count: 2, MemoryMiB: 40960},
	}
	if fmt.Sprint(mixed.MIG) != fmt.Sprint(want) || mixed.WholeGPUs != 2 || mixed.Labelled != ModeMIGMixed {
		t.Errorf("mixed = %+v, want MIG %v and 2 whole GPUs", mixed, want)
	}
	if d := mixed.Describe(); d != "mig-mixed: 2 whole GPUs, nvidia.com/mig-1g.10gb ×1 (1g.10gb), nvidia.com/mig-2g.20gb ×3 (2g.20gb), nvidia.com/mig-3g.40gb ×2 (3g.40gb)" {
		t.Errorf("Describe = %q", d)
	}
	if fmt.Sprint(single.MIG) != fmt.Sprint([]MIGResource{{Resource: "nvidia.com/gpu", Profile: "3g.40gb", Count: 8, MemoryMiB: 40960}}) {
		t.Errorf("single = %+v", single)
	}
	// Without a memory label the profile's name says it (rounded to whole GB).
	if unlabelled.Mode != ModeMIGMixed || unlabelled.MIG[0].MemoryMiB != 5*1024 || unlabelled.Conflict != "" {
		t.Errorf("unlabelled = %+v", unlabelled)
	}
}

// draGPU is one H100 of the fake DRA half in a MIG mode: the whole device "gpu-<minor>" and a partition
// per placement of every profile but 7g, all consuming the counter set "gpu-<minor>-counters" (unless
// noCounters), returned with that set.
func draGPU(minor int, noCounters bool) ([]resourcev1.Device, resourcev1.CounterSet) {
	set := fmt.Sprintf("gpu-%d-counters", minor)
	uuid := fmt.Sprintf("GPU-0000000%d-0000-0000-0000-000000000000", minor)
	all := map[string]resourcev1.Counter{"multiprocessors": {Value: *resource.NewQuantity(132, resource.DecimalSI)}}
	for k := range fakegpu.MIGSlices {
		all[fmt.Sprintf("memory-slice-%d", k)] = resourcev1.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
	}
	str := func(s string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: ptr.To(s)} }
	devices := []resourcev1.Device{{
		Name:             fmt.Sprintf("gpu-%d", minor),
		Attributes:       map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": str("gpu"), "uuid": str(uuid)},
		ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: set, Counters: all}},
	}}
	for _, prof := range fakegpu.H100Profiles {
		if prof.Slices == fakegpu.MIGSlices {
			continue
		}
		for _, start := range prof.Starts {
			p := fakegpu.Placement{Profile: prof.Name, Start: start}
			uses := map[string]resourcev1.Counter{"multiprocessors": {Value: *resource.NewQuantity(int64(prof.Multiprocessors), resource.DecimalSI)}}
			for k := start; k < start+prof.Slices; k++ {
				uses[fmt.Sprintf("memory-slice-%d", k)] = resourcev1.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
			}
			d := resourcev1.Device{
				Name: fmt.Sprintf("gpu-%d-mig-%s-%d", minor, strings.ReplaceAll(prof.Name, ".", ""), start),
				Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"type": str("mig"), "profile": str(prof.Name), "uuid": str(fakegpu.MIGUUID(uuid, p)), "parentUUID": str(uuid),
				},
				Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse(strconv.Itoa(prof.MemoryMiB) + "Mi")}},
			}
			if !noCounters {
				d.ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: set, Counters: uses}}
			}
			devices = append(devices, d)
		}
	}
	return devices, resourcev1.CounterSet{Name: set, Counters: all}
}

// draSlices publishes gpus H100s of node as the fake DRA half does: devices in one slice and, as
// Kubernetes 1.34+ requires, the counters in a second slice of the same pool (together when oneSlice,
// which older API servers allowed).
func draSlices(node string, gpus int, oneSlice, noCounters bool) []resourcev1.ResourceSlice {
	spec := func() resourcev1.ResourceSliceSpec {
		return resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 2}}
	}
	devs := resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-devices"}, Spec: spec()}
	counters := resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-counters"}, Spec: spec()}
	for i := range gpus {
		d, cs := draGPU(i, noCounters)
		devs.Spec.Devices = append(devs.Spec.Devices, d...)
		counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, cs)
	}
	if oneSlice {
		devs.Spec.SharedCounters = counters.Spec.SharedCounters
		devs.Spec.Pool.ResourceSliceCount = 1
		return []resourcev1.ResourceSlice{devs}
	}
	return []resourcev1.ResourceSlice{counters, devs}
}

func TestDiscoverSharingModesDRA(t *testing.T) {
	// Partitions per H100 except 7g: 7 + 3 + 2 + 1.
	const perGPU = 13
	for _, oneSlice := range []bool{false, true} {
		t.Run(fmt.Sprintf("counters in the devices' slice: %v", oneSlice), func(t *testing.T) {
			got := DiscoverSharingModes([]corev1.Node{*gpuNode("w1", nil, nil)}, draSlices("w1", 2, oneSlice, false), "gpu.nvidia.com")
			if len(got) != 1 || got[0].Path != config.PathDRA || got[0].Mode != ModePartitionable || got[0].Conflict != "" {
				t.Fatalf("modes = %+v, want w1/dra partitionable without conflict", got)
			}
			m := got[0]
			if len(m.Partitions) != 2 {
				t.Fatalf("partitionable GPUs = %d, want 2", len(m.Partitions))
			}
			g := m.Partitions[1]
			if g.Whole != "gpu-1" || g.CounterSet != "gpu-1-counters" || !strings.HasPrefix(g.UUID, "GPU-") || len(g.Partitions) != perGPU || g.Counters["multiprocessors"] != 132 || g.Counters["memory-slice-6"] != 1 {
				t.Errorf("GPU 1 = %+v", g)
			}
			var p3g PartitionDevice
			for _, p := range g.Partitions {
				if p.Name == "gpu-1-mig-3g40gb-4" {
					p3g = p
				}
			}
			if p3g.Profile != "3g.40gb" || p3g.MemoryMiB != 40960 || !strings.HasPrefix(p3g.UUID, "MIG-") || p3g.Consumes["memory-slice-4"] != 1 || p3g.Consumes["memory-slice-3"] != 0 || p3g.Consumes["multiprocessors"] != 48 {
				t.Errorf("partition gpu-1-mig-3g40gb-4 = %+v", p3g)
			}
			if !strings.Contains(strings.Join(m.Evidence, "\n"), "devices consume counter set gpu-0-counters") {
				t.Errorf("evidence = %q", m.Evidence)
			}
			if d := m.Describe(); d != "dra-partitionable: 2 GPUs, 26 partitions" {
				t.Errorf("Describe = %q", d)
			}
		})
	}

	// dra-partition-no-counters: the partitions are still read as partitions of their GPU, and the
	// conflict says what the missing counters allow.
	got := DiscoverSharingModes([]corev1.Node{*gpuNode("w1", nil, nil)}, draSlices("w1", 1, false, true), "gpu.nvidia.com")
	if len(got) != 1 || got[0].Mode != ModePartitionable || len(got[0].Partitions) != 1 || len(got[0].Partitions[0].Partitions) != perGPU || got[0].Partitions[0].Whole != "gpu-0" {
		t.Fatalf("without counters: %+v", got)
	}
	if !strings.Contains(got[0].Conflict, "13 partition devices consume no shared counter") {
		t.Errorf("conflict = %q", got[0].Conflict)
	}

	// Plain GPUs: exclusive. Another driver's devices and an older generation of the pool are not read.
	plain := nvidiaSlice("w2", 4)
	plain.Spec.Pool.Generation = 1
	old := draSlices("w2", 1, false, false)
	for i := range old {
		old[i].Spec.Pool.Generation = 0
		old[i].Name += "-old"
	}
	other := draSlices("w3", 1, true, false)[0]
	other.Spec.Driver = "gpu.example.com"
	got = DiscoverSharingModes([]corev1.Node{*gpuNode("w2", nil, nil), *gpuNode("w3", nil, nil)}, append(old, plain, other), "gpu.nvidia.com")
	if len(got) != 1 || got[0].Node != "w2" || got[0].Mode != ModeExclusive || got[0].Partitions != nil {
		t.Errorf("plain GPUs: %+v", got)
	}
	if got := DiscoverSharingModes([]corev1.Node{*gpuNode("w1", nil, nil)}, draSlices("w1", 1, false, false), ""); len(got) != 0 {
		t.Errorf("no DRA driver: %+v, want nothing read", got)
	}
}

// Discovery carries the modes of the discovered paths, summarises them in Sharing, and names each node's pool.
func TestDiscoverCarriesSharingModes(t *testing.T) {
	l := gfd(fakegpu.SharingTimeSlicing, 2)
	l["cloud.google.com/gke-nodepool"] = "gpu-a"
	snap := draSnapshot(nvidiaClass(), nil)
	snap.Nodes = []corev1.Node{*gpuNode("w1", l, map[string]int64{"nvidia.com/gpu": 8}), *gpuNode("w2", gfd(fakegpu.SharingNone, 1), map[string]int64{"nvidia.com/gpu": 4})}
	caps := Discover(snap, config.Default())
	var got []string
	for _, m := range caps.SharingModes {
		got = append(got, m.Node+"/"+m.Path+"="+m.Mode+"@"+m.Pool)
	}
	want := "w1/device-plugin=time-slicing@cloud.google.com/gke-nodepool=gpu-a w1/dra=exclusive@cloud.google.com/gke-nodepool=gpu-a w2/device-plugin=exclusive@ w2/dra=exclusive@"
	if strings.Join(got, " ") != want {
		t.Errorf("modes = %s, want %s", strings.Join(got, " "), want)
	}
	if caps.Sharing.Mode != ModeTimeSlicing || caps.Sharing.Replicas != 2 {
		t.Errorf("sharing = %+v", caps.Sharing)
	}
	cfg := config.Default()
	cfg.AllocationPaths = []string{config.PathDRA}
	for _, m := range Discover(snap, cfg).SharingModes {
		if m.Path != config.PathDRA {
			t.Errorf("device-plugin mode %+v discovered with the path not selected", m)
		}
	}
}

// sharedSlice is n GPUs of node published as the fake DRA half does in time-slicing and MPS: each allows
// multiple allocations, its memory consumable in shares of memory/replicas (the first GPU without a
// request policy when noPolicy).
func sharedSlice(node string, n, replicas int, noPolicy bool) resourcev1.ResourceSlice {
	s := nvidiaSlice(node, n)
	memory := resource.MustParse("80Gi")
	share := resource.NewQuantity(memory.Value()/int64(replicas), resource.BinarySI)
	for i := range s.Spec.Devices {
		d := &s.Spec.Devices[i]
		d.Attributes["uuid"] = resourcev1.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("GPU-%d", i))}
		d.AllowMultipleAllocations = ptr.To(true)
		c := resourcev1.DeviceCapacity{Value: memory}
		if i > 0 || !noPolicy {
			c.RequestPolicy = &resourcev1.CapacityRequestPolicy{Default: &memory, ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: share, Max: &memory, Step: share}}
		}
		d.Capacity = map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": c}
	}
	return s
}

func TestDiscoverSharingModesDRAConsumableCapacity(t *testing.T) {
	got := DiscoverSharingModes([]corev1.Node{*gpuNode("w1", nil, nil)}, []resourcev1.ResourceSlice{sharedSlice("w1", 2, 2, true)}, "gpu.nvidia.com")
	if len(got) != 1 || got[0].Path != config.PathDRA || got[0].Mode != ModeConsumable || got[0].Conflict != "" {
		t.Fatalf("modes = %+v, want w1/dra dra-shared without conflict", got)
	}
	m := got[0]
	if !m.Shared() || len(m.Consumable) != 2 || m.Partitions != nil {
		t.Fatalf("mode %+v: want 2 shared GPUs and no partitions", m)
	}
	d := m.Consumable[1]
	memory := d.Capacity["memory"]
	if d.Name != "gpu-1" || d.UUID != "GPU-1" || d.Slice != "w1-gpu.nvidia.com" || memory.Value.String() != "80Gi" ||
		memory.Default == nil || memory.Default.String() != "80Gi" || memory.Min == nil || memory.Min.String() != "40Gi" ||
		memory.Step == nil || memory.Step.String() != "40Gi" || memory.Max == nil || memory.Max.String() != "80Gi" {
		t.Errorf("gpu-1 = %+v (memory %+v)", d, memory)
	}
	if q, ok := memory.SmallestRequest(); !ok || q.String() != "40Gi" {
		t.Errorf("smallest request of gpu-1 = %v, %v; want 40Gi", q.String(), ok)
	}
	// Without a policy any amount goes: there is no smallest request, and the capacity is all there is.
	noPolicy := m.Consumable[0].Capacity["memory"]
	if _, ok := noPolicy.SmallestRequest(); ok || noPolicy.Default != nil || noPolicy.Value.String() != "80Gi" {
		t.Errorf("gpu-0 without a policy = %+v", noPolicy)
	}
	evidence := strings.Join(m.Evidence, "\n")
	for _, want := range []string{
		"ResourceSlice w1-gpu.nvidia.com: device gpu-0 allows multiple allocations, capacity memory 80Gi (no request policy)",
		"device gpu-1 allows multiple allocations, capacity memory 80Gi (request policy: default 80Gi, min 40Gi, max 80Gi, step 40Gi)",
	} {
		if !strings.Contains(evidence, want) {
			t.Errorf("evidence %q lacks %q", evidence, want)
		}
	}
	if d := m.Describe(); d != "dra-shared: 2 GPUs shared by capacity (memory)" {
		t.Errorf("Describe = %q", d)
	}
	if sh := summariseSharing(got); sh.Mode != ModeConsumable {
		t.Errorf("summary = %+v, want mode %s", sh, ModeConsumable)
	}

	// The same GPUs without allowMultipleAllocations are exclusive, whatever their capacity says.
	plain := sharedSlice("w1", 2, 2, false)
	for i := range plain.Spec.Devices {
		plain.Spec.Devices[i].AllowMultipleAllocations = nil
	}
	got = DiscoverSharingModes([]corev1.Node{*gpuNode("w1", nil, nil)}, []resourcev1.ResourceSlice{plain}, "gpu.nvidia.com")
	if len(got) != 1 || got[0].Mode != ModeExclusive || got[0].Consumable != nil {
		t.Errorf("GPUs for one claim each: %+v", got)
	}
}
