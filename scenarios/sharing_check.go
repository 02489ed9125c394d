package scenarios

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/internal/workload/probe"
)

// The sharing scenario's judgements, kept apart from the specs that gather their evidence so each can be
// tested without a cluster.

// labelGPUMemory is GPU Feature Discovery's label of a GPU's framebuffer in MiB: the memory NVIDIA's MPS
// control daemon divides among a shared GPU's replicas.
const labelGPUMemory = "nvidia.com/gpu.memory"

// mpsLimits are the MPS limits a container is given: the percentage of the GPU's threads its clients
// may use, and the device memory each may pin, in CUDA's own format ("<ordinal>=<size>[M|G]", one entry per
// visible device, comma-separated).
type mpsLimits struct {
	ActiveThreadPercentage string
	PinnedDeviceMemLimit   string
}

// expectedMPS is what NVIDIA's MPS control daemon sets by default on a GPU shared replicas ways
// (k8s-device-plugin, cmd/mps-control-daemon/mps/daemon.go): 100/replicas percent of the threads
// (integer division) and memory/replicas MiB of pinned memory, for the one device a one-replica pod sees.
// memoryMiB 0 (the label absent) leaves the memory limit unknown ("").
func expectedMPS(replicas int, memoryMiB int64) mpsLimits {
	want := mpsLimits{ActiveThreadPercentage: strconv.Itoa(100 / max(replicas, 1))}
	if memoryMiB > 0 {
		want.PinnedDeviceMemLimit = fmt.Sprintf("0=%dM", memoryMiB/int64(max(replicas, 1)))
	}
	return want
}

// checkMPS compares the limits a container's probe found with the expected ones. Missing limits are named
// one by one: a container without them is not limited at all, whatever the node's labels promise.
func checkMPS(pod string, seen *probe.MPS, want mpsLimits) error {
	if seen == nil {
		return fmt.Errorf("pod %s on an MPS node sees no CUDA_MPS_* variable: no MPS pipe directory, no active thread percentage and no pinned memory limit, so its clients are not limited; the device plugin must hand each container its MPS limits", pod)
	}
	var missing []string
	if seen.PipeDirectory == "" {
		missing = append(missing, "CUDA_MPS_PIPE_DIRECTORY (the MPS server's pipe directory)")
	}
	if seen.ActiveThreadPercentage == "" {
		missing = append(missing, fmt.Sprintf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (want %s)", want.ActiveThreadPercentage))
	}
	if seen.PinnedDeviceMemLimit == "" {
		missing = append(missing, fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (want %s)", cmpOr(want.PinnedDeviceMemLimit, "a limit per device")))
	}
	if len(missing) > 0 {
		return fmt.Errorf("pod %s on an MPS node lacks its MPS limits: %s (neither its CUDA_MPS_* variables nor the defaults of the MPS control daemon behind its pipe directory, asked with %s, give them)", pod, strings.Join(missing, "; "), probe.MPSControl)
	}
	if n, err := strconv.Atoi(strings.TrimSpace(seen.ActiveThreadPercentage)); err != nil || strconv.Itoa(n) != want.ActiveThreadPercentage {
		return fmt.Errorf("pod %s: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is %q, want %s (100 divided among the GPU's replicas)", pod, seen.ActiveThreadPercentage, want.ActiveThreadPercentage)
	}
	if want.PinnedDeviceMemLimit == "" {
		return nil
	}
	got, err := probe.ParsePinnedMemLimit(seen.PinnedDeviceMemLimit)
	if err != nil {
		return fmt.Errorf("pod %s: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: %w", pod, err)
	}
	exp, _ := probe.ParsePinnedMemLimit(want.PinnedDeviceMemLimit)
	if !maps.Equal(got, exp) {
		return fmt.Errorf("pod %s: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is %q, want %s (the GPU's memory divided among its replicas)", pod, seen.PinnedDeviceMemLimit, want.PinnedDeviceMemLimit)
	}
	return nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// sharedHolding is one pod's share of a time-sliced or MPS GPU, as its allocation and probe showed it.
type sharedHolding struct {
	Pod      string
	Replicas []string // the replica IDs the kubelet handed out
	GPU      string   // the physical GPU the container saw
	MPS      string   // the MPS limits it saw, rendered; "" on time-slicing
}

// sharedObservations are the report's record of a shared node: per pod the replica it holds and the pods
// it shares that GPU with, with what the mode does not promise (time-slicing) or the limits it does (MPS).
func sharedObservations(node, path, mode string, holdings []sharedHolding) []gpu.SharingObservation {
	byGPU := map[string][]string{}
	for _, h := range holdings {
		byGPU[h.GPU] = append(byGPU[h.GPU], h.Pod)
	}
	out := make([]gpu.SharingObservation, 0, len(holdings))
	for _, h := range holdings {
		saw := gpu.DescribeReplicas(h.Replicas)
		if saw == "" {
			saw = h.GPU + " whole"
		}
		others := slices.DeleteFunc(slices.Clone(byGPU[h.GPU]), func(p string) bool { return p == h.Pod })
		with := "alone on " + h.GPU
		if len(others) > 0 {
			with = "shares " + h.GPU + " with " + strings.Join(others, ", ")
		}
		note := with + ": no memory or fault isolation"
		if mode == cluster.ModeMPS {
			note = with + ": MPS limits " + cmpOr(h.MPS, "none seen") + ", no fault isolation"
		}
		out = append(out, gpu.SharingObservation{Node: node, Path: path, Mode: mode, Pod: h.Pod, Saw: saw, Note: note})
	}
	return out
}

// migHolding is a MIG device (or a DRA partition) a pod holds, as the probe saw it.
type migHolding struct {
	Pod, UUID, Profile, Parent string
}

// checkMIGSeen compares what a container's nvidia-smi listed with the MIG device it was allocated: exactly
// one MIG device, the allocated one, of the expected profile, on the expected parent when one is known.
func checkMIGSeen(pod string, seen []probe.MIGDevice, allocated, profile, parent string) (migHolding, error) {
	if len(seen) != 1 {
		uuids := make([]string, 0, len(seen))
		for _, d := range seen {
			uuids = append(uuids, d.UUID)
		}
		return migHolding{}, fmt.Errorf("pod %s was allocated MIG device %s and its nvidia-smi lists %d MIG devices %s; want exactly that one", pod, allocated, len(seen), gpu.FormatDevices(uuids))
	}
	d := seen[0]
	h := migHolding{Pod: pod, UUID: d.UUID, Profile: d.Profile, Parent: d.Parent}
	switch {
	case d.UUID != allocated:
		return h, fmt.Errorf("pod %s was allocated MIG device %s but sees %s", pod, allocated, d.UUID)
	case d.Profile != profile:
		return h, fmt.Errorf("pod %s asked for a %s MIG device and sees %s, a %s", pod, profile, d.UUID, cmpOr(d.Profile, "device of no profile"))
	case parent != "" && d.Parent != parent:
		return h, fmt.Errorf("pod %s asked for a partition of %s and sees %s on %s", pod, parent, d.UUID, cmpOr(d.Parent, "no parent GPU"))
	}
	return h, nil
}

// checkMIGParents judges, with the framework's gpu.CheckMIGParents, the MIG devices (or partitions) pods
// on node hold beside the whole GPUs others hold (whole maps a GPU's UUID to its holder).
func checkMIGParents(node string, whole map[string]string, migs []migHolding) error {
	holdings := make([]gpu.MIGHolding, 0, len(whole)+len(migs))
	for uuid, pod := range whole {
		holdings = append(holdings, gpu.MIGHolding{Pod: pod, Whole: []string{uuid}})
	}
	for _, m := range migs {
		holdings = append(holdings, gpu.MIGHolding{Pod: m.Pod, MIG: []probe.MIGDevice{{UUID: m.UUID, Profile: m.Profile, Parent: m.Parent}}})
	}
	slices.SortStableFunc(holdings, func(a, b gpu.MIGHolding) int { return strings.Compare(a.Pod, b.Pod) })
	return gpu.CheckMIGParents(node, holdings)
}

// migObservation records one pod's MIG device (or partition) for the report.
func migObservation(node, path, mode string, h migHolding) gpu.SharingObservation {
	return gpu.SharingObservation{Node: node, Path: path, Mode: mode, Pod: h.Pod,
		Saw: fmt.Sprintf("%s (%s of %s)", h.UUID, h.Profile, cmpOr(h.Parent, "an unnamed GPU")), Note: "MIG device: memory and fault isolated in hardware"}
}

// maxPlacements is how many partitions of devs can be allocated together without any counter of the set
// exceeding its capacity, with one such set (sorted names): what the published counters promise for one
// profile. A device consuming a counter the set does not have cannot be allocated at all. The search is
// exact over every subset (a GPU has at most a handful of placements per profile); past 20 devices it
// stops at a greedy answer, which is still a lower bound.
func maxPlacements(devs []cluster.PartitionDevice, capacity map[string]int64) (int, []string) {
	fits := func(set []cluster.PartitionDevice) bool { return counterOverrun(capacity, set) == nil }
	var best []cluster.PartitionDevice
	if len(devs) > 20 {
		for _, d := range devs {
			if fits(append(slices.Clone(best), d)) {
				best = append(best, d)
			}
		}
	} else {
		for mask := uint32(1); mask < 1<<len(devs); mask++ {
			if bits.OnesCount32(mask) <= len(best) {
				continue
			}
			var set []cluster.PartitionDevice
			for i, d := range devs {
				if mask&(1<<i) != 0 {
					set = append(set, d)
				}
			}
			if fits(set) {
				best = set
			}
		}
	}
	names := make([]string, 0, len(best))
	for _, d := range best {
		names = append(names, d.Name)
	}
	slices.Sort(names)
	return len(best), names
}

// counterOverrun reports the first counter that the devices together consume beyond its capacity, or a
// counter they consume that the set does not publish.
func counterOverrun(capacity map[string]int64, devs []cluster.PartitionDevice) error {
	used := map[string]int64{}
	by := map[string][]string{}
	for _, d := range devs {
		for c, n := range d.Consumes {
			used[c] += n
			by[c] = append(by[c], d.Name)
		}
	}
	for _, c := range slices.Sorted(maps.Keys(used)) {
		limit, ok := capacity[c]
		if !ok {
			return fmt.Errorf("devices %s consume counter %s, which their counter set does not publish", strings.Join(by[c], ", "), c)
		}
		if used[c] > limit {
			return fmt.Errorf("devices %s together consume %d of counter %s, whose capacity is %d", strings.Join(by[c], ", "), used[c], c, limit)
		}
	}
	return nil
}

// partitionPlan is the fill of one parent GPU with partitions of one profile.
type partitionPlan struct {
	Profile string
	Count   int      // how many the counters let run together
	Devices []string // one such set, for messages
}

// errNoCounters is why a parent's partitions cannot be planned: one consumes nothing, so nothing stops the
// scheduler from handing it out beside anything else.
var errNoCounters = errors.New("consumes no counter")

// planPartitions chooses the profile to fill a parent with: the one whose counters let the most
// partitions run together while that stays at most maxPods (one pod each); ties go to the larger profile
// (fewer slices left over). A partition that consumes no counter fails the plan: its placements could
// overlap any other's.
func planPartitions(g cluster.PartitionableGPU, maxPods int) (partitionPlan, error) {
	byProfile := map[string][]cluster.PartitionDevice{}
	for _, d := range g.Partitions {
		if len(d.Consumes) == 0 {
			return partitionPlan{}, fmt.Errorf("partition %s (%s of %s) %w of set %s: nothing stops the scheduler from handing it out beside its parent or an overlapping partition",
				d.Name, d.Profile, g.UUID, errNoCounters, g.CounterSet)
		}
		byProfile[d.Profile] = append(byProfile[d.Profile], d)
	}
	var best partitionPlan
	var bestMem int64
	for _, p := range slices.Sorted(maps.Keys(byProfile)) {
		n, names := maxPlacements(byProfile[p], g.Counters)
		mem := byProfile[p][0].MemoryMiB
		if n == 0 || n > maxPods {
			continue
		}
		if n > best.Count || n == best.Count && mem > bestMem {
			best, bestMem = partitionPlan{Profile: p, Count: n, Devices: names}, mem
		}
	}
	if best.Count == 0 {
		return best, fmt.Errorf("no profile of %s's partitions fits %d pods or fewer under its counters", g.UUID, maxPods)
	}
	return best, nil
}

// latency is one run of the noisy-neighbour probe: the last JSON line of its log.
type latency struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
}

// String renders it for the report: "p50 1.20 ms, p99 3.40 ms".
func (l latency) String() string { return fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", l.P50, l.P99) }

// parseLatency reads the probe's last non-empty log line, which must be {"p50_ms": …, "p99_ms": …} with
// both numbers present and positive: a missing number is never taken as zero.
func parseLatency(log string) (latency, error) {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	var raw map[string]*float64
	if err := json.Unmarshal([]byte(last), &raw); err != nil {
		return latency{}, fmt.Errorf("the noisy-neighbour probe's last log line is not JSON {\"p50_ms\": …, \"p99_ms\": …}: %q", last)
	}
	p50, p99 := raw["p50_ms"], raw["p99_ms"]
	if p50 == nil || p99 == nil || *p50 <= 0 || *p99 <= 0 {
		return latency{}, fmt.Errorf("the noisy-neighbour probe's last log line lacks positive p50_ms and p99_ms: %q", last)
	}
	return latency{P50: *p50, P99: *p99}, nil
}
