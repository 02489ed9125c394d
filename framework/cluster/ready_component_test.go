package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// testNow is the fixed "now" of the component tests; pods are created relative to it.
func testNow() time.Time { return time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) }

// managerLabels are the labels Kueue's manifests give the controller's pods, which its webhook Service
// selects.
func managerLabels() map[string]string {
	return map[string]string{"control-plane": "controller-manager"}
}

func webhookService(ns, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Selector: managerLabels()}}
}

func managerDeployment(ns, name string, replicas int32, conds ...appsv1.DeploymentCondition) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "dep-uid"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: managerLabels()},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: managerLabels()}}},
		Status: appsv1.DeploymentStatus{Conditions: conds},
	}
}

func progressing(status corev1.ConditionStatus, reason string) appsv1.DeploymentCondition {
	return appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: status, Reason: reason, Message: `ReplicaSet "m-1" has timed out progressing.`}
}

func managerReplicaSet(ns, deployment string) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: deployment + "-7d9f", UID: "rs-uid",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: deployment, UID: "dep-uid", Controller: ptr.To(true)}}}}
}

// managerPod is a pod of the ReplicaSet, created age before testNow, in the state set gives it.
func managerPod(ns, rs, name string, age time.Duration, set func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: managerLabels(), CreationTimestamp: metav1.NewTime(testNow().Add(-age)),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: "rs-uid", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "control-plane"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if set != nil {
		set(p)
	}
	return p
}

func waiting(reason, message string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "manager", RestartCount: 4, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}}
	}
}

func runningNotReady(p *corev1.Pod) {
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
}

func unschedulable(p *corev1.Pod) {
	p.Spec.NodeName = ""
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."}}
}

func forbid(verb, resource string) func(*fake.Clientset) {
	return func(c *fake.Clientset) {
		c.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New("RBAC: access denied"))
		})
	}
}

// What is behind Kueue's webhook Service decides whether the stack wait may stop at once.
func TestDescribeKueueController(t *testing.T) {
	const ns, name = "kueue-system", "kueue-controller-manager"
	now := testNow()
	rs := managerReplicaSet(ns, name).Name
	pod := func(n string, age time.Duration, set func(*corev1.Pod)) *corev1.Pod {
		return managerPod(ns, rs, n, age, set)
	}
	base := func(replicas int32, conds ...appsv1.DeploymentCondition) []runtime.Object {
		return []runtime.Object{webhookService(ns, KueueWebhookService), managerDeployment(ns, name, replicas, conds...), managerReplicaSet(ns, name)}
	}
	with := func(objs []runtime.Object, more ...runtime.Object) []runtime.Object { return append(objs, more...) }
	rollout := progressing(corev1.ConditionTrue, reasonReplicaSetUpdated)
	cases := []struct {
		name     string
		objs     []runtime.Object
		reactors []func(*fake.Clientset)
		terminal bool
		// rollout: the Deployment controller reports a rollout; comingUp: for a wait that begins now.
		rollout, comingUp bool
		// deployment is the Deployment found ("" none); says are fragments of the error.
		deployment string
		says       []string
	}{
		{name: "scaled to zero", objs: base(0), terminal: true, deployment: name,
			says: []string{"Deployment kueue-system/kueue-controller-manager", "replicas 0 (scaled to zero)", "pods: none", "final: it is scaled to zero", "--replicas=1"}},
		{name: "no pods, the ReplicaSet cannot create them", terminal: true, deployment: name,
			objs: base(1, appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: `pods "m-1" is forbidden`}),
			says: []string{"replicas 1 desired, 0 ready", "it has no pods", "FailedCreate"}},
		{name: "crash loop", objs: with(base(1), pod("m-1", time.Hour, waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container"))), terminal: true, deployment: name,
			says: []string{"m-1: CrashLoopBackOff (container manager, 4 restarts)", "created 1h0m0s ago", "every pod is failing for good"}},
		{name: "a crash loop before its third restart is not final", deployment: name,
			objs: with(base(1), pod("m-1", time.Minute, func(p *corev1.Pod) {
				waiting("CrashLoopBackOff", "")(p)
				p.Status.ContainerStatuses[0].RestartCount = 2
			})),
			says: []string{"CrashLoopBackOff (container manager, 2 restarts); not final before 3 restarts", "not final: a pod is starting"}},
		{name: "image pull back-off", objs: with(base(1), pod("m-1", time.Minute, waiting("ImagePullBackOff", `Back-off pulling image "kueue:v9"`))), terminal: true, deployment: name,
			says: []string{"ImagePullBackOff", `Back-off pulling image "kueue:v9"`}},
		{name: "image pull error", objs: with(base(1), pod("m-1", time.Minute, waiting("ErrImagePull", "not found"))), terminal: true, deployment: name, says: []string{"ErrImagePull"}},
		{name: "missing config", objs: with(base(1), pod("m-1", time.Minute, waiting("CreateContainerConfigError", `secret "kueue-webhook-server-cert" not found`))), terminal: true, deployment: name,
			says: []string{"CreateContainerConfigError", "kueue-webhook-server-cert"}},
		{name: "invalid image name", objs: with(base(1), pod("m-1", time.Minute, waiting("InvalidImageName", ""))), terminal: true, deployment: name, says: []string{"InvalidImageName"}},
		{name: "unschedulable", objs: with(base(1), pod("m-1", time.Minute, unschedulable)), terminal: true, deployment: name,
			says: []string{"Pending, Unschedulable: 0/4 nodes are available"}},
		{name: "rollout past its progress deadline", objs: with(base(1, progressing(corev1.ConditionFalse, reasonTimedOut)), pod("m-2", 11*time.Minute, runningNotReady)),
			terminal: true, deployment: name, says: []string{"ProgressDeadlineExceeded", "Running, not Ready"}},
		{name: "one pod crashing, one starting", objs: with(base(2), pod("m-1", time.Hour, waiting("CrashLoopBackOff", "")), pod("m-2", 5*time.Second, nil)), deployment: name,
			says: []string{"not final: a pod is starting", "m-2: Pending (created 5s ago)"}},
		{name: "container creating", objs: with(base(1), pod("m-1", 3*time.Second, waiting("ContainerCreating", ""))), deployment: name,
			says: []string{"Pending, ContainerCreating", "not final"}},
		{name: "not scheduled yet", objs: with(base(1), pod("m-1", time.Second, func(p *corev1.Pod) { p.Spec.NodeName = "" })), deployment: name,
			says: []string{"not scheduled yet"}},
		{name: "a rollout under way", objs: with(base(1, rollout), pod("m-2", 10*time.Second, runningNotReady)), rollout: true, comingUp: true, deployment: name,
			says: []string{"a rollout is in progress (Progressing: ReplicaSetUpdated)"}},
		{name: "a new ReplicaSet", objs: with(base(1, progressing(corev1.ConditionTrue, reasonNewReplicaSet)), pod("m-2", time.Second, nil)), rollout: true, comingUp: true, deployment: name},
		{name: "a rollout whose pod was stuck long before the wait", objs: with(base(1, rollout), pod("m-2", 5*time.Minute, runningNotReady)), rollout: true, deployment: name},
		{name: "a finished rollout is no rollout", objs: with(base(1, progressing(corev1.ConditionTrue, "NewReplicaSetAvailable")), pod("m-1", time.Second, runningNotReady)), deployment: name},
		{name: "pods being replaced", objs: with(base(1), pod("m-1", time.Hour, func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(now)); p.Finalizers = []string{"x"} })),
			deployment: name, says: []string{"m-1: Terminating", "replacements are not created yet"}},
		{name: "an evicted pod does not count as failing", objs: with(base(1), pod("m-1", time.Hour, func(p *corev1.Pod) { p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted" }),
			pod("m-2", time.Second, nil)), deployment: name, says: []string{"m-1: Failed Evicted", "a pod is starting"}},
		{name: "Ready pods the Service does not reach", objs: with(base(1), pod("m-1", time.Hour, func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Conditions = corev1.PodRunning, []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		})), deployment: name, says: []string{"Running, Ready", "no ready endpoint yet"}},
		{name: "nothing readable", objs: base(0), deployment: "",
			reactors: []func(*fake.Clientset){forbid("get", "services"), forbid("get", "deployments"), forbid("list", "deployments")},
			says:     []string{"no Deployment found behind it", "cannot read Service kueue-system/kueue-webhook-service (forbidden", "cannot read Deployment kueue-system/kueue-controller-manager (forbidden"}},
		{name: "pods unreadable", objs: with(base(1), pod("m-1", time.Hour, waiting("CrashLoopBackOff", ""))), reactors: []func(*fake.Clientset){forbid("list", "pods")},
			deployment: name, says: []string{"pods: unknown", "its pods could not be read", "cannot list its pods (forbidden"}},
		{name: "pods unreadable, scaled to zero", objs: base(0), reactors: []func(*fake.Clientset){forbid("list", "pods")}, terminal: true, deployment: name,
			says: []string{"scaled to zero", "cannot list its pods (forbidden"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(tc.objs...)
			for _, r := range tc.reactors {
				r(kube)
			}
			c := describeKueueController(t.Context(), kube, KueueWebhookRef{Namespace: ns, Name: KueueWebhookService}, ns, now)
			msg := c.Error()
			if c.Terminal != tc.terminal || c.Rollout != tc.rollout || c.Name != tc.deployment {
				t.Errorf("terminal %v rollout %v deployment %q, want %v %v %q: %s", c.Terminal, c.Rollout, c.Name, tc.terminal, tc.rollout, tc.deployment, msg)
			}
			if got := c.ComingUp(now, 30*time.Second); got != tc.comingUp {
				t.Errorf("coming up %v, want %v: %s", got, tc.comingUp, msg)
			}
			for _, s := range tc.says {
				if !strings.Contains(msg, s) {
					t.Errorf("message lacks %q:\n%s", s, msg)
				}
			}
		})
	}
}

// An installation that renamed everything is followed from the Service's selector: through a pod's
// owners when it has pods, through the Deployments' pod templates when it has none.
func TestDescribeKueueControllerFollowsTheService(t *testing.T) {
	const ns, name = "queues", "rel-kueue-controller"
	ref := KueueWebhookRef{Namespace: ns, Name: "rel-kueue-webhook"}
	rs := managerReplicaSet(ns, name)
	crashing := managerPod(ns, rs.Name, "m-1", time.Hour, waiting("CrashLoopBackOff", ""))
	unrelated := managerDeployment(ns, "unrelated", 1)
	unrelated.Spec.Template.Labels = map[string]string{"app": "other"}
	for what, objs := range map[string][]runtime.Object{
		"through the pod's owners":  {webhookService(ns, ref.Name), managerDeployment(ns, name, 1), rs, crashing},
		"through the pod templates": {webhookService(ns, ref.Name), unrelated, managerDeployment(ns, name, 0)},
	} {
		c := describeKueueController(t.Context(), fake.NewClientset(objs...), ref, "kueue-system", testNow())
		if c.Namespace != ns || c.Name != name || !c.Terminal {
			t.Errorf("%s: found %s/%s terminal %v: %s", what, c.Namespace, c.Name, c.Terminal, c.Error())
		}
	}
}

// The webhook check's error carries what is behind the Service, and the stack check's error reaches it.
func TestCheckKueueWebhookReadyNamesTheDeployment(t *testing.T) {
	const ns = "kueue-system"
	kube := fake.NewClientset(kueueWebhookConfig(ns, KueueWebhookService), webhookService(ns, KueueWebhookService), managerDeployment(ns, "kueue-controller-manager", 0))
	err := CheckKueueWebhookReady(t.Context(), kube, ns)
	stack := &StackNotReady{Problems: []error{errors.New("no allocation path has devices yet"), err}}
	var down *ComponentDown
	if !errors.As(stack, &down) || !down.Terminal {
		t.Fatalf("no terminal *ComponentDown in %v", stack)
	}
	for _, s := range []string{"GPU stack not ready:\n  - no allocation path has devices yet\n  - the Kueue webhook Service kueue-system/kueue-webhook-service",
		"has no ready endpoint (0 EndpointSlices): Kueue's controller", "Deployment kueue-system/kueue-controller-manager: replicas 0 (scaled to zero)"} {
		if !strings.Contains(stack.Error(), s) {
			t.Errorf("message lacks %q:\n%s", s, stack.Error())
		}
	}
}
