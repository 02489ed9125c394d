package diagnose

import (
	"errors"
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// Decide classifies a Snapshot into a Result. It reads nothing, so a recorded snapshot gives the same
// verdict as the cluster it was read from. It resolves the snapshot once into a view (the workload's Job,
// controllers, pods and Workload, and what the passes look at beyond them), then walks the layers in the
// order a workload waits (decide): the queue, the controllers that create its pods, its pods (scheduler,
// DRA, kubelet, containers), each pass a function of the view. A read that failed is a verdict,
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
	w := snap.view()
	base := append([]ObjectRef{{Kind: t.Kind, Namespace: t.Namespace, Name: t.Name}}, w.read...)
	switch {
	case w.err != nil:
		return nil, w.err
	case w.stop != nil:
		return finish(w.stop, base), nil // a read the workload rests on failed, or the target is absent
	}
	res, byPod, err := decide(w)
	switch {
	case err != nil:
		return nil, err
	case res == nil:
		return nil, errors.New("diagnose: nothing to diagnose")
	case byPod:
		base = append(base, ObjectRef{Kind: "Pod", Namespace: w.pod.Namespace, Name: w.pod.Name})
	}
	// A gang's verdict also names each worker: which run, which wait and where.
	return withWorkers(finish(res, base), w.job, w.pods), nil
}

// decide walks the layers in the order a workload waits; each pass places the workload there or passes
// it on (nil). The workload's own passes come first: the queue (Kueue), then the controllers that create
// its pods. Then the passes of the pod that explains it best: the scheduler (with the DRA claims it
// allocates), the kubelet's admission, the containers, and last the kubelet's events about containers it
// has not started (events may be stale where a container's state is current, so states come first). A
// failed Job creates no more pods, so whatever its pod says is then final (jobFailed). byPod says the
// verdict is the pod's.
func decide(w view) (res *Result, byPod bool, err error) {
	for _, pass := range []func(view) (*Result, error){queued, created} {
		if res, err := pass(w); res != nil || err != nil {
			return res, false, err
		}
	}
	if w.pod == nil {
		return nil, false, nil
	}
	// starting, the last pass, always places the pod.
	for _, pass := range []func(view) (*Result, error){scheduled, admitted, containers, starting} {
		if res, err = pass(w); err != nil || res != nil {
			break
		}
	}
	return jobFailed(w.job, res), true, err
}

// finish completes a verdict: the objects it rests on are the workload's (base, the target first), then
// its own.
func finish(res *Result, base []ObjectRef) *Result {
	var objs []ObjectRef
	for _, o := range slices.Concat(base, res.Objects) {
		if !slices.Contains(objs, o) {
			objs = append(objs, o)
		}
	}
	res.Objects = objs
	if res.Messages == nil {
		res.Messages = []string{}
	}
	return res
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
