package diagnose

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/constants"
)

// kueueRead and friends describe the reads that can fail as a whole API.
var (
	readWorkloads = read{verb: "list", resource: "workloads", group: kueue.GroupVersion.Group, version: kueue.GroupVersion.Version}
)

// Run diagnoses the target. It returns an error only when the diagnosis
// itself could not be made (the API server is unreachable, the context
// ended); a missing target, a denied read or an unserved API are verdicts
// (Reason NotFound, Forbidden, APIMissing) in the Result.
func Run(ctx context.Context, c Clients, t Target) (*Result, error) {
	if c.Kube == nil {
		return nil, errors.New("diagnose: Clients.Kube is nil")
	}
	kind, err := ParseKind(t.Kind)
	if err != nil {
		return nil, err
	}
	t.Kind = kind
	if t.Namespace == "" {
		t.Namespace = metav1.NamespaceDefault
	}
	d := &diagnosis{c: c, t: t}
	d.ref(t.Kind, t.Namespace, t.Name)
	res, err := d.run(ctx)
	var ve *verdictError
	if errors.As(err, &ve) {
		res, err = ve.res, nil
	}
	if err != nil {
		return nil, err
	}
	res.Objects = d.objects
	if res.Messages == nil {
		res.Messages = []string{}
	}
	return res, nil
}

// Explain is what a failed wait prints: the diagnosis as text, or one
// sentence saying why the diagnosis itself failed. It never errors so a
// caller can put it straight into a failure message.
func Explain(ctx context.Context, c Clients, t Target) string {
	res, err := Run(ctx, c, t)
	if err != nil {
		return fmt.Sprintf("diagnosis of %s failed: %v", t, err)
	}
	return res.String()
}

// ParseKind normalises the kinds the CLI and callers accept ("job", "jobs",
// "jobs.batch", "workload", "workloads.kueue.x-k8s.io", "pod", "po", ...) to
// "Job", "Workload" or "Pod".
func ParseKind(s string) (string, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	if i := strings.Index(k, "."); i >= 0 {
		k = k[:i]
	}
	switch k {
	case "job", "jobs":
		return "Job", nil
	case "workload", "workloads", "wl":
		return "Workload", nil
	case "pod", "pods", "po":
		return "Pod", nil
	}
	if kind, ok := ownerKind(k); ok {
		return kind, nil
	}
	return "", unsupportedKind(s)
}

// diagnosis holds what one Run has read so far.
type diagnosis struct {
	c       Clients
	t       Target
	objects []ObjectRef
	seen    map[ObjectRef]bool
	// kueueMissing records that kueue.x-k8s.io/v1beta2 is not served, so a
	// verdict that needs Kueue can say so instead of guessing.
	kueueMissing string
	// nodes are read at most once per Run, and only when a scheduler verdict
	// needs them (see nodes.go); nodesNote says why the read failed.
	nodes     []corev1.Node
	nodesRead bool
	nodesNote string
}

func (d *diagnosis) ref(kind, ns, name string) {
	r := ObjectRef{Kind: kind, Namespace: ns, Name: name}
	if d.seen == nil {
		d.seen = map[ObjectRef]bool{}
	}
	if !d.seen[r] {
		d.seen[r] = true
		d.objects = append(d.objects, r)
	}
}

func (d *diagnosis) ns() string { return d.t.Namespace }

func (d *diagnosis) run(ctx context.Context) (*Result, error) {
	var (
		job  *batchv1.Job
		wl   *kueue.Workload
		pods []corev1.Pod
		err  error
	)
	switch d.t.Kind {
	case "Job":
		if job, err = d.getJob(ctx, d.t.Name, true); err != nil {
			return nil, err
		}
		if needsKueue(job) {
			if wl, err = d.workloadForJob(ctx, job); err != nil {
				return nil, err
			}
		}
		if pods, err = d.jobPods(ctx, job.Name); err != nil {
			return nil, err
		}
	case "Workload":
		if wl, err = d.getWorkload(ctx, d.t.Name); err != nil {
			return nil, err
		}
		if owner := jobOwner(wl.OwnerReferences); owner != "" {
			if job, err = d.getJob(ctx, owner, false); err != nil {
				return nil, err
			}
			if job != nil {
				if pods, err = d.jobPods(ctx, job.Name); err != nil {
					return nil, err
				}
			}
		}
	default:
		return d.diagnoseOwner(ctx)
	case "Pod":
		pod, err := d.getPod(ctx, d.t.Name)
		if err != nil {
			return nil, err
		}
		pods = []corev1.Pod{*pod}
		if owner := jobOwner(pod.OwnerReferences); owner != "" {
			if job, err = d.getJob(ctx, owner, false); err != nil {
				return nil, err
			}
			if job != nil && needsKueue(job) {
				// A missing Kueue API does not matter once a pod exists.
				if wl, err = d.workloadForJob(ctx, job); err != nil && !isAPIMissing(err) {
					return nil, err
				}
			}
		}
	}
	return d.decide(ctx, job, wl, pods)
}

// decide places the workload from its most downstream object: pods when
// there are any, else the Workload, else the Job.
func (d *diagnosis) decide(ctx context.Context, job *batchv1.Job, wl *kueue.Workload, pods []corev1.Pod) (*Result, error) {
	// Pods that are all terminating after a Kueue eviction belong to the
	// past; the Workload says what happens next.
	if len(pods) > 0 && allTerminating(pods) && wl != nil && isTrue(wl.Status.Conditions, kueue.WorkloadEvicted) {
		return d.diagnoseWorkload(ctx, wl)
	}
	if len(pods) > 0 {
		pod := representativePod(pods)
		res, err := d.diagnosePod(ctx, pod)
		if err != nil {
			return nil, err
		}
		// Pods held by a scheduling gate (Kueue's own gates, for instance)
		// wait on the queue, not on the scheduler.
		if res.Reason == SchedulingPending && len(pod.Spec.SchedulingGates) > 0 && wl != nil && !isTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) {
			return d.diagnoseWorkload(ctx, wl)
		}
		// A failed Job creates no more pods: whatever its last pod says is final.
		if job != nil {
			if jf := jobFinished(job); jf != nil && jf.Terminal && !res.Terminal {
				res.Messages = append(res.Messages, jf.Messages...)
				res.terminal(jf.TerminalWhy)
			}
		}
		return res, nil
	}
	if job != nil {
		if res := jobFinished(job); res != nil {
			return res, nil
		}
	}
	if wl != nil {
		return d.diagnoseWorkload(ctx, wl)
	}
	if job == nil {
		return nil, errors.New("diagnose: nothing to diagnose")
	}
	if isSuspended(job) {
		if q := job.Labels[constants.QueueLabel]; q != "" && d.kueueMissing != "" {
			return nil, apiMissing(readWorkloads, StageQueued, d.kueueMissing)
		}
		msg := fmt.Sprintf("Job %s/%s has spec.suspend=true and no Kueue Workload owns it", job.Namespace, job.Name)
		if q := job.Labels[constants.QueueLabel]; q != "" {
			msg += fmt.Sprintf(" (label %s=%s is set, so Kueue should have created one: check that Kueue manages Jobs and that its controller runs)", constants.QueueLabel, q)
		} else {
			msg += fmt.Sprintf(" (no %s label)", constants.QueueLabel)
		}
		return &Result{Stage: StageQueued, Layer: LayerKueue, Reason: QueueNotManaged, Messages: []string{msg},
			Next: fmt.Sprintf("kubectl get job -n %s %s -o jsonpath='{.metadata.labels}'", job.Namespace, job.Name)}, nil
	}
	// Not suspended and no pods: the Job controller has not created them,
	// usually because the API server refused (quota, webhook, validation).
	evs, err := d.events(ctx, "Job", job.Name, job.UID)
	if err != nil {
		return nil, err
	}
	return d.noPodsYet(evs, "Job", job.Namespace, job.Name), nil
}

// noPodsYet explains a controller (Job, ReplicaSet, StatefulSet, ...) that should have pods and has
// none, from its events: an admission refusal quoted in FailedCreate is AdmissionDenied, and final; any
// other FailedCreate is quoted as Unknown; no such event means the controller has not acted yet.
func (d *diagnosis) noPodsYet(evs []corev1.Event, kind, ns, name string) *Result {
	res := &Result{Stage: StageScheduling, Layer: LayerNone, Reason: SchedulingPending,
		Messages: []string{fmt.Sprintf("%s %s/%s has no pods yet", kind, ns, name)},
		Next:     fmt.Sprintf("kubectl get events -n %s --field-selector involvedObject.kind=%s,involvedObject.name=%s", ns, kind, name)}
	// The newest FailedCreate decides; controllers retry with backoff and repeat the same refusal.
	e := latestEvent(evs, "FailedCreate")
	if e == nil {
		return res
	}
	d.ref("Event", e.Namespace, e.Name)
	res.Messages = append(res.Messages, e.Message)
	if denial, ok := ParseAdmissionDenial(e.Message); ok {
		res.Layer, res.Reason = LayerAdmission, AdmissionDenied
		res.Messages[0] = fmt.Sprintf("%s %s/%s cannot create its pods: refused by %s", kind, ns, name, denial.By)
		return res.terminal(fmt.Sprintf("admission (%s) refuses the pods; it repeats the refusal on every retry until the policy or the pod template changes", denial.By))
	}
	res.Layer, res.Reason = LayerAPI, Unknown
	return res
}

func allTerminating(pods []corev1.Pod) bool {
	for i := range pods {
		if pods[i].DeletionTimestamp == nil {
			return false
		}
	}
	return true
}

// needsKueue reports whether a Job's progress depends on Kueue: it names a
// queue, or it is suspended (which, under manageJobsWithoutQueueName, Kueue
// would also own).
func needsKueue(job *batchv1.Job) bool {
	return job.Labels[constants.QueueLabel] != "" || isSuspended(job)
}

func isSuspended(job *batchv1.Job) bool {
	return job.Spec.Suspend != nil && *job.Spec.Suspend
}

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

func jobOwner(refs []metav1.OwnerReference) string {
	for _, r := range refs {
		if r.Kind == "Job" && strings.HasPrefix(r.APIVersion, "batch/") {
			return r.Name
		}
	}
	return ""
}

func isAPIMissing(err error) bool {
	var ve *verdictError
	return errors.As(err, &ve) && ve.res.Reason == APIMissing
}

// getJob reads a Job. A missing target is the NotFound verdict; a missing
// owner (mustExist=false) is just absent.
func (d *diagnosis) getJob(ctx context.Context, name string, mustExist bool) (*batchv1.Job, error) {
	r := read{verb: "get", resource: "jobs", group: "batch", version: "v1", namespace: d.ns(), name: name}
	job, err := d.c.Kube.BatchV1().Jobs(d.ns()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if err = classifyReadErr(err, r, StageUnknown); isObjectNotFound(err) {
			if mustExist {
				return nil, d.notFound("job", name, err)
			}
			return nil, nil
		}
		return nil, err
	}
	d.ref("Job", d.ns(), name)
	return job, nil
}

func (d *diagnosis) getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	r := read{verb: "get", resource: "pods", version: "v1", namespace: d.ns(), name: name}
	pod, err := d.c.Kube.CoreV1().Pods(d.ns()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if err = classifyReadErr(err, r, StageUnknown); isObjectNotFound(err) {
			return nil, d.notFound("pod", name, err)
		}
		return nil, err
	}
	return pod, nil
}

func (d *diagnosis) getWorkload(ctx context.Context, name string) (*kueue.Workload, error) {
	r := readWorkloads
	r.verb, r.namespace, r.name = "get", d.ns(), name
	if d.c.Kueue == nil {
		return nil, apiMissing(r, StageUnknown, "no Kueue client: kueue.x-k8s.io/v1beta2 was not discovered on this cluster")
	}
	wl, err := d.c.Kueue.KueueV1beta2().Workloads(d.ns()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if err = classifyReadErr(err, r, StageUnknown); isObjectNotFound(err) {
			return nil, d.notFound("workloads.kueue.x-k8s.io", name, err)
		}
		return nil, err
	}
	return wl, nil
}

func (d *diagnosis) notFound(resource, name string, err error) error {
	return &verdictError{&Result{Stage: StageUnknown, Layer: LayerAPI, Reason: NotFound,
		Messages: []string{err.Error()},
		Next:     fmt.Sprintf("kubectl get %s -n %s", resource, d.ns())}}
}

// workloadForJob finds the Workload Kueue created for the Job by the job-UID
// label Kueue puts on it (names are job-<name>-<hash>, so the name alone is
// not enough). A missing Kueue API is remembered, not returned, because a Job
// that already has pods does not need Kueue to be diagnosed.
func (d *diagnosis) workloadForJob(ctx context.Context, job *batchv1.Job) (*kueue.Workload, error) {
	r := readWorkloads
	r.namespace = d.ns()
	if d.c.Kueue == nil {
		d.kueueMissing = "no Kueue client: kueue.x-k8s.io/v1beta2 was not discovered on this cluster"
		return nil, nil
	}
	if job.UID == "" {
		return nil, nil
	}
	sel := labels.SelectorFromSet(labels.Set{constants.JobUIDLabel: string(job.UID)}).String()
	list, err := d.c.Kueue.KueueV1beta2().Workloads(d.ns()).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		err = classifyReadErr(err, r, StageQueued)
		if isAPIMissing(err) {
			d.kueueMissing = err.(*verdictError).res.Messages[1]
			return nil, nil
		}
		return nil, err
	}
	found := list.Items
	if len(found) == 0 {
		return nil, nil
	}
	// Prefer an unfinished Workload, then the newest.
	sort.SliceStable(found, func(i, j int) bool {
		fi, fj := isTrue(found[i].Status.Conditions, kueue.WorkloadFinished), isTrue(found[j].Status.Conditions, kueue.WorkloadFinished)
		if fi != fj {
			return !fi
		}
		return found[j].CreationTimestamp.Before(&found[i].CreationTimestamp)
	})
	d.ref("Workload", found[0].Namespace, found[0].Name)
	return &found[0], nil
}

func (d *diagnosis) jobPods(ctx context.Context, jobName string) ([]corev1.Pod, error) {
	r := read{verb: "list", resource: "pods", version: "v1", namespace: d.ns()}
	sel := labels.SelectorFromSet(labels.Set{batchv1.JobNameLabel: jobName}).String()
	list, err := d.c.Kube.CoreV1().Pods(d.ns()).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, classifyReadErr(err, r, StageUnknown)
	}
	return list.Items, nil
}

// events lists the events about one object, newest last. The field selector
// keeps the read small on a real cluster; the filter below repeats it
// because not every client (fakes, older servers) honours field selectors.
func (d *diagnosis) events(ctx context.Context, kind, name string, uid types.UID) ([]corev1.Event, error) {
	r := read{verb: "list", resource: "events", version: "v1", namespace: d.ns()}
	sel := fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.kind", kind),
		fields.OneTermEqualSelector("involvedObject.name", name),
	).String()
	list, err := d.c.Kube.CoreV1().Events(d.ns()).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, classifyReadErr(err, r, StageUnknown)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind != kind || e.InvolvedObject.Name != name {
			continue
		}
		if uid != "" && e.InvolvedObject.UID != "" && e.InvolvedObject.UID != uid {
			continue // an event about an earlier object with the same name
		}
		out = append(out, e)
	}
	sort.SliceStable(out, func(i, j int) bool { return eventTime(out[i]).Before(eventTime(out[j])) })
	return out, nil
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// latestEvent returns the newest event with one of the reasons.
func latestEvent(evs []corev1.Event, reasons ...string) *corev1.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		for _, r := range reasons {
			if evs[i].Reason == r {
				return &evs[i]
			}
		}
	}
	return nil
}

func isTrue(conds []metav1.Condition, t string) bool {
	c := findCondition(conds, t)
	return c != nil && c.Status == metav1.ConditionTrue
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// appendUnique appends the non-empty texts not already present.
func appendUnique(list []string, texts ...string) []string {
	for _, t := range texts {
		if t == "" {
			continue
		}
		dup := false
		for _, have := range list {
			if have == t {
				dup = true
				break
			}
		}
		if !dup {
			list = append(list, t)
		}
	}
	return list
}
