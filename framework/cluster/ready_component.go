package cluster

import (
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
