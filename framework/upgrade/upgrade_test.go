package upgrade

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func agent(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sys", Labels: map[string]string{"app.kubernetes.io/name": "fake-device-plugin"}},
		Spec: corev1.PodSpec{NodeName: node}}
}

// The local provider sets the version on the canary nodes only and restarts only their agents; the
// rollback removes it.
func TestLocalUpgradesOnlyThePool(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "canary"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "good"}},
		agent("a-canary", "canary"), agent("a-good", "good"))
	l := &Local{Kube: kube, Namespace: "sys"}
	if err := l.Apply(ctx, []string{"canary"}, "560.35.03"); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Pods("sys").Get(ctx, "a-canary", metav1.GetOptions{}); err == nil {
		t.Error("the canary's agent was not restarted")
	}
	if _, err := kube.CoreV1().Pods("sys").Get(ctx, "a-good", metav1.GetOptions{}); err != nil {
		t.Errorf("the known-good node's agent was restarted: %v", err)
	}
	n, _ := kube.CoreV1().Nodes().Get(ctx, "canary", metav1.GetOptions{})
	if n.Annotations[localVersionAnnotation] != "560.35.03" {
		t.Errorf("canary annotations = %v", n.Annotations)
	}
	g, _ := kube.CoreV1().Nodes().Get(ctx, "good", metav1.GetOptions{})
	if _, ok := g.Annotations[localVersionAnnotation]; ok {
		t.Errorf("the known-good node was changed: %v", g.Annotations)
	}
	if err := l.Rollback(ctx, []string{"canary"}, "550.54.15"); err != nil {
		t.Fatal(err)
	}
	n, _ = kube.CoreV1().Nodes().Get(ctx, "canary", metav1.GetOptions{})
	if _, ok := n.Annotations[localVersionAnnotation]; ok {
		t.Errorf("rollback left %v", n.Annotations)
	}
	if !LocalServes([]map[string]string{{localAgentLabel: "v1"}}) || LocalServes([]map[string]string{{localAgentLabel: "v1"}, {}}) || LocalServes(nil) {
		t.Error("LocalServes: every canary node must run the fake agent")
	}
}

func TestLocalTargetIsTheStacksDeclaredVersion(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "fake-device-plugin", Namespace: "sys",
		Annotations: map[string]string{localTargetAnnotation: "560.35.03"}}}
	l := &Local{Kube: fake.NewClientset(ds), Namespace: "sys"}
	got, err := l.LocalTarget(t.Context())
	if err != nil || got != "560.35.03" {
		t.Fatalf("LocalTarget = %q, %v; want the DaemonSet's declared 560.35.03", got, err)
	}
	if _, err := (&Local{Kube: fake.NewClientset(), Namespace: "sys"}).LocalTarget(t.Context()); err == nil {
		t.Fatal("LocalTarget without the agent's DaemonSet: want an error")
	}
}
