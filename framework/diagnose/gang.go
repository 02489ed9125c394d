package diagnose

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"gpuconform.io/gpuconform/internal/podcond"
)

// Worker is one worker of a gang (an Indexed Job of several pods) as the diagnosis saw it: whether it
// runs, and where the ones that do not are held.
type Worker struct {
	Index int    `json:"index"`
	Pod   string `json:"pod,omitempty"`
	Node  string `json:"node,omitempty"`
	// State is running, done, failed, waiting or missing (no pod for the index).
	State string `json:"state"`
	// Layer is where a worker that does not run waits (Kueue, Scheduler, DRA, Kubelet, Runtime) or
	// failed (Application); None for one that runs or is done.
	Layer Layer `json:"layer"`
	// Why is the component's own words: the PodScheduled message, the container's waiting reason.
	Why string `json:"why,omitempty"`
}

// Worker states.
const (
	WorkerRunning = "running"
	WorkerDone    = "done"
	WorkerFailed  = "failed"
	WorkerWaiting = "waiting"
	WorkerMissing = "missing"
)

func (w Worker) String() string {
	s := fmt.Sprintf("worker %d", w.Index)
	if w.Pod != "" {
		s += " (pod " + w.Pod + ")"
	}
	switch w.State {
	case WorkerRunning, WorkerDone:
		return s + ": " + w.State + " on " + w.Node
	case WorkerMissing:
		return s + ": no pod, " + w.Why
	}
	s += ": " + w.State + " at the " + string(w.Layer)
	if w.Node != "" {
		s += " on " + w.Node
	}
	if w.Why != "" {
		s += ": " + w.Why
	}
	return s
}

// isGang reports whether the Job is a gang: Indexed, with more than one completion.
func isGang(job *batchv1.Job) bool {
	return job != nil && job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion &&
		job.Spec.Completions != nil && *job.Spec.Completions > 1
}

// gangWorkers says, per completion index of the gang, what its current pod does. The newest live pod
// of an index stands for it; an index whose pods all succeeded is done.
func gangWorkers(job *batchv1.Job, pods []corev1.Pod) []Worker {
	n := int(*job.Spec.Completions)
	byIndex := map[int]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		idx, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
		if err != nil || idx < 0 || idx >= n {
			continue
		}
		cur, ok := byIndex[idx]
		// A live pod beats a terminating one; among equals the newest stands for the index.
		if !ok || (cur.DeletionTimestamp != nil && p.DeletionTimestamp == nil) ||
			((cur.DeletionTimestamp == nil) == (p.DeletionTimestamp == nil) && p.CreationTimestamp.After(cur.CreationTimestamp.Time)) {
			byIndex[idx] = p
		}
	}
	out := make([]Worker, 0, n)
	for i := range n {
		p, ok := byIndex[i]
		if !ok {
			why := "the Job controller has not created it"
			if isSuspended(job) {
				why = "the Job is suspended (not admitted)"
			}
			out = append(out, Worker{Index: i, State: WorkerMissing, Layer: LayerKueue, Why: why})
			continue
		}
		out = append(out, workerOf(i, p))
	}
	return out
}

// workerOf classifies one worker's pod from its status alone.
func workerOf(i int, p *corev1.Pod) Worker {
	w := Worker{Index: i, Pod: p.Name, Node: p.Spec.NodeName, Layer: LayerNone}
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		w.State = WorkerDone
		return w
	case corev1.PodFailed:
		w.State, w.Layer, w.Why = WorkerFailed, LayerApplication, cmp.Or(containerError(p), p.Status.Reason)
		return w
	}
	if p.Spec.NodeName == "" {
		w.State, w.Layer = WorkerWaiting, LayerScheduler
		if c := podcond.Find(p, corev1.PodScheduled); c != nil {
			w.Why = strings.TrimSpace(c.Reason + ": " + c.Message)
			switch {
			case c.Reason == corev1.PodReasonSchedulingGated:
				w.Layer = LayerKueue
			case len(p.Spec.ResourceClaims) > 0 && strings.Contains(c.Message, "cannot allocate all claims"):
				w.Layer = LayerDRA
			}
		}
		return w
	}
	for _, cs := range allStatuses(p) {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			w.State, w.Why = WorkerWaiting, cs.Name+": "+cs.State.Waiting.Reason
			w.Layer = LayerKubelet
			if imagePullReason(cs.State.Waiting.Reason) || createReason(cs.State.Waiting.Reason) {
				w.Layer = LayerRuntime
			}
			return w
		}
	}
	w.State = WorkerRunning
	return w
}

// gangSummary is the diagnosis's first line for a gang: how many of its workers run and how many wait,
// and where ("" when every worker runs or is done).
func gangSummary(ws []Worker) string {
	var running, other []string
	for _, w := range ws {
		if w.State == WorkerRunning || w.State == WorkerDone {
			running = append(running, strconv.Itoa(w.Index))
			continue
		}
		other = append(other, fmt.Sprintf("%d (%s, %s)", w.Index, w.State, w.Layer))
	}
	if len(other) == 0 {
		return ""
	}
	if len(running) == 0 {
		return fmt.Sprintf("gang of %d workers: none runs; %s", len(ws), strings.Join(other, ", "))
	}
	return fmt.Sprintf("gang partly placed: %d of %d workers run (%s) while %s do not: the running ones hold devices they cannot use until the rest start",
		len(running), len(ws), strings.Join(running, ", "), strings.Join(other, ", "))
}

// withWorkers adds the gang's workers to a Job's verdict.
func withWorkers(res *Result, job *batchv1.Job, pods []corev1.Pod) *Result {
	if res == nil || !isGang(job) {
		return res
	}
	res.Workers = gangWorkers(job, pods)
	if s := gangSummary(res.Workers); s != "" && !slices.Contains(res.Messages, s) {
		res.Messages = append([]string{s}, res.Messages...)
	}
	return res
}
