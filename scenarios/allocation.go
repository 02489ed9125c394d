package scenarios

import (
	"context"
	"fmt"
	"slices"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/queues"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/testenv"
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
// with the application checks of deviceChecks), and a spec that fails for each path found present but not
// working (BrokenPathSpec).
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
				if nodes := reg.eligible(regPath, n); len(nodes) > 0 && reg.queued(reg.KueuePresent, pathName) {
					ginkgo.It(fmt.Sprintf("admits a Job for %s through a LocalQueue and completes it", plural(n)),
						labels.Of(labels.NeedsKueue), takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
							ginkgo.By("the Job is placed on a node with the devices and sees exactly the devices it was given")
							queuedJobGetsItsDevices(ctx, s.Env, s.In, s.Path, s.NS, n, s.lease(ctx, nodes))
						})
				}
			}
			for _, c := range deviceChecks {
				deviceCheckSpecs(s, reg, regPath, c, counts)
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

// deviceCheckSpecs registers c's specs on path: one per device count where c is counted (else one, with one
// device), each on the pool's nodes with that many devices; a count no pool node has is recorded as not
// exercised.
func deviceCheckSpecs(s *Spec[AllocationInput], reg AllocationInput, path gpu.Path, c deviceCheck, counts []int) {
	if !c.perCount {
		counts = []int{1}
	}
	for _, n := range counts {
		nodes := reg.eligible(path, n)
		if len(nodes) == 0 {
			reg.notExercised(fmt.Sprintf("%s: %s with %d device(s) per pod", path.Name(), c.name, n), fmt.Sprintf("no node in the GPU pool has %d devices on this path", n))
			continue
		}
		proof := []any{takes(c.takes)}
		for _, id := range c.proves {
			proof = append(proof, proves(allocationName, id))
		}
		for _, id := range c.claimProves {
			if path.ClaimBased() {
				proof = append(proof, proves(allocationName, id))
			}
		}
		ginkgo.It(c.title(n), append(proof, func(ctx context.Context) {
			c.run(ctx, checkOn{env: s.Env, path: s.Path, ns: s.NS, nodes: s.lease(ctx, nodes), devices: n, deviceTest: s.In.DeviceTest})
		})...)
	}
}
