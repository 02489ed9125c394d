package diagnose

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/constants"
)

// Decide classifies a Snapshot into a Result. It reads nothing, so a recorded snapshot gives the same
// verdict as the cluster it was read from. It frames the workload (its Job, controllers, pods and
// Workload), then walks the layers in the order a workload waits (decide): the queue, the controllers
// that create its pods, its pods (scheduler, DRA, kubelet, containers). A read that failed is a verdict,
// a value like any other: a denied read is Forbidden, an unserved API APIMissing, an absent target
// NotFound. It returns an error only when the snapshot cannot be classified: the target's kind is not
// supported, a read the verdict needs failed for a reason other than access (the API server unreachable,
// the context ended), or there is nothing to diagnose.
func Decide(s *Snapshot) (*Result, error) {
	t, err := normalise(s.Target)
	if err != nil {
		return nil, err
	}
	snap := *s
	snap.Target = t
	v := &verdict{s: &snap}
	v.ref(t.Kind, t.Namespace, t.Name)
	f := snap.frame()
	for _, r := range f.read {
		v.ref(r.Kind, r.Namespace, r.Name)
	}
	switch {
	case f.err != nil:
		return nil, f.err
	case f.stop != nil:
		return v.result(f.stop), nil // a read the workload rests on failed, or the target is absent
	}
	res, err := v.decide(f)
	if err != nil {
		return nil, err
	}
	// A gang's verdict also names each worker: which run, which wait and where.
	return withWorkers(v.result(res), f.job, f.pods), nil
}

// decide walks the layers in the order a workload waits; each pass places the workload there or passes
// it on (nil). The workload's own passes come first: the queue (Kueue), then the controllers that create
// its pods. Then the passes of the pod that explains it best: the scheduler (with the DRA claims it
// allocates), the kubelet's admission, the containers, and last the kubelet's events about containers it
// has not started (events may be stale where a container's state is current, so states come first). A
// failed Job creates no more pods, so whatever its pod says is then final (jobFailed).
func (v *verdict) decide(f frame) (*Result, error) {
	for _, pass := range []func(frame) (*Result, error){v.queued, v.created} {
		if res, err := pass(f); res != nil || err != nil {
			return res, err
		}
	}
	if len(f.pods) == 0 {
		return nil, errors.New("diagnose: nothing to diagnose")
	}
	pod := representativePod(f.pods)
	v.ref("Pod", pod.Namespace, pod.Name)
	for _, pass := range []func(*corev1.Pod) (*Result, error){v.scheduled, admitted, v.containers, v.starting} {
		if res, err := pass(pod); err != nil || res != nil {
			return jobFailed(f.job, res), err
		}
	}
	return nil, errors.New("diagnose: nothing to diagnose")
}

// queued places a workload that Kueue holds: its pods all terminating after an eviction, its pods gated
// while its Workload is not admitted, or, with no pods, a Workload that does not let them be created yet
// (unless a controller already says why none exist, or the Job finished), or a suspended Job that no
// Workload owns.
func (v *verdict) queued(f frame) (*Result, error) {
	job, wl := f.job, f.wl
	admitted := wl != nil && meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)
	if len(f.pods) > 0 {
		if wl == nil {
			return nil, nil
		}
		if allTerminating(f.pods) && meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted) {
			return v.workload(wl)
		}
		// Pods held by a scheduling gate (Kueue's own gates, for instance) wait on the queue, not on the
		// scheduler.
		if pod := representativePod(f.pods); pod.Spec.NodeName == "" && len(pod.Spec.SchedulingGates) > 0 && !admitted {
			return v.workload(wl)
		}
		return nil, nil
	}
	switch {
	case v.controllersSay(f, admitted):
		return nil, nil
	case wl != nil:
		return v.workload(wl)
	case job != nil && isSuspended(job):
		return v.unmanaged(f)
	}
	return nil, nil
}

// controllersSay reports a workload without pods whose controllers, not the queue, say where it is: an
// owner whose Workload (if any) is admitted, a finished Job, or a Job whose controller was refused.
func (v *verdict) controllersSay(f frame, admitted bool) bool {
	return (isOwnerKind(v.s.Target.Kind) && (f.wl == nil || admitted)) ||
		(f.job != nil && jobFinished(f.job) != nil) || v.refusedCreate(f)
}

// created places a workload with no pods at the controllers that should create them: an owner's
// controllers' refusals, a finished Job, or the Job's own events.
func (v *verdict) created(f frame) (*Result, error) {
	if len(f.pods) > 0 {
		return nil, nil
	}
	switch {
	case isOwnerKind(v.s.Target.Kind):
		return v.controllersWithoutPods(f)
	case f.job == nil:
		return nil, nil
	}
	if jf := jobFinished(f.job); jf != nil {
		return jf, nil
	}
	// No pods: the Job controller has not created them, usually because the API server refused (quota,
	// webhook, validation); its events say so.
	evs, stop, err := v.events("Job", f.job.Name, f.job.UID)
	if stop != nil || err != nil {
		return stop, err
	}
	return v.noPodsYet(evs, "Job", f.job.Namespace, f.job.Name), nil
}

// jobFailed makes a pod's verdict final when the pod's Job has failed (it creates no more pods), quoting
// the Job's condition; any other verdict is returned as it is.
func jobFailed(job *batchv1.Job, res *Result) *Result {
	if job == nil || res == nil || res.Terminal {
		return res
	}
	if jf := jobFinished(job); jf != nil && jf.Terminal {
		res.Messages = append(res.Messages, jf.Messages...)
		res.terminal(jf.TerminalWhy)
	}
	return res
}

// refusedCreate reports a Job whose controller should be creating pods (createsPods) and has a
// FailedCreate event, readable, that says why it has none.
func (v *verdict) refusedCreate(f frame) bool {
	job := f.job
	if job == nil || !createsPods(job, f.wl) || v.s.failed(eventsRead(v.s.Target.Namespace, "Job", job.Name)) != nil {
		return false
	}
	return latestEvent(eventsOf(v.s.Events, "Job", job.Name, job.UID), eventFailedCreate) != nil
}

// unmanaged places a suspended Job that no Workload owns: Kueue does not manage it, or cannot be asked.
func (v *verdict) unmanaged(f frame) (*Result, error) {
	job := f.job
	q := job.Labels[constants.QueueLabel]
	if q != "" && f.kueueMissing != "" {
		return apiMissing(workloadsRead("list", job.Namespace, ""), StageQueued, f.kueueMissing), nil
	}
	msg := fmt.Sprintf("Job %s/%s has spec.suspend=true and no Kueue Workload owns it", job.Namespace, job.Name)
	if q != "" {
		msg += fmt.Sprintf(" (label %s=%s is set, so Kueue should have created one: check that Kueue manages Jobs and that its controller runs)", constants.QueueLabel, q)
	} else {
		msg += fmt.Sprintf(" (no %s label)", constants.QueueLabel)
	}
	return &Result{Stage: StageQueued, Layer: LayerKueue, Reason: QueueNotManaged, Messages: []string{msg},
		Next: fmt.Sprintf("kubectl get job -n %s %s -o jsonpath='{.metadata.labels}'", job.Namespace, job.Name)}, nil
}

// verdict is one Decide: the snapshot, and the objects the verdict rests on so far, the target first.
type verdict struct {
	s       *Snapshot
	objects []ObjectRef
}

func (v *verdict) ref(kind, ns, name string) {
	if r := (ObjectRef{Kind: kind, Namespace: ns, Name: name}); !slices.Contains(v.objects, r) {
		v.objects = append(v.objects, r)
	}
}

// result finishes a decision: the Result lists the objects it rests on.
func (v *verdict) result(res *Result) *Result {
	res.Objects = v.objects
	if res.Messages == nil {
		res.Messages = []string{}
	}
	return res
}

// events returns the events about one object, oldest first, or the verdict on why they could not be read
// (stop), or the API server's error.
func (v *verdict) events(kind, name string, uid types.UID) (evs []corev1.Event, stop *Result, err error) {
	r := eventsRead(v.s.Target.Namespace, kind, name)
	if stop, err = v.s.check(r, StageUnknown); stop != nil || err != nil {
		return nil, stop, err
	}
	return eventsOf(v.s.Events, kind, name, uid), nil, nil
}

// controllersWithoutPods explains an owner target with no pods from the events of the first controller
// (ReplicaSet, Job) that reports FailedCreate, else from the target's own events.
func (v *verdict) controllersWithoutPods(f frame) (*Result, error) {
	t := v.s.Target
	for _, c := range f.controllers {
		evs, stop, err := v.events(f.controllerKind, c.GetName(), c.GetUID())
		if stop != nil || err != nil {
			return stop, err
		}
		if latestEvent(evs, eventFailedCreate) != nil {
			return v.noPodsYet(evs, f.controllerKind, t.Namespace, c.GetName()), nil
		}
	}
	evs, stop, err := v.events(t.Kind, t.Name, "")
	if stop != nil || err != nil {
		return stop, err
	}
	return v.noPodsYet(evs, t.Kind, t.Namespace, t.Name), nil
}

// noPodsYet explains a controller (Job, ReplicaSet, StatefulSet, ...) that should have pods and has
// none, from its events: an admission refusal quoted in FailedCreate is QuotaExceeded (a ResourceQuota),
// LimitRangeViolated (a LimitRange) or AdmissionDenied (any other plugin), final unless the refusal may
// pass by itself (AdmissionDenial.Final); any other FailedCreate is quoted as Unknown; no such event
// means the controller has not acted yet.
func (v *verdict) noPodsYet(evs []corev1.Event, kind, ns, name string) *Result {
	res := &Result{Stage: StageScheduling, Layer: LayerNone, Reason: SchedulingPending,
		Messages: []string{fmt.Sprintf("%s %s/%s has no pods yet", kind, ns, name)},
		Next:     fmt.Sprintf("kubectl get events -n %s --field-selector involvedObject.kind=%s,involvedObject.name=%s", ns, kind, name)}
	// The newest FailedCreate decides; controllers retry with backoff and repeat the same refusal.
	e := latestEvent(evs, eventFailedCreate)
	if e == nil {
		return res
	}
	v.ref("Event", e.Namespace, e.Name)
	res.Messages = append(res.Messages, e.Message)
	denial, ok := ParseAdmissionDenial(e.Message)
	if !ok {
		res.Layer, res.Reason = LayerAPI, Unknown
		return res
	}
	res.Layer, res.Reason = LayerAdmission, AdmissionDenied
	res.Messages[0] = fmt.Sprintf("%s %s/%s cannot create its pods: refused by %s", kind, ns, name, denial.By)
	switch denial.Policy {
	case PolicyResourceQuota:
		res.Reason = QuotaExceeded
		res.Next = fmt.Sprintf("kubectl describe resourcequota -n %s", ns)
		if denial.Quota != "" {
			res.Next += " " + denial.Quota
		}
	case PolicyLimitRange:
		res.Reason = LimitRangeViolated
		res.Next = fmt.Sprintf("kubectl describe limitrange -n %s", ns)
	}
	if len(denial.Resources) > 0 {
		refused := make([]string, len(denial.Resources))
		for i, r := range denial.Resources {
			refused[i] = r.String()
		}
		res.Messages[0] += ": " + strings.Join(refused, "; ")
	}
	final, why := denial.FinalAfter(refusalSpan(evs, denial))
	if final {
		return res.terminal(why)
	}
	res.Messages = append(res.Messages, why)
	return res
}

// refusalSpan is how long the FailedCreate events in evs have quoted a "status unknown" refusal of the
// same quota as denial: from the first time the earliest was seen to the last time the newest was (each
// pod name makes its own event, and a repeated one counts up). Other refusals span nothing.
func refusalSpan(evs []corev1.Event, denial AdmissionDenial) time.Duration {
	if !denial.StatusUnknown() {
		return 0
	}
	var first, last time.Time
	for _, e := range evs {
		d, ok := ParseAdmissionDenial(e.Message)
		if e.Reason != eventFailedCreate || !ok || !d.StatusUnknown() || d.Quota != denial.Quota {
			continue
		}
		if t := eventFirstTime(e); first.IsZero() || t.Before(first) {
			first = t
		}
		if t := EventTime(e); t.After(last) {
			last = t
		}
	}
	return last.Sub(first)
}

// createsPods reports a Job whose controller should be creating pods: unfinished, not suspended, and
// either not queued by Kueue (no Workload) or admitted. Its events then say why pods are missing.
func createsPods(job *batchv1.Job, wl *kueue.Workload) bool {
	return !isSuspended(job) && jobFinished(job) == nil &&
		(wl == nil || meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted))
}

func allTerminating(pods []corev1.Pod) bool {
	return !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.DeletionTimestamp == nil })
}

// jobFinished is the verdict on a Job whose Complete or Failed condition is True, or nil.
func jobFinished(job *batchv1.Job) *Result {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return &Result{Stage: StageSucceeded, Layer: LayerNone, Reason: ReasonCompleted,
				Messages: []string{fmt.Sprintf("Job condition Complete=True %s", c.Message)},
				Next:     fmt.Sprintf("kubectl describe job -n %s %s", job.Namespace, job.Name)}
		case batchv1.JobFailed:
			return (&Result{Stage: StageFailed, Layer: LayerApplication, Reason: ApplicationError,
				Messages: []string{fmt.Sprintf("Job condition Failed=True reason %s: %s", c.Reason, c.Message)},
				Next:     fmt.Sprintf("kubectl describe job -n %s %s", job.Namespace, job.Name)}).terminal("the Job has failed: it creates no more pods")
		}
	}
	return nil
}

// appendUnique appends the non-empty texts not already present.
func appendUnique(list []string, texts ...string) []string {
	for _, t := range texts {
		if t != "" && !slices.Contains(list, t) {
			list = append(list, t)
		}
	}
	return list
}
