package scenarios

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/faults"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/queues"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/timeline"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/internal/workload/train"
)

// FailureInput is the input of FailureSpec.
type FailureInput struct {
	Base
	FaultNeeds
	// KueuePresent submits the training jobs through a LocalQueue.
	KueuePresent       bool
	ExistingLocalQueue string
}

const failureName = "failure"

// Failure is the failed-worker and failed-device scenario (FailureSpec).
var Failure = Define(Scenario{Name: failureName, Title: "a failed worker or device is withdrawn, and the work resumes elsewhere from its checkpoint",
	Required: true, Measured: true, Needs: suite.Needs{Disruptive: true, FaultProvider: true, CheckpointStorage: true}, Uses: suite.Needs{Kueue: true}},
	func(r *suite.Run) FailureInput {
		return FailureInput{Base: baseOf(r), FaultNeeds: faultNeedsOf(r), KueuePresent: r.KueueUsable, ExistingLocalQueue: r.ExistingLocalQueue()}
	},
	FailureSpec)

// FailureSpec registers, per path, the checks that a GPU cluster survives a lost worker and a bad
// device: the device reported unhealthy is withdrawn and never handed out, and handed out again after it
// recovers; a kubelet restart brings the node's devices back; a training job whose node fails is
// rescheduled onto another GPU node, resumes from its last checkpoint and completes with the state of
// an uninterrupted run, and the node comes back with its devices; a device that fails under a training
// job is not handed to its replacement, which resumes on a healthy device. All change nodes: they need
// --disruptive and a fault provider (framework/faults). The pool locks say what runs beside them: a node's
// holders (holds:node), one node stopped at a time (stops:node), never a device fault under the upgrade
// rehearsal (faults:device).
func FailureSpec(input func() FailureInput) {
	reg := input()
	for i, regPath := range reg.Paths {
		pathName := regPath.Name()
		if !reg.Disruptive {
			reg.notExercised(pathName+": failed worker and failed device", "they change nodes of the GPU pool; run with --disruptive to include them")
			continue
		}
		nodes := reg.withDevices(regPath, "failed worker and failed device")
		if len(nodes) == 0 {
			continue
		}
		devices, devicesWhy := reg.Faults.DevicesFor(regPath.ClaimBased())
		evictor, evictorWhy := devices, devicesWhy
		if regPath.ClaimBased() && reg.Faults.DRAEvict != nil {
			evictor, evictorWhy = reg.Faults.DRAEvict, ""
		}
		nodeFaults, nodeWhy := reg.Faults.Nodes, reg.Faults.NodesWhy
		// Each path restarts another node's kubelet where it can: two restarts of one kubelet seconds
		// apart test the restart twice over, not each path.
		restartNode := nodes[(len(nodes)-1+i)%len(nodes)]
		if reg.Checkpoints.None() {
			reg.notExercised(pathName+": resume from a checkpoint after a failure", reg.CheckpointsWhy+"; the reschedule half of the checks still runs")
		}
		describePath(input, regPath, "GPU failure and recovery", "fail", []any{labels.Of(labels.Scenario(failureName), labels.Disruptive)}, func(s *Spec[FailureInput]) {
			if devices == nil {
				reg.notExercised(pathName+": device health", devicesWhy)
			} else {
				// holds:node: a device fault is the device's (the provider's contract), and the spec fills the
				// path's healthy devices of its node; the other path's specs, and holders of other nodes, go on
				// beside it. faults:device: not the upgrade rehearsal, which compares what nodes offer.
				ginkgo.It("withdraws exactly the device reported unhealthy, then offers it again", takes(Takes{Devices: OneWholeNode, FailsDevice: true}), func(ctx context.Context) {
					ginkgo.By("the device is never handed out while unhealthy, and handed out again after it recovers")
					deviceHealth(ctx, s.Env, s.In.Faults, devices, s.Path, s.NS, s.on(nodes)[0])
				})
			}
			if nodeFaults == nil {
				reg.notExercised(pathName+": kubelet restart and failed worker", nodeWhy)
			} else {
				// stops:node: a kubelet restart, or a node that fails, takes every path's devices there; the
				// other nodes' specs go on.
				ginkgo.It("advertises a node's devices again after its kubelet restarts", takes(Takes{StopsNode: true}), func(ctx context.Context) {
					ginkgo.By("then a new pod is given one of them")
					s.stopping(ctx, []string{restartNode}, s.Env.Timeouts.StackReady)
					kubeletRestart(ctx, s.Env, s.In.Faults, s.Path, s.NS, restartNode)
				})
				if len(nodes) < 2 {
					reg.notExercised(pathName+": failed worker", "the GPU pool has one node with a device on this path; the replacement needs another")
				} else {
					ginkgo.It("reschedules a training job whose GPU node fails, which resumes and completes", takes(Takes{Devices: WholePath, StopsNode: true}), func(ctx context.Context) {
						ginkgo.By("the job moves to another GPU node and resumes from its last checkpoint; the node comes back with its devices")
						failedWorker(ctx, s, nodes)
					})
				}
			}
			if evictor == nil {
				reg.notExercised(pathName+": failed device under a running job", evictorWhy)
			} else {
				// holds:node: the job and its replacement stay on the leased node, whose other devices are healthy.
				ginkgo.It("keeps a failed device from a training job's replacement, which resumes", takes(Takes{Devices: OneWholeNode, FailsDevice: true}), func(ctx context.Context) {
					ginkgo.By("the replacement resumes from the last checkpoint on a healthy device")
					failedDevice(ctx, s, evictor, s.on(nodes))
				})
			}
			rule, _ := reg.Faults.DRAEvict.(*faults.TaintRule)
			switch _, ownClaims := regPath.(*gpu.DRA); {
			case !regPath.ClaimBased():
				// Device-plugin devices have no taints to tolerate.
			case !ownClaims:
				reg.notExercised(pathName+": a device taint a pod's claim tolerates", "the claim the scheduler creates for an extended resource carries none of the pod's tolerations: a pod on this path cannot tolerate a device taint")
			case rule == nil:
				reg.notExercised(pathName+": a device taint a pod's claim tolerates", reg.Faults.DRAEvictWhy)
			default:
				// holds:node: the pod and its device are the leased node's; faults:device as every device fault.
				ginkgo.It("keeps a pod whose claim tolerates a device's NoExecute taint on that device", takes(Takes{Devices: OneWholeNode, FailsDevice: true}), func(ctx context.Context) {
					ginkgo.By("kube-controller-manager judges the taint and evicts nothing")
					toleratedTaint(ctx, s, rule, s.on(nodes)[0])
				})
			}
		})
	}
}

// trainingJob is one submitted training Job of the failure scenario.
type trainingJob struct {
	job    *batchv1.Job
	workID string
	resume bool // its checkpoints outlive a node
	// obj and prereqs are the Job and the objects it needs, built by prepareTraining, created by startTraining.
	obj     *batchv1.Job
	prereqs []fixtures.Object
}

// submitTraining creates the checkpoint storage, the queue (when Kueue is there) and a checkpointing
// training Job on one device of one of nodes, and waits until it has written a checkpoint at step
// trainEvery*2 or later, so that a resume is distinguishable from a restart. It returns the Job and its
// running pod.
func submitTraining(ctx context.Context, s *Spec[FailureInput], name string, nodes []string) (trainingJob, *corev1.Pod) {
	ginkgo.GinkgoHelper()
	t := prepareTraining(ctx, s, name, nodes)
	pod := startTraining(ctx, s, &t)
	awaitTrainingCheckpoint(ctx, s.Env, pod)
	return t, pod
}

// prepareTraining is submitTraining's first part: the checkpoint storage and the queue, and the Job built
// but not created. It creates nothing that uses a device, so a spec takes its pool locks after it.
func prepareTraining(ctx context.Context, s *Spec[FailureInput], name string, nodes []string) trainingJob {
	ginkgo.GinkgoHelper()
	env, ns, path := s.Env, s.NS, s.Path
	spec := training{Name: name, Steps: trainSteps, Every: trainEvery, StepTime: trainStepTime, ResumedStepTime: trainResumedStepTime, ResumedMinTime: trainResumedMinTime, Storage: s.In.Checkpoints, Nodes: nodes, EvictAfter: s.In.EvictAfter}
	created := false
	t := trainingJob{resume: ensureCheckpointStorage(ctx, env, ns, s.In.Checkpoints, &created)}
	if s.In.queued(s.In.KueuePresent, path.Name()) {
		spec.Queue = queues.Setup(ctx, env, queues.SetupInput{Namespace: ns, ExistingLocalQueue: s.In.ExistingLocalQueue, Quota: queues.QuotaFor(path.QuotaResource(), 1)})
	} else {
		ginkgo.AddReportEntry("submitted without Kueue", "Kueue is absent, or the team's ClusterQueue does not cover this path: the training Job is created directly")
	}
	w, workID := spec.build(env, ns, path)
	t.workID, t.obj, t.prereqs = workID, w.Obj(), w.Prerequisites()
	return t
}

// startTraining is submitTraining's second part: it creates the prepared Job and waits until its pod
// runs, which it returns.
func startTraining(ctx context.Context, s *Spec[FailureInput], t *trainingJob) *corev1.Pod {
	ginkgo.GinkgoHelper()
	env, path := s.Env, s.Path
	for _, pre := range t.prereqs {
		env.Create(ctx, pre)
	}
	t.job = env.Create(ctx, t.obj).(*batchv1.Job)
	if s.In.queued(s.In.KueuePresent, path.Name()) {
		queues.ExpectAdmitted(ctx, env, t.job, path.QuotaResource(), 1)
	}
	return pods.ExpectJobPodStarted(ctx, env, t.job)
}

// awaitTrainingCheckpoint is submitTraining's last part: it waits until the running pod has written a
// checkpoint at step trainEvery*2 or later.
func awaitTrainingCheckpoint(ctx context.Context, env *testenv.Env, pod *corev1.Pod) {
	ginkgo.GinkgoHelper()
	ginkgo.By(fmt.Sprintf("training on %s (pod %s); waiting for a checkpoint at step %d or later", pod.Spec.NodeName, pod.Name, 2*trainEvery))
	expectCheckpoint(ctx, env, pod.Namespace, pod.Name, 2*trainEvery)
}

// expectResumedAndComplete waits for the Job to complete and checks what its last pod reports: resumed
// from a checkpoint at or after lastSeen (lost work under one interval), one restart more, every step
// done and the state digest of an uninterrupted run. Without storage that outlives a node it checks
// only completion and records the restart from step 0.
func expectResumedAndComplete(ctx context.Context, env *testenv.Env, t trainingJob, pod string, lastSeen int) train.Summary {
	ginkgo.GinkgoHelper()
	pods.ExpectJobComplete(ctx, env, t.job)
	sum := trainSummary(ctx, env, t.job.Namespace, pod)
	gomega.Expect(sum.Status).To(gomega.Equal(train.StatusCompleted), "the replacement's training did not complete: %+v", sum)
	gomega.Expect(sum.CompletedSteps).To(gomega.Equal(trainSteps), "steps completed")
	ginkgo.AddReportEntry("training after the failure", fmt.Sprintf("resumed=%t from step %d (newest checkpoint seen before the fault: step %d), restarts %d, %d steps run by the replacement",
		sum.Resumed, sum.ResumedFrom, lastSeen, sum.Restarts, sum.StepsRunThisAttempt))
	if !t.resume {
		ginkgo.AddReportEntry("not exercised: resume", "no storage that outlives a node: the replacement started over")
		return sum
	}
	gomega.Expect(sum.Resumed).To(gomega.BeTrue(), "the replacement started over from step 0 although its checkpoints were on storage that outlives the node: %+v", sum)
	gomega.Expect(sum.Restarts).To(gomega.Equal(1), "restart counter: one interruption, one resume")
	gomega.Expect(sum.ResumedFrom).To(gomega.BeNumerically(">=", lastSeen),
		"resumed from step %d, older than the checkpoint at step %d written before the fault: more than one interval of work was lost", sum.ResumedFrom, lastSeen)
	gomega.Expect(sum.StateDigest).To(gomega.Equal(train.Digest(t.workID, trainSteps)), "the resumed job's final state differs from an uninterrupted run's")
	ginkgo.AddReportEntry("steps lost", fmt.Sprintf("at most %d (checkpoint every %d steps; resumed from step %d)", trainEvery-1, trainEvery, sum.ResumedFrom))
	return sum
}

// nodeReady reads whether node is Ready.
func nodeReady(ctx context.Context, env *testenv.Env, node string) (corev1.ConditionStatus, error) {
	n, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return cluster.NodeReady(*n), nil
}

func failedWorker(ctx context.Context, s *Spec[FailureInput], nodes []string) {
	env, ns, path, inj := s.Env, s.NS, s.Path, s.In.Faults
	// The training lands on one of nodes, which the spec stops: it holds them all on every path until its
	// pod is placed (not until its first checkpoint: the others' specs go on meanwhile). The storage and
	// the queue need no device; they are made before.
	t := prepareTraining(ctx, s, "train", nodes)
	keep := s.stopping(ctx, nodes, env.Timeouts.NodeReturn)
	pod := startTraining(ctx, s, &t)
	node := pod.Spec.NodeName
	keep(node)
	awaitTrainingCheckpoint(ctx, env, pod)
	capacity := path.Capacity()[node]
	var oldClaims []gpu.ClaimInfo
	if path.ClaimBased() {
		given, err := path.Given(ctx, givenInput(env, pod, nil))
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		oldClaims = given.Claims
	}
	lastSeen, err := lastCheckpoint(ctx, env, ns, pod.Name)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())

	slicesBefore := publishedBefore(ctx, env, path, node)
	ginkgo.By(fmt.Sprintf("stopping %s through %s", node, inj.Nodes.Name()))
	faultAt := time.Now()
	env.Note(t.job.Name, timeline.Fault, "Node/"+node, "stopped through "+inj.Nodes.Name())
	start, err := inj.StopNode(ctx, node)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	stopped := testenv.DeferUndo(func(ctx context.Context) error {
		if err := start(ctx); err != nil {
			return err
		}
		waitNodeBack(ctx, env, path, node, capacity)
		return nil
	})

	env.Wait.For(ctx, fmt.Sprintf("node %s to be reported not Ready", node), wait.Target{Kind: "Node", Name: node}, env.Timeouts.NodeLost, func(g gomega.Gomega) {
		st, err := nodeReady(ctx, env, node)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(st).NotTo(gomega.Equal(corev1.ConditionTrue), "node %s is still Ready", node)
	})
	env.Note(t.job.Name, timeline.NodeNotReady, "Node/"+node, "")
	ginkgo.AddReportEntry("node stopped → NotReady", since(faultAt))

	ginkgo.By(fmt.Sprintf("waiting for Kubernetes to evict %s from the lost node (tolerationSeconds %s)", pod.Name, s.In.EvictAfter))
	env.Wait.For(ctx, fmt.Sprintf("pod %s/%s to be evicted from %s", ns, pod.Name, node), wait.Target{Kind: "Pod", Namespace: ns, Name: pod.Name}, env.Timeouts.NodeLost, func(g gomega.Gomega) {
		p, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(p.DeletionTimestamp).NotTo(gomega.BeNil(), "pod %s on the lost node is not being deleted", pod.Name)
	})
	ginkgo.AddReportEntry("node stopped → pod evicted", since(faultAt))

	repl := expectReplacement(ctx, env, t.job, pod.Name)
	ginkgo.AddReportEntry("node stopped → replacement running", since(faultAt))
	gomega.Expect(repl.Spec.NodeName).NotTo(gomega.Equal(node), "the replacement %s was placed on the lost node", repl.Name)
	gomega.Expect(nodes).To(gomega.ContainElement(repl.Spec.NodeName), "the replacement runs outside the GPU pool")
	given, err := path.Given(ctx, givenInput(env, repl, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the replacement's devices from %s", path.Authority())
	gomega.Expect(given.Node).To(gomega.Equal(repl.Spec.NodeName), "the replacement's devices are on %s, not on its node %s", given.Node, repl.Spec.NodeName)
	if !given.CountOnly {
		gomega.Expect(given.Devices).To(gomega.HaveLen(1), "the replacement holds %s", gpu.FormatDevices(given.Devices))
	}
	ginkgo.AddReportEntry("replacement", fmt.Sprintf("%s on %s with %s (%s)", repl.Name, repl.Spec.NodeName, gpu.FormatDevices(given.Devices), given.Source))

	// The lost pod stays Terminating: only its kubelet could confirm it is gone. Kubernetes' answer for a
	// node that is shut down and will not come back soon is the out-of-service taint: the pod GC then
	// force-deletes the pod, and DRA releases its claim. It is only for nodes that are really shut down:
	// where only the kubelet stopped, the pod's containers still run and the pod is left to its kubelet.
	var outOfService *testenv.Undo
	if inj.Nodes.ShutsDown() {
		ginkgo.By(fmt.Sprintf("putting %s out of service so the lost pod %s and its claims are released", node, pod.Name))
		oosAt := time.Now()
		unOOS, err := inj.PutOutOfService(ctx, node)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		outOfService = testenv.DeferUndo(unOOS)
		expectPodGone(ctx, env, ns, pod.Name)
		expectClaimsReleased(ctx, env, ns, pod, oldClaims)
		ginkgo.AddReportEntry("out-of-service → lost pod deleted", since(oosAt))
	} else {
		ginkgo.AddReportEntry("out-of-service taint", fmt.Sprintf("not applied: %s stops only the kubelet, the lost pod's containers keep running; the pod is deleted when its kubelet is back", inj.Nodes.Name()))
	}

	// The node comes back while the replacement trains on (an operator repairs a node without waiting for
	// the jobs it ran): the spec holds the node, and the stops lock, that much less. Its return is timed
	// from its start; the training's completion from the Job's own completionTime, read once the node is
	// back.
	ginkgo.By(fmt.Sprintf("starting %s again while the replacement trains", node))
	backAt := time.Now()
	gomega.Expect(start(ctx)).To(gomega.Succeed())
	stopped.Done() // the spec waits for the node's return step by step below
	waitNodeReady(ctx, env, node)
	env.Note(t.job.Name, timeline.NodeReady, "Node/"+node, "")
	ginkgo.AddReportEntry("node started → Ready", since(backAt))
	if !inj.Nodes.ShutsDown() {
		expectPodGone(ctx, env, ns, pod.Name)
		expectClaimsReleased(ctx, env, ns, pod, oldClaims)
		ginkgo.AddReportEntry("node back → lost pod deleted", since(backAt))
	}
	// The taint goes once the node is back, as the node-shutdown docs say: while it is there it also
	// keeps off the GPU stack's own DaemonSet pods unless they tolerate everything.
	if outOfService != nil {
		gomega.Expect(outOfService.Now(ctx)).To(gomega.Succeed())
	}
	expectCapacityAfterRestart(ctx, env, path, node, capacity, slicesBefore, "after it came back", env.Timeouts.NodeReturn)
	ginkgo.AddReportEntry("node started → devices advertised", since(backAt))
	ginkgo.By("running a one-device pod on " + node)
	held := runOnceDevicesBack(ctx, env, path, ns, node, "after-restart", "after the node came back")
	env.Note(t.job.Name, timeline.Recovered, "Node/"+node, "pod "+held+" got a device")
	ginkgo.AddReportEntry("node started → device allocated", since(backAt))

	sum := expectResumedAndComplete(ctx, env, t, repl.Name, lastSeen)
	if sum.ResumedFrom >= lastSeen+trainEvery {
		// The lost pod checkpointed after its node was lost: it kept running beside its replacement.
		ginkgo.AddReportEntry("warning: two writers", fmt.Sprintf("the replacement resumed from step %d, written after the fault (the newest checkpoint seen before it was step %d): the lost pod kept training on its unreachable node, beside its replacement, on the same checkpoints", sum.ResumedFrom, lastSeen))
	}
	ginkgo.AddReportEntry("node stopped → job complete", jobCompletedSince(ctx, env, t.job, faultAt))
}

// jobCompletedSince is how long after at the Job completed, by its status's completionTime (the API
// server's clock, to the second), for a Job that is complete.
func jobCompletedSince(ctx context.Context, env *testenv.Env, job *batchv1.Job, at time.Time) string {
	ginkgo.GinkgoHelper()
	got, err := env.Clients.Kube.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(got.Status.CompletionTime).NotTo(gomega.BeNil(), "Job %s/%s is complete but has no completionTime", job.Namespace, job.Name)
	return fmt.Sprintf("%s (the Job's completionTime)", got.Status.CompletionTime.Sub(at).Round(time.Second))
}

// expectPodGone waits until the pod is deleted.
func expectPodGone(ctx context.Context, env *testenv.Env, ns, name string) {
	ginkgo.GinkgoHelper()
	env.Wait.For(ctx, fmt.Sprintf("the lost pod %s/%s to be deleted", ns, name), wait.Target{Kind: "Pod", Namespace: ns, Name: name}, env.Timeouts.Release, func(g gomega.Gomega) {
		_, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "the lost pod %s still exists (err=%v)", name, err)
	})
}

// waitNodeReady waits until node is Ready again.
func waitNodeReady(ctx context.Context, env *testenv.Env, node string) {
	ginkgo.GinkgoHelper()
	env.Wait.For(ctx, fmt.Sprintf("node %s to be Ready again", node), wait.Target{Kind: "Node", Name: node}, env.Timeouts.NodeReturn, func(g gomega.Gomega) {
		st, err := nodeReady(ctx, env, node)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(st).To(gomega.Equal(corev1.ConditionTrue), "node %s Ready", node)
	})
}

// waitNodeBack waits until node is Ready and offers want devices on path again.
func waitNodeBack(ctx context.Context, env *testenv.Env, path gpu.Path, node string, want int64) {
	ginkgo.GinkgoHelper()
	waitNodeReady(ctx, env, node)
	expectLiveCapacity(ctx, env, path, node, want, "after it came back", env.Timeouts.NodeReturn)
}

func failedDevice(ctx context.Context, s *Spec[FailureInput], evictor faults.DeviceProvider, nodes []string) {
	failingDevices()
	env, ns, path, inj := s.Env, s.NS, s.Path, s.In.Faults
	t, pod := submitTraining(ctx, s, "train", nodes)
	node := pod.Spec.NodeName
	capacity := path.Capacity()[node]
	given, err := path.Given(ctx, givenInput(env, pod, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the training pod's device from %s", path.Authority())
	if given.CountOnly {
		ginkgo.Skip("not exercised: the training pod's device identity cannot be read (" + given.Note + ")")
	}
	gomega.Expect(given.Devices).To(gomega.HaveLen(1))
	victim := victimDevice(path, node, given)
	lastSeen, err := lastCheckpoint(ctx, env, ns, pod.Name)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())

	ginkgo.By(fmt.Sprintf("reporting %s, used by %s, unhealthy through %s", victim, pod.Name, evictor.Name()))
	faultAt := time.Now()
	env.Note(t.job.Name, timeline.Fault, "Device/"+victim.ID, "unhealthy through "+evictor.Name())
	withdrawn, _ := withdrawnWith(ctx, env, path, node, victim.ID)
	undo, err := inj.MarkDeviceUnhealthy(ctx, evictor, victim)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	unhealthy := testenv.DeferUndo(undo)
	expectWithdrawn(ctx, env, path, node, capacity-withdrawn, victim, evictor.Name(), env.Timeouts.Release)
	env.Note(t.job.Name, timeline.DeviceWithdrawn, "Device/"+victim.ID, "")
	ginkgo.AddReportEntry("device unhealthy → withdrawn", since(faultAt))

	if evictor.Evicts() {
		ginkgo.By(fmt.Sprintf("waiting for the cluster to evict %s from the unhealthy device", pod.Name))
		env.Wait.For(ctx, fmt.Sprintf("pod %s/%s to be evicted from %s", ns, pod.Name, victim.ID), wait.Target{Kind: "Pod", Namespace: ns, Name: pod.Name}, env.Timeouts.Release, func(g gomega.Gomega) {
			p, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return
			}
			g.Expect(err).NotTo(gomega.HaveOccurred())
			if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed {
				return
			}
			// Who evicts says whether it saw the fault: a DeviceTaintRule's status is the eviction
			// controller's.
			why := ""
			if rule, ok := evictor.(*faults.TaintRule); ok {
				if st, err := rule.Status(ctx, victim); err == nil {
					why = ": " + st
				}
			}
			if p.Status.Phase == corev1.PodSucceeded {
				// Its work is done on the bad device: no eviction can come any more.
				gomega.StopTrying(fmt.Sprintf("pod %s was not evicted from the unhealthy device %s (phase %s: it finished there)%s", pod.Name, victim.ID, p.Status.Phase, why)).Now()
			}
			g.Expect(p.Status.Phase).To(gomega.Equal(corev1.PodFailed), "pod %s was not evicted from the unhealthy device %s (phase %s)%s", pod.Name, victim.ID, p.Status.Phase, why)
		})
		ginkgo.AddReportEntry("device unhealthy → pod evicted", since(faultAt))
	} else {
		// Nothing in Kubernetes evicts a pod whose device-plugin device turns unhealthy: the application
		// fails (a real GPU error kills its CUDA context) and the Job replaces the pod. The pod's status
		// shows the device's health where the kubelet serves it (ResourceHealthStatus).
		p, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		ginkgo.AddReportEntry("pod status after the device failed", resourceHealth(p))
		ginkgo.By(fmt.Sprintf("%s does not evict: failing %s as the application would (deleting it)", evictor.Name(), pod.Name))
		gomega.Expect(env.Clients.Kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})).To(gomega.Succeed())
	}
	repl := expectReplacement(ctx, env, t.job, pod.Name)
	ginkgo.AddReportEntry("device unhealthy → replacement running", since(faultAt))
	rg, err := path.Given(ctx, givenInput(env, repl, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the replacement's device from %s", path.Authority())
	gomega.Expect(rg.Devices).NotTo(gomega.ContainElement(victim.ID), "the replacement %s was given the unhealthy device %s", repl.Name, victim.ID)
	ginkgo.AddReportEntry("replacement", fmt.Sprintf("%s on %s with %s", repl.Name, repl.Spec.NodeName, gpu.FormatDevices(rg.Devices)))
	expectResumedAndComplete(ctx, env, t, repl.Name, lastSeen)

	ginkgo.By(fmt.Sprintf("reporting %s healthy again", victim.ID))
	recoverAt := time.Now()
	gomega.Expect(unhealthy.Now(ctx)).To(gomega.Succeed())
	expectLiveCapacity(ctx, env, path, node, capacity, victim.ID+" back", env.Timeouts.Release)
	env.Note(t.job.Name, timeline.Recovered, "Device/"+victim.ID, "")
	ginkgo.AddReportEntry("device healthy → advertised", since(recoverAt))
}

// resourceHealth describes the health the kubelet reports for the pod's allocated devices
// (status.containerStatuses[].allocatedResourcesStatus), or says it reports none.
func resourceHealth(p *corev1.Pod) string {
	var out []string
	for _, cs := range p.Status.ContainerStatuses {
		for _, rs := range cs.AllocatedResourcesStatus {
			for _, r := range rs.Resources {
				out = append(out, fmt.Sprintf("%s %s: %s", rs.Name, r.ResourceID, r.Health))
			}
		}
	}
	if len(out) == 0 {
		return fmt.Sprintf("phase %s; no allocatedResourcesStatus (the kubelet reports device health in pod status only with the ResourceHealthStatus feature)", p.Status.Phase)
	}
	return fmt.Sprintf("phase %s; %s", p.Status.Phase, strings.Join(out, "; "))
}

// toleratedTaint runs a pod on node whose claim tolerates the taint the device-taint-rule provider puts
// (key faults.DeviceTaintKey, effect NoExecute), taints the pod's device NoExecute through rule, and
// requires the pod to stay: kube-controller-manager's device-taint-eviction-controller must judge the rule
// as it is (its EvictionInProgress condition for the rule's generation: False, NotStarted, no pod to
// evict) while the pod still runs, unrestarted, its claim still allocated that device. The toleration
// must reach the claim generated from the template: where something between them drops it (a mutating
// admission policy or webhook on resourceclaims), the pod is evicted and the failure says so.
func toleratedTaint(ctx context.Context, s *Spec[FailureInput], rule *faults.TaintRule, node string) {
	failingDevices()
	env, ns, path := s.Env, s.NS, s.Path
	dra := path.(*gpu.DRA)
	tol := resourcev1.DeviceToleration{Key: faults.DeviceTaintKey, Operator: resourcev1.DeviceTolerationOpExists, Effect: resourcev1.DeviceTaintEffectNoExecute}
	tmpl := env.Factory.ResourceClaimTemplate("tolerant-gpus", ns).ExactCount(gpu.DRAClaimName, dra.DeviceClass, 1).Toleration(gpu.DRAClaimName, tol).Obj()
	env.Create(ctx, tmpl)
	pod := env.Factory.GPUPod("tolerant", ns).ClaimTemplate(gpu.DRAClaimName, tmpl).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...).OnNodes(node).Obj()
	env.Create(ctx, pod)
	running := pods.ExpectPodRunning(ctx, env, ns, pod.Name)
	pods.ExpectProbeReport(ctx, env, ns, pod.Name)
	given, err := path.Given(ctx, givenInput(env, running, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading pod %s's device from %s", pod.Name, path.Authority())
	gomega.Expect(given.DeviceRefs).To(gomega.HaveLen(1), "pod %s's claim asked for one device", pod.Name)
	gomega.Expect(given.Claims).To(gomega.HaveLen(1), "pod %s's generated claim", pod.Name)
	victim := victimDevice(path, node, given)
	tolerated := fmt.Sprintf("%s (%s:NoExecute)", tol.Key, tol.Operator)
	dropped := claimDropsToleration(ctx, env, ns, given.Claims[0].Name, tmpl.Name, tol)
	restarts := podRestarts(running)

	ginkgo.By(fmt.Sprintf("tainting %s, used by %s, whose claim tolerates %s, through %s", victim, pod.Name, tolerated, rule.Name()))
	undo, err := s.In.Faults.MarkDeviceUnhealthy(ctx, rule, victim)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	testenv.DeferUndo(undo)
	at := time.Now()
	var cond faults.EvictionCondition
	env.Wait.For(ctx, fmt.Sprintf("kube-controller-manager to judge the taint on %s, which pod %s/%s tolerates", victim.ID, ns, pod.Name), wait.Target{Kind: "Pod", Namespace: ns, Name: pod.Name},
		env.Timeouts.Release, func(g gomega.Gomega) {
			p, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || err == nil && evictedPod(p) != "" {
				why := "it is gone"
				if err == nil {
					why = evictedPod(p)
				}
				gomega.StopTrying(fmt.Sprintf("pod %s/%s, whose claim's template tolerates %s, was evicted from %s when the device was tainted NoExecute (%s)%s", ns, pod.Name, tolerated, victim.ID, why, dropped)).Now()
			}
			g.Expect(err).NotTo(gomega.HaveOccurred())
			c, found, err := rule.EvictionInProgress(ctx, victim)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			if !found {
				st, _ := rule.Status(ctx, victim)
				g.Expect(found).To(gomega.BeTrue(), "%s", st)
			}
			g.Expect(c.Current).To(gomega.BeTrue(), "the EvictionInProgress condition (%s %s: %s) is not for the rule's generation yet", c.Status, c.Reason, c.Message)
			cond = c
			g.Expect(c.Status).To(gomega.Equal(string(metav1.ConditionFalse)), "the controller has pods to evict (%s: %s)", c.Reason, c.Message)
		})
	ginkgo.AddReportEntry("taint → judged", since(at))
	gomega.Expect(cond.Reason).To(gomega.Equal("NotStarted"), "DeviceTaintRule for %s: EvictionInProgress=False reason %s (%s): the controller evicted a pod using the device, which only %s, tolerating it, uses", victim.ID, cond.Reason, cond.Message, pod.Name)
	now, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "pod %s, which tolerates the taint, is gone", pod.Name)
	gomega.Expect(evictedPod(now)).To(gomega.BeEmpty(), "pod %s tolerates the taint on %s", pod.Name, victim.ID)
	gomega.Expect(now.Status.Phase).To(gomega.Equal(corev1.PodRunning), "pod %s, which tolerates the taint on %s", pod.Name, victim.ID)
	gomega.Expect(podRestarts(now)).To(gomega.Equal(restarts), "pod %s restarted after its device was tainted", pod.Name)
	still, err := path.Given(ctx, givenInput(env, now, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(still.DeviceRefs).To(gomega.Equal(given.DeviceRefs), "pod %s's claim no longer holds the device it tolerates the taint of", pod.Name)
	ginkgo.AddReportEntry("evidence: tolerated", fmt.Sprintf("pod %s/%s keeps %s (%s), tainted %s through %s; the controller: EvictionInProgress=%s %s", ns, pod.Name, victim.ID, given.DeviceRefs[0], tolerated, rule.Name(), cond.Status, cond.Reason))
}

// claimDropsToleration says, as a clause to append to a failure, that the claim generated from template
// carries no toleration like tol although the template has it, or that the claim could not be read to
// tell; "" when it carries it.
func claimDropsToleration(ctx context.Context, env *testenv.Env, ns, claim, template string, tol resourcev1.DeviceToleration) string {
	c, err := env.Clients.Kube.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("; its claim %s could not be read to see whether it kept template %s's toleration: %v", claim, template, err)
	}
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly == nil {
			continue
		}
		for _, t := range r.Exactly.Tolerations {
			if t.Key == tol.Key {
				return ""
			}
		}
	}
	return fmt.Sprintf("; its claim %s, generated from template %s, which has the toleration, carries none: something between them dropped it "+
		"(a mutating admission policy or webhook on resourceclaims: kubectl get mutatingadmissionpolicies,mutatingwebhookconfigurations)", claim, template)
}

// evictedPod says how a pod was evicted (deleted, failed, or a DisruptionTarget condition), "" while it was not.
func evictedPod(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return fmt.Sprintf("DisruptionTarget: %s: %s", c.Reason, c.Message)
		}
	}
	switch {
	case p.DeletionTimestamp != nil:
		return "being deleted"
	case p.Status.Phase == corev1.PodFailed:
		return "phase Failed: " + p.Status.Reason
	}
	return ""
}

// podRestarts is the restarts of a pod's containers, together.
func podRestarts(p *corev1.Pod) int32 {
	var n int32
	for _, cs := range p.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}
