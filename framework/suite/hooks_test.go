package suite

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/audit/audittest"
	"gpuconform.io/gpuconform/framework/faults"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/runlease"
)

// noLeases is a cluster where no run holds a lease.
func noLeases() leaseLister {
	return leaseLister{list: func(context.Context) ([]runlease.Info, error) { return nil, nil },
		remove: func(context.Context, runlease.Info) error { return nil }}
}

// leasesOf lists infos and records which leases were removed.
func leasesOf(infos []runlease.Info, removed *[]string) leaseLister {
	return leaseLister{list: func(context.Context) ([]runlease.Info, error) { return infos, nil },
		remove: func(_ context.Context, l runlease.Info) error { *removed = append(*removed, l.Name); return nil }}
}

// A live run's namespace and node fault are never leftovers, even with --cleanup-leftovers: they stay,
// nothing is restored, and the notes name the run; a dead run's expired lease goes with its objects.
func TestClearLeftoversLeavesLiveRunsAlone(t *testing.T) {
	now := time.Now()
	b := crfake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpuconform-live", Labels: map[string]string{fixtures.RunLabel: "live"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpuconform-dead", Labels: map[string]string{fixtures.RunLabel: "dead"}}})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1",
		Annotations: map[string]string{faults.FaultsAnnotation: string(faults.OutOfService), faults.FaultRunAnnotation: "live"}}}
	c := b.Build()
	a := audit.Auditor{Kube: fake.NewClientset(node), Objects: audittest.Objects{Client: c}}
	infos := []runlease.Info{
		{Name: "gpuconform-suite-now", Namespace: "default", RunID: "now", Role: runlease.RoleSuite, Host: "me", Renewed: now, Duration: time.Minute},
		{Name: "gpuconform-suite-live", Namespace: "default", RunID: "live", Role: runlease.RoleSuite, Host: "ci-1", Renewed: now, Duration: time.Minute},
		{Name: "gpuconform-suite-dead", Namespace: "default", RunID: "dead", Role: runlease.RoleSuite, Host: "ci-2", Renewed: now.Add(-time.Hour), Duration: time.Minute},
	}

	r := &Run{RunID: "now"}
	found, err := r.clearLeftovers(t.Context(), a, leasesOf(infos, new([]string)), func(context.Context, string) error { return nil }, false)
	if err == nil || !strings.Contains(err.Error(), "gpuconform-dead") || strings.Contains(err.Error(), "gpuconform-live") {
		t.Errorf("without --cleanup-leftovers only the dead run's objects refuse the run: %v", err)
	}
	if len(found.LiveObjects) != 2 {
		t.Errorf("live objects %v, want the live run's namespace and node fault", found.LiveObjects)
	}

	r = &Run{RunID: "now"}
	var removed []string
	if _, err := r.clearLeftovers(t.Context(), a, leasesOf(infos, &removed), func(_ context.Context, n string) error {
		t.Errorf("restored %s: the fault is the live run's", n)
		return nil
	}, true); err != nil {
		t.Fatalf("--cleanup-leftovers: %v", err)
	}
	var nss corev1.NamespaceList
	if err := c.List(t.Context(), &nss); err != nil {
		t.Fatal(err)
	}
	if len(nss.Items) != 1 || nss.Items[0].Name != "gpuconform-live" {
		t.Errorf("namespaces left %v, want the live run's only", nss.Items)
	}
	if strings.Join(removed, ",") != "gpuconform-suite-dead" {
		t.Errorf("leases removed %q, want the dead run's", removed)
	}
	if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, "left alone: run live on host ci-1") || !strings.Contains(notes, "Namespace gpuconform-live") ||
		strings.Contains(notes, "run now on host me") {
		t.Errorf("notes do not name the live run: %q", r.Notes)
	}
}

// Objects of other runs whose leases cannot be read: nobody can tell whether those runs are alive, so
// nothing is deleted and the run refuses, saying what to grant.
func TestClearLeftoversWithoutLeases(t *testing.T) {
	b := crfake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpuconform-x", Labels: map[string]string{fixtures.RunLabel: "x"}}})
	c := b.Build()
	a := audit.Auditor{Kube: fake.NewClientset(), Objects: audittest.Objects{Client: c}}
	forbidden := leaseLister{list: func(context.Context) ([]runlease.Info, error) { return nil, errors.New("leases is forbidden") }}
	r := &Run{RunID: "now"}
	_, err := r.clearLeftovers(t.Context(), a, forbidden, func(context.Context, string) error { return nil }, true)
	if _, ok := run.Refused(err); !ok || !strings.Contains(err.Error(), "leases is forbidden") || !strings.Contains(err.Error(), "grant list on leases") {
		t.Errorf("want a refusal naming the lease error: %v", err)
	}
	var nss corev1.NamespaceList
	if err := c.List(t.Context(), &nss); err != nil || len(nss.Items) != 1 {
		t.Errorf("the namespace must stay: %v %v", nss.Items, err)
	}
}

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
	_, err := r.clearLeftovers(t.Context(), a, noLeases(), func(context.Context, string) error { t.Error("restored without --cleanup-leftovers"); return nil }, false)
	if err == nil || !strings.Contains(err.Error(), "Namespace gpuconform-old (run old)") || !strings.Contains(err.Error(), "--cleanup-leftovers") {
		t.Errorf("without --cleanup-leftovers: %v", err)
	}
	if _, ok := run.Refused(err); !ok {
		t.Errorf("leftovers refuse the run (INCOMPLETE), they are not a finding: %T", err)
	}

	a, b = objects()
	c := b.Build()
	a.Objects = audittest.Objects{Client: c}
	r = &Run{RunID: "now"}
	var restored []string
	if _, err := r.clearLeftovers(t.Context(), a, noLeases(), func(_ context.Context, node string) error {
		restored = append(restored, node)
		return nil
	}, true); err != nil {
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
