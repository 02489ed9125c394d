package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// ComponentDown says what is behind a component's Service that has no ready endpoint: the Deployment
// that should serve it, its replicas and its pods, and whether waiting can change anything. The stack
// wait stops on a Terminal one at once instead of waiting out its budget.
type ComponentDown struct {
	// Component names what is down and where it was looked for.
	Component string
	// Namespace and Name are the Deployment's; Name is "" when no Deployment was found.
	Namespace, Name string
	// Desired and Ready are the Deployment's spec.replicas and status.readyReplicas.
	Desired, Ready int32
	// Pods are the Deployment's pods, each as "name: state in words"; PodsUnknown says they could not be
	// read.
	Pods        []string
	PodsUnknown bool
	// Terminal is true when the component will not come up by itself: scaled to zero, without pods,
	// every pod failing for good, or a rollout past its progress deadline.
	Terminal bool
	// Rollout is true while the Deployment controller reports a rollout in progress (Progressing True
	// with one of its in-progress reasons).
	Rollout bool
	// NewestPod is when the newest of its live pods was created (zero when it has none).
	NewestPod time.Time
	// Why says why it is down or, when it is not terminal, what it is waiting on, and names what could
	// not be read.
	Why string
}

// Error names the Deployment, its replicas and its pods' states, and why.
func (c *ComponentDown) Error() string {
	var b strings.Builder
	b.WriteString(c.Component)
	if c.Name == "" {
		fmt.Fprintf(&b, ": no Deployment found behind it; %s", c.Why)
		return b.String()
	}
	fmt.Fprintf(&b, ": Deployment %s/%s: ", c.Namespace, c.Name)
	if c.Desired == 0 {
		b.WriteString("replicas 0 (scaled to zero)")
	} else {
		fmt.Fprintf(&b, "replicas %d desired, %d ready", c.Desired, c.Ready)
	}
	switch {
	case c.PodsUnknown:
		b.WriteString("; pods: unknown")
	case len(c.Pods) == 0:
		b.WriteString("; pods: none")
	default:
		fmt.Fprintf(&b, "; pods: %s", strings.Join(c.Pods, "; "))
	}
	final := "not final"
	if c.Terminal {
		final = "final"
	}
	fmt.Fprintf(&b, " (%s: %s)", final, c.Why)
	return b.String()
}

// ComingUp reports whether the component is visibly coming up for a wait that began at start: the
// Deployment controller reports a rollout in progress, and its newest pod was created at most grace
// before start (or later), so the rollout is the one under way as the wait began, not one stuck since
// long before it.
func (c *ComponentDown) ComingUp(start time.Time, grace time.Duration) bool {
	return !c.Terminal && c.Rollout && !c.NewestPod.IsZero() && !c.NewestPod.Before(start.Add(-grace))
}

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
func describeKueueController(ctx context.Context, kube kubernetes.Interface, ref KueueWebhookRef, namespace string, now time.Time) *ComponentDown {
	c := &ComponentDown{Component: fmt.Sprintf("Kueue's controller (behind webhook Service %s/%s)", ref.Namespace, ref.Name)}
	var unread []string
	dep := findDeployment(ctx, kube, ref, namespace, &unread)
	if dep == nil {
		c.Why = strings.Join(unread, "; ")
		return c
	}
	c.Namespace, c.Name = dep.Namespace, dep.Name
	var pods []corev1.Pod
	podsRead := false
	if sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector); err != nil {
		unread = append(unread, fmt.Sprintf("the Deployment's selector: %v", err))
	} else if list, err := kube.CoreV1().Pods(dep.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()}); err != nil {
		unread = append(unread, fmt.Sprintf("cannot list its pods (%s)", reasonOf(err)))
	} else {
		pods, podsRead = list.Items, true
	}
	classify(c, dep, pods, podsRead, now)
	if len(unread) > 0 {
		c.Why += "; " + strings.Join(unread, "; ")
	}
	return c
}

// findDeployment is the Deployment behind the webhook Service, or nil; unread collects what could not
// be read on the way, and why no Deployment was found.
func findDeployment(ctx context.Context, kube kubernetes.Interface, ref KueueWebhookRef, namespace string, unread *[]string) *appsv1.Deployment {
	note := func(format string, args ...any) { *unread = append(*unread, fmt.Sprintf(format, args...)) }
	var selector labels.Selector
	if svc, err := kube.CoreV1().Services(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); err != nil {
		note("cannot read Service %s/%s (%s)", ref.Namespace, ref.Name, reasonOf(err))
	} else if len(svc.Spec.Selector) > 0 {
		selector = labels.SelectorFromSet(svc.Spec.Selector)
	}
	if selector != nil {
		if dep := deploymentOfPods(ctx, kube, ref.Namespace, selector, note); dep != nil {
			return dep
		}
		// No pod to follow (scaled to zero, say): the Deployment whose pods the Service would select.
		if list, err := kube.AppsV1().Deployments(ref.Namespace).List(ctx, metav1.ListOptions{}); err != nil {
			note("cannot list Deployments in %s (%s)", ref.Namespace, reasonOf(err))
		} else {
			for i := range list.Items {
				if selector.Matches(labels.Set(list.Items[i].Spec.Template.Labels)) {
					return &list.Items[i]
				}
			}
		}
	}
	dep, err := kube.AppsV1().Deployments(namespace).Get(ctx, kueueManagerName, metav1.GetOptions{})
	if err != nil {
		note("cannot read Deployment %s/%s (%s)", namespace, kueueManagerName, reasonOf(err))
		return nil
	}
	return dep
}

// deploymentOfPods follows the controller references of the pods selector selects in namespace: pod →
// ReplicaSet → Deployment.
func deploymentOfPods(ctx context.Context, kube kubernetes.Interface, namespace string, selector labels.Selector, note func(string, ...any)) *appsv1.Deployment {
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		note("cannot list the Service's pods (%s)", reasonOf(err))
		return nil
	}
	for _, p := range pods.Items {
		owner := metav1.GetControllerOf(&p)
		if owner == nil || owner.Kind != "ReplicaSet" {
			continue
		}
		rs, err := kube.AppsV1().ReplicaSets(namespace).Get(ctx, owner.Name, metav1.GetOptions{})
		if err != nil {
			note("cannot read ReplicaSet %s/%s (%s)", namespace, owner.Name, reasonOf(err))
			return nil
		}
		if owner = metav1.GetControllerOf(rs); owner == nil || owner.Kind != "Deployment" {
			continue
		}
		dep, err := kube.AppsV1().Deployments(namespace).Get(ctx, owner.Name, metav1.GetOptions{})
		if err != nil {
			note("cannot read Deployment %s/%s (%s)", namespace, owner.Name, reasonOf(err))
			return nil
		}
		return dep
	}
	return nil
}

// reasonOf is an API error in a few words: "forbidden" and "not found" say what the user can act on.
func reasonOf(err error) string {
	switch {
	case apierrors.IsForbidden(err):
		return "forbidden: " + err.Error()
	case apierrors.IsNotFound(err):
		return "not found"
	}
	return err.Error()
}

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

// KueueControllerReads are the reads that say what is behind a Kueue webhook Service without a ready
// endpoint (namespace: where Kueue runs). They are not in PreflightNeeds: the stack wait that makes them
// runs before the preflight, and without them it still decides from what it can read and says what it
// could not (the shipped non-disruptive and read-only roles grant them; the team role grants only the
// Deployment's get, which decides "scaled to zero" and a rollout past its deadline).
func KueueControllerReads(namespace string) []Permission {
	const why = "say why Kueue's webhook has no ready endpoint"
	return []Permission{
		{Verb: "get", Resource: "services", Why: why + ": its Service's selector", Namespace: namespace},
		{Verb: "list", Resource: "pods", Why: why + ": its pods and their states", Namespace: namespace},
		{Verb: "get", Group: "apps", Resource: "replicasets", Why: why + ": its pods' owner", Namespace: namespace},
		{Verb: "get", Group: "apps", Resource: "deployments", Why: why + ": its Deployment", Namespace: namespace},
		{Verb: "list", Group: "apps", Resource: "deployments", Why: why + ": the Deployment of a Service without pods", Namespace: namespace},
	}
}
