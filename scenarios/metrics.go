package scenarios

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/accelmetrics"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/internal/workload/probe"
)

// MetricsInput is the input of MetricsSpec.
type MetricsInput struct {
	Base
	// Endpoint is where the metrics are read; absent, Why says why.
	Endpoint accelmetrics.Endpoint
	Why      string
}

const metricsName = "metrics"

// Metrics is the accelerator metrics scenario (MetricsSpec). Not required by the signoff: a cluster
// without a metrics exporter schedules GPUs as well; the AI Conformance profile requires it (the
// requirement is a MUST), so there a cluster without one is INCOMPLETE, with why.
var Metrics = Define(Scenario{Name: metricsName, Title: "every device a pod holds is on the accelerator metrics endpoint with its utilisation and memory, attributed to that pod",
	Proves: []conformance.Proof{{Requirement: conformance.AcceleratorMetrics,
		How: "a pod holds devices on a GPU node; the metrics endpoint (a DCGM exporter Service scraped on that node through the API server's pod proxy, " +
			"or a Prometheus queried by the exporter's Hostname label) must carry, for each device by its UUID label, " + accelmetrics.GPUUtil + " and " +
			accelmetrics.FBUsed + " samples attributed to the pod and namespace (labels pod/namespace, or pod_name/pod_namespace) wherever the exporter attributes any device"}}},
	func(r *suite.Run) MetricsInput {
		return MetricsInput{Base: baseOf(r), Endpoint: r.Metrics, Why: r.MetricsWhy}
	},
	MetricsSpec)

// MetricsSpec registers, per path, the check that a running pod's devices are on the metrics endpoint.
func MetricsSpec(input func() MetricsInput) {
	reg := input()
	if !reg.Endpoint.Present() {
		reg.notExercised("metrics: accelerator metrics", reg.Why)
		return
	}
	for _, regPath := range reg.Paths {
		// Two devices where a node has them: "every device" is then more than the first one.
		n := 2
		nodes := reg.eligible(regPath, n)
		if len(nodes) == 0 {
			n, nodes = 1, reg.withDevices(regPath, "metrics")
		}
		if len(nodes) == 0 {
			continue
		}
		describePath(input, regPath, "Accelerator metrics", "metrics", []any{labels.Of(labels.Scenario(metricsName))}, func(s *Spec[MetricsInput]) {
			ginkgo.It("exposes utilisation and memory metrics for every device a running pod holds", proves(metricsName, conformance.AcceleratorMetrics),
				takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
					ginkgo.By("attributed to that pod")
					heldDevicesOnMetrics(ctx, s, n, s.lease(ctx, nodes))
				})
		})
	}
}

// heldDevicesOnMetrics runs a pod holding n devices, reads which GPUs it sees, and waits until the
// endpoint shows each with its samples and attribution; a scrape that cannot succeed ends it at once.
func heldDevicesOnMetrics(ctx context.Context, s *Spec[MetricsInput], n int, nodes []string) {
	env := s.Env
	w := env.Factory.GPUPod("metrics", s.NS).Path(s.Path).Devices(n).Args(fixtures.ProbeArgs(n)...).RestartAlways().OnNodes(nodes...)
	pod := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	env.Create(ctx, pod)
	running := pods.ExpectPodRunning(ctx, env, s.NS, pod.Name)
	report := pods.ExpectProbeReport(ctx, env, s.NS, pod.Name)
	holder := accelmetrics.Holder{Namespace: s.NS, Pod: pod.Name, Node: running.Spec.NodeName, Devices: physicalDevices(report)}
	gomega.Expect(holder.Devices).To(gomega.HaveLen(n), "pod %s asked for %s and sees %s (%s)", pod.Name, plural(n), gpu.FormatDevices(report.Devices), report.Message)
	ginkgo.AddReportEntry("evidence: devices held", fmt.Sprintf("pod %s/%s on %s sees %s (from %s)", s.NS, pod.Name, holder.Node, strings.Join(holder.Devices, ", "), strings.Join(report.CountedFrom, ", ")))

	ginkgo.By(fmt.Sprintf("reading %s for node %s", s.In.Endpoint, holder.Node))
	var last accelmetrics.Scrape
	var found accelmetrics.Finding
	env.Wait.For(ctx, fmt.Sprintf("the devices of pod %s/%s on the accelerator metrics endpoint", s.NS, pod.Name), wait.Target{Kind: "Pod", Namespace: s.NS, Name: pod.Name},
		env.Timeouts.Metrics, func(g gomega.Gomega) {
			scrape, err := accelmetrics.Read(ctx, env.Clients.Kube, s.In.Endpoint, holder.Node)
			if errors.Is(err, accelmetrics.ErrTerminal) {
				ginkgo.Fail(err.Error()) // waiting cannot mend it: no exporter on the node, access denied
			}
			g.Expect(err).NotTo(gomega.HaveOccurred())
			last = scrape
			found, err = accelmetrics.Check(scrape.Samples, holder)
			g.Expect(err).NotTo(gomega.HaveOccurred(), "read from %s", scrape.From)
		})
	ginkgo.AddReportEntry("evidence: metrics endpoint", last.From)
	ginkgo.AddReportEntry("evidence: samples", strings.Join(found.Samples, "\n"))
	if !found.Attributed {
		ginkgo.AddReportEntry("evidence: pod attribution", "the exporter attributes no device to any pod (its Kubernetes mapping is off): the devices' presence was checked, their attribution could not be")
	}
}

// physicalDevices are the GPUs a probe saw, a MIG device counted as its parent GPU (the exporter's UUID
// label names the parent of a MIG instance).
func physicalDevices(r gpu.ProbeReport) []string {
	out := make([]string, 0, len(r.Devices))
	for _, d := range r.Devices {
		if i := slices.IndexFunc(r.MIGDevices, func(m probe.MIGDevice) bool { return m.UUID == d }); i >= 0 {
			d = r.MIGDevices[i].Parent
		}
		out = append(out, d)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
