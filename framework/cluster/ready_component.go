package cluster

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// ComponentDown says what is behind a component that serves nothing: the workload that should serve it
// (the Deployment behind Kueue's webhook Service, or a GPU node agent's DaemonSet: ready_agents.go), its
// pods, and whether waiting can change anything. The stack wait stops on a Terminal one at once instead
// of waiting out its budget.
type ComponentDown struct {
	// Component names what is down and where it was looked for.
	Component string
	// Kind is the workload's kind, KindDeployment ("" reads as one) or KindDaemonSet.
	Kind string
	// Namespace and Name are the workload's; Name is "" when none was found.
	Namespace, Name string
	// Desired and Ready are a Deployment's spec.replicas and status.readyReplicas, a DaemonSet's
	// status.desiredNumberScheduled and status.numberReady.
	Desired, Ready int32
	// Pods are the workload's pods (a DaemonSet's: those not Ready, with their nodes), each as
	// "name: state in words"; PodsUnknown says they could not be read.
	Pods        []string
	PodsUnknown bool
	// Terminal is true when the component will not come up by itself: scaled to zero or scheduled on no
	// node, without pods, a pod failing for good (every pod, for a Deployment), or a rollout past its
	// progress deadline.
	Terminal bool
	// Rollout is true while the workload's controller shows a rollout in progress (a Deployment's
	// Progressing True with one of its in-progress reasons; a DaemonSet's generation not observed yet, pods
	// not updated, being replaced or just created).
	Rollout bool
	// NewestPod is when the newest of its live pods was created or last started a container (zero when
	// it has none).
	NewestPod time.Time
	// Why says why it is down or, when it is not terminal, what it is waiting on, and names what could
	// not be read; for a DaemonSet scheduled on no node, what keeps it off the GPU nodes and the fix.
	Why string
}

// The workload kinds a ComponentDown names.
const (
	KindDeployment = "Deployment"
	KindDaemonSet  = "DaemonSet"
)

// Error names the workload, its replicas (a DaemonSet: its scheduled and Ready pods) and its pods'
// states, and why.
func (c *ComponentDown) Error() string {
	var b strings.Builder
	b.WriteString(c.Component)
	kind := cmp.Or(c.Kind, KindDeployment)
	if c.Name == "" {
		fmt.Fprintf(&b, ": no %s found behind it; %s", kind, c.Why)
		return b.String()
	}
	fmt.Fprintf(&b, ": %s %s/%s", kind, c.Namespace, c.Name)
	podsLabel := "pods"
	switch {
	case kind == KindDaemonSet && c.Desired == 0:
		b.WriteString(" is scheduled on no node (desired 0)")
		if c.Terminal {
			fmt.Fprintf(&b, ": %s", c.Why)
			return b.String()
		}
	case kind == KindDaemonSet:
		fmt.Fprintf(&b, ": %d of %d scheduled pods Ready", c.Ready, c.Desired)
		podsLabel = "pods not Ready"
	case c.Desired == 0:
		b.WriteString(": replicas 0 (scaled to zero)")
	default:
		fmt.Fprintf(&b, ": replicas %d desired, %d ready", c.Desired, c.Ready)
	}
	switch {
	case c.PodsUnknown:
		fmt.Fprintf(&b, "; %s: unknown", podsLabel)
	case len(c.Pods) == 0 && kind == KindDaemonSet && c.Desired == 0:
	case len(c.Pods) == 0:
		fmt.Fprintf(&b, "; %s: none", podsLabel)
	default:
		fmt.Fprintf(&b, "; %s: %s", podsLabel, strings.Join(c.Pods, "; "))
	}
	final := "not final"
	if c.Terminal {
		final = "final"
	}
	fmt.Fprintf(&b, " (%s: %s)", final, c.Why)
	return b.String()
}

// ComponentsDown are the *ComponentDown in err's tree (a *StackNotReady's problems, each wrapped or
// not), in order: errors.As would find only the first.
func ComponentsDown(err error) []*ComponentDown {
	var out []*ComponentDown
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) { //nolint:errorlint // the walk is errors.As's, keeping every match
		case nil:
		case *ComponentDown:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

// ComingUp reports whether the component is visibly coming up for a wait that began at start: the
// Deployment controller reports a rollout in progress, and its newest pod was created at most grace
// before start (or later), so the rollout is the one under way as the wait began, not one stuck since
// long before it.
func (c *ComponentDown) ComingUp(start time.Time, grace time.Duration) bool {
	return !c.Terminal && c.Rollout && !c.NewestPod.IsZero() && !c.NewestPod.Before(start.Add(-grace))
}

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
