package cluster

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func kueueWebhookConfig(ns, svc string) *admissionv1.MutatingWebhookConfiguration {
	return &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "queues-mutating"},
		Webhooks: []admissionv1.MutatingWebhook{
			{Name: "mpod.other.io", ClientConfig: admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: "other", Name: "other"}},
				Rules: []admissionv1.RuleWithOperations{{Rule: admissionv1.Rule{APIGroups: []string{""}}}}},
			{Name: "mworkload.kb.io", ClientConfig: admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: ns, Name: svc}},
				Rules: []admissionv1.RuleWithOperations{{Rule: admissionv1.Rule{APIGroups: []string{"kueue.x-k8s.io"}}}}},
		},
	}
}

func TestKueueWebhookIsFoundFromTheWebhookConfigurations(t *testing.T) {
	ctx := t.Context()
	// A release that renamed the Service and lives in another namespace than the configured one.
	kube := fake.NewClientset(kueueWebhookConfig("queues", "rel-kueue-webhook"),
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "queues", Labels: map[string]string{discoveryv1.LabelServiceName: "rel-kueue-webhook"}},
			Endpoints: []discoveryv1.Endpoint{{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}})
	if err := CheckKueueWebhookReady(ctx, kube, "kueue-system"); err != nil {
		t.Errorf("renamed installation: %v", err)
	}
	ref, err := FindKueueWebhook(ctx, kube)
	if err != nil || ref.Name != "rel-kueue-webhook" || ref.Namespace != "queues" || ref.Webhook != "mworkload.kb.io" {
		t.Errorf("ref = %+v, %v", ref, err)
	}
	// Not ready: the error names the Service found.
	kube = fake.NewClientset(kueueWebhookConfig("queues", "rel-kueue-webhook"))
	if err := CheckKueueWebhookReady(ctx, kube, "kueue-system"); err == nil || !strings.Contains(err.Error(), "queues/rel-kueue-webhook") {
		t.Errorf("no endpoints: %v", err)
	}
	// CRDs without a webhook: present but broken, said so.
	if err := CheckKueueWebhookReady(ctx, fake.NewClientset(), "kueue-system"); err == nil || !strings.Contains(err.Error(), "its webhook is not") {
		t.Errorf("no webhook configuration: %v", err)
	}
}
