package scenarios

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/diagnose"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/internal/workload/probe"
)

// noSharingOnExtendedDRA is why the sharing checks do not run on a DRA-served extended resource.
const noSharingOnExtendedDRA = "sharing is configured per device plugin or per DRA claim; a DRA-served extended resource has none of its own"

// The sharing scenario's judgements, kept apart from the specs that gather their evidence so each can be
// tested without a cluster.

// labelGPUMemory is GPU Feature Discovery's label of a GPU's framebuffer in MiB: the memory NVIDIA's MPS
// control daemon divides among a shared GPU's replicas.
const labelGPUMemory = "nvidia.com/gpu.memory"

// mpsLimits are the MPS limits a container's clients must get from the MPS control daemon behind its pipe
// directory: the percentage of the GPU's threads, and the device memory each may pin per GPU, with what
// they are derived from (for messages).
type mpsLimits struct {
	ActiveThreadPercentage int   // 100 divided among the replicas, integer division
	PinnedMemMiB           int64 // the GPU's memory divided among the replicas; 0 when unknown
	Replicas               int
	MemoryMiB              int64 // the GPU's memory (labelGPUMemory); 0 when the label is absent
}

// expectedMPS is what NVIDIA's device plugin sets as its MPS control daemon's defaults on a GPU shared
// replicas ways (k8s-device-plugin, cmd/mps-control-daemon/mps/daemon.go): set_default_active_thread_percentage
// 100/replicas (integer division) and set_default_device_pinned_mem_limit <index> <memory/replicas>M.
// memoryMiB 0 (the label absent) leaves the memory limit unknown.
func expectedMPS(replicas int, memoryMiB int64) mpsLimits {
	r := max(replicas, 1)
	want := mpsLimits{ActiveThreadPercentage: 100 / r, Replicas: r, MemoryMiB: memoryMiB}
	if memoryMiB > 0 {
		want.PinnedMemMiB = memoryMiB / int64(r)
	}
	return want
}

// checkMPS judges what a container's probe read of MPS: it must have the pipe directory of an MPS control
// daemon, that daemon must answer nvidia-cuda-mps-control in the container, and its default limits must
// be the container's share (want). A daemon answering its built-in defaults (100 percent, no memory
// limit) lacks the limits; other values are the wrong share. CUDA_MPS_* limit variables never count:
// NVIDIA's plugin does not set them. When a CUDA program under MPS ran (seen.CUDA, not a stand-in), its
// context must have had about that share of the SMs and an allocation above its memory limit must have
// failed.
func checkMPS(pod string, seen *probe.MPS, want mpsLimits) error {
	switch {
	case seen == nil:
		return fmt.Errorf("pod %s on an MPS node has no CUDA_MPS_PIPE_DIRECTORY: its container was not given the pipe directory of an MPS control daemon, so its CUDA clients do not reach MPS and nothing limits them; the device plugin must give each container its daemon's pipe directory", pod)
	case seen.PipeDirectory == "":
		return fmt.Errorf("pod %s on an MPS node has no CUDA_MPS_PIPE_DIRECTORY (only other CUDA_MPS_* variables): its CUDA clients look for an MPS control daemon at MPS's default /tmp/nvidia-mps, not the device plugin's; the device plugin must give each container its daemon's pipe directory", pod)
	case seen.Control != probe.MPSControlAnswered:
		return fmt.Errorf("pod %s on an MPS node shows no MPS limits: %s", pod, cmp.Or(seen.ControlError, "its probe did not read the MPS control daemon's defaults"))
	}
	answer := func(command string) string {
		for _, a := range seen.Asked {
			if a.Command == command {
				return a.Answer
			}
		}
		return ""
	}
	var unset, wrong []string
	// The percentage: 100/replicas as the plugin sets it, or the exact fraction a plugin may set instead.
	cmd := probe.MPSGetActiveThreadPercentage
	raw := cmp.Or(answer(cmd), seen.ActiveThreadPercentage)
	wantPct := fmt.Sprintf("want %d (100 divided among %d replicas)", want.ActiveThreadPercentage, want.Replicas)
	pct, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
	switch {
	case err != nil:
		wrong = append(wrong, fmt.Sprintf("%s answered %q, not a percentage; %s", cmd, raw, wantPct))
	case pct >= float64(want.ActiveThreadPercentage) && pct <= 100/float64(want.Replicas):
	case pct >= 100:
		unset = append(unset, fmt.Sprintf("%s answered %q (the daemon's default: no limit), %s", cmd, raw, wantPct))
	default:
		wrong = append(wrong, fmt.Sprintf("%s answered %q, %s", cmd, raw, wantPct))
	}
	// The pinned memory limit of each GPU the daemon was asked about.
	limits, err := probe.ParsePinnedMemLimit(seen.PinnedDeviceMemLimit)
	switch {
	case err != nil:
		wrong = append(wrong, err.Error())
	case len(limits) == 0:
		unset = append(unset, fmt.Sprintf("no %s answer was recorded", probe.MPSGetPinnedDeviceMemLimit))
	}
	wantMem := "want a limit (the node has no " + labelGPUMemory + " label to compute it from)"
	if want.PinnedMemMiB > 0 {
		wantMem = fmt.Sprintf("want %dM (%d MiB divided among %d replicas)", want.PinnedMemMiB, want.MemoryMiB, want.Replicas)
	}
	for _, dev := range slices.Sorted(maps.Keys(limits)) {
		mib, cmd := limits[dev], fmt.Sprintf("%s %d", probe.MPSGetPinnedDeviceMemLimit, dev)
		raw := answer(cmd)
		switch {
		case mib == 0 && strings.Trim(strings.TrimRight(strings.ToUpper(raw), "MGB"), " 0") == "":
			unset = append(unset, fmt.Sprintf("%s answered %q (no limit), %s", cmd, raw, wantMem))
		case want.PinnedMemMiB == 0 || mib == want.PinnedMemMiB:
		case strings.HasSuffix(strings.ToUpper(strings.TrimSpace(raw)), "G") && mib/1024 == want.PinnedMemMiB/1024:
			// The daemon may render the limit in whole GiB (NVIDIA's GPU Operator documentation shows it
			// answering "3G"): equal within that rounding.
		default:
			wrong = append(wrong, fmt.Sprintf("%s answered %q, %s", cmd, raw, wantMem))
		}
	}
	via := fmt.Sprintf("the MPS control daemon behind CUDA_MPS_PIPE_DIRECTORY=%s, asked through %s in the container", seen.PipeDirectory, probe.MPSControl)
	switch {
	case len(wrong) == 0 && len(unset) > 0:
		return fmt.Errorf("pod %s on an MPS node lacks its MPS limits: %s, has no default limits set: %s", pod, via, strings.Join(unset, "; "))
	case len(wrong) > 0:
		return fmt.Errorf("pod %s on an MPS node does not get its share of the GPU: %s, answered: %s", pod, via, strings.Join(append(wrong, unset...), "; "))
	}
	return checkMPSContext(pod, seen.CUDA, want)
}

// checkMPSContext judges what a CUDA program under MPS saw (nil, or a stand-in: nothing to judge): about
// the percentage's share of the device's SMs (MPS hands out whole TPCs of two SMs, so within two of the
// exact share) and a failed allocation above the pinned memory limit.
func checkMPSContext(pod string, c *probe.MPSContext, want mpsLimits) error {
	if c == nil || c.StandIn != "" {
		return nil
	}
	if c.Error != "" {
		return fmt.Errorf("pod %s: a CUDA program under MPS failed: %s", pod, c.Error)
	}
	share := float64(c.DeviceSMCount) * float64(want.ActiveThreadPercentage) / 100
	if c.DeviceSMCount <= 0 || math.Abs(float64(c.SMCount)-share) >= 2 {
		return fmt.Errorf("pod %s: a CUDA program under MPS had %d SMs of the device's %d, want about %.1f (%d%% of them): the active thread percentage does not limit its clients", pod, c.SMCount, c.DeviceSMCount, share, want.ActiveThreadPercentage)
	}
	if !c.OverLimitAllocationFailed {
		return fmt.Errorf("pod %s: a CUDA program under MPS allocated more device memory than its pinned memory limit (%d MiB) and the allocation succeeded: the limit is not enforced", pod, c.MemoryLimitBytes>>20)
	}
	return nil
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
			note = with + ": MPS limits " + cmp.Or(h.MPS, "none seen") + ", no fault isolation"
		}
		out = append(out, gpu.SharingObservation{Node: node, Path: path, Mode: mode, Pod: h.Pod, Saw: saw, Note: note})
	}
	return out
}

// migHolding is a MIG device (or a DRA partition) a pod holds, as the probe saw it.
type migHolding struct {
	Pod, UUID, Profile, Parent string
	// Replicas is how many pods may hold the MIG device (its resource's replicas; 0 when exclusive), and
	// Replica the replica ID the pod was given when it is time-sliced.
	Replicas int
	Replica  string
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
		return h, fmt.Errorf("pod %s asked for a %s MIG device and sees %s, a %s", pod, profile, d.UUID, cmp.Or(d.Profile, "device of no profile"))
	case parent != "" && d.Parent != parent:
		return h, fmt.Errorf("pod %s asked for a partition of %s and sees %s on %s", pod, parent, d.UUID, cmp.Or(d.Parent, "no parent GPU"))
	}
	return h, nil
}

// checkMIGParents judges, with the framework's gpu.CheckMIGParents, the MIG devices (or partitions) pods
// on node hold beside the whole GPUs others hold (whole maps a GPU's UUID to its holders).
func checkMIGParents(node string, whole map[string][]string, migs []migHolding) error {
	holdings := make([]gpu.MIGHolding, 0, len(whole)+len(migs))
	for uuid, pods := range whole {
		for _, pod := range pods {
			holdings = append(holdings, gpu.MIGHolding{Pod: pod, Whole: []string{uuid}})
		}
	}
	for _, m := range migs {
		h := gpu.MIGHolding{Pod: m.Pod, MIG: []probe.MIGDevice{{UUID: m.UUID, Profile: m.Profile, Parent: m.Parent}}, Replicas: m.Replicas}
		if m.Replica != "" {
			h.ReplicaIDs = []string{m.Replica}
		}
		holdings = append(holdings, h)
	}
	slices.SortStableFunc(holdings, func(a, b gpu.MIGHolding) int { return strings.Compare(a.Pod, b.Pod) })
	return gpu.CheckMIGParents(node, holdings)
}

// checkWholeHolders judges the whole GPUs pods hold beside MIG devices (mig-mixed; whole maps a GPU's UUID
// to its holders): each to one pod, or to as many as its replicas when the plugin time-slices them.
func checkWholeHolders(node string, replicas int, whole map[string][]string) error {
	sharing := cluster.NodeSharing{}
	if replicas > 1 {
		sharing = cluster.NodeSharing{Strategy: cluster.ModeTimeSlicing, Replicas: replicas}
	}
	var holdings []gpu.Holding
	for _, uuid := range slices.Sorted(maps.Keys(whole)) {
		for _, pod := range whole[uuid] {
			holdings = append(holdings, gpu.Holding{Pod: pod, Seen: []string{uuid}})
		}
	}
	return gpu.CheckExclusive(node, sharing, holdings)
}

// migObservation records one pod's MIG device (or partition) for the report.
func migObservation(node, path, mode string, h migHolding) gpu.SharingObservation {
	return gpu.SharingObservation{Node: node, Path: path, Mode: mode, Pod: h.Pod,
		Saw: fmt.Sprintf("%s (%s of %s)", h.UUID, h.Profile, cmp.Or(h.Parent, "an unnamed GPU")), Note: "MIG device: memory and fault isolated in hardware"}
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

// sharingModesOn picks, among the GPU pool's nodes on the path, the first node (by name) of each mode this
// scenario checks there, and renders the evidence of the exclusive ones. A mode no spec checks on this path
// is recorded where it is met.
func sharingModesOn(modes []cluster.NodeSharingMode, path string, pool []string) (chosen []cluster.NodeSharingMode, exclusive []string) {
	sorted := slices.Clone(modes)
	slices.SortFunc(sorted, func(a, b cluster.NodeSharingMode) int { return strings.Compare(a.Node, b.Node) })
	seen := map[string]bool{}
	for _, m := range sorted {
		if m.Path != path || (len(pool) > 0 && !slices.Contains(pool, m.Node)) {
			continue
		}
		if !checkedOn(path, m.Mode) {
			exclusive = append(exclusive, fmt.Sprintf("%s: %s from %s", m.Node, m.Mode, cmp.Or(strings.Join(m.Evidence, ", "), "no evidence recorded")))
			continue
		}
		if !seen[m.Mode] {
			seen[m.Mode] = true
			chosen = append(chosen, m)
		}
	}
	return chosen, exclusive
}

// sharedNodeFilled fills one time-sliced or MPS node's free replicas with one-replica probe pods and checks
// what the mode promises: each pod sees exactly the physical GPU behind the replica it was given, no GPU
// has more holders than the node's replicas, MPS pods see NVIDIA's default limits; the report names the
// pods that share each GPU. One more pod then waits, diagnosed as a device shortage.
func sharedNodeFilled[I scenarioInput](ctx context.Context, s *Spec[I], m cluster.NodeSharingMode) {
	env, path, ns, node := s.Env, s.Path, s.NS, m.Node
	nodeObj, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading node %s's labels", node)
	if dp, ok := path.(*gpu.DevicePlugin); ok && m.Resource != "" && corev1.ResourceName(m.Resource) != dp.Resource {
		// The node serves its replicas under another name than the path's (NVIDIA's renameByDefault on
		// part of the pool): its pods ask for that resource.
		q := nodeObj.Status.Allocatable[corev1.ResourceName(m.Resource)]
		path = resourcePath(m.Resource, node, q.Value())
		ginkgo.By(fmt.Sprintf("node %s serves its replicas as %s, not %s: its pods ask for %s", node, m.Resource, dp.Resource, m.Resource))
	}
	sharing := sharingLimit(path, nodeObj.Labels, m)
	_, n, held := freestNode(ctx, env, path, []string{node})
	if held != "" {
		ginkgo.AddReportEntry("devices of "+node+" held by other workloads", held)
	}
	if n == 0 {
		ginkgo.Fail(fmt.Sprintf("no replica of %s (%s) is free on the %s path (%s): the node cannot be filled; free it or give another node of this mode", node, m.Mode, path.Name(), cmp.Or(held, "nobody holds one")))
	}
	ginkgo.By(fmt.Sprintf("starting %d one-replica pods on %s (%s)", n, node, sharing))
	names := startProbePods(ctx, s, "share", n, path, node)
	memoryMiB, _ := strconv.ParseInt(nodeObj.Labels[labelGPUMemory], 10, 64)
	if m.Mode == cluster.ModeMPS && memoryMiB == 0 {
		ginkgo.AddReportEntry("not compared: MPS pinned memory limit on "+node, fmt.Sprintf("the node has no %s label, so the expected limit (memory divided among replicas) is unknown; its presence is still checked", labelGPUMemory))
	}
	var holdings []gpu.Holding
	mpsStandInNoted := false
	var shares []sharedHolding
	reports, allocations := runningProbes(ctx, env, path, ns, names)
	for i, name := range names {
		report, given := reports[i], allocations[i]
		gomega.Expect(report.Devices).To(gomega.HaveLen(1), "pod %s asked for 1 replica and sees %s (%s)", name, gpu.FormatDevices(report.Devices), report.Message)
		h := gpu.Holding{Pod: name, Seen: report.Devices}
		share := sharedHolding{Pod: name, GPU: report.Devices[0]}
		if given.CountOnly {
			ginkgo.AddReportEntry("not exercised: replica identity check", given.Note)
		} else {
			expectSameDevices(report, given)
			if given.Replicas == nil {
				ginkgo.Fail(fmt.Sprintf("node %s shares its GPUs %s (%s), but the kubelet handed pod %s the plain ID %s, not a replica of a GPU",
					node, sharing, strings.Join(m.Evidence, ", "), name, strings.Join(given.Devices, " ")))
			}
			h.Allocated, h.Seen = given.Allocated(), given.Normalize(report.Devices)
			share.Replicas, share.GPU = given.Replicas, given.Devices[0]
		}
		holdings = append(holdings, h)
		if err := gpu.CheckExclusive(node, sharing, holdings); err != nil {
			ginkgo.Fail(err.Error())
		}
		if m.Mode == cluster.ModeMPS {
			want := expectedMPS(sharing.HoldersPerDevice(), memoryMiB)
			if err := checkMPS(name, report.MPS, want); err != nil {
				ginkgo.Fail(err.Error())
			}
			share.MPS = fmt.Sprintf("active threads %s%%, pinned memory %s", report.MPS.ActiveThreadPercentage, report.MPS.PinnedDeviceMemLimit)
			if c := report.MPS.CUDA; c != nil && c.StandIn != "" && !mpsStandInNoted {
				mpsStandInNoted = true
				ginkgo.AddReportEntry(run.StandInPrefix+"MPS limits as a CUDA program sees them on "+node, run.StandIn{Did: c.StandIn,
					Fix: "give GPU containers NVIDIA's CUDA driver library (NVIDIA_DRIVER_CAPABILITIES=compute), so the probe's CUDA program reads its SMs and tries an allocation above the pinned limit"})
			}
		}
		shares = append(shares, share)
	}
	for _, obs := range sharedObservations(node, path.Name(), m.Mode, shares) {
		ginkgo.AddReportEntry(gpu.SharingObservedEntry, obs)
	}

	ginkgo.By("asking for one more replica on the full node")
	pendingPodDiagnosed(ctx, env, env.Factory.GPUPod("one-more", ns).Path(path).Devices(1).Args(fixtures.ProbeArgs(1)...).OnNodes(node), expectation{
		stage: diagnose.StageScheduling, layer: diagnose.LayerScheduler, reason: diagnose.InsufficientDevice,
		messages: []string{"Insufficient " + string(path.QuotaResource())}})
}

// sharingLimit is how many holders one GPU of the node may have: the replicas its GPU Feature Discovery
// labels configure when they say it is shared, since that is the promise (a plugin advertising more
// replicas than configured is what the check must catch), else the replicas discovery read from the
// evidence. A disagreement goes to the report.
func sharingLimit(path gpu.Path, nodeLabels map[string]string, m cluster.NodeSharingMode) cluster.NodeSharing {
	labelled := gpu.SharingFor(path, nodeLabels)
	if m.Conflict != "" {
		ginkgo.AddReportEntry("sharing labels and evidence disagree on "+m.Node, m.Conflict)
	}
	if labelled.Shared() {
		if labelled.Replicas != m.Replicas {
			ginkgo.AddReportEntry("replicas of "+m.Node, fmt.Sprintf("labels configure %d replicas per GPU, the evidence shows %d (%s); the configured %d is the limit",
				labelled.Replicas, m.Replicas, strings.Join(m.Evidence, ", "), labelled.Replicas))
		}
		return labelled
	}
	return cluster.NodeSharing{Strategy: m.Mode, Replicas: m.Replicas}
}

// startProbePods creates n one-device probe pods on node through path, which hold their device while the
// suite compares them, and returns their names.
func startProbePods[I scenarioInput](ctx context.Context, s *Spec[I], prefix string, n int, path gpu.Path, node string) []string {
	var names []string
	for i := range n {
		w := s.Env.Factory.GPUPod(fmt.Sprintf("%s-%d", prefix, i), s.NS).Path(path).Devices(1).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...).OnNodes(node)
		names = append(names, createPod(ctx, s, w))
	}
	return names
}

// createPod creates the pod a builder makes, after its prerequisites, and returns its name.
func createPod[I scenarioInput](ctx context.Context, s *Spec[I], w *fixtures.GPUPodWrapper) string {
	pod := w.Obj()
	for _, pre := range w.Prerequisites() {
		s.Env.Create(ctx, pre)
	}
	s.Env.Create(ctx, pod)
	return pod.Name
}

// resourcePath is the device-plugin path of one extended resource of node (a MIG profile's under the mixed
// strategy): pods ask for it and the kubelet's answer is read for it, as for nvidia.com/gpu.
func resourcePath(resource string, node string, count int64) *gpu.DevicePlugin {
	return &gpu.DevicePlugin{Resource: corev1.ResourceName(resource), Allocatable: map[string]int64{node: count}}
}

// migNodeFilled starts, all at once, one pod per free device of each MIG resource of the node and, in the
// mixed strategy, one per free whole GPU, and checks that each MIG pod sees exactly the MIG device it was
// allocated, of its resource's profile, all distinct, and that no whole GPU one pod holds is the parent of
// a MIG device another holds. One more pod of the first MIG resource then waits, diagnosed.
func migNodeFilled[I scenarioInput](ctx context.Context, s *Spec[I], m cluster.NodeSharingMode) {
	env, ns, node := s.Env, s.NS, m.Node
	dp, ok := s.Path.(*gpu.DevicePlugin)
	gomega.Expect(ok).To(gomega.BeTrue(), "MIG resources are device-plugin resources; the %s path is not", s.Path.Name())
	gomega.Expect(m.MIG).NotTo(gomega.BeEmpty(), "node %s is %s (%s) but discovery names no resource carrying its MIG devices", node, m.Mode, strings.Join(m.Evidence, ", "))
	var groups []migGroup
	for _, r := range m.MIG {
		groups = append(groups, migGroup{path: resourcePath(r.Resource, node, r.Count), profile: r.Profile, replicas: r.Replicas})
	}
	if m.Mode == cluster.ModeMIGMixed && m.WholeGPUs > 0 {
		groups = append(groups, migGroup{path: resourcePath(cmp.Or(m.Resource, string(dp.Resource)), node, m.WholeGPUs)})
	}
	for i := range groups {
		g := &groups[i]
		_, n, held := freestNode(ctx, env, g.path, []string{node})
		if held != "" {
			ginkgo.AddReportEntry(fmt.Sprintf("%s of %s held by other workloads", g.path.Resource, node), held)
		}
		ginkgo.By(fmt.Sprintf("starting %d pods asking for one %s each on %s", n, g.path.Resource, node))
		g.names = startProbePods(ctx, s, fmt.Sprintf("mig-%d", i), n, g.path, node)
	}
	if !slices.ContainsFunc(groups, func(g migGroup) bool { return len(g.names) > 0 }) {
		ginkgo.Fail(fmt.Sprintf("no MIG device or whole GPU of %s is free on the %s path: the node cannot be filled; free it or give another node of this mode", node, s.Path.Name()))
	}
	whole := map[string][]string{}
	var migs []migHolding
	for _, g := range groups {
		for _, name := range g.names {
			pod := pods.ExpectPodRunning(ctx, env, ns, name)
			report := pods.ExpectProbeReport(ctx, env, ns, name)
			gomega.Expect(report.Devices).To(gomega.HaveLen(1), "pod %s asked for one %s and sees %s (%s)", name, g.path.Resource, gpu.FormatDevices(report.Devices), report.Message)
			given, err := g.path.Given(ctx, givenInput(env, pod, nil))
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the allocation of pod %s from %s", name, s.Path.Authority())
			allocated, replica := report.Devices[0], ""
			if given.CountOnly {
				ginkgo.AddReportEntry("not exercised: MIG device identity check", given.Note)
			} else {
				expectSameDevices(report, given)
				allocated = given.Devices[0]
				if len(given.Replicas) > 0 {
					replica = given.Replicas[0]
				}
			}
			if g.profile == "" {
				gomega.Expect(report.MIGDevices).To(gomega.BeEmpty(), "pod %s asked for a whole GPU (%s) and its nvidia-smi lists MIG devices", name, g.path.Resource)
				whole[allocated] = append(whole[allocated], name)
				ginkgo.AddReportEntry(gpu.SharingObservedEntry, gpu.SharingObservation{Node: node, Path: s.Path.Name(), Mode: m.Mode, Pod: name, Saw: allocated + " whole"})
				continue
			}
			h, err := checkMIGSeen(name, report.MIGDevices, allocated, g.profile, "")
			if err != nil {
				ginkgo.Fail(err.Error())
			}
			h.Replicas, h.Replica = g.replicas, replica
			migs = append(migs, h)
			ginkgo.AddReportEntry(gpu.SharingObservedEntry, migObservation(node, s.Path.Name(), m.Mode, h))
		}
	}
	if err := checkMIGParents(node, whole, migs); err != nil {
		ginkgo.Fail(err.Error())
	}
	if err := checkWholeHolders(node, m.WholeReplicas, whole); err != nil {
		ginkgo.Fail(err.Error())
	}

	more := groups[0].path
	ginkgo.By(fmt.Sprintf("asking for one more %s on the full node", more.Resource))
	pendingPodDiagnosed(ctx, env, env.Factory.GPUPod("one-more", ns).Path(more).Devices(1).Args(fixtures.ProbeArgs(1)...).OnNodes(node), expectation{
		stage: diagnose.StageScheduling, layer: diagnose.LayerScheduler, reason: diagnose.InsufficientDevice,
		messages: []string{"Insufficient " + string(more.Resource)}})
}

// checkedOn says whether this scenario checks mode on path: replicas and MIG resources are the device
// plugin's, partitions through shared counters and GPUs shared by capacity DRA's.
func checkedOn(path, mode string) bool {
	switch mode {
	case cluster.ModeTimeSlicing, cluster.ModeMPS, cluster.ModeMIGSingle, cluster.ModeMIGMixed:
		return path == config.PathDevicePlugin
	case cluster.ModePartitionable, cluster.ModeConsumable:
		return path == config.PathDRA
	}
	return false
}

// migGroup is the pods asking for one resource of a MIG node: a profile's MIG devices, or (profile "")
// the whole GPUs of the mixed strategy.
type migGroup struct {
	path    *gpu.DevicePlugin
	profile string
	// replicas is how many pods may share each of the group's devices (time-sliced MIG), 0 when none.
	replicas int
	names    []string
}
