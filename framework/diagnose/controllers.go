package diagnose

import (
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// created places a workload with no pods at the controllers that should create them: an owner's
// controllers' refusals, a finished Job, or the Job's own events. An owner target with no pods is
// explained from the events of the first controller (ReplicaSet, Job) that reports FailedCreate, else
// from the target's own events.
func created(f view) (*Result, error) {
	if len(f.pods) > 0 {
		return nil, nil
	}
	t := f.target
	switch {
	case isOwnerKind(t.Kind):
		for _, c := range f.controllers {
			evs := f.events[eventsKey(f.controllerKind, c.GetName())]
			if evs.failed() {
				return evs.verdict(nil)
			}
			if latestEvent(evs.val, eventFailedCreate) != nil {
				return noPodsYet(evs.val, f.controllerKind, t.Namespace, c.GetName()), nil
			}
		}
		evs := f.events[eventsKey(t.Kind, t.Name)]
		if evs.failed() {
			return evs.verdict(nil)
		}
		return noPodsYet(evs.val, t.Kind, t.Namespace, t.Name), nil
	case f.job == nil:
		return nil, nil
	}
	if jf := jobFinished(f.job); jf != nil {
		return jf, nil
	}
	// No pods: the Job controller has not created them, usually because the API server refused (quota,
	// webhook, validation); its events say so.
	evs := f.events[eventsKey("Job", f.job.Name)]
	if evs.failed() {
		return evs.verdict(nil)
	}
	return noPodsYet(evs.val, "Job", f.job.Namespace, f.job.Name), nil
}

// noPodsYet explains a controller (Job, ReplicaSet, StatefulSet, ...) that should have pods and has
// none, from its events: an admission refusal quoted in FailedCreate is QuotaExceeded (a ResourceQuota),
// LimitRangeViolated (a LimitRange) or AdmissionDenied (any other plugin), final unless the refusal may
// pass by itself (AdmissionDenial.Final); any other FailedCreate is quoted as Unknown; no such event
// means the controller has not acted yet.
func noPodsYet(evs []corev1.Event, kind, ns, name string) *Result {
	res := &Result{Stage: StageScheduling, Layer: LayerNone, Reason: SchedulingPending,
		Messages: []string{fmt.Sprintf("%s %s/%s has no pods yet", kind, ns, name)},
		Next:     fmt.Sprintf("kubectl get events -n %s --field-selector involvedObject.kind=%s,involvedObject.name=%s", ns, kind, name)}
	// The newest FailedCreate decides; controllers retry with backoff and repeat the same refusal.
	e := latestEvent(evs, eventFailedCreate)
	if e == nil {
		return res
	}
	res.rests("Event", e.Namespace, e.Name)
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
