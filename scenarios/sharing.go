package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/diagnose"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/suite"
)

// SharingInput is the input of SharingSpec.
type SharingInput struct {
	Base
	// Modes are how each node shares its GPUs on each path, read by discovery from evidence (labels,
	// resources, ResourceSlices), evidence winning over labels.
	Modes []cluster.NodeSharingMode
	// Noisy is the configured workload of the noisy-neighbour measurement (none: the workload image's), and
	// NoisyMaxP99 its limit, default applied.
	Noisy       config.NoisyNeighbourConfig
	NoisyMaxP99 time.Duration
}

const sharingName = "sharing"

// Sharing is the shared-and-partitioned-GPU scenario (SharingSpec). It is not required: a cluster of whole
// exclusive GPUs has nothing to share, and the allocation scenario already holds it to one device per pod.
var Sharing = Define(Scenario{Name: sharingName,
	NotOnExtendedDRA: "sharing is configured per device plugin or per DRA claim; a DRA-served extended resource has none of its own",
	Title:            "a shared or partitioned GPU keeps what its mode promises, and only that (not required: a cluster of whole exclusive GPUs has nothing to share)",
	Proves: []conformance.Proof{{Requirement: conformance.GPUSharing,
		How: "in each sharing mode discovery finds on a node (time-slicing, MPS, MIG, DRA partitions or shared capacity), a full node's pods " +
			"each get one replica, MIG device or partition, every one mapped to its physical GPU, no GPU has more holders than its mode allows, " +
			"and one more pod waits"}}},
	func(r *suite.Run) SharingInput {
		return SharingInput{Base: baseOf(r), Modes: r.Caps.SharingModes, Noisy: r.Config.NoisyNeighbour,
			NoisyMaxP99: cmp.Or(r.Config.NoisyNeighbour.MaxP99.Duration, config.DefaultNoisyMaxP99)}
	},
	SharingSpec)

// SharingSpec registers, per path, one node of each sharing mode found in the GPU pool and the checks of
// what that mode promises: time-slicing and MPS replicas map to one physical GPU, no GPU has more holders
// than its replicas, MPS containers see their limits; MIG devices are distinct, of their profile, and never
// handed out beside their parent GPU; DRA partitions never exceed their parent's shared counters and never
// run beside the whole parent. A noisy-neighbour measurement runs where a workload that drives the device
// is configured. Every check it cannot make here is recorded as not exercised, with the evidence.
func SharingSpec(input func() SharingInput) {
	reg := input()
	for _, regPath := range reg.pathsFor(sharingName) {
		pathName := regPath.Name()
		chosen, exclusive := sharingModesOn(reg.Modes, pathName, reg.GPUPool)
		if len(chosen) == 0 {
			why := "discovery read no sharing mode for any node of the GPU pool on this path"
			if len(exclusive) > 0 {
				why = "every node of the GPU pool hands out whole exclusive GPUs on this path, so nothing is shared (" + strings.Join(exclusive, "; ") + ")"
			}
			reg.notExercised(pathName+": sharing", why)
		}
		noisyNode := noisyCandidate(reg, pathName, chosen)
		if len(chosen) == 0 {
			continue
		}
		describePath(input, regPath, "GPU sharing", "share", []any{labels.Of(labels.Scenario(sharingName))}, func(s *Spec[SharingInput]) {
			for _, m := range chosen {
				switch m.Mode {
				case cluster.ModeTimeSlicing, cluster.ModeMPS:
					// holds:path: it fills every free replica of the node.
					ginkgo.It(fmt.Sprintf("maps every %s replica of a full node to one physical GPU", m.Mode),
						takes(Takes{Devices: WholePath}), proves(sharingName, conformance.GPUSharing), func(ctx context.Context) {
							ginkgo.By("no GPU gets more holders than its replicas, the pods sharing each GPU are named, and one more pod waits")
							sharedNodeFilled(ctx, s, m)
						})
				case cluster.ModeMIGSingle, cluster.ModeMIGMixed:
					ginkgo.It(fmt.Sprintf("fills a %s node with MIG devices, never beside its whole parent GPU", m.Mode),
						takes(Takes{Devices: WholePath}), proves(sharingName, conformance.GPUSharing), func(ctx context.Context) {
							ginkgo.By("each pod gets one distinct MIG device of its resource's profile, and one more pod waits")
							migNodeFilled(ctx, s, m)
						})
				case cluster.ModePartitionable:
					registerPartitionSpecs(reg, s, m)
				case cluster.ModeConsumable:
					registerCapacitySpecs(reg, s, m)
				}
			}
			if noisyNode != nil {
				m := *noisyNode
				// holds:nodes: a timing measured while another spec loads the node would measure that spec.
				ginkgo.It(fmt.Sprintf("measures a probe's latency alone and beside noisy neighbours (%s)", m.Mode),
					takes(Takes{Devices: WholePool}), func(ctx context.Context) {
						ginkgo.By("the neighbours: a memory-heavy one and a compute-heavy one")
						noisyNeighbours(ctx, s, m)
					})
			}
		})
	}
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

// sharedNodeFilled fills one time-sliced or MPS node's free replicas with one-replica probe pods and checks
// what the mode promises: each pod sees exactly the physical GPU behind the replica it was given, no GPU
// has more holders than the node's replicas, MPS pods see NVIDIA's default limits; the report names the
// pods that share each GPU. One more pod then waits, diagnosed as a device shortage.
func sharedNodeFilled(ctx context.Context, s *Spec[SharingInput], m cluster.NodeSharingMode) {
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
func startProbePods(ctx context.Context, s *Spec[SharingInput], prefix string, n int, path gpu.Path, node string) []string {
	var names []string
	for i := range n {
		w := s.Env.Factory.GPUPod(fmt.Sprintf("%s-%d", prefix, i), s.NS).Path(path).Devices(1).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...).OnNodes(node)
		names = append(names, createPod(ctx, s, w))
	}
	return names
}

// createPod creates the pod a builder makes, after its prerequisites, and returns its name.
func createPod(ctx context.Context, s *Spec[SharingInput], w *fixtures.GPUPodWrapper) string {
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

// migGroup is the pods asking for one resource of a MIG node: a profile's MIG devices, or (profile "")
// the whole GPUs of the mixed strategy.
type migGroup struct {
	path    *gpu.DevicePlugin
	profile string
	// replicas is how many pods may share each of the group's devices (time-sliced MIG), 0 when none.
	replicas int
	names    []string
}

// migNodeFilled starts, all at once, one pod per free device of each MIG resource of the node and, in the
// mixed strategy, one per free whole GPU, and checks that each MIG pod sees exactly the MIG device it was
// allocated, of its resource's profile, all distinct, and that no whole GPU one pod holds is the parent of
// a MIG device another holds. One more pod of the first MIG resource then waits, diagnosed.
func migNodeFilled(ctx context.Context, s *Spec[SharingInput], m cluster.NodeSharingMode) {
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
