package localcluster

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
)

// agentNode is a GPU node serving allocatable of the agent's resource.
func agentNode(name string, allocatable int64) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Status.Capacity = corev1.ResourceList{agentGPUResource: *resource.NewQuantity(4, resource.DecimalSI)}
	n.Status.Allocatable = corev1.ResourceList{agentGPUResource: *resource.NewQuantity(allocatable, resource.DecimalSI)}
	return n
}

func fastNowhere(kube *fake.Clientset) agentNowhere {
	return agentNowhere{kube: kube, poll: time.Millisecond, gone: 2 * time.Second, back: 2 * time.Second}
}

// agentController plays the DaemonSet controller and the kubelets for the row: once the agent's
// nodeSelector asks for AgentNowhereLabel (or, with back, no longer does) it sets the DaemonSet's counts
// and the nodes' devices and slices as they become.
func agentController(ctx context.Context, t *testing.T, kube *fake.Clientset, back bool) {
	t.Helper()
	go func() {
		_ = wait.PollUntilContextTimeout(ctx, time.Millisecond, 2*time.Second, true, func(ctx context.Context) (bool, error) {
			ds, err := kube.AppsV1().DaemonSets(SystemNamespace).Get(ctx, fakeAgentDaemonSet, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // tried again
			}
			if _, nowhere := ds.Spec.Template.Spec.NodeSelector[AgentNowhereLabel]; nowhere == back {
				return false, nil
			}
			n, alloc := int32(0), int64(0)
			if back {
				n, alloc = 2, 4
			}
			ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: n, UpdatedNumberScheduled: n, NumberReady: n, NumberAvailable: n}
			_, _ = kube.AppsV1().DaemonSets(SystemNamespace).UpdateStatus(ctx, ds, metav1.UpdateOptions{})
			for _, name := range []string{"w1", "w2"} {
				_, _ = kube.CoreV1().Nodes().UpdateStatus(ctx, agentNode(name, alloc), metav1.UpdateOptions{})
				if back {
					_, _ = kube.ResourceV1().ResourceSlices().Create(ctx, agentSlice(name), metav1.CreateOptions{})
				} else {
					_ = kube.ResourceV1().ResourceSlices().Delete(ctx, agentSlice(name).Name, metav1.DeleteOptions{})
				}
			}
			return true, nil
		})
	}()
}

// The row puts AgentNowhereLabel in the agent's nodeSelector and returns once its pods, devices and
// slices are gone; the undo takes that entry away, leaves the others, and waits for them to come back.
func TestApplyAgentScheduledNowhere(t *testing.T) {
	ctx := t.Context()
	ds := agentDaemonSet()
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
	kube := fake.NewClientset(ds, agentNode("w1", 4), agentNode("w2", 4), agentSlice("w1"), agentSlice("w2"))
	agentController(ctx, t, kube, false)
	undo, err := fastNowhere(kube).apply(ctx)
	if err != nil {
		t.Fatal(err)
	}
	selector := func() map[string]string {
		ds, err := kube.AppsV1().DaemonSets(SystemNamespace).Get(ctx, fakeAgentDaemonSet, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ds.Spec.Template.Spec.NodeSelector
	}
	if got := selector(); len(got) != 2 || got[AgentNowhereLabel] != "true" {
		t.Errorf("nodeSelector under the row: %v", got)
	}
	if _, err := fastNowhere(kube).apply(ctx); err == nil || !strings.Contains(err.Error(), "not undone") {
		t.Errorf("applying twice: %v", err)
	}
	agentController(ctx, t, kube, true)
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	if got := selector(); len(got) != 1 || got["kubernetes.io/os"] != "linux" {
		t.Errorf("nodeSelector after the undo: %v", got)
	}
}

// An agent that does not go fails the set-up and is restored; one that is not settled is not touched.
func TestApplyAgentScheduledNowhereFails(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset(agentDaemonSet(), agentNode("w1", 4))
	a := fastNowhere(kube)
	a.gone, a.back = 20*time.Millisecond, 20*time.Millisecond
	_, err := a.apply(ctx)
	if err == nil || !strings.Contains(err.Error(), "had not gone") || !strings.Contains(err.Error(), "2 pods desired") {
		t.Errorf("an agent that stays: %v", err)
	}
	ds, _ := kube.AppsV1().DaemonSets(SystemNamespace).Get(ctx, fakeAgentDaemonSet, metav1.GetOptions{})
	if _, ok := ds.Spec.Template.Spec.NodeSelector[AgentNowhereLabel]; ok {
		t.Error("a failed set-up left the nodeSelector on")
	}
	unsettled := agentDaemonSet()
	unsettled.Status.NumberAvailable = 1
	if _, err := fastNowhere(fake.NewClientset(unsettled, agentNode("w1", 4))).apply(ctx); err == nil || !strings.Contains(err.Error(), "must be settled") {
		t.Errorf("an unsettled agent: %v", err)
	}
}
