package cluster

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// What the Deployment behind a component and its pods say about whether the component will come up:
// the verdict of ComponentDown, from the objects alone.

// Deployment condition reasons the deployment controller writes (k8s.io/kubernetes
// pkg/controller/deployment/util/deployment_util.go): the Progressing condition's while a rollout is
// under way, and the one after it made no progress for progressDeadlineSeconds.
const (
	reasonReplicaSetUpdated = "ReplicaSetUpdated"
	reasonNewReplicaSet     = "NewReplicaSetCreated"
	reasonFoundNewRS        = "FoundNewReplicaSet"
	reasonTimedOut          = "ProgressDeadlineExceeded"
)

// failingForGood reports whether a container's waiting reason, as the kubelet writes it, says it will
// not start without someone changing something: a crash loop (pkg/kubelet/container/sync_result.go), an
// image that cannot be pulled or named (pkg/kubelet/images/types.go), or a configuration it refers to
// that is missing (pkg/kubelet/kuberuntime/kuberuntime_container.go).
func failingForGood(reason string) bool {
	return slices.Contains([]string{"CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError"}, reason)
}

// describeKueueController reads what is behind Kueue's webhook Service ref: the Deployment found through
// the Service's selector (its pods' owner ReplicaSet's owner, or the Deployment whose pod template the
// selector matches), else the Deployment kueue-controller-manager in the configured namespace, and that
// Deployment's pods.

// classify fills c from the Deployment and its pods (podsRead false: they could not be read).
func classify(c *ComponentDown, dep *appsv1.Deployment, pods []corev1.Pod, podsRead bool, now time.Time) {
	c.Desired, c.Ready, c.PodsUnknown = ptr.Deref(dep.Spec.Replicas, 1), dep.Status.ReadyReplicas, !podsRead
	progressing := deploymentCondition(dep, appsv1.DeploymentProgressing)
	c.Rollout = progressing != nil && progressing.Status == corev1.ConditionTrue &&
		slices.Contains([]string{reasonReplicaSetUpdated, reasonNewReplicaSet, reasonFoundNewRS}, progressing.Reason)
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	var live, failing, ready, leaving int
	for i := range pods {
		st := stateOf(&pods[i], now)
		c.Pods = append(c.Pods, pods[i].Name+": "+st.words)
		switch {
		case !st.live:
			leaving++
			continue
		case st.failing:
			failing++
		case st.ready:
			ready++
		}
		live++
		c.NewestPod = maxTime(c.NewestPod, pods[i].CreationTimestamp.Time)
	}
	scale := fmt.Sprintf("kubectl -n %s scale deployment/%s --replicas=1", dep.Namespace, dep.Name)
	switch {
	case c.Desired == 0:
		c.Terminal, c.Why = true, "it is scaled to zero, so nothing serves the webhook until it is scaled up (`"+scale+"`)"
	case progressing != nil && progressing.Reason == reasonTimedOut:
		c.Terminal, c.Why = true, fmt.Sprintf("its rollout made no progress within its progress deadline (%s: %s)", reasonTimedOut, progressing.Message)
	case !podsRead:
		c.Why = "its pods could not be read, so whether they are starting is unknown"
	case live == 0 && leaving > 0:
		c.Why = "its pods are terminating or failed; their replacements are not created yet"
	case live == 0:
		c.Terminal, c.Why = true, "it has no pods"
		if rf := deploymentCondition(dep, appsv1.DeploymentReplicaFailure); rf != nil && rf.Status == corev1.ConditionTrue {
			c.Why += fmt.Sprintf(": its ReplicaSet cannot create them (%s: %s)", rf.Reason, rf.Message)
		}
	case failing == live:
		c.Terminal, c.Why = true, "every pod is failing for good (see their states): it will not serve the webhook until its configuration, image or node is fixed"
	case ready > 0:
		c.Why = "a pod is Ready but the Service has no ready endpoint yet (or its selector does not match the pods)"
	case c.Rollout:
		c.Why = fmt.Sprintf("a rollout is in progress (Progressing: %s) and a pod is starting", progressing.Reason)
	default:
		c.Why = "a pod is starting"
	}
}

// podState is one pod's state for the verdict on its Deployment.
type podState struct {
	words string
	// live: not being deleted and not finished (a finished pod of a Deployment is replaced).
	live bool
	// failing: it will not start by itself (see failingForGood; or the scheduler finds no node).
	failing bool
	ready   bool
}

// stateOf says in words what state pod is in, as of now.
func stateOf(pod *corev1.Pod, now time.Time) podState {
	age := fmt.Sprintf(" (created %s ago)", now.Sub(pod.CreationTimestamp.Time).Round(time.Second))
	if pod.DeletionTimestamp != nil {
		return podState{words: "Terminating" + age}
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return podState{words: strings.TrimSpace(string(pod.Status.Phase) + " " + pod.Status.Reason + age)}
	}
	if cond := podCondition(pod, corev1.PodScheduled); cond != nil && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
		return podState{words: "Pending, Unschedulable: " + cut(cond.Message) + age, live: true, failing: true}
	}
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if w := cs.State.Waiting; w != nil && failingForGood(w.Reason) {
			words := fmt.Sprintf("%s (container %s, %d restarts)", w.Reason, cs.Name, cs.RestartCount)
			if w.Message != "" {
				words += ": " + cut(w.Message)
			}
			return podState{words: words + age, live: true, failing: true}
		}
	}
	if cond := podCondition(pod, corev1.PodReady); cond != nil && cond.Status == corev1.ConditionTrue {
		return podState{words: string(pod.Status.Phase) + ", Ready" + age, live: true, ready: true}
	}
	words := string(cmp.Or(pod.Status.Phase, corev1.PodPending))
	switch {
	case pod.Spec.NodeName == "":
		words += ", not scheduled yet"
	case pod.Status.Phase == corev1.PodRunning:
		words += ", not Ready"
	case firstWaiting(pod) != "":
		words += ", " + firstWaiting(pod)
	}
	return podState{words: words + age, live: true}
}

// firstWaiting is the first waiting reason of pod's containers, init containers first (ContainerCreating,
// PodInitializing), or "".
func firstWaiting(pod *corev1.Pod) string {
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return w.Reason
		}
	}
	return ""
}

func deploymentCondition(dep *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range dep.Status.Conditions {
		if dep.Status.Conditions[i].Type == t {
			return &dep.Status.Conditions[i]
		}
	}
	return nil
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// cut keeps a kubelet or scheduler message to one readable line.
func cut(s string) string {
	const width = 200
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > width {
		return string(r[:width-1]) + "…"
	}
	return s
}
