package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/monitoring"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/internal/podcond"
	"gpuconform.io/gpuconform/internal/workload/serve"
)

// PodAutoscalingInput is the input of PodAutoscalingSpec.
type PodAutoscalingInput struct {
	Base
	// Metric is the pods metric of the custom metrics API the HPA scales on (config hpaMetric).
	Metric string
}

const podAutoscalingName = "autoscaling"

// hpaMaxReplicas is how far the HPA may scale the Deployment: one device per replica.
const hpaMaxReplicas = 2

// PodAutoscaling proves the AI Conformance requirement pod_autoscaling where the cluster serves the
// custom metrics API: an HPA scales a Deployment of one-GPU pods on a metric of the pods themselves, read
// by the HPA controller through custom.metrics.k8s.io. Not required by the signoff.
var PodAutoscaling = Define(Scenario{Name: podAutoscalingName, Title: "an HPA scales a GPU Deployment on the pods' own metric through the custom metrics API",
	Proves: []conformance.Proof{{Requirement: conformance.PodAutoscaling,
		How: "a Deployment of one-GPU model-server stand-ins (one replica) exposes " + serve.RequestsTotal + "; once the custom metrics API " +
			"serves the configured pods metric (--hpa-metric) for its pod, an autoscaling/v2 HPA targets half that value per pod: " +
			"the HPA controller must read it (ScalingActive=True), rescale the Deployment to 2 replicas (its SuccessfulRescale event) " +
			"and the second replica must run with its own GPU; no custom metrics API registered is not applicable"}}},
	func(r *suite.Run) PodAutoscalingInput {
		return PodAutoscalingInput{Base: baseOf(r), Metric: r.Config.HPAMetricName()}
	},
	PodAutoscalingSpec)

// PodAutoscalingSpec registers the check on the first path with a pool node that holds both replicas:
// the HPA and the metrics API are the cluster's, not a path's.
func PodAutoscalingSpec(input func() PodAutoscalingInput) {
	reg := input()
	regPath, nodes := reg.firstPathWith(hpaMaxReplicas)
	if regPath == nil {
		reg.notExercised("pod autoscaling", fmt.Sprintf("no node in the GPU pool has %d devices on one path", hpaMaxReplicas))
		return
	}
	describePath(input, regPath, "Pod autoscaling", "hpa", []any{labels.Of(labels.Scenario(podAutoscalingName))}, func(s *Spec[PodAutoscalingInput]) {
		ginkgo.It("scales a GPU Deployment with an HPA on its custom metric", proves(podAutoscalingName, conformance.PodAutoscaling),
			takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
				hpaScales(ctx, s, nodes)
			})
	})
}

// hpaScales runs the check: the metrics API registered and Available, one replica running, its metric
// served, then the HPA's rescale to hpaMaxReplicas with every replica running.
func hpaScales(ctx context.Context, s *Spec[PodAutoscalingInput], candidates []string) {
	env, metric := s.Env, s.In.Metric
	apis := readMetricsAPIs(ctx, env)
	if !slices.ContainsFunc(apis, monitoring.MetricsAPI.Custom) {
		if len(apis) > 0 {
			ginkgo.Skip("not exercised: only " + joinLines(apis) + "; gpuconform scales on a pods metric of the custom metrics API")
		}
		notApplicable(noMetricsAPI)
	}
	ginkgo.AddReportEntry("evidence: metrics APIs", joinLines(apis))
	gomega.Expect(unavailable(apis)).To(gomega.BeEmpty(), "a metrics API is registered but not available: the HPA cannot read metrics through it")
	reader, err := monitoring.NewCustomMetrics(env.Clients.REST)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "a client of the custom metrics API")

	nodes := s.lease(ctx, candidates)
	w := env.Factory.ModelServer("serve", s.NS, serve.NewNonce(), serve.Port).Path(s.Path).Devices(1).OnNodes(nodes...)
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	dep := fixtures.Deployment(w.Obj(), 1)
	ginkgo.By(fmt.Sprintf("running Deployment %s/%s: one replica holding one device on the %s path", s.NS, dep.Name, s.Path.Name()))
	env.Create(ctx, dep)
	first := waitReplicas(ctx, s, dep.Name, 1)[0]

	ginkgo.By(fmt.Sprintf("reading pods metric %s of %s/%s from the custom metrics API", metric, s.NS, first))
	var value monitoring.PodValue
	env.Wait.For(ctx, fmt.Sprintf("the custom metrics API to serve %s for pod %s/%s above zero", metric, s.NS, first),
		wait.Target{Kind: "Pod", Namespace: s.NS, Name: first}, env.Timeouts.Autoscale, func(g gomega.Gomega) {
			v, err := reader.Pod(s.NS, first, metric)
			mayRead(err, "get custom.metrics.k8s.io pods/"+metric)
			if monitoring.NotServed(err) {
				g.Expect(err).NotTo(gomega.HaveOccurred(), "the custom metrics API does not serve %s for pod %s/%s: its adapter has no rule that maps "+
					"the pod's series to that name, or has not relisted since the pod's first scrape (name the metric it serves with --hpa-metric)", metric, s.NS, first)
			}
			g.Expect(err).NotTo(gomega.HaveOccurred(), "reading %s for pod %s/%s", metric, s.NS, first)
			g.Expect(v.Value.Sign()).To(gomega.BeNumerically(">", 0), "the custom metrics API serves %s for pod %s/%s as %s: a target below zero cannot be set", metric, s.NS, first, v)
			value = v
		})
	ginkgo.AddReportEntry("evidence: metric", fmt.Sprintf("%s of pod %s/%s: %s", metric, s.NS, first, value))

	target := hpaTarget(value.Value)
	hpa := fixtures.PodsMetricHPA(dep, metric, target, 1, hpaMaxReplicas)
	ginkgo.By(fmt.Sprintf("creating HPA %s/%s: pods metric %s, average value %s, 1 to %d replicas", s.NS, hpa.Name, metric, target.String(), hpaMaxReplicas))
	env.Create(ctx, hpa)
	replicas := waitReplicas(ctx, s, dep.Name, hpaMaxReplicas, func() string { return hpaState(ctx, s, hpa.Name) })
	rescale := hpaRescale(ctx, s, hpa.Name)
	// The HPA controller's event (pkg/controller/podautoscaler): "New size: N; reason: pods metric M above target".
	gomega.Expect(rescale).To(gomega.And(gomega.ContainSubstring(fmt.Sprintf("New size: %d;", hpaMaxReplicas)), gomega.ContainSubstring(metric)),
		"Deployment %s/%s runs %d replicas, but HPA %s has no SuccessfulRescale event to %d on %s: something else scaled it (%s)",
		s.NS, dep.Name, hpaMaxReplicas, hpa.Name, hpaMaxReplicas, metric, hpaState(ctx, s, hpa.Name))
	ginkgo.AddReportEntry("evidence: rescale", rescale)
	ginkgo.AddReportEntry("evidence: hpa", hpaState(ctx, s, hpa.Name))
	ginkgo.AddReportEntry("evidence: replicas", strings.Join(replicas, ", "))
}

// hpaTarget is the average value per pod the HPA keeps the metric at: half of what one replica shows
// (at least 1m), so that the controller wants twice the replicas and stops at hpaMaxReplicas.
func hpaTarget(observed resource.Quantity) resource.Quantity {
	return *resource.NewMilliQuantity(max(observed.MilliValue()/2, 1), resource.DecimalSI)
}

// waitReplicas waits until n pods of the Deployment run, each Ready, and returns their names; why, when
// given, adds to the failure what drives the count. A replica that cannot start (no node can take it, its
// image cannot be pulled) ends the wait once its diagnosis is final.
func waitReplicas(ctx context.Context, s *Spec[PodAutoscalingInput], name string, n int, why ...func() string) []string {
	ginkgo.GinkgoHelper()
	env := s.Env
	var out []string
	deployment := wait.Target{Kind: "Deployment", Namespace: s.NS, Name: name}
	env.Wait.ForProgress(ctx, fmt.Sprintf("%d running replicas of Deployment %s/%s", n, s.NS, name), deployment, env.Timeouts.PodStart+env.Timeouts.Autoscale, func(g gomega.Gomega) {
		list, err := env.Clients.Kube.CoreV1().Pods(s.NS).List(ctx, metav1.ListOptions{LabelSelector: fixtures.DeploymentLabel + "=" + name})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		var ready, states []string
		for _, p := range list.Items {
			states = append(states, fmt.Sprintf("%s %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName))
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podcond.Ready(&p) {
				ready = append(ready, p.Name)
			}
		}
		extra := ""
		for _, f := range why {
			extra = "; " + f()
		}
		g.Expect(ready).To(gomega.HaveLen(n), "pods of Deployment %s/%s: %s%s", s.NS, name, strings.Join(states, ", "), extra)
		out = ready
	})
	return out
}

// hpaState is the HPA's status in a line: replicas, the metric it read, its conditions.
func hpaState(ctx context.Context, s *Spec[PodAutoscalingInput], name string) string {
	h, err := s.Env.Clients.Kube.AutoscalingV2().HorizontalPodAutoscalers(s.NS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "HPA " + name + " unreadable: " + err.Error()
	}
	parts := []string{fmt.Sprintf("HPA %s: current %d, desired %d replicas", name, h.Status.CurrentReplicas, h.Status.DesiredReplicas)}
	for _, m := range h.Status.CurrentMetrics {
		if m.Type == autoscalingv2.PodsMetricSourceType && m.Pods != nil && m.Pods.Current.AverageValue != nil {
			parts = append(parts, fmt.Sprintf("read %s average %s", m.Pods.Metric.Name, m.Pods.Current.AverageValue))
		}
	}
	for _, c := range h.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(parts, "; ")
}

// hpaRescale are the HPA controller's SuccessfulRescale events of the HPA ("New size: N; reason: …").
func hpaRescale(ctx context.Context, s *Spec[PodAutoscalingInput], name string) string {
	sel := fields.Set{"involvedObject.kind": "HorizontalPodAutoscaler", "involvedObject.name": name, "reason": "SuccessfulRescale"}.AsSelector().String()
	evs, err := s.Env.Clients.Kube.CoreV1().Events(s.NS).List(ctx, metav1.ListOptions{FieldSelector: sel})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "listing HPA %s's events", name)
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Message)
	}
	return strings.Join(out, "\n")
}
