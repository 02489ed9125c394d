package diagnose

import (
	"errors"
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
	var res *Result
	var err error
	// starting, the last pass, always places the pod.
	for _, pass := range []func(*corev1.Pod) (*Result, error){v.scheduled, admitted, v.containers, v.starting} {
		if res, err = pass(pod); err != nil || res != nil {
			break
		}
	}
	return jobFailed(f.job, res), err
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
