// Package podcond reads a pod's status conditions: the one place the suite, discovery and diagnosis find a
// condition by type.
package podcond

import corev1 "k8s.io/api/core/v1"

// Find is the pod's condition of type t, or nil when the pod has none.
func Find(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// Ready reports a pod whose Ready condition is True.
func Ready(pod *corev1.Pod) bool {
	c := Find(pod, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}
