package audit

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/audit/audittest"
	"gpuconform.io/gpuconform/framework/faults"
)

// auditor serves objs: nodes from a typed fake (their marks are updated there), the rest from the
// generic one.
func auditor(t *testing.T, kueuePresent bool, objs ...runtime.Object) (Auditor, *fake.Clientset) {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := kueue.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	var nodes []runtime.Object
	b := crfake.NewClientBuilder().WithScheme(s)
	for _, o := range objs {
		if _, ok := o.(*corev1.Node); ok {
			nodes = append(nodes, o)
		} else {
			b = b.WithRuntimeObjects(o)
		}
	}
	kube := fake.NewClientset(nodes...)
	return Auditor{Objects: audittest.Objects{Client: b.Build()}, Kube: kube, Kueue: kueuePresent}, kube
}

func TestAuditorCleanClusterPasses(t *testing.T) {
	a, _ := auditor(t, true, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	res := a.Run(t.Context(), "run-a")
	if !res.Clean() || len(res.Others) != 0 || len(res.Errors) != 0 {
		t.Errorf("clean cluster: %+v", res)
	}
}

func TestAuditorSeparatesLeaksAndLeftovers(t *testing.T) {
	ctx := t.Context()
	now := metav1.Now()
	a, kube := auditor(t, true,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpuconform-alloc-x", Labels: lbl("run-a")}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpuconform-alloc-old", Labels: lbl("run-old"), DeletionTimestamp: &now, Finalizers: []string{"kubernetes"}}},
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "gpuconform-alloc-x", Labels: lbl("run-a")}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-old", Labels: lbl("run-old")}, Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeReleased}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Annotations: map[string]string{fixtures.RunLabel: "run-old", UnhealthyDevicesAnnotation: "GPU-1"}},
			Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "gpuconform.io/drain", Effect: corev1.TaintEffectNoSchedule}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w2"}, Spec: corev1.NodeSpec{Unschedulable: true}}, // someone else's cordon: not ours
		&kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "gpu-gpuconform-alloc-x", Labels: lbl("run-a")}},
		&kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "gpu-old", Labels: lbl("run-old")}},
		&kueue.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}},
	)
	res := a.Run(ctx, "run-a")
	if res.Clean() || len(res.Ours) != 3 || len(res.Errors) != 0 {
		t.Fatalf("expected 3 leaks of run-a, got:\n%s\nerrors: %v", Summary(res.Ours), res.Errors)
	}
	ours := Summary(res.Ours)
	for _, want := range []string{"Namespace gpuconform-alloc-x (run run-a)", "ResourceClaim gpuconform-alloc-x/c (run run-a)", "ClusterQueue gpu-gpuconform-alloc-x (run run-a)"} {
		if !strings.Contains(ours, want) {
			t.Errorf("leaks should include %q:\n%s", want, ours)
		}
	}
	others := Summary(res.Others)
	for _, want := range []string{"Namespace gpuconform-alloc-old (run run-old): terminating", "PersistentVolume pv-old (run run-old): Released",
		"ResourceFlavor gpu-old", "NodeTaint w1", "NodeCordon w1", "NodeAnnotation w1"} {
		if !strings.Contains(others, want) {
			t.Errorf("leftovers should include %q:\n%s", want, others)
		}
	}
	if strings.Contains(others, "w2") || strings.Contains(others, "unrelated") {
		t.Errorf("unlabelled objects must never be reported:\n%s", others)
	}

	if err := a.Delete(ctx, res.Others); err != nil {
		t.Fatal(err)
	}
	// The terminating namespace stays until its finalizer runs, as on a real cluster.
	after := a.Run(ctx, "run-a")
	if s := Summary(after.Others); s != "  - Namespace gpuconform-alloc-old (run run-old): terminating" {
		t.Errorf("leftovers after delete:\n%s", s)
	}
	n, _ := kube.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
	if n.Spec.Unschedulable || len(n.Spec.Taints) != 0 || n.Annotations[UnhealthyDevicesAnnotation] != "" {
		t.Errorf("node not restored: %+v", n.Spec)
	}
	w2, _ := kube.CoreV1().Nodes().Get(ctx, "w2", metav1.GetOptions{})
	if !w2.Spec.Unschedulable {
		t.Error("a cordon the suite did not make must be left alone")
	}
}

func TestAuditorWithoutKueueSkipsItsKinds(t *testing.T) {
	a, _ := auditor(t, false, &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "cq", Labels: lbl("run-a")}})
	if res := a.Run(t.Context(), "run-a"); len(res.Ours)+len(res.Others)+len(res.Errors) != 0 {
		t.Errorf("Kueue kinds listed although Kueue is absent: %+v", res)
	}
	if err := a.Delete(t.Context(), []Finding{{Kind: "ClusterQueue", Name: "cq"}}); err == nil {
		t.Error("deleting a Kueue kind without Kueue should fail")
	}
}

func TestAuditorTeamNamespaceListsOnlyThatNamespace(t *testing.T) {
	ctx := t.Context()
	a, _ := auditor(t, true,
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe-1-alloc-x1", Namespace: "team-a", Labels: lbl("run-a")}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "their-pod", Namespace: "team-a"}}, // the team's own: never ours
		&resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "old-gpus", Namespace: "team-a", Labels: lbl("run-old")}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "team-b", Labels: lbl("run-a")}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: "helpers", Labels: lbl("run-a")}},
		&kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "cq", Labels: lbl("run-a")}}, // cluster-scoped: not listed here
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}},
	)
	res := a.RunIn(ctx, "run-a", "team-a", "helpers")
	if s := Summary(res.Ours); s != "  - Pod helpers/reader (run run-a): helper\n  - Pod team-a/probe-1-alloc-x1 (run run-a)" {
		t.Errorf("ours =\n%s\nwant the labelled pod in team-a and the helper", s)
	}
	if len(res.Others) != 1 || res.Others[0].Kind != "ResourceClaimTemplate" {
		t.Errorf("others = %v, want the earlier run's claim template", res.Others)
	}
	if err := a.Delete(ctx, append(res.Ours, res.Others...)); err != nil {
		t.Fatal(err)
	}
	if again := a.RunIn(ctx, "run-a", "team-a", ""); len(again.Ours)+len(again.Others) != 0 {
		t.Errorf("after delete: %+v", again)
	}
	var pod corev1.Pod
	if err := a.Objects.(audittest.Objects).Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "their-pod"}, &pod); err != nil {
		t.Errorf("the team's own pod was touched: %v", err)
	}
}

func TestAuditorFindsAndClearsAnInterruptedRunsDeviceFault(t *testing.T) {
	a, kube := auditor(t, false, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1",
		Annotations: map[string]string{UnhealthyDevicesAnnotation: "GPU-1", FaultRunAnnotation: "run-old"}}})
	res := a.Run(t.Context(), "run-a")
	if len(res.Others) != 1 || res.Others[0].Run != "run-old" || res.Others[0].Kind != "NodeAnnotation" {
		t.Fatalf("others = %v, want the fault of run-old", res.Others)
	}
	if err := a.Delete(t.Context(), res.Others); err != nil {
		t.Fatal(err)
	}
	n, _ := kube.CoreV1().Nodes().Get(t.Context(), "w1", metav1.GetOptions{})
	if len(n.Annotations) != 0 {
		t.Errorf("annotations left: %v", n.Annotations)
	}
}

// A stopped node is not deleted as a mark while it stays stopped; once the leftover check's restore has
// started it and removed the record (as before it deletes), the finding listed earlier clears.
func TestAuditorClearsAStoppedNodeOnlyOnceRestored(t *testing.T) {
	ctx := t.Context()
	a, kube := auditor(t, false, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1",
		Annotations: map[string]string{faults.FaultsAnnotation: string(faults.StopNode), FaultRunAnnotation: "run-old"}}})
	res := a.Run(ctx, "run-a")
	if len(res.Others) != 1 || res.Others[0].Kind != "NodeFault" {
		t.Fatalf("others = %v, want run-old's stopped node", res.Others)
	}
	if err := a.Delete(ctx, res.Others); err == nil || !strings.Contains(err.Error(), "was stopped by run run-old") {
		t.Fatalf("deleting a node still stopped: %v, want the error that says to start it", err)
	}
	if err := faults.Mark(ctx, kube, "w1", "run-old", string(faults.StopNode), false); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, res.Others); err != nil {
		t.Fatalf("deleting the finding of a restored node: %v", err)
	}
	n, _ := kube.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
	if len(n.Annotations) != 0 {
		t.Errorf("annotations left: %v", n.Annotations)
	}
}

func lbl(run string) map[string]string { return map[string]string{fixtures.RunLabel: run} }
