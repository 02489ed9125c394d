package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/internal/podcond"
)

// OperatorInput is the input of OperatorSpec.
type OperatorInput struct {
	Base
	// Kueue is whether Kueue is installed and usable; OwnQueues whether the run may create Kueue's
	// cluster-scoped objects (queues.mode own).
	Kueue, OwnQueues bool
	// KueueWhy says why Kueue is not usable.
	KueueWhy string
}

const operatorName = "operator"

// kueueAPIs are the custom resources Kueue's controller reconciles that every installation serves.
var kueueAPIs = []string{"clusterqueues", "localqueues", "resourceflavors", "workloads"}

// Operator proves Kueue, the AI-workload operator every other scenario queues through, as the checklist's
// robust_controller asks: its pods run, its CRDs are served, its validating webhook rejects an invalid
// object the API schema alone accepts, and its controller reconciles a ClusterQueue's status both ways.
var Operator = Define(Scenario{Name: operatorName, Title: "Kueue's pods run, its CRDs are served, its webhook rejects an invalid object and its controller reconciles",
	Needs: suite.Needs{Kueue: true},
	Proves: []conformance.Proof{{Requirement: conformance.RobustController,
		How: "Kueue is the operator: the pods behind its webhook Service are Running and Ready; kueue.x-k8s.io/v1beta2 serves " + strings.Join(kueueAPIs, ", ") +
			"; a server-side dry-run ResourceFlavor whose nodeLabels value is invalid (which only Kueue's validating webhook checks) is denied by an admission webhook; " +
			"a ClusterQueue naming a missing ResourceFlavor becomes Active=False (" + kueue.ClusterQueueActiveReasonFlavorNotFound + ") and, once the flavor exists, Active=True"}}},
	func(r *suite.Run) OperatorInput {
		return OperatorInput{Base: baseOf(r), Kueue: r.KueueUsable, OwnQueues: r.KueueUsable && r.Config.Queues.Mode == config.QueuesOwn, KueueWhy: r.Caps.Kueue.Reason}
	},
	OperatorSpec)

// OperatorSpec registers the operator checks, once for the cluster (no path: the operator is not a
// device's).
func OperatorSpec(input func() OperatorInput) {
	reg := input()
	switch {
	case !reg.Kueue:
		reg.notExercised("operator: Kueue as the AI operator", "Kueue is not usable: "+reg.KueueWhy)
		return
	case !reg.OwnQueues:
		reg.notExercised("operator: Kueue as the AI operator", "queues.mode existing: the suite may not create Kueue's cluster-scoped objects (a dry-run ResourceFlavor, a ClusterQueue)")
		return
	}
	ginkgo.Describe("Kueue as the AI operator", labels.Of(labels.Scenario(operatorName)), proves(operatorName, conformance.RobustController), func() {
		var in OperatorInput
		var ns string
		ginkgo.BeforeEach(func(ctx context.Context) {
			in = input()
			ns = in.Env.NewNamespace(ctx, "operator").Name
		})
		ginkgo.It("runs its controller pods and serves its CRDs", func(ctx context.Context) {
			operatorPods(ctx, in)
		})
		ginkgo.It("rejects an invalid ResourceFlavor in its validating webhook", func(ctx context.Context) {
			webhookRejects(ctx, in, ns)
		})
		ginkgo.It("reconciles a ClusterQueue's Active condition both ways", func(ctx context.Context) {
			reconcilesQueue(ctx, in, ns)
		})
	})
}

// operatorPods: the pods behind Kueue's webhook Service, found from the cluster's webhook configurations
// (any release name or namespace), are Running and Ready; Kueue's API serves its resources.
func operatorPods(ctx context.Context, in OperatorInput) {
	kube := in.Env.Clients.Kube
	ref, err := cluster.FindKueueWebhook(ctx, kube)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	eps, err := kube.DiscoveryV1().EndpointSlices(ref.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + ref.Name})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "listing the endpoints of Kueue's webhook Service %s/%s", ref.Namespace, ref.Name)
	var seen []string
	for _, s := range eps.Items {
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
				continue
			}
			pod, err := kube.CoreV1().Pods(ep.TargetRef.Namespace).Get(ctx, ep.TargetRef.Name, metav1.GetOptions{})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(pod.Status.Phase).To(gomega.Equal(corev1.PodRunning), "Kueue's pod %s/%s", pod.Namespace, pod.Name)
			gomega.Expect(podcond.Ready(pod)).To(gomega.BeTrue(), "Kueue's pod %s/%s is not Ready", pod.Namespace, pod.Name)
			seen = append(seen, fmt.Sprintf("%s/%s on %s (%s)", pod.Namespace, pod.Name, pod.Spec.NodeName, pod.Spec.Containers[0].Image))
		}
	}
	gomega.Expect(seen).NotTo(gomega.BeEmpty(), "Kueue's webhook Service %s/%s (webhook %s of %s) has no pod behind it", ref.Namespace, ref.Name, ref.Webhook, ref.Configuration)
	ginkgo.AddReportEntry("evidence: operator pods", strings.Join(slices.Compact(seen), "\n"))
	list, err := kube.Discovery().ServerResourcesForGroupVersion(kueue.GroupVersion.String())
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the resources %s serves", kueue.GroupVersion)
	var served []string
	for _, r := range list.APIResources {
		if !strings.Contains(r.Name, "/") {
			served = append(served, r.Name)
		}
	}
	for _, want := range kueueAPIs {
		gomega.Expect(served).To(gomega.ContainElement(want), "%s does not serve %s", kueue.GroupVersion, want)
	}
	ginkgo.AddReportEntry("evidence: CRDs served", kueue.GroupVersion.String()+": "+strings.Join(served, ", "))
}

// invalidLabelValue is a nodeLabels value no label may carry: the ResourceFlavor's schema takes any
// string there, and only Kueue's validating webhook (ValidateResourceFlavor) checks it.
const invalidLabelValue = "not a label value!"

// webhookRejects creates, server-side dry run (nothing is stored, whatever the answer), a ResourceFlavor
// the API schema accepts and Kueue's webhook must deny; an accepted one means the webhook did not run.
func webhookRejects(ctx context.Context, in OperatorInput, ns string) {
	rf := in.Env.Factory.ResourceFlavor("invalid", ns).NodeLabels(map[string]string{"gpuconform.io/invalid": invalidLabelValue}).Obj()
	_, err := in.Env.Clients.Kueue.KueueV1beta2().ResourceFlavors().Create(ctx, rf, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil {
		ginkgo.Fail(fmt.Sprintf("the API server accepted ResourceFlavor %s with nodeLabels value %q (dry run): Kueue's validating webhook did not run for it; %s",
			rf.Name, invalidLabelValue, validatingWebhooksFor(ctx, in, "resourceflavors")))
	}
	msg := err.Error()
	gomega.Expect(apierrors.IsForbidden(err) && !strings.Contains(msg, "admission webhook")).To(gomega.BeFalse(), "the dry run was refused by RBAC, not by the webhook: %v", err)
	gomega.Expect(msg).To(gomega.And(gomega.ContainSubstring("admission webhook"), gomega.ContainSubstring("denied the request"), gomega.ContainSubstring("spec.nodeLabels")),
		"the invalid ResourceFlavor was refused, but not by an admission webhook's validation of spec.nodeLabels")
	ginkgo.AddReportEntry("evidence: webhook denial", msg)
}

// validatingWebhooksFor says which validating webhooks have a rule on Kueue's resource, for a failure.
func validatingWebhooksFor(ctx context.Context, in OperatorInput, resource string) string {
	list, err := in.Env.Clients.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "the ValidatingWebhookConfigurations could not be read: " + err.Error()
	}
	var hits []string
	for _, c := range list.Items {
		for _, w := range c.Webhooks {
			for _, r := range w.Rules {
				if slices.Contains(r.APIGroups, kueue.GroupVersion.Group) && slices.ContainsFunc(r.Resources, func(x string) bool { return x == resource || x == "*" }) {
					hits = append(hits, c.Name+"/"+w.Name)
				}
			}
		}
	}
	if len(hits) == 0 {
		return "no ValidatingWebhookConfiguration has a rule on " + kueue.GroupVersion.Group + " " + resource
	}
	return "webhooks with a rule on " + resource + ": " + strings.Join(hits, ", ")
}

// reconcilesQueue creates a ClusterQueue naming a ResourceFlavor that does not exist yet: Kueue's
// controller must set Active=False with FlavorNotFound, then Active=True once the flavor is created.
// The queue admits only from the spec's namespace, which has no LocalQueue: it admits nothing.
func reconcilesQueue(ctx context.Context, in OperatorInput, ns string) {
	env := in.Env
	rf := env.Factory.ResourceFlavor("reconciled", ns).Obj()
	cq := env.Factory.ClusterQueue("reconciles", ns).Flavor(rf.Name, map[corev1.ResourceName]string{corev1.ResourceCPU: "0"}).Obj()
	env.Create(ctx, cq)
	active := func(status metav1.ConditionStatus, reason string) {
		var seen string
		env.Wait.For(ctx, fmt.Sprintf("ClusterQueue %s Active=%s (%s)", cq.Name, status, reason), wait.Target{Kind: "ClusterQueue", Name: cq.Name}, env.Timeouts.QueueActive,
			func(g gomega.Gomega) {
				got, err := env.Clients.Kueue.KueueV1beta2().ClusterQueues().Get(ctx, cq.Name, metav1.GetOptions{})
				g.Expect(err).NotTo(gomega.HaveOccurred())
				c := meta.FindStatusCondition(got.Status.Conditions, kueue.ClusterQueueActive)
				g.Expect(c).NotTo(gomega.BeNil(), "Kueue's controller has set no %s condition", kueue.ClusterQueueActive)
				seen = fmt.Sprintf("%s=%s reason %s: %s", c.Type, c.Status, c.Reason, c.Message)
				g.Expect(c.Status).To(gomega.Equal(status), seen)
				g.Expect(c.Reason).To(gomega.Equal(reason), seen)
			})
		ginkgo.AddReportEntry("evidence: ClusterQueue "+cq.Name, seen)
	}
	active(metav1.ConditionFalse, kueue.ClusterQueueActiveReasonFlavorNotFound)
	env.Create(ctx, rf)
	active(metav1.ConditionTrue, kueue.ClusterQueueActiveReasonReady)
}
