package scenarios

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/internal/textcut"
)

// NoisyInput is the input of NoisySpec.
type NoisyInput struct {
	Base
	// Modes are how each node shares its GPUs on each path (discovery's, as for the sharing scenario).
	Modes []cluster.NodeSharingMode
	// Noisy is the configured workload of the measurement (none: the workload image's), and NoisyMaxP99
	// its limit, default applied.
	Noisy       config.NoisyNeighbourConfig
	NoisyMaxP99 time.Duration
}

const noisyName = "noisy-neighbours"

// Noisy is the noisy-neighbour scenario (NoisySpec): a probe's latency on one GPU that time-slicing or MPS
// shares, alone and beside a memory-heavy and a compute-heavy neighbour. It is not required: a cluster
// that shares no GPU has no neighbours.
var Noisy = Define(Scenario{Name: noisyName,
	NotOnExtendedDRA: noSharingOnExtendedDRA,
	Title:            "a probe on a shared GPU keeps its latency beside noisy neighbours (not required: a cluster that shares no GPU has none)"},
	func(r *suite.Run) NoisyInput {
		return NoisyInput{Base: baseOf(r), Modes: r.Caps.SharingModes, Noisy: r.Config.NoisyNeighbour,
			NoisyMaxP99: cmp.Or(r.Config.NoisyNeighbour.MaxP99.Duration, config.DefaultNoisyMaxP99)}
	},
	NoisySpec)

// NoisySpec registers, per path, the measurement on the first time-sliced or MPS node of the GPU pool with
// two replicas or more; a path without one is recorded as not exercised.
func NoisySpec(input func() NoisyInput) {
	reg := input()
	for _, regPath := range reg.pathsFor(noisyName) {
		chosen, _ := sharingModesOn(reg.Modes, regPath.Name(), reg.GPUPool)
		m := noisyCandidate(reg, regPath.Name(), chosen)
		if m == nil {
			continue
		}
		describePath(input, regPath, "Noisy neighbours", "noisy", []any{labels.Of(labels.Scenario(noisyName))}, func(s *Spec[NoisyInput]) {
			// A timing measured while another spec loads the node would measure that spec.
			ginkgo.It(fmt.Sprintf("measures a probe's latency alone and beside noisy neighbours (%s)", m.Mode),
				takes(Takes{Devices: WholePool}), func(ctx context.Context) {
					ginkgo.By("the neighbours: a memory-heavy one and a compute-heavy one")
					noisyNeighbours(ctx, s, *m)
				})
		})
	}
}

// NoisyLatencyEntry is the report entry of the noisy-neighbour measurement; its value a noisyResult.
const NoisyLatencyEntry = "gpu noisy-neighbour latency"

// noisyResult is the measurement on one shared GPU: the probe's latency alone and beside each neighbour.
// A run that could not be made on the same GPU is nil, with Why saying so; no number is ever made up.
type noisyResult struct {
	Node         string   `json:"node"`
	GPU          string   `json:"gpu"`
	Mode         string   `json:"mode"`
	Alone        *latency `json:"alone"`
	MemoryHeavy  *latency `json:"memory_heavy"`
	ComputeHeavy *latency `json:"compute_heavy"`
	Why          []string `json:"why,omitempty"`
}

// String is what the report shows.
func (r noisyResult) String() string {
	show := func(l *latency) string {
		if l == nil {
			return "not measured"
		}
		return l.String()
	}
	s := fmt.Sprintf("%s on %s (%s): alone %s; beside a memory-heavy neighbour %s; beside a compute-heavy neighbour %s",
		r.GPU, r.Node, r.Mode, show(r.Alone), show(r.MemoryHeavy), show(r.ComputeHeavy))
	if len(r.Why) > 0 {
		s += " (" + strings.Join(r.Why, "; ") + ")"
	}
	return s
}

// noisyCandidate is the node the noisy-neighbour measurement runs on for this path: a time-sliced or MPS
// node (several pods on one physical GPU) where a workload that drives the device is configured. Else the
// measurement is recorded as not exercised, with why.
func noisyCandidate(reg NoisyInput, path string, chosen []cluster.NodeSharingMode) *cluster.NodeSharingMode {
	what := "noisy-neighbour latency on " + path
	i := slices.IndexFunc(chosen, func(m cluster.NodeSharingMode) bool {
		return (m.Mode == cluster.ModeTimeSlicing || m.Mode == cluster.ModeMPS) && m.Replicas >= 2
	})
	if i < 0 {
		reg.notExercised(what, "no time-sliced or MPS node with two replicas or more in the GPU pool on this path: a neighbour cannot share one physical GPU with the probe")
		return nil
	}
	return &chosen[i]
}

// noisyNeighbours measures the configured probe on one GPU of a shared node alone, then beside a
// memory-heavy and then a compute-heavy neighbour. The device plugin cannot be told which GPU to give, so
// the suite first holds every free replica of the node with idle pods, reads which GPU each holds, and frees
// replicas of one GPU only: the next pod can only get that GPU, which its allocation then confirms.
func noisyNeighbours(ctx context.Context, s *Spec[NoisyInput], m cluster.NodeSharingMode) {
	env, path, node := s.Env, s.Path, m.Node
	_, n, held := freestNode(ctx, env, path, []string{node})
	if n == 0 {
		ginkgo.Fail(fmt.Sprintf("no replica of %s is free on the %s path (%s): the noisy-neighbour measurement needs a GPU of it", node, path.Name(), cmp.Or(held, "nobody holds one")))
	}
	ginkgo.By(fmt.Sprintf("holding the %d free replicas of %s with idle pods and reading which GPU each holds", n, node))
	byGPU := map[string][]string{}
	for _, name := range startProbePods(ctx, s, "idle", n, path, node) {
		g, ok := heldGPU(ctx, s, name)
		if !ok {
			return
		}
		byGPU[g] = append(byGPU[g], name)
	}
	var target string
	for g, holders := range byGPU {
		if len(holders) > len(byGPU[target]) || len(holders) == len(byGPU[target]) && g < target {
			target = g
		}
	}
	res := noisyResult{Node: node, GPU: target, Mode: m.Mode}
	defer func() {
		ginkgo.AddReportEntry(NoisyLatencyEntry, res)
		if len(res.Why) > 0 {
			// Nothing measured is never a pass: the run is INCOMPLETE with why.
			ginkgo.AddReportEntry("not exercised: noisy-neighbour latency on "+node, strings.Join(res.Why, "; "))
		}
	}()
	if len(byGPU[target]) < 2 {
		res.Why = append(res.Why, fmt.Sprintf("no GPU of %s had two free replicas (%v): a neighbour cannot share one GPU with the probe", node, byGPU))
		return
	}
	idle := byGPU[target]

	ginkgo.By(fmt.Sprintf("measuring alone on %s", target))
	deletePod(ctx, s, idle[0])
	var standIn string
	res.Alone, standIn = runNoisyProbe(ctx, s, "probe-alone", node)
	if standIn != "" {
		ginkgo.AddReportEntry(run.StandInPrefix+"noisy-neighbour latency on the "+s.Path.Name()+" path", run.StandIn{
			Did: fmt.Sprintf("placed the probe on %s of %s beside idle holders of its other replicas; %s", target, node, standIn),
			Fix: "give GPU containers NVIDIA's CUDA driver library (NVIDIA_DRIVER_CAPABILITIES=compute), or pass --noisy-neighbour-image with a CUDA workload"})
		return
	}

	for i, role := range []string{config.NoisyRoleMemory, config.NoisyRoleCompute} {
		ginkgo.By(fmt.Sprintf("measuring beside a %s neighbour on %s", role, target))
		neighbour := createPod(ctx, s, noisyPod(s, "neighbour-"+role, role, node).RestartAlways())
		if g, ok := heldGPU(ctx, s, neighbour); !ok || g != target {
			res.Why = append(res.Why, fmt.Sprintf("the %s neighbour was given %s, not %s, although only %s's replicas were free", role, cmp.Or(g, "a GPU the kubelet did not name"), target, target))
			return
		}
		if i == 0 {
			// The probe needs a replica of its own beside the neighbour's.
			deletePod(ctx, s, idle[1])
		}
		l, _ := runNoisyProbe(ctx, s, "probe-"+role, node)
		if role == config.NoisyRoleMemory {
			res.MemoryHeavy = l
		} else {
			res.ComputeHeavy = l
		}
		deletePod(ctx, s, neighbour)
	}
	limit := s.In.NoisyMaxP99
	for role, l := range map[string]*latency{config.NoisyRoleMemory: res.MemoryHeavy, config.NoisyRoleCompute: res.ComputeHeavy} {
		gomega.Expect(l.P99).To(gomega.BeNumerically("<=", float64(limit.Microseconds())/1e3),
			"noisy neighbour: the probe's p99 on %s (%s) beside a %s neighbour is %.2f ms, above the limit %s (alone: %s); a latency-bound tenant of this GPU is starved (--noisy-neighbour-max-p99)",
			target, m.Mode, role, l.P99, limit, res.Alone)
	}
}

// noisyPod is a pod of the configured workload in role, asking for one replica on node.
func noisyPod(s *Spec[NoisyInput], name, role, node string) *fixtures.GPUPodWrapper {
	w := s.Env.Factory.GPUPod(name, s.NS).Path(s.Path).Devices(1).Env(config.NoisyNeighbourRoleEnv, role).OnNodes(node)
	if s.In.Noisy.Image == "" {
		return w.Args("noisy") // the workload image's own, on libcuda where the container has it
	}
	return w.Image(s.In.Noisy.Image).Command(s.In.Noisy.Command...)
}

// heldGPU is the physical GPU the kubelet allocated to a running pod; false (recorded) when the kubelet's
// view cannot be read, since then no neighbour can be shown to share the probe's GPU.
func heldGPU(ctx context.Context, s *Spec[NoisyInput], name string) (string, bool) {
	pod := pods.ExpectPodRunning(ctx, s.Env, s.NS, name)
	given, err := s.Path.Given(ctx, givenInput(s.Env, pod, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the allocation of pod %s from %s", name, s.Path.Authority())
	if given.CountOnly || len(given.Devices) != 1 {
		ginkgo.AddReportEntry("not exercised: noisy-neighbour latency on "+pod.Spec.NodeName,
			fmt.Sprintf("the GPU behind pod %s's replica cannot be read (%s), so no neighbour can be shown to share the probe's GPU", name, cmp.Or(given.Note, gpu.FormatDevices(given.Devices))))
		return "", false
	}
	return given.Devices[0], true
}

// runNoisyProbe runs the configured probe to its end on node and reads its latency from its log's last
// line, or the stand-in sentence the workload's own probe prints where its container has no CUDA driver.
// A probe that fails, or prints neither, fails the spec: the measurement is the check.
func runNoisyProbe(ctx context.Context, s *Spec[NoisyInput], name, node string) (*latency, string) {
	ginkgo.GinkgoHelper()
	env, ns := s.Env, s.NS
	name = createPod(ctx, s, noisyPod(s, name, config.NoisyRoleProbe, node))
	var pod *corev1.Pod
	env.Wait.ForProgress(ctx, fmt.Sprintf("the noisy-neighbour probe %s/%s to finish", ns, name), wait.Target{Kind: "Pod", Namespace: ns, Name: name}, env.Timeouts.JobRun,
		func(g gomega.Gomega) {
			var err error
			pod, err = env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(pod.Status.Phase).To(gomega.BeElementOf(corev1.PodSucceeded, corev1.PodFailed), "pod phase")
		})
	raw, err := env.Clients.Kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: fixtures.WorkloadContainer}).DoRaw(ctx)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the log of the noisy-neighbour probe %s", name)
	gomega.Expect(pod.Status.Phase).To(gomega.Equal(corev1.PodSucceeded), "the noisy-neighbour probe %s failed; its log ends: %s", name, textcut.Tail(string(raw), 600))
	gomega.Expect(pod.Spec.NodeName).To(gomega.Equal(node), "the noisy-neighbour probe %s ran on %s, not on %s", name, pod.Spec.NodeName, node)
	if standIn := noisyStandIn(string(raw)); standIn != "" {
		return nil, standIn
	}
	l, err := parseLatency(string(raw))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return &l, ""
}

// noisyStandIn is the stand-in sentence of the workload's own probe's last line ({"stand_in": …}), or "".
func noisyStandIn(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	var last struct {
		StandIn string `json:"stand_in"`
	}
	if json.Unmarshal([]byte(lines[len(lines)-1]), &last) != nil {
		return ""
	}
	return last.StandIn
}

// deletePod deletes a pod of the spec and waits until it is gone, so its replica is free again.
func deletePod(ctx context.Context, s *Spec[NoisyInput], name string) {
	ginkgo.GinkgoHelper()
	env, ns := s.Env, s.NS
	gomega.Expect(env.Clients.Kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})).To(gomega.Succeed(), "deleting pod %s", name)
	env.Wait.For(ctx, fmt.Sprintf("pod %s/%s to be gone", ns, name), wait.Target{Kind: "Pod", Namespace: ns, Name: name}, env.Timeouts.Release, func(g gomega.Gomega) {
		_, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "pod still exists (err=%v)", err)
	})
}
