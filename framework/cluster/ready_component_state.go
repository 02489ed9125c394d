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

	"gpuconform.io/gpuconform/internal/podcond"
	"gpuconform.io/gpuconform/internal/textcut"
)

// What the workload behind a component (a Deployment, or a DaemonSet: ready_agents.go) and its pods say
// about whether the component will come up: the verdict of ComponentDown, from the objects alone.

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
	return reason == reasonCrashLoop || imageNotPullable(reason) || reason == "CreateContainerConfigError"
}

// imageNotPullable reports a waiting reason that says the container's image cannot be pulled or named
// (pkg/kubelet/images/types.go).
func imageNotPullable(reason string) bool {
	return slices.Contains([]string{"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"}, reason)
}

// reasonCrashLoop is the kubelet's waiting reason for a container it restarts with a back-off.
const reasonCrashLoop = "CrashLoopBackOff"

// crashLoopRestarts is how many restarts make a crash loop final: a container that exits once or twice
// while what it needs comes up (a webhook certificate, the kubelet's socket after a kubelet restart) is
// in CrashLoopBackOff for its first back-off (10 s) without being broken, and its third restart comes
// some 70 s after its first start, past the stack wait's grace and settling window.
const crashLoopRestarts = 3

// describeKueueController reads what is behind Kueue's webhook Service ref: the Deployment found through
// the Service's selector (its pods' owner ReplicaSet's owner, or the Deployment whose pod template the
// selector matches), else the Deployment kueue-controller-manager in the configured namespace, and that
// Deployment's pods.

// classify fills c from the Deployment and its pods (podsRead false: they could not be read).
func classify(c *ComponentDown, dep *appsv1.Deployment, pods []corev1.Pod, podsRead bool, now time.Time) {
	c.Kind = KindDeployment
	c.Desired, c.Ready, c.PodsUnknown = ptr.Deref(dep.Spec.Replicas, 1), dep.Status.ReadyReplicas, !podsRead
	progressing := deploymentCondition(dep, appsv1.DeploymentProgressing)
	c.Rollout = progressing != nil && progressing.Status == corev1.ConditionTrue &&
		slices.Contains([]string{reasonReplicaSetUpdated, reasonNewReplicaSet, reasonFoundNewRS}, progressing.Reason)
	t := tallyPods(pods, now, nil)
	for _, r := range t.pods {
		c.Pods = append(c.Pods, r.pod.Name+": "+r.state.words)
	}
	c.NewestPod = t.newest
	scale := fmt.Sprintf("kubectl -n %s scale deployment/%s --replicas=1", dep.Namespace, dep.Name)
	switch {
	case c.Desired == 0:
		c.Terminal, c.Why = true, "it is scaled to zero, so nothing serves the webhook until it is scaled up (`"+scale+"`)"
	case progressing != nil && progressing.Reason == reasonTimedOut:
		c.Terminal, c.Why = true, fmt.Sprintf("its rollout made no progress within its progress deadline (%s: %s)", reasonTimedOut, progressing.Message)
	case !podsRead:
		c.Why = "its pods could not be read, so whether they are starting is unknown"
	case t.live == 0 && t.leaving > 0:
		c.Why = "its pods are terminating or failed; their replacements are not created yet"
	case t.live == 0:
		c.Terminal, c.Why = true, "it has no pods"
		if rf := deploymentCondition(dep, appsv1.DeploymentReplicaFailure); rf != nil && rf.Status == corev1.ConditionTrue {
			c.Why += fmt.Sprintf(": its ReplicaSet cannot create them (%s: %s)", rf.Reason, rf.Message)
		}
	case t.failing == t.live:
		c.Terminal, c.Why = true, "every pod is failing for good (see their states): it will not serve the webhook until its configuration, image or node is fixed"
	case t.ready > 0:
		c.Why = "a pod is Ready but the Service has no ready endpoint yet (or its selector does not match the pods)"
	case c.Rollout:
		c.Why = fmt.Sprintf("a rollout is in progress (Progressing: %s) and a pod is starting", progressing.Reason)
	default:
		c.Why = "a pod is starting"
	}
}

// podTally is what a workload's pods say together: each pod's state, sorted by name, and how many are
// live, failing (for good, or unschedulable), Ready, or leaving (being deleted, or finished), and when
// the newest live one was created or last started a container.
type podTally struct {
	pods                          []podReading
	live, failing, ready, leaving int
	newest                        time.Time
}

// podReading is one pod with its state.
type podReading struct {
	pod   *corev1.Pod
	state podState
}

// tallyPods reads each pod's state as of now and counts those counted says count (nil: all); the
// others are read but not counted.
func tallyPods(pods []corev1.Pod, now time.Time, counted func(*corev1.Pod) bool) podTally {
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	var t podTally
	for i := range pods {
		st := stateOf(&pods[i], now)
		t.pods = append(t.pods, podReading{pod: &pods[i], state: st})
		switch {
		case counted != nil && !counted(&pods[i]):
			continue
		case !st.live:
			t.leaving++
			continue
		case st.failing:
			t.failing++
		case st.ready:
			t.ready++
		}
		t.live++
		t.newest = maxTime(t.newest, maxTime(pods[i].CreationTimestamp.Time, podStarted(pods[i])))
	}
	return t
}

// podState is one pod's state for the verdict on its workload.
type podState struct {
	words string
	// live: not being deleted and not finished (a finished pod of a Deployment is replaced).
	live bool
	// failing: it will not start by itself (final), or the scheduler finds no node for it.
	failing bool
	// final: a container will not start without someone changing something (failingForGood; a crash
	// loop only from crashLoopRestarts restarts on); reason, container and restarts say which and why.
	final             bool
	reason, container string
	restarts          int32
	ready             bool
}

// stateOf says in words what state pod is in, as of now: for a container failing for good, its waiting
// reason and message, its restarts, the image it cannot pull, and how it last exited.
func stateOf(pod *corev1.Pod, now time.Time) podState {
	age := fmt.Sprintf(" (created %s ago)", now.Sub(pod.CreationTimestamp.Time).Round(time.Second))
	if pod.DeletionTimestamp != nil {
		return podState{words: "Terminating" + age}
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return podState{words: strings.TrimSpace(string(pod.Status.Phase) + " " + pod.Status.Reason + age)}
	}
	if cond := podcond.Find(pod, corev1.PodScheduled); cond != nil && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
		return podState{words: "Pending, Unschedulable: " + textcut.Line(cond.Message, lineWidth) + age, live: true, failing: true}
	}
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		w := cs.State.Waiting
		if w == nil || !failingForGood(w.Reason) {
			continue
		}
		words := fmt.Sprintf("%s (container %s, %d restarts)", w.Reason, cs.Name, cs.RestartCount)
		if imageNotPullable(w.Reason) {
			words = fmt.Sprintf("%s (container %s, image %s, %d restarts)", w.Reason, cs.Name, cmp.Or(containerImage(pod, cs.Name), cs.Image, "unknown"), cs.RestartCount)
		}
		if w.Message != "" {
			words += ": " + textcut.Line(w.Message, lineWidth)
		}
		if t := cs.LastTerminationState.Terminated; t != nil && w.Reason == reasonCrashLoop {
			words += fmt.Sprintf("; it last exited with code %d", t.ExitCode)
			if t.Reason != "" {
				words += " (" + t.Reason + ")"
			}
			if t.Message != "" {
				words += ": " + textcut.Line(t.Message, lineWidth)
			}
		}
		if w.Reason == reasonCrashLoop && cs.RestartCount < crashLoopRestarts {
			return podState{words: fmt.Sprintf("%s; not final before %d restarts%s", words, crashLoopRestarts, age), live: true}
		}
		return podState{words: words + age, live: true, failing: true, final: true, reason: w.Reason, container: cs.Name, restarts: cs.RestartCount}
	}
	if cond := podcond.Find(pod, corev1.PodReady); cond != nil && cond.Status == corev1.ConditionTrue {
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

// containerImage is the image pod's spec gives the (init) container name ("" when it has none).
func containerImage(pod *corev1.Pod, name string) string {
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if c.Name == name {
			return c.Image
		}
	}
	return ""
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

// lineWidth is the most characters a kubelet or scheduler message keeps in a component state line.
const lineWidth = 200

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
