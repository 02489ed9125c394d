package scenarios

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/diagnose"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/queues"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/wait"
)

// ShortageInput is the input of ShortageSpec. Like AllocationInput, the getter is called while the spec
// tree is built (Env is nil then; Nodes and Paths decide registration) and again in each spec.
type ShortageInput struct {
	Base
	// KueuePresent registers the queue-quota spec and sends device shortages through a LocalQueue.
	KueuePresent bool
	// ExistingLocalQueue, when set, means the suite cannot size a ClusterQueue's quota: the queue-quota
	// spec is not registered and device shortages are submitted as bare pods.
	ExistingLocalQueue string
	// Nodes are the cluster's nodes as discovery read them: allocatable CPU and memory, labels and taints
	// size the shortages without assuming this project's pool labels.
	Nodes []corev1.Node
	// Tolerations are the ones every test pod carries (from config); a taint they tolerate cannot be
	// the one a spec relies on.
	Tolerations []corev1.Toleration
}

const shortageName = "shortage"

// Shortage is the deliberate-shortage scenario (ShortageSpec).
var Shortage = Define(Scenario{Name: shortageName, Title: "a workload that cannot get its devices waits, and the suite names where and why",
	Required: true, Uses: suite.Needs{Kueue: true}},
	func(r *suite.Run) ShortageInput {
		return ShortageInput{Base: baseOf(r), KueuePresent: r.KueueUsable, ExistingLocalQueue: r.ExistingLocalQueue(), Nodes: r.Nodes, Tolerations: r.Tolerations}
	},
	ShortageSpec)

// controlPlaneLabel marks control-plane nodes (kubeadm, kind, most distributions). Their NoSchedule
// taint is the one taint the taint spec can rely on without tainting anything itself.
const controlPlaneLabel = "node-role.kubernetes.io/control-plane"

// absentDevice is an extended resource no device plugin advertises: asking for it separates "no such
// device anywhere" from "all devices in use".
const absentDevice corev1.ResourceName = "gpuconform.io/absent-device"

// maxDevicesPerClaimRequest is resource.k8s.io/v1's bound on the devices one claim may be allocated
// (AllocationResultsMaxSize); a count above it is rejected by validation, not by the allocator.
const maxDevicesPerClaimRequest = 32

// ShortageSpec registers the shortage scenario: per path, a deliberate shortage on each layer (Kueue
// quota, the scheduler's device count, DRA allocation, a taint, a node selector, CPU and memory) leaves
// the workload waiting, and framework/diagnose names exactly that layer and reason, quoting the
// component's own text. Nothing here taints, labels or cordons a node: the shortages are sized from the
// discovered nodes.
func ShortageSpec(input func() ShortageInput) {
	reg := input()
	taintNodes, taintWhy := taintedControlPlane(reg.Nodes, reg.Tolerations)
	maxCPU, cpuNode := mostAllocatable(reg.Nodes, corev1.ResourceCPU)
	maxMem, memNode := mostAllocatable(reg.Nodes, corev1.ResourceMemory)
	ownQueues := reg.KueuePresent && reg.ExistingLocalQueue == ""

	for _, regPath := range reg.Paths {
		pathName := regPath.Name()
		describePath(input, regPath, "Deliberate shortages", "short", []any{labels.Of(labels.Scenario(shortageName))}, func(s *Spec[ShortageInput]) {
			// (a) Kueue quota.
			switch {
			case !reg.KueuePresent:
				reg.notExercised(pathName+": Kueue quota shortage", "Kueue is absent")
			case !ownQueues:
				reg.notExercised(pathName+": Kueue quota shortage", "queues.mode=existing: the suite cannot size the ClusterQueue's quota")
			case len(reg.eligible(regPath, 1)) == 0:
				reg.notExercised(pathName+": Kueue quota shortage", noDevicesWhy)
			default:
				ginkgo.It("holds a Job over its ClusterQueue's quota as QueueQuotaExhausted, then admits it",
					labels.Of(labels.NeedsKueue), takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
						ginkgo.By("unadmitted and without a pod; admitted and completed once the first Job is deleted")
						quotaShortage(ctx, s.Env, s.Path, s.NS, s.lease(ctx, eligibleNodes(s.Path, 1, s.In.GPUPool)))
					})
			}

			// (b) more devices than any node has; on DRA, (d) a claim no node can satisfy.
			over := int(maxCapacity(regPath)) + 1
			if regPath.ClaimBased() {
				if over > maxDevicesPerClaimRequest {
					reg.notExercised(pathName+": a claim no node can satisfy", fmt.Sprintf("a node has %d devices; a claim may ask for at most %d", over-1, maxDevicesPerClaimRequest))
				} else {
					// The pod's own claim is there to read, unallocated; the claim the scheduler creates for an
					// extended resource (extended-resource-dra) exists only once a node fits.
					messages := []string{"cannot allocate all claims", "not allocated (status.allocation is empty)"}
					if _, ext := regPath.(*gpu.ExtendedDRA); ext {
						messages = messages[:1]
					}
					// devices:none here and below: the pod can never get a device, and the diagnosis reads capacity,
					// taints and labels, not which devices are free.
					ginkgo.It("diagnoses a claim for more devices than any node has as DRAAllocationFailed",
						takes(Takes{Devices: NoDevice}), func(ctx context.Context) {
							ginkgo.By("the pod stays Pending, with the scheduler's own message")
							ginkgo.By(fmt.Sprintf("asking for %s; the most on one node is %d", plural(over), over-1))
							deviceShortage(ctx, s.Env, s.In, s.Path, s.NS, over, expectation{
								stage: diagnose.StageScheduling, layer: diagnose.LayerDRA, reason: diagnose.DRAAllocationFailed,
								messages: messages,
							})
						})
				}
			} else {
				ginkgo.It("diagnoses a pod wanting more devices than any node has as InsufficientDevice",
					takes(Takes{Devices: NoDevice}), func(ctx context.Context) {
						ginkgo.By("the pod stays Pending, with the scheduler's own message")
						ginkgo.By(fmt.Sprintf("asking for %s; the most on one node is %d", plural(over), over-1))
						deviceShortage(ctx, s.Env, s.In, s.Path, s.NS, over, expectation{
							stage: diagnose.StageScheduling, layer: diagnose.LayerScheduler, reason: diagnose.InsufficientDevice,
							messages: []string{"Insufficient " + string(s.Path.QuotaResource()), "no node can ever satisfy the request"},
						})
					})
			}

			if !regPath.ClaimBased() {
				ginkgo.It("diagnoses a resource no node advertises as DeviceNotAdvertised", takes(Takes{Devices: NoDevice}), func(ctx context.Context) {
					ginkgo.By("a pod asks for an extended resource that no node advertises: not devices in use")
					one := resource.MustParse("1")
					w := s.Env.Factory.GPUPod("unadvertised", s.NS).Args(fixtures.ProbeArgs(0)...).Resources(corev1.ResourceRequirements{
						Requests: corev1.ResourceList{absentDevice: one},
						Limits:   corev1.ResourceList{absentDevice: one},
					})
					for _, n := range s.In.Nodes {
						q := n.Status.Allocatable[absentDevice]
						gomega.Expect(q.IsZero()).To(gomega.BeTrue(), "node %s advertises %s", n.Name, absentDevice)
					}
					pendingPodDiagnosed(ctx, s.Env, w, expectation{
						stage: diagnose.StageScheduling, layer: diagnose.LayerKubelet, reason: diagnose.DeviceNotAdvertised,
						messages: []string{"Insufficient " + string(absentDevice), "no node advertises " + string(absentDevice)},
					})
				})
			}

			// (c) a taint and a node selector are gates, not shortages.
			if len(taintNodes) == 0 {
				reg.notExercised(pathName+": untolerated taint", taintWhy)
			} else {
				ginkgo.It("diagnoses a pod selecting only tainted control-plane nodes as UntoleratedTaint",
					takes(Takes{Devices: NoDevice}), func(ctx context.Context) {
						ginkgo.By("not as a shortage")
						ginkgo.By(fmt.Sprintf("selecting %s, which only %v carry", controlPlaneLabel, taintNodes))
						w := s.Env.Factory.GPUPod("on-tainted", s.NS).Path(s.Path).Devices(1).Args(fixtures.ProbeArgs(1)...).
							NodeSelector(map[string]string{controlPlaneLabel: ""})
						pendingPodDiagnosed(ctx, s.Env, w, expectation{
							stage: diagnose.StageScheduling, layer: diagnose.LayerScheduler, reason: diagnose.UntoleratedTaint,
							messages: []string{"had untolerated taint", "carries a taint the pod does not tolerate"},
						})
					})
			}
			ginkgo.It("diagnoses a node selector that matches no node as NodeSelectorMismatch", takes(Takes{Devices: NoDevice}), func(ctx context.Context) {
				ginkgo.By("not as a shortage")
				value := "gpuconform-no-such-node-" + s.NS
				for _, n := range s.In.Nodes {
					gomega.Expect(n.Labels[corev1.LabelHostname]).NotTo(gomega.Equal(value), "node %s unexpectedly carries %s=%s", n.Name, corev1.LabelHostname, value)
				}
				w := s.Env.Factory.GPUPod("nowhere", s.NS).Path(s.Path).Devices(1).Args(fixtures.ProbeArgs(1)...).
					NodeSelector(map[string]string{corev1.LabelHostname: value})
				pendingPodDiagnosed(ctx, s.Env, w, expectation{
					stage: diagnose.StageScheduling, layer: diagnose.LayerScheduler, reason: diagnose.NodeSelectorMismatch,
					// The scheduler names the selector when a node passes its taint filter; when every node is
					// tainted it names the taints, and the diagnosis reads the nodes to find the selector.
					messages: []string{"didn't match Pod's node affinity/selector || no node matches the pod's node selector"},
				})
			})

			// (e) a free device but not enough CPU or memory.
			if cpuNode == "" || memNode == "" {
				reg.notExercised(pathName+": CPU and memory shortage", "no node's allocatable CPU and memory could be read at discovery")
			} else {
				mem := maxMem.DeepCopy()
				mem.Add(resource.MustParse("1Gi"))
				for _, c := range []struct {
					what     string // as the spec says it
					resource corev1.ResourceName
					ask      resource.Quantity
					most     resource.Quantity
					node     string
					reason   diagnose.Reason
				}{
					{"CPU", corev1.ResourceCPU, *resource.NewQuantity(maxCPU.Value()+1, resource.DecimalSI), maxCPU, cpuNode, diagnose.InsufficientCPU},
					{"memory", corev1.ResourceMemory, mem, maxMem, memNode, diagnose.InsufficientMemory},
				} {
					ginkgo.It(fmt.Sprintf("diagnoses a device pod needing more %s than any node as %s", c.what, c.reason),
						takes(Takes{Devices: EachNode}), func(ctx context.Context) {
							ginkgo.By("the pod asks for 1 device and more than any node's allocatable: not a device shortage")
							ginkgo.By(fmt.Sprintf("requesting %s %s; the most any node has allocatable is %s (%s)", c.ask.String(), c.what, c.most.String(), c.node))
							w := s.Env.Factory.GPUPod("too-much-"+string(c.resource), s.NS).Path(s.Path).Devices(1).Args(fixtures.ProbeArgs(1)...).Request(c.resource, c.ask)
							pendingPodDiagnosed(ctx, s.Env, w, expectation{
								stage: diagnose.StageScheduling, layer: diagnose.LayerScheduler, reason: c.reason,
								messages: []string{"Insufficient " + string(c.resource), "no node can ever satisfy the request"},
							})
						})
				}
			}
		})
	}
}

// Spec texts carry no cluster-sized numbers (device counts, CPU, node names): they must stay the same
// from run to run so reports can be compared; the sizes go into By steps.

// quotaShortage: a ClusterQueue with quota for one device, a first Job that holds it for a while, a
// second Job that Kueue must hold back without creating a pod, then admit once the first finishes.
func quotaShortage(ctx context.Context, env *testenv.Env, path gpu.Path, ns string, nodes []string) {
	res := path.QuotaResource()
	ginkgo.By(fmt.Sprintf("creating a LocalQueue with quota for 1 %s", res))
	lq := queues.Setup(ctx, env, queues.SetupInput{Namespace: ns, Quota: queues.QuotaFor(res, 1)})

	// The first Job must still hold its quota while the second is diagnosed and watched: it trains for
	// about the admission budget, far longer than Kueue takes to refuse the second, and is then deleted
	// rather than waited out (a user cancelling it; Kueue releases a deleted Workload's quota as it does a
	// finished one's).
	steps := max(int(env.Timeouts.Admission/time.Second), 10)
	ginkgo.By(fmt.Sprintf("submitting a first Job that uses the whole quota for up to %ds", steps))
	first := createJob(ctx, env, env.Factory.GPUJob("holder", ns).Path(path).Devices(1).Queue(lq).OnNodes(nodes...).
		ScratchDir("scratch", "/scratch").
		Args("train", "--steps", strconv.Itoa(steps), "--step-duration", "1s", "--checkpoint-dir", "/scratch/ckpt", "--checkpoint-every", strconv.Itoa(steps)))
	queues.ExpectAdmitted(ctx, env, first, res, 1)

	ginkgo.By("submitting a second Job that does not fit in the remaining quota")
	extra := createJob(ctx, env, env.Factory.GPUJob("extra", ns).Path(path).Devices(1).Queue(lq).OnNodes(nodes...).Args(fixtures.ProbeArgs(1)...))
	target := wait.Target{Kind: "Job", Namespace: ns, Name: extra.Name}
	expectDiagnosis(ctx, env, target, expectation{
		stage: diagnose.StageQueued, layer: diagnose.LayerKueue, reason: diagnose.QueueQuotaExhausted,
		messages: []string{"insufficient unused quota for " + string(res)},
	})

	ginkgo.By("checking that Kueue created no pod for the unadmitted Job and keeps it suspended")
	env.Wait.Consistently(ctx, fmt.Sprintf("Job %s/%s to stay suspended with no pod", ns, extra.Name), target, 10*env.Timeouts.Poll, func(g gomega.Gomega) {
		list, err := pods.OfJob(ctx, env, extra)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(list).To(gomega.BeEmpty(), "the Job that Kueue did not admit has pods")
		got, err := env.Clients.Kube.BatchV1().Jobs(ns).Get(ctx, extra.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(got.Spec.Suspend).NotTo(gomega.BeNil())
		g.Expect(*got.Spec.Suspend).To(gomega.BeTrue(), "the unadmitted Job is not suspended")
	})

	ginkgo.By("deleting the first Job, whose Workload's quota Kueue must then release")
	gomega.Expect(env.Clients.Kube.BatchV1().Jobs(ns).Delete(ctx, first.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})).
		To(gomega.Succeed(), "deleting Job %s/%s", ns, first.Name)

	ginkgo.By("waiting for Kueue to admit the second Job and for it to complete")
	queues.ExpectAdmitted(ctx, env, extra, res, 1)
	pods.ExpectJobComplete(ctx, env, extra)
	expectDiagnosis(ctx, env, target, expectation{stage: diagnose.StageSucceeded, layer: diagnose.LayerNone, reason: diagnose.ReasonCompleted})
}

// deviceShortage asks for n devices, more than any node has: through a LocalQueue whose quota admits
// them when the suite owns its queues (so the scheduler, not Kueue, is what refuses), else as a pod.
func deviceShortage(ctx context.Context, env *testenv.Env, in ShortageInput, path gpu.Path, ns string, n int, want expectation) {
	if !in.KueuePresent || in.ExistingLocalQueue != "" {
		pendingPodDiagnosed(ctx, env, env.Factory.GPUPod("too-many", ns).Path(path).Devices(n).Args(fixtures.ProbeArgs(n)...), want)
		return
	}
	ginkgo.By(fmt.Sprintf("creating a LocalQueue with quota for %d %s, so Kueue admits the Job", n, path.QuotaResource()))
	lq := queues.Setup(ctx, env, queues.SetupInput{Namespace: ns, Quota: queues.QuotaFor(path.QuotaResource(), n)})
	job := createJob(ctx, env, env.Factory.GPUJob("too-many", ns).Path(path).Devices(n).Queue(lq).Args(fixtures.ProbeArgs(n)...))
	queues.ExpectAdmitted(ctx, env, job, path.QuotaResource(), n)
	target := wait.Target{Kind: "Job", Namespace: ns, Name: job.Name}
	expectDiagnosis(ctx, env, target, want)
	expectJobPodsPending(ctx, env, job)
}

func expectJobPodsPending(ctx context.Context, env *testenv.Env, job *batchv1.Job) {
	ginkgo.GinkgoHelper()
	list, err := pods.OfJob(ctx, env, job)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(list).NotTo(gomega.BeEmpty(), "admitted Job %s/%s has no pod", job.Namespace, job.Name)
	for _, p := range list {
		gomega.Expect(p.Spec.NodeName).To(gomega.BeEmpty(), "pod %s was bound to %s although no node has the devices", p.Name, p.Spec.NodeName)
	}
}

func createJob(ctx context.Context, env *testenv.Env, w *fixtures.GPUJobWrapper) *batchv1.Job {
	ginkgo.GinkgoHelper()
	obj := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	return env.Create(ctx, obj).(*batchv1.Job)
}

// taintedControlPlane returns the control-plane nodes when every one of them carries a taint the test
// pods do not tolerate (so a pod selecting them can only be held back by the taint), or why not.
func taintedControlPlane(nodes []corev1.Node, tolerations []corev1.Toleration) ([]string, string) {
	var names []string
	for i := range nodes {
		n := &nodes[i]
		if _, ok := n.Labels[controlPlaneLabel]; !ok {
			continue
		}
		if len(diagnose.UntoleratedTaints(n, tolerations)) == 0 {
			return nil, fmt.Sprintf("control-plane node %s has no NoSchedule/NoExecute taint that the configured tolerations leave untolerated; the suite never taints nodes itself", n.Name)
		}
		names = append(names, n.Name)
	}
	if len(names) == 0 {
		return nil, fmt.Sprintf("no node carries the %s label (managed control plane); the suite never taints nodes itself", controlPlaneLabel)
	}
	return names, ""
}

// mostAllocatable returns the largest allocatable amount of a resource on any node, and that node.
func mostAllocatable(nodes []corev1.Node, name corev1.ResourceName) (resource.Quantity, string) {
	var (
		most resource.Quantity
		node string
	)
	for i := range nodes {
		if q, ok := nodes[i].Status.Allocatable[name]; ok && (node == "" || q.Cmp(most) > 0) {
			most, node = q, nodes[i].Name
		}
	}
	return most, node
}

// maxCapacity is the most devices any node has on the path.
func maxCapacity(p gpu.Path) int64 {
	var m int64
	for _, c := range p.Capacity() {
		m = max(m, c)
	}
	return m
}
