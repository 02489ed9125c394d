package scenarios

import (
	"context"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/suite"
)

// PlatformInput is the input of PlatformSpec.
type PlatformInput struct{ Base }

const platformName = "platform"

// Platform finds out, for the conditional MUSTs of the checklist, whether the cluster offers the thing at
// all, from what a real cluster shows: the metrics APIs registered with the aggregator (pod autoscaling),
// a cluster autoscaler's own status or API (cluster autoscaling), the Gateway API and a controller that
// accepted a GatewayClass (inference traffic). Where the cluster evidently has none, the spec is not
// applicable, with the evidence, and the requirement N/A; where it has one that is broken (a metrics API
// registered but unavailable, Gateway CRDs no controller serves), the spec fails; where it has a working
// one, the spec passes with the evidence and a scenario of its own drives it (autoscaling, cluster
// autoscaling, inference gateway).
var Platform = Define(Scenario{Name: platformName, Title: "the cluster's autoscalers and inference gateway: present and working, or evidently absent",
	Proves: []conformance.Proof{
		{Requirement: conformance.PodAutoscaling, How: "the custom and external metrics APIs (APIServices v1beta1/v1beta2.custom.metrics.k8s.io, v1beta1.external.metrics.k8s.io): " +
			"none registered is not applicable; one registered must be Available"},
		{Requirement: conformance.ClusterAutoscaling, How: "a cluster autoscaler's evidence (cluster-autoscaler's status ConfigMap kube-system/cluster-autoscaler-status, " +
			"Karpenter's karpenter.sh API): none is not applicable; cluster-autoscaler's cluster-wide health must be Healthy (the cluster autoscaling " +
			"scenario grows its node group)"},
		{Requirement: conformance.AIInference, How: "the Gateway API (gateway.networking.k8s.io): not served is not applicable; served, a controller must have accepted a " +
			"GatewayClass (the inference gateway scenario routes through it)"},
	}},
	func(r *suite.Run) PlatformInput { return PlatformInput{Base: baseOf(r)} },
	PlatformSpec)

// PlatformSpec registers the three checks, once for the cluster.
func PlatformSpec(input func() PlatformInput) {
	ginkgo.Describe("Platform autoscalers and inference gateway", labels.Of(labels.Scenario(platformName)), func() {
		var in PlatformInput
		ginkgo.BeforeEach(func() { in = input() })
		ginkgo.It("serves a registered custom metrics API for the HPA", proves(platformName, conformance.PodAutoscaling), func(ctx context.Context) {
			metricsAPIs(ctx, in)
		})
		ginkgo.It("shows a cluster autoscaler or evidently has none", proves(platformName, conformance.ClusterAutoscaling), func(ctx context.Context) {
			clusterAutoscaler(ctx, in)
		})
		ginkgo.It("serves the Gateway API through an accepted GatewayClass", proves(platformName, conformance.AIInference), func(ctx context.Context) {
			gatewayAPI(ctx, in)
		})
	})
}

// metricsAPIs: none registered is not applicable; every one registered must be Available. The
// autoscaling scenario drives an HPA through them.
func metricsAPIs(ctx context.Context, in PlatformInput) {
	apis := readMetricsAPIs(ctx, in.Env)
	if len(apis) == 0 {
		notApplicable(noMetricsAPI)
	}
	ginkgo.AddReportEntry("evidence: metrics APIs", joinLines(apis))
	gomega.Expect(unavailable(apis)).To(gomega.BeEmpty(), "a metrics API is registered but not available: the HPA cannot read AI metrics through it")
}

// clusterAutoscaler looks for a cluster autoscaler (autoscalers): none is not applicable; one found
// passes with its evidence, and the cluster autoscaling scenario grows its node group.
func clusterAutoscaler(ctx context.Context, in PlatformInput) {
	found := autoscalers(ctx, in.Env)
	if len(found) == 0 {
		notApplicable(noClusterAutoscaler)
	}
	ginkgo.AddReportEntry("evidence: found", strings.Join(found, "; "))
}

// gatewayAPI: the Gateway API not served is not applicable; served, some GatewayClass must be accepted
// by its controller (status condition Accepted=True), or no implementation serves it. The inference
// gateway scenario routes through it.
func gatewayAPI(ctx context.Context, in PlatformInput) {
	group, ok := servedGroup(in.Env, gatewayGroup)
	if !ok {
		notApplicable(noGatewayAPI)
	}
	// The group's preferred version: a cluster with only v1beta1 (an older Gateway API) is read as it is.
	gvr := schema.GroupVersionResource{Group: gatewayGroup, Version: group.PreferredVersion.Version, Resource: "gatewayclasses"}
	classes := listGatewayClasses(ctx, in.Env.Clients.Dynamic.Resource(gvr))
	var all, accepted []string
	for _, c := range classes {
		all = append(all, c.String())
		if c.Accepted == "True" {
			accepted = append(accepted, c.Name)
		}
	}
	ginkgo.AddReportEntry("evidence: GatewayClasses", strings.Join(all, "\n"))
	gomega.Expect(accepted).NotTo(gomega.BeEmpty(), "the Gateway API is served but no controller accepted a GatewayClass (%d GatewayClass(es)): no implementation serves it", len(all))
}
