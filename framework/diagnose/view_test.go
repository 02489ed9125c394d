package diagnose

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPassesReadOnlyTheView: a pass is a function of the view. A failed read is the verdict only for the
// pass that needs what it would have given (an unscheduled pod's events), and never for one that does not
// (a running pod's containers); the verdict on the read rests on what the pass had found before it.
func TestPassesReadOnlyTheView(t *testing.T) {
	denied, err := classifyReadErr(forbidden("list", "events"), eventsRead("ml", "Pod", "p"), StageUnknown)
	if err != nil || denied == nil {
		t.Fatalf("classifyReadErr: %v, %v", denied, err)
	}
	viewOf := func(pod *corev1.Pod) view {
		return view{pod: pod, frame: frame{pods: []corev1.Pod{*pod}},
			events: map[string]got[[]corev1.Event]{eventsKey("Pod", "p"): {stop: denied}}}
	}
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ml"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if res, err := scheduled(viewOf(pending)); err != nil || res == nil || res.Reason != Forbidden {
		t.Errorf("unscheduled pod, its events denied: %v, %v; want Forbidden", res, err)
	}
	running := pending.DeepCopy()
	running.Spec.NodeName = "gpu-1"
	running.Status.Phase = corev1.PodRunning
	running.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	res, byPod, err := decide(viewOf(running))
	if err != nil || res == nil || res.Reason != ReasonRunning || !byPod {
		t.Errorf("running pod, its events denied: %v, %v, %v; want Running from the pod", res, byPod, err)
	}
	// A bound pod whose DRA prepare failed needs its claims: their denied read is the verdict, resting on
	// the kubelet's event the pass found first.
	bound := pending.DeepCopy()
	bound.Spec.NodeName = "gpu-1"
	w := viewOf(bound)
	w.events[eventsKey("Pod", "p")] = got[[]corev1.Event]{val: []corev1.Event{{ObjectMeta: metav1.ObjectMeta{Name: "p.1", Namespace: "ml"},
		Reason: eventFailedPrepareDRA, Message: "Failed to prepare dynamic resources: GPU 0 is lost"}}}
	w.claims = got[*claimState]{val: &claimState{}, stop: denied}
	res, err = starting(w)
	if err != nil || res == nil || res.Reason != Forbidden || !containsRef(res.Objects, "Event ml/p.1") {
		t.Errorf("prepare failed, claims denied: %v, %v; want Forbidden resting on Event ml/p.1", res, err)
	}
}
