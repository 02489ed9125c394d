package suite

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/audit/audittest"
	"gpuconform.io/gpuconform/framework/faults"
)

// An earlier run's namespace and a fault it left on a node: refused by default; with --cleanup-leftovers
// the fault is undone through the providers, both are gone, the record says what went, and this run's
// objects and everything unlabelled stay.
func TestClearLeftovers(t *testing.T) {
	objects := func() (audit.Auditor, *crfake.ClientBuilder) {
		b := crfake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpuconform-old", Labels: map[string]string{fixtures.RunLabel: "old"}}},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpuconform-now", Labels: map[string]string{fixtures.RunLabel: "now"}}},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "users"}})
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1",
			Annotations: map[string]string{faults.FaultsAnnotation: string(faults.OutOfService), faults.FaultRunAnnotation: "old"}}}
		return audit.Auditor{Kube: fake.NewClientset(node)}, b
	}

	a, b := objects()
	a.Objects = audittest.Objects{Client: b.Build()}
	r := &Run{RunID: "now"}
	err := r.clearLeftovers(t.Context(), a, func(context.Context, string) error { t.Error("restored without --cleanup-leftovers"); return nil })
	if err == nil || !strings.Contains(err.Error(), "Namespace gpuconform-old (run old)") || !strings.Contains(err.Error(), "--cleanup-leftovers") {
		t.Errorf("without --cleanup-leftovers: %v", err)
	}

	a, b = objects()
	c := b.Build()
	a.Objects = audittest.Objects{Client: c}
	r = &Run{RunID: "now"}
	r.Config.CleanupLeftovers = true
	var restored []string
	if err := r.clearLeftovers(t.Context(), a, func(_ context.Context, node string) error {
		restored = append(restored, node)
		return nil
	}); err != nil {
		t.Fatalf("--cleanup-leftovers: %v", err)
	}
	if strings.Join(restored, ",") != "gpu-1" {
		t.Errorf("faults undone on %q, want gpu-1", restored)
	}
	var nss corev1.NamespaceList
	if err := c.List(t.Context(), &nss); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ns := range nss.Items {
		names = append(names, ns.Name)
	}
	if strings.Join(names, ",") != "gpuconform-now,users" {
		t.Errorf("namespaces left: %q, want this run's and the unlabelled one", names)
	}
	if left := a.RunIn(t.Context(), "now", "", "").Others; len(left) != 0 {
		t.Errorf("still left: %v", left)
	}
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "Namespace gpuconform-old (run old)") || !strings.Contains(r.Notes[0], "NodeFault gpu-1") {
		t.Errorf("notes: %q", r.Notes)
	}
}
