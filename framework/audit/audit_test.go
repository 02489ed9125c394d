package audit

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuefake "sigs.k8s.io/kueue/client-go/clientset/versioned/fake"

	"gpuconform.io/gpuconform/fixtures"
)

func lbl(run string) map[string]string { return map[string]string{fixtures.RunLabel: run} }

func TestCleanClusterPasses(t *testing.T) {
	kube := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	res := Run(context.Background(), kube, kueuefake.NewSimpleClientset(), "run-a")
	if !res.Clean() || len(res.Others) != 0 || len(res.Errors) != 0 {
		t.Errorf("clean cluster: %+v", res)
	}
}

func TestLeaksAndLeftoversAreSeparated(t *testing.T) {
	kube := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpuconform-alloc-x", Labels: lbl("run-a")}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpuconform-alloc-old", Labels: lbl("run-old")}},
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "gpuconform-alloc-x", Labels: lbl("run-a")}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Annotations: map[string]string{fixtures.RunLabel: "run-old", UnhealthyDevicesAnnotation: "GPU-1"}},
			Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "gpuconform.io/drain", Effect: corev1.TaintEffectNoSchedule}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w2"}, Spec: corev1.NodeSpec{Unschedulable: true}}, // someone else's cordon: not ours
	)
	kq := kueuefake.NewSimpleClientset(
		&kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "gpu-gpuconform-alloc-x", Labels: lbl("run-a")}},
		&kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "gpu-old", Labels: lbl("run-old")}},
		&kueue.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}},
	)
	res := Run(context.Background(), kube, kq, "run-a")
	if res.Clean() || len(res.Ours) != 3 {
		t.Fatalf("expected 3 leaks of run-a, got:\n%s", Summary(res.Ours))
	}
	others := Summary(res.Others)
	for _, want := range []string{"Namespace gpuconform-alloc-old (run run-old)", "ResourceFlavor gpu-old", "NodeTaint w1", "NodeCordon w1", "NodeAnnotation w1"} {
		if !strings.Contains(others, want) {
			t.Errorf("leftovers should include %q:\n%s", want, others)
		}
	}
	if strings.Contains(others, "w2") || strings.Contains(others, "unrelated") {
		t.Errorf("unlabelled objects must never be reported:\n%s", others)
	}

	if err := Delete(context.Background(), kube, kq, res.Others); err != nil {
		t.Fatal(err)
	}
	after := Run(context.Background(), kube, kq, "run-a")
	if len(after.Others) != 0 {
		t.Errorf("leftovers after delete:\n%s", Summary(after.Others))
	}
	n, _ := kube.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if n.Spec.Unschedulable || len(n.Spec.Taints) != 0 || n.Annotations[UnhealthyDevicesAnnotation] != "" {
		t.Errorf("node not restored: %+v", n.Spec)
	}
	w2, _ := kube.CoreV1().Nodes().Get(context.Background(), "w2", metav1.GetOptions{})
	if !w2.Spec.Unschedulable {
		t.Error("a cordon the suite did not make must be left alone")
	}
}

func TestTeamNamespaceAuditListsOnlyThatNamespace(t *testing.T) {
	kube := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe-1-alloc-x1", Namespace: "team-a", Labels: lbl("run-a")}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "their-pod", Namespace: "team-a"}}, // the team's own: never ours
		&resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "old-gpus", Namespace: "team-a", Labels: lbl("run-old")}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "team-b", Labels: lbl("run-a")}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}},
	)
	res := RunIn(context.Background(), kube, nil, "run-a", "team-a", "")
	if len(res.Ours) != 1 || res.Ours[0].Kind != "Pod" || res.Ours[0].Name != "probe-1-alloc-x1" {
		t.Errorf("ours = %v, want the one labelled pod in team-a", res.Ours)
	}
	if len(res.Others) != 1 || res.Others[0].Kind != "ResourceClaimTemplate" {
		t.Errorf("others = %v, want the earlier run's claim template", res.Others)
	}
	if err := Delete(context.Background(), kube, nil, append(res.Ours, res.Others...)); err != nil {
		t.Fatal(err)
	}
	if again := RunIn(context.Background(), kube, nil, "run-a", "team-a", ""); len(again.Ours)+len(again.Others) != 0 {
		t.Errorf("after delete: %+v", again)
	}
	if _, err := kube.CoreV1().Pods("team-a").Get(context.Background(), "their-pod", metav1.GetOptions{}); err != nil {
		t.Errorf("the team's own pod was touched: %v", err)
	}
}

func TestAnInterruptedRunsDeviceFaultIsFoundAndCleared(t *testing.T) {
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1",
		Annotations: map[string]string{UnhealthyDevicesAnnotation: "GPU-1", FaultRunAnnotation: "run-old"}}})
	res := Run(context.Background(), kube, nil, "run-a")
	if len(res.Others) != 1 || res.Others[0].Run != "run-old" || res.Others[0].Kind != "NodeAnnotation" {
		t.Fatalf("others = %v, want the fault of run-old", res.Others)
	}
	if err := Delete(context.Background(), kube, nil, res.Others); err != nil {
		t.Fatal(err)
	}
	n, _ := kube.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if len(n.Annotations) != 0 {
		t.Errorf("annotations left: %v", n.Annotations)
	}
}
