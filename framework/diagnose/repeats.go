package diagnose

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// repeatsFinal is how many identical failures to pull or create a container make the failure final.
// One failure is often transient (a registry blip, a CDI spec or device plugin being rewritten during a
// roll), and two can still straddle one. The kubelet retries a failed create on its next pod sync (10 s
// back-off, pkg/kubelet/kubelet.go backOffPeriod) and a failed pull after 10 s, then 20 s (its image
// back-off doubles), so the third identical failure comes about 20 to 30 s after the first: long
// enough to outlast a blip, well inside the suite's pod-start wait.
const repeatsFinal = 3

// The kubelet's container events (pkg/kubelet/events, pkg/kubelet/images/image_manager.go,
// pkg/kubelet/kuberuntime/kuberuntime_container.go in k8s v1.37): a failed pull is reason Failed with
// `Failed to pull image %q: %v`; a failed create or start is reason Failed with `Error: %v`, the same text
// as the container's waiting message. The event correlator (client-go tools/record) counts identical
// events in one object and, past ten similar ones, combines them under this prefix.
const (
	eventFailed          = "Failed"
	pullFailedHead       = "Failed to pull image "
	createFailedHead     = "Error: "
	combinedEventsPrefix = "(combined from similar events): "
)

// runtimeIDRE matches the identifiers that differ between otherwise identical failures: the runtime's
// container IDs (64 hex digits, a new one per create attempt) and digests.
var runtimeIDRE = regexp.MustCompile(`[0-9a-f]{12,}`)

// repeatable reports a container waiting reason whose failure becomes final by repetition: a pull the
// registry may still serve later (not a name that is invalid or an image that may never be pulled), or
// a create or start the runtime failed.
func repeatable(w *corev1.ContainerStateWaiting) bool {
	switch w.Reason {
	case "CreateContainerError", "RunContainerError":
		return true
	}
	return imagePullReason(w.Reason) && imageNeverPullable(w) == ""
}

// countsRepeats reports a pod whose verdict comes from a container failure that may become final by
// repetition, so Collect reads its events even though its status names the failure. It follows the
// order in which pod picks the container that explains the pod.
func countsRepeats(p *corev1.Pod) bool {
	if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || kubeletRejected(p) {
		return false
	}
	for _, cs := range allStatuses(p) {
		if w := cs.State.Waiting; w != nil && (imagePullReason(w.Reason) || createReason(w.Reason) || w.Reason == "CrashLoopBackOff") {
			return repeatable(w)
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return false
		}
	}
	return false
}

// repeats counts how often the kubelet recorded the container's current pull or create failure on the
// pod's node, adds the count and the node to res, and makes res terminal from repeatsFinal identical
// failures on. Identical means the same message once container IDs and digests are set aside, summed
// over the event objects that carry it (each has a count). A failure seen fewer times is not final.
func repeats(pod *corev1.Pod, podEvents got[[]corev1.Event], replaced []corev1.Event, container string, w *corev1.ContainerStateWaiting, res *Result) {
	if !repeatable(w) {
		return
	}
	if podEvents.failed() {
		res.Messages = append(res.Messages, "the pod's events could not be read, so repeated failures are not counted")
		return
	}
	pull := imagePullReason(w.Reason)
	failing := func(msg string) bool {
		if pull {
			return strings.HasPrefix(msg, pullFailedHead)
		}
		return sameFailure(msg, createFailedHead+w.Message)
	}
	about := func(e *corev1.Event) bool { return e.Reason == eventFailed && aboutContainer(e, container) }
	evs := slices.Clone(podEvents.val)
	own := len(evs)
	evs = append(evs, replaced...)
	rep, ok := repeated(evs, about, failing)
	if !ok {
		return
	}
	n, newest := rep.count, rep.newest
	carried := carriedFrom(evs[own:], about, newest)
	res.rests("Event", newest.Namespace, newest.Name)
	what := "the runtime on node %s failed to create container %s %d time(s) for the same reason"
	switch {
	case pull:
		what = "node %s failed to pull the image of container %s %d time(s) for the same reason"
	case w.Reason == "RunContainerError":
		what = "the runtime on node %s failed to start container %s %d time(s) for the same reason"
	}
	res.Messages = append(res.Messages, fmt.Sprintf(what, pod.Spec.NodeName, container, n)+fmt.Sprintf(" (events %s, count %d)", newest.Reason, n)+carried)
	if !rep.final(0) {
		res.Messages = append(res.Messages, fmt.Sprintf("not final yet: final after %d identical failures", repeatsFinal))
		return
	}
	res.terminal(fmt.Sprintf("the same failure repeated %d times on node %s (final from %d): the kubelet keeps retrying, but it fails the same way until the node, the image or the pod changes", n, pod.Spec.NodeName, repeatsFinal))
}

// jobOf is the name of the Job that controls pod ("" when none does).
func jobOf(pod *corev1.Pod) string {
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "Job" {
		return ref.Name
	}
	return ""
}

// predecessorOf reports an event about another pod of pod's Job on pod's node: the Job controller names
// its pods <job>-<suffix> (Indexed Jobs <job>-<index>-<suffix>), and the kubelet that recorded the event
// is the node's (source host, or the reporting instance of events.k8s.io writers).
func predecessorOf(e corev1.Event, pod *corev1.Pod) bool {
	job := jobOf(pod)
	node := pod.Spec.NodeName
	rest, ok := strings.CutPrefix(e.InvolvedObject.Name, job+"-")
	return job != "" && ok && jobPodSuffixRE.MatchString(rest) && (e.Source.Host == node || e.ReportingInstance == node)
}

// jobPodSuffixRE is what the Job controller appends to the Job's name for a pod: the API server's
// five-character generateName suffix, after the completion index for an Indexed Job.
var jobPodSuffixRE = regexp.MustCompile(`^([0-9]+-)?[bcdfghjklmnpqrstvwxz2-9]{5}$`)

// predecessorFailures are the snapshot's events about the pods pod's Job replaced on pod's node, oldest
// first: a replaced pod's failures carry forward to its successor.
func predecessorFailures(evs []corev1.Event, pod *corev1.Pod) []corev1.Event {
	var out []corev1.Event
	for _, e := range evs {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name != pod.Name && predecessorOf(e, pod) {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b corev1.Event) int { return EventTime(a).Compare(EventTime(b)) })
	return out
}

// carriedFrom says which replaced pods' events count toward the failure newest names ("" when none).
func carriedFrom(evs []corev1.Event, about func(*corev1.Event) bool, newest *corev1.Event) string {
	var n int32
	var pods []string
	for _, e := range evs {
		if about(&e) && sameFailure(e.Message, newest.Message) {
			n += eventCount(e)
			if !slices.Contains(pods, e.InvolvedObject.Name) {
				pods = append(pods, e.InvolvedObject.Name)
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d of them by pod(s) the Job replaced before it (%s)", n, strings.Join(pods, ", "))
}

// repetition is one failure as the events about a pod carry it.
type repetition struct {
	// newest is the latest event of the failure.
	newest *corev1.Event
	// count sums the counts of the events that carry it; first is its first occurrence and span the time
	// from then to its latest.
	count int32
	first time.Time
	span  time.Duration
}

// repeated finds the newest event that about accepts and whose message (without the event correlator's
// prefix) failing accepts, and counts the events about accepts that carry the same failure (sameFailure).
// ok is false when there is no such event.
func repeated(evs []corev1.Event, about func(*corev1.Event) bool, failing func(msg string) bool) (rep repetition, ok bool) {
	for i := len(evs) - 1; i >= 0 && rep.newest == nil; i-- {
		if e := &evs[i]; about(e) && failing(uncombined(e.Message)) {
			rep.newest = e
		}
	}
	if rep.newest == nil {
		return rep, false
	}
	first := EventTime(*rep.newest)
	for _, e := range evs {
		if about(&e) && sameFailure(e.Message, rep.newest.Message) {
			rep.count += eventCount(e)
			if t := eventFirstTime(e); !t.IsZero() && t.Before(first) {
				first = t
			}
		}
	}
	rep.first, rep.span = first, EventTime(*rep.newest).Sub(first)
	return rep, true
}

// final reports a failure that has repeated repeatsFinal times or, when within is set, has lasted within.
func (r repetition) final(within time.Duration) bool {
	return r.count >= repeatsFinal || within > 0 && r.span >= within
}

// aboutContainer reports an event about the named container, or about the pod as a whole (a recorder
// that sets no field path). Container names are unique across a pod's init and app containers.
func aboutContainer(e *corev1.Event, container string) bool {
	fp := e.InvolvedObject.FieldPath
	return fp == "" || strings.HasSuffix(fp, "{"+container+"}")
}

// sameFailure reports two failure messages that differ at most in runtime IDs, digests or the event
// correlator's prefix.
func sameFailure(a, b string) bool {
	norm := func(s string) string { return runtimeIDRE.ReplaceAllString(uncombined(s), "<id>") }
	return norm(a) == norm(b)
}

// uncombined strips the prefix the event correlator gives a message that stands for similar ones.
func uncombined(msg string) string {
	return strings.TrimPrefix(msg, combinedEventsPrefix)
}

// eventCount is how many times an event happened: its count (core/v1 writers), or its series count
// (events.k8s.io writers), at least one.
func eventCount(e corev1.Event) int32 {
	n := max(e.Count, 1)
	if e.Series != nil {
		n = max(n, e.Series.Count)
	}
	return n
}
