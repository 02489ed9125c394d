package localcluster

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func fakePluginDS(available int32) *appsv1.DaemonSet {
	lbls := map[string]string{"app.kubernetes.io/name": PluginDaemonSet}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: PluginDaemonSet, Namespace: SystemNamespace, UID: "ds-uid"},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: lbls}},
		Status:     appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, NumberAvailable: available, UpdatedNumberScheduled: 2},
	}
}

func fakePluginPod(name string, owner *appsv1.DaemonSet) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: SystemNamespace, UID: types.UID(name + "-uid"),
		Labels: map[string]string{"app.kubernetes.io/name": PluginDaemonSet}}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
	}
	return p
}

func TestRestartPluginDeletesItsPodsAndWaitsForThem(t *testing.T) {
	ctx := t.Context()
	ds := fakePluginDS(2)
	// A pod with the label that the DaemonSet does not control is not the plugin's.
	kube := fake.NewClientset(ds, fakePluginPod("dp-a", ds), fakePluginPod("dp-b", ds), fakePluginPod("stray", nil))
	undo, err := restartPlugin(ctx, kube, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	left, _ := kube.CoreV1().Pods(SystemNamespace).List(ctx, metav1.ListOptions{})
	if len(left.Items) != 1 || left.Items[0].Name != "stray" {
		t.Errorf("pods left: %v", left.Items)
	}
	if err := undo(ctx); err != nil {
		t.Errorf("undo with the DaemonSet available: %v", err)
	}
	// The undo holds the next row back until the plugin is back, and says so when it is not.
	ds.Status.NumberAvailable = 1
	if _, err := kube.AppsV1().DaemonSets(SystemNamespace).UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := undo(ctx); err == nil || !strings.Contains(err.Error(), "1 of 2 pods available") {
		t.Errorf("undo with a pod missing: %v", err)
	}
}

func TestRestartPluginRefusesAnUnsettledPlugin(t *testing.T) {
	ds := fakePluginDS(1)
	kube := fake.NewClientset(ds, fakePluginPod("dp-a", ds))
	if _, err := restartPlugin(t.Context(), kube, time.Second); err == nil || !strings.Contains(err.Error(), "must be settled") {
		t.Errorf("restart of an unsettled plugin: %v", err)
	}
	if _, err := restartPlugin(t.Context(), fake.NewClientset(fakePluginDS(2)), time.Second); err == nil || !strings.Contains(err.Error(), "no pods") {
		t.Errorf("restart without pods: %v", err)
	}
}
