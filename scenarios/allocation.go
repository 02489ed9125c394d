package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/queues"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/wait"
)

// AllocationInput is the input of AllocationSpec. The getter is called while the spec tree is built
// (to decide registration: paths, Kueue, pool) and again in each spec (for the live environment), so
// the suite must have discovered capabilities before RunSpecs.
type AllocationInput struct {
	Base
	// KueuePresent registers the queue-based specs.
	KueuePresent bool
	// ExistingLocalQueue, when set, is submitted to instead of per-spec queues.
	ExistingLocalQueue string
	// DeviceCounts are the device counts to ask for, in order (default 1, 2).
	DeviceCounts []int
	// Broken are the paths discovery found present but not working, with the finding.
	Broken map[string]string
}

const allocationName = "allocation"

// Allocation is the allocation scenario: the right devices on the right node, exclusively (AllocationSpec,
// IsolationSpec), and a spec that fails for each path found present but not working (BrokenPathSpec).
var Allocation = Define(Scenario{Name: allocationName, Title: "a workload gets exactly the devices it asked for, and only it sees them",
	Required: true, Uses: suite.Needs{Kueue: true},
	Proves: []conformance.Proof{{Requirement: conformance.SecureAcceleratorAccess,
		How: "a running pod sees exactly the devices the kubelet (device plugin) or its ResourceClaim (DRA) allocated to it, compared by identity; " +
			"every device of a full node goes to exactly one pod and one more pod waits; a pod that asks for no device, a GPU pod's second container, " +
			"its init container and a pod beside it see none of its devices. Absence is asserted on the device nodes (/dev/nvidiaN), " +
			"nvidia-smi's list and the runtime's environment together, never inferred from a missing tool"},
		{Requirement: conformance.DRASupport, How: "on the DRA path, a pod's ResourceClaim (from a ResourceClaimTemplate naming a DeviceClass) is allocated by the scheduler " +
			"from the driver's ResourceSlices, and the running container sees exactly the devices the claim's allocation names"}}},
	func(r *suite.Run) AllocationInput {
		return AllocationInput{Base: baseOf(r), KueuePresent: r.KueueUsable, ExistingLocalQueue: r.ExistingLocalQueue(), Broken: r.Caps.Broken}
	},
	func(input func() AllocationInput) {
		BrokenPathSpec(input().Broken)
		AllocationSpec(input)
		IsolationSpec(input)
	})

// AllocationSpec registers the allocation scenario: per path and device count, a Job submitted through
// a LocalQueue is admitted, placed on a node with the devices, sees exactly the devices it was given,
// and completes; a running pod sees exactly what the path's authority allocated; the vendor's device test
// passes in a pod given one device; negative checks.
func AllocationSpec(input func() AllocationInput) {
	reg := input()
	counts := reg.DeviceCounts
	if len(counts) == 0 {
		counts = []int{1, 2}
	}
	if !reg.KueuePresent {
		reg.notExercised("allocation through a Kueue LocalQueue", "Kueue is absent; direct-submission checks still run")
	}
	for _, regPath := range reg.Paths {
		pathName := regPath.Name()
		describePath(input, regPath, "GPU allocation", "alloc", []any{labels.Of(labels.Scenario(allocationName))}, func(s *Spec[AllocationInput]) {
			for _, n := range counts {
				nodes := reg.eligible(regPath, n)
				if len(nodes) == 0 {
					reg.notExercised(fmt.Sprintf("%s: %d device(s) per pod", pathName, n), fmt.Sprintf("no node in the GPU pool has %d devices on this path", n))
					continue
				}

				if reg.queued(reg.KueuePresent, pathName) {
					ginkgo.It(fmt.Sprintf("admits a Job for %s through a LocalQueue and completes it", plural(n)),
						labels.Of(labels.NeedsKueue), takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
							ginkgo.By("the Job is placed on a node with the devices and sees exactly the devices it was given")
							queuedJobGetsItsDevices(ctx, s.Env, s.In, s.Path, s.NS, n, s.lease(ctx, nodes))
						})
				}

				proof := proves(allocationName, conformance.SecureAcceleratorAccess)
				if regPath.ClaimBased() {
					proof = append(proof, proves(allocationName, conformance.DRASupport)...)
				}
				ginkgo.It(fmt.Sprintf("shows a running pod exactly the %s allocated to it", plural(n)),
					proof, takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
						ginkgo.By(fmt.Sprintf("the devices the pod sees are those %s allocated", s.Path.Authority()))
						ginkgo.By("the devices are freed when the pod is deleted")
						runningPodSeesGivenDevices(ctx, s.Env, s.Path, s.NS, n, s.lease(ctx, nodes))
					})
			}

			if nodes := reg.withDevices(regPath, "the vendor's device test"); len(nodes) > 0 {
				ginkgo.It("runs the vendor's device test in a pod with one device", takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
					deviceTest(ctx, s.Env, s.Path, s.NS, s.lease(ctx, nodes), s.In.DeviceTest)
				})
			}

			ginkgo.It("shows no device to a pod that asks for none", proves(allocationName, conformance.SecureAcceleratorAccess), takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
				pod := s.Env.Factory.GPUPod("no-gpu", s.NS).Args(fixtures.ProbeArgs(0)...).OnNodes(s.lease(ctx, s.In.eligible(s.Path, 1))...).Obj()
				s.Env.Create(ctx, pod)
				report := pods.ExpectProbeReport(ctx, s.Env, s.NS, pod.Name)
				gomega.Expect(report.Devices).To(gomega.BeEmpty(),
					"a pod that asked for no GPU saw %s on node %s (%s)", gpu.FormatDevices(report.Devices), report.Node, report.Message)
				evidenceSeen("a pod that asked for no device", report)
			})

			if dp, ok := regPath.(*gpu.DevicePlugin); ok {
				ginkgo.It("rejects a pod whose GPU request differs from its limit", takes(Takes{Devices: NoDevice}), func(ctx context.Context) {
					pod := s.Env.Factory.GPUPod("request-ne-limit", s.NS).Args(fixtures.ProbeArgs(1)...).Resources(corev1.ResourceRequirements{
						Requests: corev1.ResourceList{dp.Resource: resource.MustParse("1")},
						Limits:   corev1.ResourceList{dp.Resource: resource.MustParse("2")},
					}).Obj()
					err := s.Env.TryCreate(ctx, pod)
					gomega.Expect(err).To(gomega.HaveOccurred(), "the API server accepted a pod requesting 1 %s with a limit of 2; extended resources must not be overcommitted", dp.Resource)
					gomega.Expect(apierrors.IsInvalid(err)).To(gomega.BeTrue(), "expected an Invalid error, got: %v", err)
					gomega.Expect(err.Error()).To(gomega.ContainSubstring(string(dp.Resource)), "the rejection should name the resource")
				})
			}
		})
	}
}

func queuedJobGetsItsDevices(ctx context.Context, env *testenv.Env, in AllocationInput, path gpu.Path, ns string, n int, nodes []string) {
	var recorder *gpu.ClaimRecorder
	if path.ClaimBased() {
		// Started before the Job: the claim of a short pod can be allocated and released between polls.
		recorder = gpu.RecordClaims(ctx, env.Clients.Kube, ns)
		ginkgo.DeferCleanup(recorder.Stop)
	}

	ginkgo.By(fmt.Sprintf("creating a LocalQueue with quota for %d %s", n, path.QuotaResource()))
	lq := queues.Setup(ctx, env, queues.SetupInput{Namespace: ns, ExistingLocalQueue: in.ExistingLocalQueue, Quota: queues.QuotaFor(path.QuotaResource(), n)})

	ginkgo.By(fmt.Sprintf("submitting a Job asking for %s", plural(n)))
	w := env.Factory.GPUJob(fmt.Sprintf("probe-%d", n), ns).Path(path).Devices(n).Queue(lq).Args(fixtures.ProbeArgs(n)...).OnNodes(nodes...)
	jobObj := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	job := env.Create(ctx, jobObj).(*batchv1.Job)

	ginkgo.By("waiting for Kueue to admit it")
	queues.ExpectAdmitted(ctx, env, job, path.QuotaResource(), n)

	ginkgo.By("waiting for its pod to start on a node that has the devices")
	pod := pods.ExpectJobPodStarted(ctx, env, job)
	gomega.Expect(path.Capacity()[pod.Spec.NodeName]).To(gomega.BeNumerically(">=", n),
		"pod %s landed on %s, which has %d devices on the %s path; expected one of %v", pod.Name, pod.Spec.NodeName, path.Capacity()[pod.Spec.NodeName], path.Name(), nodes)

	ginkgo.By("reading what the container saw")
	pod, report := pods.ExpectJobProbeReport(ctx, env, job, pod)
	gomega.Expect(report.Devices).To(gomega.HaveLen(n), "container saw %s, asked for %d (%s)", gpu.FormatDevices(report.Devices), n, report.Message)

	if dra, ok := path.(gpu.SliceChecker); ok {
		ginkgo.By("comparing with the devices the ResourceClaim allocated")
		given, err := path.Given(ctx, givenInput(env, pod, recorder))
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the pod's allocation")
		expectSameDevices(report, given)
		gomega.Expect(dra.CheckFromNodeSlices(ctx, env.Clients.Kube, given)).To(gomega.Succeed())
		for _, c := range given.Claims {
			gomega.Expect(recorder.EverReservedFor(c.Name, string(pod.UID))).To(gomega.BeTrue(), "claim %s was never seen reserved for pod %s (uid %s)", c.Name, pod.Name, pod.UID)
		}
		ginkgo.By("waiting for the Job to complete")
		pods.ExpectJobComplete(ctx, env, job)
		expectClaimsReleased(ctx, env, ns, pod, given.Claims)
		return
	}
	ginkgo.AddReportEntry("kubelet cross-check", "the queued Job's pod exits after probing, so its device IDs are compared with the kubelet's in the running-pod spec; here the count is checked")
	ginkgo.By("waiting for the Job to complete")
	pods.ExpectJobComplete(ctx, env, job)
}

func runningPodSeesGivenDevices(ctx context.Context, env *testenv.Env, path gpu.Path, ns string, n int, nodes []string) {
	// RestartAlways keeps the pod active after the probe exits, so the kubelet still reports its devices.
	w := env.Factory.GPUPod(fmt.Sprintf("held-%d", n), ns).Path(path).Devices(n).Args(fixtures.ProbeArgs(n)...).RestartAlways().OnNodes(nodes...)
	podObj := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	env.Create(ctx, podObj)

	pod := pods.ExpectPodRunning(ctx, env, ns, podObj.Name)
	report := pods.ExpectProbeReport(ctx, env, ns, pod.Name)

	ginkgo.By(fmt.Sprintf("asking %s which devices it allocated", path.Authority()))
	given, err := path.Given(ctx, givenInput(env, pod, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the pod's allocation from %s", path.Authority())
	gomega.Expect(given.Node).To(gomega.Equal(pod.Spec.NodeName))
	if given.CountOnly {
		ginkgo.AddReportEntry("not exercised: device identity check", given.Note)
		gomega.Expect(report.Devices).To(gomega.HaveLen(given.Count), "container saw %s but %s", gpu.FormatDevices(report.Devices), given.Note)
	} else {
		expectSameDevices(report, given)
		ginkgo.AddReportEntry("evidence: allocated by "+path.Authority(), strings.Join(given.Allocated(), " "))
	}
	evidenceSeen(fmt.Sprintf("a pod that asked for %s", plural(n)), report)
	if dra, ok := path.(gpu.SliceChecker); ok {
		gomega.Expect(dra.CheckFromNodeSlices(ctx, env.Clients.Kube, given)).To(gomega.Succeed())
		for _, c := range given.Claims {
			gomega.Expect(c.ReservedFor).To(gomega.ContainElement(string(pod.UID)), "claim %s is not reserved for the running pod %s", c.Name, pod.Name)
		}
	}

	ginkgo.By("deleting the pod and waiting for its devices to be released")
	gomega.Expect(env.Clients.Kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})).To(gomega.Succeed())
	env.Wait.For(ctx, fmt.Sprintf("pod %s/%s to be gone", ns, pod.Name), wait.Target{Kind: "Pod", Namespace: ns, Name: pod.Name}, env.Timeouts.Release, func(g gomega.Gomega) {
		_, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "pod still exists (err=%v)", err)
	})
	expectClaimsReleased(ctx, env, ns, pod, given.Claims)
}

// expectClaimsReleased waits until each generated claim is deleted or no longer reserved for the pod.
func expectClaimsReleased(ctx context.Context, env *testenv.Env, ns string, pod *corev1.Pod, claims []gpu.ClaimInfo) {
	ginkgo.GinkgoHelper()
	for _, c := range claims {
		env.Wait.For(ctx, fmt.Sprintf("ResourceClaim %s/%s to be released by pod %s", ns, c.Name, pod.Name), wait.Target{Kind: "Pod", Namespace: ns, Name: pod.Name},
			env.Timeouts.Release, func(g gomega.Gomega) {
				claim, err := env.Clients.Kube.ResourceV1().ResourceClaims(ns).Get(ctx, c.Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return
				}
				g.Expect(err).NotTo(gomega.HaveOccurred())
				for _, r := range claim.Status.ReservedFor {
					g.Expect(string(r.UID)).NotTo(gomega.Equal(string(pod.UID)), "claim %s is still reserved for pod %s", c.Name, pod.Name)
				}
			})
	}
}

// expectSameDevices compares what the container saw with what the path's authority allocated: at the
// physical level when it handed out time-slicing or MPS replicas, which the report then records.
func expectSameDevices(report gpu.ProbeReport, given gpu.Allocation) {
	ginkgo.GinkgoHelper()
	if given.Replicas != nil {
		ginkgo.AddReportEntry(gpu.ReplicasEntry, gpu.ReplicaObservation{Node: given.Node, IDs: given.Replicas})
	}
	if err := given.CheckSeen(report.Devices); err != nil {
		ginkgo.Fail(fmt.Sprintf("%v (node %s; probe: %s)", err, given.Node, report.Message))
	}
	if report.Node != "" {
		gomega.Expect(report.Node).To(gomega.Equal(given.Node), "the probe ran on %s but the devices were allocated on %s", report.Node, given.Node)
	}
}

func givenInput(env *testenv.Env, pod *corev1.Pod, rec *gpu.ClaimRecorder) gpu.GivenInput {
	return gpu.GivenInput{
		Kube: env.Clients.Kube, Pod: pod, Container: fixtures.WorkloadContainer, Factory: env.Factory, Claims: rec,
		HelperTimeout: env.Timeouts.HelperPod, HelperNamespace: env.HelperNamespace,
	}
}

func eligibleNodes(p gpu.Path, n int, pool []string) []string {
	var out []string
	for _, node := range gpu.NodesWithAtLeast(p, int64(n)) {
		if len(pool) == 0 || slices.Contains(pool, node) {
			out = append(out, node)
		}
	}
	return out
}

func plural(n int) string {
	if n == 1 {
		return "1 device"
	}
	return fmt.Sprintf("%d devices", n)
}

// BrokenPathSpec registers, for each allocation path that discovery found present but not working
// (cluster.Capabilities.Broken), a spec that fails with discovery's finding. A broken path is never "not
// exercised": that would let the other path sign off GO for a cluster whose GPUs half cannot be used.
func BrokenPathSpec(broken map[string]string) {
	names := make([]string, 0, len(broken))
	for name := range broken {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		why := broken[name]
		ginkgo.Describe(fmt.Sprintf("GPU allocation on the %s path", name), labels.Of(labels.Scenario(allocationName), labels.ForPath(name)), func() {
			ginkgo.It("serves the devices the cluster advertises", func() {
				ginkgo.Fail(fmt.Sprintf("the %s path is present but not working: %s", name, why))
			})
		})
	}
}

// evidenceSeen records, for the conformance evidence, what a container saw and from which sources: the
// device nodes, nvidia-smi's list and the runtime's environment, so "no device" reads as the absence of
// each, never as a tool that was missing.
func evidenceSeen(what string, r gpu.ProbeReport) {
	smi := strings.Join(r.Sources.NvidiaSMI, " ")
	switch {
	case r.Sources.NvidiaSMIError != "":
		smi = "failed: " + r.Sources.NvidiaSMIError
	case r.Sources.NvidiaSMI == nil:
		smi = "not in the container"
	case smi == "":
		smi = "lists none"
	}
	ginkgo.AddReportEntry("evidence: "+what, fmt.Sprintf("pod %s on %s sees %s; device nodes %s; nvidia-smi %s; NVIDIA_VISIBLE_DEVICES %s",
		cmp.Or(r.Pod, "?"), cmp.Or(r.Node, "?"), listOrNone(r.Devices), listOrNone(r.Sources.DevFiles), smi, listOrNone(r.Sources.NvidiaVisibleDevices)))
}

// listOrNone is a list for the evidence, "none" when empty.
func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return "[" + strings.Join(l, " ") + "]"
}
