package podcond

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestFindAndReady(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"},
	}}}
	if c := Find(pod, corev1.PodReady); c == nil || c.Reason != "ContainersNotReady" {
		t.Errorf("Find(Ready) = %+v", c)
	}
	if Find(pod, corev1.DisruptionTarget) != nil {
		t.Error("Find found a condition the pod does not have")
	}
	if Ready(pod) {
		t.Error("Ready with Ready=False")
	}
	pod.Status.Conditions[1].Status = corev1.ConditionTrue
	if !Ready(pod) || Ready(&corev1.Pod{}) {
		t.Error("Ready disagrees with the Ready condition")
	}
}
