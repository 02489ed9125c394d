package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8swait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/faults"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/queues"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/timeline"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/internal/workload/gang"
)

// GangInput is the input of GangSpec.
type GangInput struct {
	Base
	// KueuePresent registers the scenario: the gang's admission is Kueue's.
	KueuePresent       bool
	ExistingLocalQueue string
	// PodsReady is Kueue's waitForPodsReady (nil: off or unknown, PodsReadyWhy says which).
	PodsReady    *cluster.PodsReady
	PodsReadyWhy string
	// Topologies are Kueue's Topologies (TAS); TopologiesWhy says why there are none.
	Topologies    []cluster.Topology
	TopologiesWhy string
	// The failed-worker spec's needs, as the failure scenario's.
	FaultNeeds
}

const gangName = "gang"

// Gang is the multi-worker job scenario (GangSpec).
var Gang = Define(Scenario{Name: gangName, Title: "a multi-worker GPU job is admitted and started whole, holds nothing while it cannot be, and comes back whole from its checkpoint when a worker fails",
	Required: true, Measured: true, Needs: suite.Needs{Kueue: true}, Uses: suite.Needs{Disruptive: true, FaultProvider: true, CheckpointStorage: true},
	Proves: []conformance.Proof{{Requirement: conformance.GangScheduling,
		How: "Kueue admits a multi-worker Indexed Job as one Workload charged for every worker at once and starts all workers, which rendezvous " +
			"and step together; a gang larger than the free devices never keeps part of it running (Kueue's waitForPodsReady evicts and " +
			"requeues it whole), and a gang short of quota stays suspended with no pod"}}},
	func(r *suite.Run) GangInput {
		return GangInput{Base: baseOf(r), KueuePresent: r.KueueUsable, ExistingLocalQueue: r.ExistingLocalQueue(),
			PodsReady: r.Caps.Kueue.PodsReady, PodsReadyWhy: r.Caps.Kueue.PodsReadyWhy,
			Topologies: r.Caps.Kueue.Topologies, TopologiesWhy: r.Caps.Kueue.TopologiesWhy,
			FaultNeeds: faultNeedsOf(r)}
	},
	GangSpec)

// GangSpec registers, per path, the checks of a multi-worker job (an Indexed Job of W workers with N
// devices each, submitted through Kueue): it is admitted as one Workload and all its workers start,
// step together and complete, on one node or on distinct nodes as asked; one that needs more devices
// than are free (with quota enough) never keeps some workers running while others wait (Kueue's
// waitForPodsReady evicts and requeues it whole); one short of quota stays suspended with no pod; and
// when one worker's device fails, the survivor stops instead of running alone and the whole gang
// restarts from its last common checkpoint on healthy devices.
func GangSpec(input func() GangInput) {
	reg := input()
	if !reg.KueuePresent {
		reg.notExercised("gang admission", "Kueue is absent (or not usable in this mode): the suite's gang admission is Kueue's")
		return
	}
	for _, regPath := range reg.Paths {
		pathName := regPath.Name()
		if !reg.queued(true, pathName) {
			continue // recorded: the team's ClusterQueue does not cover the path's Kueue resource
		}
		one, across := reg.eligible(regPath, 2), reg.withDevices(regPath, "gang")
		if len(across) == 0 {
			continue
		}
		devices, devicesWhy := reg.Faults.DevicesFor(regPath.ClaimBased())
		if regPath.ClaimBased() && reg.Faults.DRAEvict != nil {
			devices, devicesWhy = reg.Faults.DRAEvict, ""
		}
		// leases:nodes: a gang leases the nodes it needs (Spec.leaseNodes) and its workers go wherever Kueue
		// and the scheduler put them among those, so gangs run beside the holders and stoppers of the path's
		// other nodes. The gang Kueue places by topology leases two nodes that each fit it, so that its
		// placement still has a choice to get wrong. The gang short of quota never has a pod (devices:none).
		describePath(input, regPath, "Multi-worker GPU jobs", "gang", []any{labels.Of(labels.Scenario(gangName), labels.NeedsKueue)}, func(s *Spec[GangInput]) {
			if len(one) == 0 {
				reg.notExercised(pathName+": gang on one node", "no node in the GPU pool has 2 devices on this path")
			} else {
				ginkgo.It("runs a 2-worker gang admitted as one Workload on one node", takes(Takes{Devices: WholeNodes}), proves(gangName, conformance.GangScheduling), func(ctx context.Context) {
					ginkgo.By("both workers start on one node, step together and complete")
					gangFits(ctx, s.Env, s.Path, s.NS, s.In.ExistingLocalQueue, fixtures.OneNode, s.leaseNodes(ctx, one, 1))
				})
			}
			if len(across) < 2 {
				reg.notExercised(pathName+": gang across nodes", "the GPU pool has one node with a device on this path")
			} else {
				ginkgo.It("runs a 2-worker gang admitted as one Workload across two nodes", takes(Takes{Devices: WholeNodes}), proves(gangName, conformance.GangScheduling), func(ctx context.Context) {
					ginkgo.By("each worker starts on a node of its own; they step together and complete")
					gangFits(ctx, s.Env, s.Path, s.NS, s.In.ExistingLocalQueue, fixtures.AcrossNodes, s.leaseNodes(ctx, across, 2))
				})
			}
			switch tas, why := reg.hostTopology(regPath); {
			case why != "":
				reg.notExercised(pathName+": gang placed by Kueue's topology-aware scheduling", why)
			default:
				// Two nodes that each fit the whole gang, where the path has them: Kueue must pick one (a
				// placement that ignored the required topology could split it across both).
				fit := reg.eligible(regPath, 2*tasDevices)
				ginkgo.It("places a 2-worker gang in one node through Kueue's topology-aware scheduling", takes(Takes{Devices: WholeNodes}), func(ctx context.Context) {
					ginkgo.By("required topology kubernetes.io/hostname")
					gangTAS(ctx, s, tas, s.leaseNodes(ctx, fit, min(2, len(fit))))
				})
			}
			if reg.ExistingLocalQueue != "" {
				reg.notExercised(pathName+": gang that does not fit, gang short of quota", "queues.mode=existing: they need a ClusterQueue of their own, sized to the gang")
			} else {
				ginkgo.It("never keeps part of a gang running while the rest waits for devices", takes(Takes{Devices: WholeNodes}), proves(gangName, conformance.GangScheduling), func(ctx context.Context) {
					ginkgo.By("a gang larger than the free devices must be evicted and requeued whole")
					gangDoesNotFit(ctx, s, s.leaseNodes(ctx, across, min(2, len(across))))
				})
				ginkgo.It("keeps a gang short of quota suspended with no pod", takes(Takes{Devices: NoDevice}), proves(gangName, conformance.GangScheduling), func(ctx context.Context) {
					gangShortOfQuota(ctx, s, across)
				})
			}
			switch {
			case !reg.Disruptive:
				reg.notExercised(pathName+": failed worker in a gang", "it fails a device of the GPU pool; run with --disruptive to include it")
			case devices == nil:
				reg.notExercised(pathName+": failed worker in a gang", devicesWhy)
			case len(across) < 2:
				reg.notExercised(pathName+": failed worker in a gang", "the GPU pool has one node with a device on this path; the gang's workers run on nodes of their own")
			case reg.Checkpoints.None():
				reg.notExercised(pathName+": failed worker in a gang", reg.CheckpointsWhy+"; a gang's restart resumes from its shared checkpoints")
			default:
				// Its workers restart on nodes of their own, one of them beside the failed device: two nodes
				// with two devices each, else three (or every) node with one.
				candidates, need := one, 2
				if len(one) < 2 {
					candidates, need = across, min(3, len(across))
				}
				ginkgo.It("restarts a whole gang from its last common checkpoint when one device fails", takes(Takes{Devices: WholeNodes, FailsDevice: true}), func(ctx context.Context) {
					ginkgo.By("the survivor is stopped when one worker's device fails, and the gang restarts on healthy devices")
					gangFailedWorker(ctx, s, devices, s.leaseNodes(ctx, candidates, need))
				})
			}
		})
	}
}

// gangDoesNotFit submits a gang one worker larger than the free devices allow, each worker asking for
// the largest node's devices, with quota for all of it: the scheduler can place some workers and not
// the rest. Kueue's waitForPodsReady must evict it whole (and requeue it); where it is off, a gang that
// stays partly running for the observation window is a failure.
func gangDoesNotFit(ctx context.Context, s *Spec[GangInput], nodes []string) {
	env, ns, path := s.Env, s.NS, s.Path
	capacity := path.Capacity()
	perWorker, total := int64(0), int64(0)
	for _, n := range nodes {
		perWorker = max(perWorker, capacity[n])
		total += capacity[n]
	}
	workers := int(total/perWorker) + 1
	ginkgo.AddReportEntry("shape", fmt.Sprintf("%d workers × %d devices = %d, over the %d devices of %d nodes; quota for all of it", workers, perWorker, int64(workers)*perWorker, total, len(nodes)))
	g := submitGang(ctx, s.Env, s.Path, s.NS, gangShape{name: "toobig", workers: workers, devices: int(perWorker), nodes: nodes, steps: gangSteps, localQueue: s.In.ExistingLocalQueue})
	queues.ExpectAdmitted(ctx, env, g.job, path.QuotaResource(), workers*int(perWorker))
	admittedAt := time.Now()
	expectOneWorkload(ctx, env, g.job, workers)

	window := gangObserve
	if pr := s.In.PodsReady; pr != nil {
		window = pr.Timeout + 30*time.Second
		ginkgo.AddReportEntry("Kueue waitForPodsReady", pr.String())
	} else {
		ginkgo.AddReportEntry("Kueue waitForPodsReady", s.In.PodsReadyWhy+fmt.Sprintf("; the gang is watched for %s", gangObserve))
	}
	var partial string
	var evicted *metav1.Condition
	// Look every gangRecheck for the whole window, or until Kueue evicts the gang; the window ending is
	// the normal end, not a failure.
	err := k8swait.PollUntilContextTimeout(ctx, gangRecheck, window, true, func(ctx context.Context) (bool, error) {
		wl, err := queues.WaitingWorkloadFor(ctx, env, g.job)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted); c != nil && c.Status == metav1.ConditionTrue {
			evicted = c
			return true, nil
		}
		workersNow, err := waitingGangWorkers(ctx, env, g.job)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		if p := partialPlacement(workersNow, workers); p != "" {
			partial = p
		}
		return false, nil
	})
	if err != nil && ctx.Err() != nil {
		ginkgo.Fail("interrupted")
	}
	if partial != "" {
		ginkgo.AddReportEntry("partly placed (while waiting)", partial)
	}
	if evicted == nil {
		if partial == "" {
			ginkgo.AddReportEntry("observed", fmt.Sprintf("for %s no worker ran while another waited", window))
			return
		}
		why := "Kueue waitForPodsReady " + s.In.PodsReadyWhy
		if s.In.PodsReady != nil {
			why = fmt.Sprintf("Kueue's waitForPodsReady (timeout %s) did not evict it", s.In.PodsReady.Timeout)
		}
		ginkgo.Fail(fmt.Sprintf("gang %s/%s started partly and stayed so for %s: %s; %s: nothing withdraws a gang that only partly fits, whose running workers hold devices they cannot use",
			ns, g.job.Name, window.Round(time.Second), partial, why))
	}
	ginkgo.AddReportEntry("admitted → evicted whole", fmt.Sprintf("%s (%s: %s)", evicted.LastTransitionTime.Sub(admittedAt).Round(100*time.Millisecond), evicted.Reason, evicted.Message))
	gomega.Expect(evicted.Reason).To(gomega.Equal(kueue.WorkloadEvictedByPodsReadyTimeout), "the gang was evicted, but for %s: %s", evicted.Reason, evicted.Message)
	// Evicted, the Job is suspended and its pods go: it holds no device while it waits again.
	env.Wait.For(ctx, fmt.Sprintf("every worker of the evicted gang %s/%s to be gone", ns, g.job.Name), wait.Target{Kind: "Job", Namespace: ns, Name: g.job.Name}, env.Timeouts.Release, func(gg gomega.Gomega) {
		left, err := gangWorkers(ctx, env, g.job)
		gg.Expect(err).NotTo(gomega.HaveOccurred())
		gg.Expect(left).To(gomega.BeEmpty(), "workers of the evicted gang still exist: %s", describeWorkers(left))
	})
	ginkgo.AddReportEntry("admitted → no worker left", since(admittedAt))
	// Requeued: Kueue counts the eviction in requeueState and admits the Workload again after its backoff.
	// (Its Requeued condition is no evidence: Kueue clears it for Workloads with DRA claims.)
	env.Wait.For(ctx, fmt.Sprintf("Kueue to requeue and admit again the evicted gang %s/%s", ns, g.job.Name), wait.Target{Kind: "Job", Namespace: ns, Name: g.job.Name}, env.Timeouts.Admission+s.In.PodsReady.BackoffBase, func(gg gomega.Gomega) {
		wl, err := queues.WorkloadFor(ctx, env, g.job)
		gg.Expect(err).NotTo(gomega.HaveOccurred())
		gg.Expect(requeueCount(wl)).To(gomega.BeNumerically(">=", 1), "Workload %s has counted no requeue", wl.Name)
		c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
		gg.Expect(c != nil && c.Status == metav1.ConditionTrue && !c.LastTransitionTime.Before(&evicted.LastTransitionTime)).To(gomega.BeTrue(),
			"Workload %s has not been admitted again since its eviction at %s", wl.Name, evicted.LastTransitionTime.Format(time.RFC3339))
		ginkgo.AddReportEntry("requeued", fmt.Sprintf("requeue count %d; quota reserved again %s after the eviction", requeueCount(wl), c.LastTransitionTime.Sub(evicted.LastTransitionTime.Time)))
	})
	withdrawGang(ctx, env, g.job)
}

// withdrawGang deletes a gang's Job and waits until none of its workers is left, while the spec's namespace
// is still active. A gang Kueue admitted again creates its workers anew; left to the namespace's deletion,
// a worker the scheduler is placing as the namespace begins terminating races it (on extended-resource-dra
// the scheduler creates the worker's claim at binding, which a terminating namespace refuses), and the
// devices it takes stay taken after the spec released its nodes. Withdrawn here, no worker outlives the
// spec's hold on its nodes.
func withdrawGang(ctx context.Context, env *testenv.Env, job *batchv1.Job) {
	ginkgo.GinkgoHelper()
	err := env.Clients.Kube.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if !apierrors.IsNotFound(err) {
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting the gang's Job %s/%s", job.Namespace, job.Name)
	}
	env.Wait.For(ctx, fmt.Sprintf("every worker of the withdrawn gang %s/%s to be gone", job.Namespace, job.Name), wait.Target{Kind: "Job", Namespace: job.Namespace, Name: job.Name}, env.Timeouts.Release, func(g gomega.Gomega) {
		left, err := pods.OfJob(ctx, env, job)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		names := make([]string, len(left))
		for i, p := range left {
			names[i] = p.Name
		}
		g.Expect(names).To(gomega.BeEmpty(), "pods of the withdrawn gang still exist")
	})
}

func requeueCount(wl *kueue.Workload) int32 {
	if wl.Status.RequeueState == nil || wl.Status.RequeueState.Count == nil {
		return 0
	}
	return *wl.Status.RequeueState.Count
}

// partialPlacement describes a gang some of whose workers run while others wait ("" when none runs or
// all do).
func partialPlacement(workers map[int]*corev1.Pod, want int) string {
	var running, waiting []string
	for i := range want {
		p, ok := workers[i]
		switch {
		case !ok:
			waiting = append(waiting, fmt.Sprintf("worker %d (no pod)", i))
		case p.Spec.NodeName != "" && (p.Status.Phase == corev1.PodRunning || !workerStart(p).IsZero()):
			running = append(running, fmt.Sprintf("worker %d on %s", i, p.Spec.NodeName))
		default:
			waiting = append(waiting, fmt.Sprintf("worker %d (%s)", i, waitingWhy(p)))
		}
	}
	if len(running) == 0 || len(waiting) == 0 {
		return ""
	}
	return fmt.Sprintf("%s run; %s wait", strings.Join(running, ", "), strings.Join(waiting, ", "))
}

// waitingWhy is the scheduler's word on a pod that waits: its PodScheduled condition.
func waitingWhy(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("%s: %s", c.Reason, c.Message)
		}
	}
	return "phase " + string(p.Status.Phase)
}

func describeWorkers(m map[int]*corev1.Pod) string {
	var out []string
	for _, i := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("worker %d %s (%s on %q)", i, m[i].Name, m[i].Status.Phase, m[i].Spec.NodeName))
	}
	return strings.Join(out, ", ")
}

// gangShortOfQuota submits a 2-worker gang to a ClusterQueue with quota for one worker: Kueue must keep
// the Job suspended, with no pod, and say the quota is short.
func gangShortOfQuota(ctx context.Context, s *Spec[GangInput], nodes []string) {
	env, ns, path := s.Env, s.NS, s.Path
	const workers = 2
	g := submitGang(ctx, s.Env, s.Path, s.NS, gangShape{name: "noquota", workers: workers, devices: 1, nodes: nodes, steps: gangSteps, quota: workers - 1, localQueue: s.In.ExistingLocalQueue})
	var msg string
	env.Wait.For(ctx, fmt.Sprintf("Kueue to refuse gang %s/%s its quota", ns, g.job.Name), wait.Target{Kind: "Job", Namespace: ns, Name: g.job.Name}, env.Timeouts.Admission, func(gg gomega.Gomega) {
		wl, err := queues.WorkloadFor(ctx, env, g.job)
		gg.Expect(err).NotTo(gomega.HaveOccurred())
		gg.Expect(wl).NotTo(gomega.BeNil(), "no Workload yet")
		gg.Expect(meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)).To(gomega.BeFalse(),
			"Kueue reserved quota for %d workers in a ClusterQueue with quota for %d", workers, workers-1)
		c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
		gg.Expect(c).NotTo(gomega.BeNil(), "Workload %s has no %s condition yet", wl.Name, kueue.WorkloadQuotaReserved)
		gg.Expect(c.Message).To(gomega.ContainSubstring("insufficient quota for "+string(path.QuotaResource())), "Workload %s: %s", wl.Name, c.Message)
		msg = c.Message
	})
	ginkgo.AddReportEntry("Kueue", msg)
	job, err := env.Clients.Kube.BatchV1().Jobs(ns).Get(ctx, g.job.Name, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(job.Spec.Suspend).To(gomega.HaveValue(gomega.BeTrue()), "the Job of a gang short of quota is not suspended")
	left, err := gangWorkers(ctx, env, g.job)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(left).To(gomega.BeEmpty(), "a gang short of quota has pods: %s", describeWorkers(left))
}

// gangFailedWorker runs a 2-worker gang across nodes with checkpoints on storage both see, fails worker
// 1's device, and checks the survivor stops (it cannot step alone), the whole gang restarts, resumes from
// its last common checkpoint on healthy devices and completes with the state of an uninterrupted run.
func gangFailedWorker(ctx context.Context, s *Spec[GangInput], devices faults.DeviceProvider, nodes []string) {
	failingDevices()
	env, ns, path, inj := s.Env, s.NS, s.Path, s.In.Faults
	const workers = 2
	g := submitGang(ctx, s.Env, s.Path, s.NS, gangShape{name: "gang", workers: workers, devices: 1, placement: fixtures.AcrossNodes, nodes: nodes,
		steps: gangFailSteps, resumedStep: gangResumedStepTime, resumedMin: trainResumedMinTime, storage: s.In.Checkpoints, evictAfter: s.In.EvictAfter, localQueue: s.In.ExistingLocalQueue})
	queues.ExpectAdmitted(ctx, env, g.job, path.QuotaResource(), workers)
	started, skew := expectGangStarted(ctx, env, g.job)
	ginkgo.AddReportEntry("gang start skew", skew.Round(10*time.Millisecond).String())
	common := gangFailSteps
	for _, i := range slices.Sorted(maps.Keys(started)) {
		common = min(common, expectCheckpoint(ctx, env, ns, started[i].Name, 2*gangEvery))
	}
	victimPod := started[1]
	node := victimPod.Spec.NodeName
	capacity := path.Capacity()[node]
	given, err := path.Given(ctx, givenInput(env, victimPod, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading worker 1's device from %s", path.Authority())
	if given.CountOnly {
		ginkgo.Skip("not exercised: worker 1's device identity cannot be read (" + given.Note + ")")
	}
	victim := victimDevice(path, node, given)

	ginkgo.By(fmt.Sprintf("reporting %s, used by worker 1 (%s), unhealthy through %s", victim, victimPod.Name, devices.Name()))
	faultAt := time.Now()
	env.Note(timeline.WorkerName(g.job.Name, "1"), timeline.Fault, "Device/"+victim.ID, "unhealthy through "+devices.Name())
	withdrawn, _ := withdrawnWith(ctx, env, path, node, victim.ID)
	undo, err := inj.MarkDeviceUnhealthy(ctx, devices, victim)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	unhealthy := testenv.DeferUndo(undo)
	expectLiveCapacity(ctx, env, path, node, capacity-withdrawn, victim.ID+" withdrawn", env.Timeouts.Release)
	if !devices.Evicts() {
		// As in the failure scenario: nothing evicts a pod whose device-plugin device turns unhealthy; the
		// application fails (a real GPU error kills its CUDA context), which deleting it stands in for. The
		// kubelet still signals it first (even a grace period of 0 becomes its minimum of 2 s), so the worker
		// saves its last step: steps lost are then 0, and a worker killed outright loses at most the interval.
		ginkgo.By(fmt.Sprintf("%s does not evict: failing worker 1 (%s) as the application would (deleting it)", devices.Name(), victimPod.Name))
		gomega.Expect(env.Clients.Kube.CoreV1().Pods(ns).Delete(ctx, victimPod.Name, metav1.DeleteOptions{})).To(gomega.Succeed())
	}

	survivor := started[0]
	if sp, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, survivor.Name, metav1.GetOptions{}); err == nil && sp.Status.Phase == corev1.PodSucceeded {
		ginkgo.Fail(fmt.Sprintf("the gang finished its %d steps before worker 1's device failed (%s after the fault): the spec proves nothing; lengthen the gang", gangFailSteps, since(faultAt)))
	}
	ginkgo.By(fmt.Sprintf("waiting for the survivor, worker 0 (%s), to stop: it must not step alone", survivor.Name))
	sum := workerSummary(ctx, env, ns, survivor.Name)
	ginkgo.AddReportEntry("fault → survivor stopped", since(faultAt))
	gomega.Expect(sum.Status).To(gomega.Equal(gang.StatusPeerLost), "the survivor ended %q at step %d instead of stopping when its peer was lost", sum.Status, sum.CompletedSteps)
	lastStep := sum.CompletedSteps
	ginkgo.AddReportEntry("survivor", fmt.Sprintf("stopped at step %d (peer lost), newest common checkpoint seen before the fault: step %d", lastStep, common))

	restarted, restartSkew := expectGangStarted(ctx, env, g.job, victimPod.Name, survivor.Name)
	ginkgo.AddReportEntry("fault → whole gang running again", since(faultAt))
	ginkgo.AddReportEntry("restarted gang start skew", restartSkew.Round(10*time.Millisecond).String())
	rg, err := path.Given(ctx, givenInput(env, restarted[1], nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the restarted worker 1's device from %s", path.Authority())
	gomega.Expect(rg.Devices).NotTo(gomega.ContainElement(victim.ID), "the restarted worker 1 (%s) was given the unhealthy device %s", restarted[1].Name, victim.ID)
	ginkgo.AddReportEntry("restarted workers", describeWorkers(restarted))
	ginkgo.AddReportEntry("restart mechanism", restartMechanism(ctx, env, g.job))

	sums := expectGangComplete(ctx, env, g, gangFailSteps)
	ginkgo.AddReportEntry("fault → gang complete", since(faultAt))
	for i, sm := range sums {
		gomega.Expect(sm.Resumed).To(gomega.BeTrue(), "worker %d started over from step 0 although the gang's checkpoints were on shared storage: %+v", i, sm)
		gomega.Expect(sm.ResumedFrom).To(gomega.Equal(sums[0].ResumedFrom), "workers resumed from different steps: worker %d from %d, worker 0 from %d", i, sm.ResumedFrom, sums[0].ResumedFrom)
	}
	from := sums[0].ResumedFrom
	gomega.Expect(from).To(gomega.BeNumerically(">=", common), "the gang resumed from step %d, older than the common checkpoint at step %d seen before the fault", from, common)
	lost := lastStep - from
	ginkgo.AddReportEntry("steps lost", fmt.Sprintf("%d: the gang reached step %d, resumed from its common checkpoint at step %d (checkpoint every %d)", lost, lastStep, from, gangEvery))
	gomega.Expect(lost).To(gomega.BeNumerically("<=", gangEvery), "more than one checkpoint interval lost: the gang reached step %d and resumed from step %d", lastStep, from)

	gomega.Expect(unhealthy.Now(ctx)).To(gomega.Succeed())
	expectLiveCapacity(ctx, env, path, node, capacity, victim.ID+" back", env.Timeouts.Release)
}

// restartMechanism says what brought the gang back: Kueue's requeue (the Workload was evicted) or the Job
// controller replacing each failed worker (backoffLimit) while Kueue kept it admitted.
func restartMechanism(ctx context.Context, env *testenv.Env, job *batchv1.Job) string {
	ginkgo.GinkgoHelper()
	wl, err := queues.WorkloadFor(ctx, env, job)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	if n := requeueCount(wl); n > 0 {
		why := ""
		if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted); c != nil {
			why = fmt.Sprintf(" (last eviction %s: %s)", c.Reason, c.Message)
		}
		return fmt.Sprintf("Kueue evicted and requeued the Workload %d time(s)%s", n, why)
	}
	j, err := env.Clients.Kube.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return fmt.Sprintf("the Job controller replaced every worker that stopped (%d failed pods within backoffLimit %d); Kueue kept the Workload admitted", j.Status.Failed, ptr.Deref(j.Spec.BackoffLimit, 0))
}

// tasDevices is what each worker of the TAS gang asks for: two workers of two devices fill a 4-GPU node.
const tasDevices = 2

// hostTopology picks the Kueue Topology with a hostname level for the TAS spec on path, or says why the
// spec is not exercised.
func (b GangInput) hostTopology(path gpu.Path) (cluster.Topology, string) {
	switch {
	case b.ExistingLocalQueue != "":
		return cluster.Topology{}, "queues.mode=existing: a topology-aware flavor is the ClusterQueue's, which the suite does not own"
	case path.ClaimBased():
		// Kueue's TAS sizes each domain from the nodes' allocatable (pkg/cache/scheduler/tas_flavor_snapshot.go in
		// Kueue 0.17): DRA devices are not in it, so a TAS flavor has no capacity for a DRA gang; nor for one
		// that asks for a DRA-served extended resource, which the nodes DRA serves it on advertise none of.
		why := "Kueue's topology-aware scheduling counts node allocatable, where DRA devices are not (Kueue 0.17)"
		if ext, ok := path.(*gpu.ExtendedDRA); ok {
			why = fmt.Sprintf("Kueue's topology-aware scheduling counts node allocatable, and the nodes DRA serves %s on advertise none (Kueue 0.17)", ext.Resource)
		}
		return cluster.Topology{}, why
	case len(b.Topologies) == 0:
		return cluster.Topology{}, b.TopologiesWhy
	case len(b.eligible(path, 2*tasDevices)) == 0:
		return cluster.Topology{}, fmt.Sprintf("no node in the GPU pool has %d devices on this path", 2*tasDevices)
	}
	for _, t := range b.Topologies {
		if t.HasLevel(corev1.LabelHostname) {
			return t, ""
		}
	}
	return cluster.Topology{}, "no Kueue Topology has a " + corev1.LabelHostname + " level"
}

// gangTAS submits a 2-worker gang through a topology-aware flavor over the Topology, requiring one
// hostname domain, on nodes (the spec's lease, each of which fits the whole gang): Kueue must assign it one
// node (its Workload's topology assignment; Kueue's TAS honours the pods' required node affinity), and
// both workers must run there.
func gangTAS(ctx context.Context, s *Spec[GangInput], tas cluster.Topology, nodes []string) {
	env, ns, path := s.Env, s.NS, s.Path
	const workers = 2
	lq := queues.Setup(ctx, env, queues.SetupInput{Namespace: ns, Name: "tas", Quota: queues.QuotaFor(path.QuotaResource(), workers*tasDevices),
		Topology: tas.Name, TopologyNodeLabels: map[string]string{corev1.LabelOSStable: "linux"}})
	w := env.Factory.GangJob("tas", ns, workers).RequiredTopology(corev1.LabelHostname)
	w.Path(path).Devices(tasDevices).Queue(lq).OnNodes(nodes...).BackoffLimit(2 * workers)
	workID := ns + "-tas"
	w.ScratchDir("checkpoints", trainDir)
	w.Args(w.GangArgs("--steps", strconv.Itoa(gangSteps), "--step-duration", gangStepTime.String(), "--checkpoint-every", strconv.Itoa(gangEvery),
		"--checkpoint-dir", trainDir+"/"+workID, "--work-id", workID, "--peer-timeout", gangPeerTimeout.String())...)
	obj := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	ginkgo.By(fmt.Sprintf("submitting gang tas: %s, required topology %s of Topology %s (%s)", w, corev1.LabelHostname, tas.Name, strings.Join(tas.Levels, " > ")))
	g := gangRun{job: env.Create(ctx, obj).(*batchv1.Job), builder: w, workID: workID, lq: lq}
	submitted := time.Now()
	wl := queues.ExpectAdmitted(ctx, env, g.job, path.QuotaResource(), workers*tasDevices)
	var assigned []string
	if wl.Status.Admission != nil {
		for _, psa := range wl.Status.Admission.PodSetAssignments {
			if ta := psa.TopologyAssignment; ta != nil {
				raw, _ := json.Marshal(ta)
				assigned = append(assigned, string(raw))
			}
		}
	}
	gomega.Expect(assigned).NotTo(gomega.BeEmpty(), "Kueue admitted Workload %s through topology-aware flavor of Topology %s without a topology assignment: TAS did not place it", wl.Name, tas.Name)
	ginkgo.AddReportEntry("Kueue's topology assignment", strings.Join(assigned, "; "))
	started, skew := expectGangStarted(ctx, env, g.job)
	ginkgo.AddReportEntry("gang start skew", skew.Round(10*time.Millisecond).String())
	ginkgo.AddReportEntry("created → whole gang running", since(submitted))
	expectWorkersDevices(ctx, env, path, started, tasDevices, fixtures.OneNode)
	expectGangComplete(ctx, env, g, gangSteps)
}
