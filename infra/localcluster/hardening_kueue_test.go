package localcluster

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/cluster"
)

func kueueManager(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"control-plane": "controller-manager"}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: KueueNamespace, Name: KueueManager},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
}

// kueueWebhookAnswering is Kueue's webhook configuration and a ready endpoint of its Service.
func kueueWebhookAnswering() (*admissionv1.MutatingWebhookConfiguration, *discoveryv1.EndpointSlice) {
	return &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kueue-mutating-webhook-configuration"},
			Webhooks: []admissionv1.MutatingWebhook{{Name: "mworkload.kb.io",
				ClientConfig: admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: KueueNamespace, Name: cluster.KueueWebhookService}},
				Rules:        []admissionv1.RuleWithOperations{{Rule: admissionv1.Rule{APIGroups: []string{"kueue.x-k8s.io"}}}}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: KueueNamespace, Name: "kueue-webhook-service-x",
			Labels: map[string]string{discoveryv1.LabelServiceName: cluster.KueueWebhookService}},
			Endpoints: []discoveryv1.Endpoint{{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}}
}

// The variation scales Kueue's controller to zero; its undo restores the replicas it had and returns once
// the webhook answers.
func TestApplyKueueDown(t *testing.T) {
	ctx := t.Context()
	config, slice := kueueWebhookAnswering()
	kube := fake.NewClientset(kueueManager(2), config, slice)
	undo, err := ApplyKueueDown(ctx, kube)
	if err != nil {
		t.Fatal(err)
	}
	replicas := func() int32 {
		d, err := kube.AppsV1().Deployments(KueueNamespace).Get(ctx, KueueManager, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *d.Spec.Replicas
	}
	if got := replicas(); got != 0 {
		t.Errorf("replicas %d after the variation, want 0", got)
	}
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	if got := replicas(); got != 2 {
		t.Errorf("replicas %d after the undo, want the 2 it had", got)
	}
}

// A Kueue already scaled to zero is a broken local cluster, not a variation to undo to zero.
func TestApplyKueueDownRefusesAStoppedKueue(t *testing.T) {
	if _, err := ApplyKueueDown(t.Context(), fake.NewClientset(kueueManager(0))); err == nil || !strings.Contains(err.Error(), "already scaled to zero") {
		t.Errorf("err = %v", err)
	}
}
