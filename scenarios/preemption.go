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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/checkpoints"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/queues"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/timeline"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/internal/workload/train"
)

// PreemptionInput is the input of PreemptionSpec.
type PreemptionInput struct {
	Base
	// KueuePresent registers the scenario (it is Kueue's).
	KueuePresent bool
	// ExistingLocalQueue, when set, is the user's LocalQueue (queues.mode=existing): the priority spec
	// fills its ClusterQueue's device quota with a job of LowPriorityClass and preempts it with one of
	// HighPriorityClass (both the user's); the cohort spec and the negatives need queues of their own
	// and are not exercised.
	ExistingLocalQueue                  string
	LowPriorityClass, HighPriorityClass string
	// Checkpoints is storage that outlives the preempted pod; without it "resume" is not exercised.
	Checkpoints    checkpoints.Storage
	CheckpointsWhy string
}

const preemptionName = "preemption"

// Preemption is Kueue preemption with checkpoint recovery (PreemptionSpec).
var Preemption = Define(Scenario{Name: preemptionName, Title: "a preempted job resumes from its checkpoint instead of restarting",
	Required: true, Measured: true, Needs: suite.Needs{Kueue: true, PriorityQueues: true, CheckpointStorage: true}},
	func(r *suite.Run) PreemptionInput {
		return PreemptionInput{Base: baseOf(r), KueuePresent: r.KueueUsable, ExistingLocalQueue: r.ExistingLocalQueue(),
			LowPriorityClass: r.Config.Preemption.LowPriorityClass, HighPriorityClass: r.Config.Preemption.HighPriorityClass,
			Checkpoints: r.Checkpoints, CheckpointsWhy: r.CheckpointsWhy}
	},
	PreemptionSpec)

// PreemptionSpec registers, per path, Kueue preemption with checkpoint recovery: a high-priority Job
// takes the device quota a low-priority training Job fills; a serving ClusterQueue reclaims the quota it
// lent to a training ClusterQueue of its cohort. Each time the preempted job must write its checkpoint
// on SIGTERM within the grace period, be re-admitted once the quota is free, resume from that checkpoint
// (lost work under one interval, about none with the SIGTERM checkpoint) and end with the state of an
// uninterrupted run. Two negative checks (on the first path) prove the suite tells a restart and a lost
// SIGTERM checkpoint from a resume: a job without checkpoints starts over, and a grace period shorter than
// the checkpoint write is diagnosed as SIGKILL before the checkpoint.
func PreemptionSpec(input func() PreemptionInput) {
	reg := input()
	switch {
	case !reg.KueuePresent:
		reg.notExercised("preemption with checkpoint recovery", "Kueue is absent (or not usable in this mode); preemption is Kueue's")
		return
	case reg.ExistingLocalQueue != "" && reg.LowPriorityClass == "":
		reg.notExercised("preemption with checkpoint recovery", "queues.mode=existing: name the WorkloadPriorityClasses of a preemptible and an urgent job (--low-priority-class, --high-priority-class)")
		return
	case reg.ExistingLocalQueue != "":
		reg.notExercised("preemption: serving reserve through a cohort, and the negative checks", "queues.mode=existing: they need ClusterQueues of their own")
	case reg.Checkpoints.None():
		reg.notExercised("preemption with checkpoint recovery: resume", reg.CheckpointsWhy+"; the preempted job would start over, which is checked on its own")
	}
	for i, regPath := range reg.Paths {
		pathName := regPath.Name()
		if !reg.queued(true, pathName) {
			continue // recorded: the team's ClusterQueue does not cover the path's Kueue resource
		}
		if len(reg.withDevices(regPath, "preemption")) == 0 {
			continue
		}
		first := i == 0
		// holds:node: its timings (time to preempt, to resume) must not include a scheduling wait for devices
		// another spec's pods hold, and its preemptor must find the devices its victim frees: its jobs stay
		// on the node it leased, which no other spec on the path uses meanwhile.
		describePath(input, regPath, "Kueue preemption with checkpoint recovery", "preempt", []any{labels.Of(labels.Scenario(preemptionName), labels.NeedsKueue), takes(Takes{Devices: OneWholeNode})}, func(s *Spec[PreemptionInput]) {
			ginkgo.It("evicts a low-priority training Job for a high-priority one; the low one resumes", func(ctx context.Context) {
				ginkgo.By("the high one runs on the freed quota; the low one checkpoints on SIGTERM, is re-admitted and resumes where it stopped")
				priorityPreemption(ctx, s)
			})
			if reg.ExistingLocalQueue != "" {
				return
			}
			ginkgo.It("lets serving reclaim quota lent to training in its cohort; training resumes", func(ctx context.Context) {
				ginkgo.By("a serving ClusterQueue reclaims the device quota; training resumes from its checkpoint when serving ends")
				cohortReclaim(ctx, s)
			})
			if first {
				ginkgo.It("reports a preempted job without checkpoints as restarted from step 0", func(ctx context.Context) {
					ginkgo.By("its progress lost")
					preemptionNegative(ctx, s, negativeNoCheckpoint)
				})
				ginkgo.It("diagnoses a grace period shorter than the checkpoint write as SIGKILL", func(ctx context.Context) {
					ginkgo.By("SIGKILL before the checkpoint")
					preemptionNegative(ctx, s, negativeShortGrace)
				})
			}
		})
	}
}

// preemptible is a low-priority training Job waiting to be preempted.
type preemptible struct {
	job      *batchv1.Job
	workID   string
	spec     training
	pod      *corev1.Pod
	lastSeen int // newest checkpoint before the preemption
	resume   bool
}

// startPreemptible submits the training Job t and waits until it runs and has checkpointed twice.
func startPreemptible(ctx context.Context, env *testenv.Env, s *Spec[PreemptionInput], t training) preemptible {
	ginkgo.GinkgoHelper()
	w, workID := t.build(env, s.NS, s.Path)
	obj := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	p := preemptible{job: env.Create(ctx, obj).(*batchv1.Job), workID: workID, spec: t, resume: !t.Storage.None()}
	queues.ExpectAdmitted(ctx, env, p.job, s.Path.QuotaResource(), max(t.Devices, 1))
	p.pod = pods.ExpectJobPodStarted(ctx, env, p.job)
	ginkgo.By(fmt.Sprintf("training (%s) on %s; waiting for a checkpoint at step %d", t, p.pod.Spec.NodeName, 2*t.Every))
	p.lastSeen = expectCheckpoint(ctx, env, s.NS, p.pod.Name, 2*t.Every)
	return p
}

// expectPreempted waits for Kueue to evict the Job's Workload by preemption for the given reason (the
// Preempted condition's: InClusterQueue, InCohortReclamation, …) and returns when.
func expectPreempted(ctx context.Context, env *testenv.Env, job, preemptor *batchv1.Job, queueConfig string, reasons ...string) time.Time {
	ginkgo.GinkgoHelper()
	var at time.Time
	// On failure the diagnosis is the preemptor's: it is the one left waiting, with Kueue's reason.
	env.Wait.For(ctx, fmt.Sprintf("Kueue to preempt the Workload of Job %s/%s for Job %s (%s)", job.Namespace, job.Name, preemptor.Name, queueConfig),
		wait.Target{Kind: "Job", Namespace: preemptor.Namespace, Name: preemptor.Name},
		env.Timeouts.Admission, func(g gomega.Gomega) {
			wl, err := queues.WaitingWorkloadFor(ctx, env, job)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(wl).NotTo(gomega.BeNil())
			if meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) {
				// Its quota is free now without any preemption: waiting longer proves nothing.
				gomega.StopTrying(fmt.Sprintf("Job %s/%s finished without being preempted: Kueue left it running while Job %s waited for its quota (%s)",
					job.Namespace, job.Name, preemptor.Name, queueConfig)).Now()
			}
			ev := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted)
			g.Expect(ev).NotTo(gomega.BeNil(), "Workload %s has no %s condition", wl.Name, kueue.WorkloadEvicted)
			g.Expect(ev.Status).To(gomega.Equal(metav1.ConditionTrue), "Workload %s: %s=%s %s", wl.Name, ev.Type, ev.Status, ev.Message)
			g.Expect(ev.Reason).To(gomega.Equal(kueue.WorkloadEvictedByPreemption), "Workload %s evicted for %s: %s", wl.Name, ev.Reason, ev.Message)
			pc := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadPreempted)
			g.Expect(pc).NotTo(gomega.BeNil(), "Workload %s has no %s condition", wl.Name, kueue.WorkloadPreempted)
			g.Expect(pc.Reason).To(gomega.BeElementOf(reasons), "Workload %s preempted for %s: %s", wl.Name, pc.Reason, pc.Message)
			at = ev.LastTransitionTime.Time
			ginkgo.AddReportEntry("Kueue's preemption", fmt.Sprintf("%s=%s (%s), %s=%s (%s): %s", ev.Type, ev.Status, ev.Reason, pc.Type, pc.Status, pc.Reason, pc.Message))
		})
	return at
}

// expectFinishedAt waits for the Job to complete and returns when it did.
func expectFinished(ctx context.Context, env *testenv.Env, job *batchv1.Job) {
	ginkgo.GinkgoHelper()
	pods.ExpectJobComplete(ctx, env, job)
}

// lastPodOf returns the newest pod of the Job.
func lastPodOf(ctx context.Context, env *testenv.Env, job *batchv1.Job) *corev1.Pod {
	ginkgo.GinkgoHelper()
	list, err := pods.OfJob(ctx, env, job)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(list).NotTo(gomega.BeEmpty(), "Job %s/%s has no pod", job.Namespace, job.Name)
	newest := &list[0]
	for i := range list {
		if list[i].CreationTimestamp.After(newest.CreationTimestamp.Time) {
			newest = &list[i]
		}
	}
	return newest
}

// preemptionOutcome judges how a preempted training job came back, from the summary of its last attempt:
// what it resumed from, how much work was lost, and, when the SIGTERM checkpoint is missing, why.
type preemptionOutcome struct {
	Summary train.Summary
	// Lost is the number of steps done before the preemption that the job had to do again (an upper
	// bound when the SIGTERM checkpoint is missing: the steps between the newest checkpoint seen and the
	// preemption).
	Lost      int
	Diagnosis string
}

func judgePreemption(p preemptible, sum train.Summary, preemptedAt time.Time, lastSeenAt time.Time) preemptionOutcome {
	o := preemptionOutcome{Summary: sum}
	switch {
	case !sum.Resumed:
		o.Lost = p.lastSeen // at least everything checkpointed, redone from step 0
		o.Diagnosis = fmt.Sprintf("restarted from step 0: no checkpoint survived the preemption (%s); at least %d steps of work were done again", storageWord(p.resume), p.lastSeen)
	case sum.ResumedReason == "sigterm":
		o.Diagnosis = fmt.Sprintf("resumed from the checkpoint written on SIGTERM at step %d: no work lost", sum.ResumedFrom)
	default:
		// Killed before the SIGTERM checkpoint landed: the work since the newest interval checkpoint is lost.
		since := int(preemptedAt.Sub(lastSeenAt) / p.spec.StepTime)
		o.Lost = max(0, p.lastSeen-sum.ResumedFrom) + min(max(since, 0), p.spec.Every-1)
		o.Diagnosis = fmt.Sprintf("SIGKILL before the checkpoint: the job resumed from its %s checkpoint at step %d, not from one written on SIGTERM; the grace period (%s) is shorter than its checkpoint write (%s) or the workload ignores SIGTERM; about %d steps lost",
			sum.ResumedReason, sum.ResumedFrom, graceWord(p.spec.Grace), writeWord(p.spec.WriteTime), o.Lost)
	}
	return o
}

func storageWord(resume bool) string {
	if resume {
		return "its checkpoints were on storage that outlives the pod, yet none was found"
	}
	return "its checkpoints were on the pod's own emptyDir"
}

func graceWord(d time.Duration) string {
	if d == 0 {
		return "the pod's default"
	}
	return d.String()
}

func writeWord(d time.Duration) string {
	if d == 0 {
		return "instant here"
	}
	return d.String()
}

// expectResumedAfterPreemption waits for the preempted Job to be re-admitted and complete, and checks
// its last attempt resumed from the SIGTERM checkpoint with the state of an uninterrupted run.
func expectResumedAfterPreemption(ctx context.Context, env *testenv.Env, s *Spec[PreemptionInput], p preemptible, preemptedAt, lastSeenAt time.Time) {
	ginkgo.GinkgoHelper()
	readmitted := time.Now()
	queues.ExpectAdmitted(ctx, env, p.job, s.Path.QuotaResource(), max(p.spec.Devices, 1))
	ginkgo.AddReportEntry("preempted → re-admitted", readmitted.Sub(preemptedAt).Round(100*time.Millisecond).String())
	expectFinished(ctx, env, p.job)
	last := lastPodOf(ctx, env, p.job)
	sum := trainSummary(ctx, env, s.NS, last.Name)
	o := judgePreemption(p, sum, preemptedAt, lastSeenAt)
	ginkgo.AddReportEntry("steps lost", fmt.Sprintf("%d — %s", o.Lost, o.Diagnosis))
	if tl := env.Timeline().Workload(p.job.Name); tl != nil {
		for _, e := range tl.Events {
			if e.Kind == timeline.Resumed {
				ginkgo.AddReportEntry("preempted → first resumed step", e.At.Sub(preemptedAt).Round(100*time.Millisecond).String())
				break
			}
		}
	}
	if !p.resume {
		return
	}
	gomega.Expect(sum.Resumed).To(gomega.BeTrue(), "the preempted job did not resume: %s", o.Diagnosis)
	gomega.Expect(sum.ResumedReason).To(gomega.Equal("sigterm"), "%s", o.Diagnosis)
	gomega.Expect(sum.Restarts).To(gomega.Equal(1), "restart counter: one preemption, one resume")
	gomega.Expect(sum.ResumedFrom).To(gomega.BeNumerically(">=", p.lastSeen), "resumed from step %d, before the checkpoint at step %d seen before the preemption", sum.ResumedFrom, p.lastSeen)
	gomega.Expect(o.Lost).To(gomega.BeNumerically("<", p.spec.Every), "more than one checkpoint interval of work lost: %s", o.Diagnosis)
	gomega.Expect(sum.CompletedSteps).To(gomega.Equal(p.spec.Steps))
	gomega.Expect(sum.StateDigest).To(gomega.Equal(train.Digest(p.workID, p.spec.Steps)), "the resumed job's final state differs from an uninterrupted run's")
}

func priorityPreemption(ctx context.Context, s *Spec[PreemptionInput]) {
	env, ns, path := s.Env, s.NS, s.Path
	f := env.Factory
	var lq, low, high, cqPolicy string
	devices := 1
	if s.In.ExistingLocalQueue != "" {
		lq, low, high = s.In.ExistingLocalQueue, s.In.LowPriorityClass, s.In.HighPriorityClass
		cq, quota, policy := existingQueueQuota(ctx, env, ns, lq, path.QuotaResource())
		if quota == 0 {
			ginkgo.Fail(fmt.Sprintf("ClusterQueue %s (behind LocalQueue %s/%s) has no nominal quota for %s: nothing to fill and preempt", cq, ns, lq, path.QuotaResource()))
		}
		if len(s.In.eligible(path, int(quota))) == 0 {
			ginkgo.Skip(fmt.Sprintf("not exercised: ClusterQueue %s's quota of %d %s is more than any one node of the GPU pool has", cq, quota, path.QuotaResource()))
		}
		if len(s.usable(s.In.eligible(path, int(quota)))) == 0 {
			ginkgo.Skip(fmt.Sprintf("not exercised: ClusterQueue %s's quota of %d %s is more than the node this spec leased (%s) has", cq, quota, path.QuotaResource(), s.Node))
		}
		devices, cqPolicy = int(quota), fmt.Sprintf("ClusterQueue %s: %s", cq, policy)
		ginkgo.AddReportEntry("existing queue", fmt.Sprintf("LocalQueue %s → %s; the low-priority job asks for its whole quota of %d", lq, cqPolicy, quota))
	} else {
		low = env.Create(ctx, f.WorkloadPriorityClass("low", ns, 100).Description("gpuconform: preemptible training").Obj()).GetName()
		high = env.Create(ctx, f.WorkloadPriorityClass("high", ns, 1000).Description("gpuconform: urgent work").Obj()).GetName()
		ginkgo.By(fmt.Sprintf("a ClusterQueue with quota for one %s that preempts lower priorities within itself", path.QuotaResource()))
		lq = queues.Setup(ctx, env, queues.SetupInput{Namespace: ns, Quota: queues.QuotaFor(path.QuotaResource(), 1), WithinClusterQueue: kueue.PreemptionPolicyLowerPriority})
		cqPolicy = "withinClusterQueue: LowerPriority (the suite's own)"
	}
	created := false
	ensureCheckpointStorage(ctx, env, ns, s.In.Checkpoints, &created)
	p := startPreemptible(ctx, env, s, training{Name: "low", Steps: preemptSteps, Every: trainEvery, StepTime: preemptStepTime, ResumedStepTime: preemptResumedStepTime,
		Storage: s.In.Checkpoints, Queue: lq, Priority: low, Grace: preemptGrace, Nodes: s.on(s.In.eligible(path, devices)), Devices: devices})
	lastSeenAt := time.Now()

	ginkgo.By("submitting a high-priority Job for one device of the same quota")
	hw := f.GPUJob("high", ns).Path(path).Devices(1).Queue(lq).PriorityClass(high).Args(fixtures.ProbeArgs(1)...).OnNodes(s.on(s.In.eligible(path, 1))...)
	hobj := hw.Obj()
	for _, pre := range hw.Prerequisites() {
		env.Create(ctx, pre)
	}
	submitted := time.Now()
	hj := env.Create(ctx, hobj).(*batchv1.Job)
	preemptedAt := expectPreempted(ctx, env, p.job, hj, cqPolicy, kueue.InClusterQueueReason)
	ginkgo.AddReportEntry("high-priority created → low preempted", since(submitted))
	queues.ExpectAdmitted(ctx, env, hj, path.QuotaResource(), 1)
	hp := pods.ExpectJobPodStarted(ctx, env, hj)
	ginkgo.AddReportEntry("high-priority created → running", since(submitted))
	report := pods.ExpectProbeReport(ctx, env, ns, hp.Name)
	gomega.Expect(report.Devices).To(gomega.HaveLen(1), "the high-priority pod sees %v", report.Devices)
	expectFinished(ctx, env, hj)
	expectResumedAfterPreemption(ctx, env, s, p, preemptedAt, lastSeenAt)
}

// existingQueueQuota reads the ClusterQueue behind the user's LocalQueue: its name, its nominal quota of
// resource (over every flavor) and its preemption policy in words.
func existingQueueQuota(ctx context.Context, env *testenv.Env, ns, lq string, resource corev1.ResourceName) (string, int64, string) {
	ginkgo.GinkgoHelper()
	l, err := env.Clients.Kueue.KueueV1beta2().LocalQueues(ns).Get(ctx, lq, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading LocalQueue %s/%s", ns, lq)
	cq, err := env.Clients.Kueue.KueueV1beta2().ClusterQueues().Get(ctx, string(l.Spec.ClusterQueue), metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading ClusterQueue %s", l.Spec.ClusterQueue)
	var quota int64
	for _, rg := range cq.Spec.ResourceGroups {
		for _, fq := range rg.Flavors {
			for _, r := range fq.Resources {
				if r.Name == resource {
					quota += r.NominalQuota.Value()
				}
			}
		}
	}
	return cq.Name, quota, preemptionWords(cq.Spec.Preemption)
}

// preemptionWords describes a ClusterQueue's preemption policy, saying plainly when it never preempts
// within itself (Kueue's default).
func preemptionWords(p *kueue.ClusterQueuePreemption) string {
	within := kueue.PreemptionPolicyNever
	if p != nil && p.WithinClusterQueue != "" {
		within = p.WithinClusterQueue
	}
	if within == kueue.PreemptionPolicyNever {
		return "preemption.withinClusterQueue is Never (Kueue's default): a higher-priority workload can never take quota from a lower one in this queue"
	}
	return "preemption.withinClusterQueue: " + string(within)
}

func cohortReclaim(ctx context.Context, s *Spec[PreemptionInput]) {
	env, ns, path := s.Env, s.NS, s.Path
	f := env.Factory
	cohort := "gpuconform-" + ns
	flavor := env.Create(ctx, f.ResourceFlavor("shared", ns).Obj()).GetName()
	ginkgo.By(fmt.Sprintf("cohort %s: serving owns one %s and reclaims it when it lends it; training owns none and borrows", cohort, path.QuotaResource()))
	servingLQ := queues.Setup(ctx, env, queues.SetupInput{Namespace: ns, Name: "serving", Flavor: flavor, Cohort: cohort,
		Quota: queues.QuotaFor(path.QuotaResource(), 1), ReclaimWithinCohort: kueue.PreemptionPolicyAny})
	trainingQuota := queues.QuotaFor(path.QuotaResource(), 0)
	trainingLQ := queues.Setup(ctx, env, queues.SetupInput{Namespace: ns, Name: "training", Flavor: flavor, Cohort: cohort, Quota: trainingQuota})
	created := false
	ensureCheckpointStorage(ctx, env, ns, s.In.Checkpoints, &created)
	p := startPreemptible(ctx, env, s, training{Name: "train", Steps: preemptSteps, Every: trainEvery, StepTime: preemptStepTime, ResumedStepTime: preemptResumedStepTime,
		Storage: s.In.Checkpoints, Queue: trainingLQ, Grace: preemptGrace, Nodes: s.on(s.In.eligible(path, 1))})
	lastSeenAt := time.Now()

	ginkgo.By("a serving burst in the serving ClusterQueue")
	sw := f.GPUJob("serve", ns).Path(path).Devices(1).Queue(servingLQ).Args(fixtures.ProbeArgs(1)...).OnNodes(s.on(s.In.eligible(path, 1))...)
	sobj := sw.Obj()
	for _, pre := range sw.Prerequisites() {
		env.Create(ctx, pre)
	}
	submitted := time.Now()
	sj := env.Create(ctx, sobj).(*batchv1.Job)
	preemptedAt := expectPreempted(ctx, env, p.job, sj, "serving reclaims within the cohort: reclaimWithinCohort Any", kueue.InCohortReclamationReason, kueue.InCohortReclaimWhileBorrowingReason)
	ginkgo.AddReportEntry("serving created → training preempted", since(submitted))
	queues.ExpectAdmitted(ctx, env, sj, path.QuotaResource(), 1)
	ginkgo.AddReportEntry("serving created → admitted", since(submitted))
	pods.ExpectJobPodStarted(ctx, env, sj)
	ginkgo.AddReportEntry("serving created → running", since(submitted))
	expectFinished(ctx, env, sj)
	expectResumedAfterPreemption(ctx, env, s, p, preemptedAt, lastSeenAt)
}

type negative int

const (
	negativeNoCheckpoint negative = iota
	negativeShortGrace
)

// preemptionNegative runs a preemption the job cannot recover from cleanly and checks the suite's
// judgement of it: a job without storage for its checkpoints starts over; a grace period shorter than the
// checkpoint write loses the SIGTERM checkpoint to SIGKILL.
func preemptionNegative(ctx context.Context, s *Spec[PreemptionInput], kind negative) {
	env, ns, path := s.Env, s.NS, s.Path
	f := env.Factory
	t := training{Name: "low", Steps: preemptSteps, Every: trainEvery, StepTime: preemptStepTime, ResumedStepTime: preemptResumedStepTime, Grace: preemptGrace, Nodes: s.on(s.In.eligible(path, 1))}
	switch kind {
	case negativeNoCheckpoint:
		t.Storage = checkpoints.Storage{} // the pod's own emptyDir
	case negativeShortGrace:
		if s.In.Checkpoints.None() {
			ginkgo.Skip("not exercised: " + s.In.CheckpointsWhy)
		}
		t.Storage = s.In.Checkpoints
		t.WriteTime, t.Grace = 4*time.Second, 1*time.Second
	}
	low := env.Create(ctx, f.WorkloadPriorityClass("low", ns, 100).Obj()).GetName()
	high := env.Create(ctx, f.WorkloadPriorityClass("high", ns, 1000).Obj()).GetName()
	lq := queues.Setup(ctx, env, queues.SetupInput{Namespace: ns, Quota: queues.QuotaFor(path.QuotaResource(), 1), WithinClusterQueue: kueue.PreemptionPolicyLowerPriority})
	created := false
	ensureCheckpointStorage(ctx, env, ns, t.Storage, &created)
	t.Queue, t.Priority = lq, low
	p := startPreemptible(ctx, env, s, t)
	lastSeenAt := time.Now()
	hw := f.GPUJob("high", ns).Path(path).Devices(1).Queue(lq).PriorityClass(high).Args(fixtures.ProbeArgs(1)...).OnNodes(s.on(s.In.eligible(path, 1))...)
	hobj := hw.Obj()
	for _, pre := range hw.Prerequisites() {
		env.Create(ctx, pre)
	}
	hj := env.Create(ctx, hobj).(*batchv1.Job)
	preemptedAt := expectPreempted(ctx, env, p.job, hj, "withinClusterQueue: LowerPriority", kueue.InClusterQueueReason)
	expectFinished(ctx, env, hj)
	queues.ExpectAdmitted(ctx, env, p.job, path.QuotaResource(), 1)
	expectFinished(ctx, env, p.job)
	sum := trainSummary(ctx, env, ns, lastPodOf(ctx, env, p.job).Name)
	o := judgePreemption(p, sum, preemptedAt, lastSeenAt)
	ginkgo.AddReportEntry("judgement", o.Diagnosis)
	switch kind {
	case negativeNoCheckpoint:
		gomega.Expect(sum.Resumed).To(gomega.BeFalse(), "a job whose checkpoints were on its emptyDir resumed: %+v", sum)
		gomega.Expect(o.Diagnosis).To(gomega.HavePrefix("restarted from step 0"))
	case negativeShortGrace:
		gomega.Expect(sum.Resumed).To(gomega.BeTrue(), "the job found no checkpoint at all: %+v", sum)
		gomega.Expect(sum.ResumedReason).NotTo(gomega.Equal("sigterm"), "a 4s checkpoint write finished within a 1s grace period: %+v", sum)
		gomega.Expect(o.Diagnosis).To(gomega.HavePrefix("SIGKILL before the checkpoint"))
		gomega.Expect(strings.Contains(o.Diagnosis, "1s")).To(gomega.BeTrue(), "the diagnosis names the grace period: %s", o.Diagnosis)
	}
	// Whatever it lost, the job still finishes its work with the right state.
	gomega.Expect(sum.StateDigest).To(gomega.Equal(train.Digest(p.workID, t.Steps)))
}
