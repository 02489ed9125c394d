package scenarios

import (
	"context"
	"fmt"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/monitoring"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/internal/workload/serve"
)

// ServiceMetricsInput is the input of ServiceMetricsSpec.
type ServiceMetricsInput struct {
	Base
	// Monitoring is the cluster's monitoring system; absent, Why says why.
	Monitoring monitoring.Endpoint
	Why        string
}

const serviceMetricsName = "servicemetrics"

// ServiceMetrics proves the AI Conformance requirement ai_service_metrics: a workload that holds a GPU and
// exposes its own metrics in the Prometheus format is discovered and collected by the cluster's
// monitoring system, which is told nothing but the workload's own conventions (annotations, and a
// PodMonitor where the Prometheus Operator's API is served). Not required by the signoff.
var ServiceMetrics = Define(Scenario{Name: serviceMetricsName, Title: "the cluster's monitoring discovers a GPU workload that exposes Prometheus metrics and collects them",
	Proves: []conformance.Proof{{Requirement: conformance.AIServiceMetrics,
		How: "a pod holding one GPU serves inference requests and exposes " + serve.RequestsTotal + " (Prometheus text format) with a nonce label, annotated " +
			fixtures.ScrapeAnnotation + " and, where the Prometheus Operator's API is served, selected by a PodMonitor labelled for the Prometheus objects; " +
			"the monitoring system's query API (a Prometheus, through the API server's service proxy or at its URL) must return that counter, " +
			"grown between two of its samples"}}},
	func(r *suite.Run) ServiceMetricsInput {
		return ServiceMetricsInput{Base: baseOf(r), Monitoring: r.Monitoring, Why: r.MonitoringWhy}
	},
	ServiceMetricsSpec)

// ServiceMetricsSpec registers the check on the first path that has a device: the monitoring system is
// the cluster's, not a path's, and one GPU workload shows whether it collects.
func ServiceMetricsSpec(input func() ServiceMetricsInput) {
	reg := input()
	if !reg.Monitoring.Present() {
		reg.notExercised("service metrics: the cluster's monitoring", reg.Why)
		return
	}
	regPath, nodes := reg.firstPathWith(1)
	if regPath == nil {
		reg.notExercised("service metrics: the cluster's monitoring", "no node in the GPU pool has a device on any path")
		return
	}
	describePath(input, regPath, "Service metrics", "svcmetrics", []any{labels.Of(labels.Scenario(serviceMetricsName))}, func(s *Spec[ServiceMetricsInput]) {
		ginkgo.It("has a GPU workload's own metrics collected by the cluster's monitoring", proves(serviceMetricsName, conformance.AIServiceMetrics),
			takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
				ginkgo.By("discovered by its annotations or a PodMonitor, and scraped twice")
				serviceMetricsCollected(ctx, s, s.lease(ctx, nodes))
			})
	})
}

// serviceMetricsCollected runs the model-server stand-in on a GPU and waits until the monitoring system
// returns its request counter grown between two samples; an endpoint that cannot answer ends it at once.
func serviceMetricsCollected(ctx context.Context, s *Spec[ServiceMetricsInput], nodes []string) {
	env := s.Env
	api, from, err := monitoring.API(env.Clients.REST, s.In.Monitoring)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reaching %s", s.In.Monitoring)
	op, err := monitoring.ReadOperator(ctx, env.Clients.Kube.Discovery(), env.Clients.Dynamic)
	mayRead(err, "list monitoring.coreos.com prometheuses")
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the Prometheus Operator's API")

	nonce := serve.NewNonce()
	w := env.Factory.ModelServer("serve", s.NS, nonce, serve.Port).Path(s.Path).Devices(1).RestartAlways().OnNodes(nodes...)
	pod := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	env.Create(ctx, pod)
	how := "its " + fixtures.ScrapeAnnotation + " annotations"
	if op.Served {
		env.Create(ctx, env.Factory.PodMonitor(s.NS, pod.Name, op.Labels))
		how += " and PodMonitor " + s.NS + "/" + pod.Name
	}
	ginkgo.AddReportEntry("evidence: discovery", op.String())
	running := pods.ExpectPodRunning(ctx, env, s.NS, pod.Name)
	ginkgo.AddReportEntry("evidence: workload", fmt.Sprintf("pod %s/%s on %s holds 1 device on the %s path, serves /metrics on port %d, found by %s",
		s.NS, pod.Name, running.Spec.NodeName, s.Path.Name(), serve.Port, how))

	query := fmt.Sprintf(`%s{%s=%q}`, serve.RequestsTotal, serve.NonceLabel, nonce)
	ginkgo.By("querying " + from + ": " + query)
	var seen monitoring.Collection
	env.Wait.For(ctx, fmt.Sprintf("pod %s/%s's metrics collected by %s", s.NS, pod.Name, from), wait.Target{Kind: "Pod", Namespace: s.NS, Name: pod.Name},
		env.Timeouts.Metrics, func(g gomega.Gomega) {
			series, err := monitoring.Query(ctx, api, query)
			if why := monitoring.Terminal(err); why != "" {
				ginkgo.Fail(from + ": " + why) // waiting cannot mend it
			}
			g.Expect(err).NotTo(gomega.HaveOccurred(), "querying %s", from)
			g.Expect(seen.Observe(series)).To(gomega.Succeed(), "querying %s for %s", from, query)
			g.Expect(seen.Collected()).To(gomega.BeTrue(), func() string {
				return fmt.Sprintf("%s has not collected pod %s/%s's %s (%s): %s; %s", from, s.NS, pod.Name, serve.RequestsTotal,
					collectionWords(seen), query, monitoring.TargetView(ctx, api, s.NS, pod.Name))
			})
		})
	ginkgo.AddReportEntry("evidence: monitoring", from)
	ginkgo.AddReportEntry("evidence: series", seen.First.String()+"\n"+seen.Last.String())
	ginkgo.AddReportEntry("evidence: target", monitoring.TargetView(ctx, api, s.NS, pod.Name))
}

// collectionWords says how far the monitoring got with the counter.
func collectionWords(c monitoring.Collection) string {
	switch {
	case c.First == nil:
		return "no series"
	case c.Last == c.First || c.Last.Value <= c.First.Value:
		return "one sample, not grown since: " + c.Last.String()
	}
	return "grown"
}
