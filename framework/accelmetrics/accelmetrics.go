// Package accelmetrics reads per-device accelerator metrics where a cluster exposes them (NVIDIA's DCGM
// exporter, directly or through a Prometheus that scrapes it) and checks that every device a pod holds is
// there with its utilisation and memory, attributed to that pod where the exporter maps devices to pods.
// It is what the AI Conformance requirement accelerator_metrics asks a platform to show.
//
// Names follow NVIDIA's dcgm-exporter: the field names of its default counters (DCGM_FI_DEV_GPU_UTIL,
// DCGM_FI_DEV_FB_USED, …), the device identity label UUID, and the Kubernetes attribution labels pod,
// namespace and container (pod_name, pod_namespace and container_name with its old-namespace option).
package accelmetrics

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/framework/config"
)

// Metric and label names of the DCGM exporter.
const (
	GPUUtil      = "DCGM_FI_DEV_GPU_UTIL"
	EngineActive = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
	FBUsed       = "DCGM_FI_DEV_FB_USED"
	FBFree       = "DCGM_FI_DEV_FB_FREE"
	LabelUUID    = "UUID"
	LabelHost    = "Hostname"
)

// attribution label pairs (pod, namespace): the exporter's current names and its old-namespace ones.
var attributionLabels = [][2]string{{"pod", "namespace"}, {"pod_name", "pod_namespace"}}

// exporterSelectors are the labels NVIDIA's deployments put on the exporter's Service: the dcgm-exporter
// Helm chart's, and the GPU Operator's.
var exporterSelectors = []string{"app.kubernetes.io/name=dcgm-exporter", "app=nvidia-dcgm-exporter"}

// Endpoint is where the suite reads the metrics, as resolved on the cluster.
type Endpoint struct {
	// Kind is config.MetricsService or config.MetricsPrometheus.
	Kind string `json:"kind"`
	// Namespace, Name and Port are the exporter Service's (Port 0: its metrics port by name, or its only one).
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Port      int    `json:"port,omitempty"`
	// URL is the Prometheus base URL.
	URL string `json:"url,omitempty"`
	// Found says how the endpoint was chosen.
	Found string `json:"found"`
}

// Present reports whether an endpoint was resolved.
func (e Endpoint) Present() bool { return e.Kind != "" }

// String names the endpoint for the record and messages.
func (e Endpoint) String() string {
	switch e.Kind {
	case config.MetricsService:
		port := ""
		if e.Port > 0 {
			port = fmt.Sprintf(":%d", e.Port)
		}
		return fmt.Sprintf("Service %s/%s%s (%s)", e.Namespace, e.Name, port, e.Found)
	case config.MetricsPrometheus:
		return fmt.Sprintf("Prometheus %s (%s)", e.URL, e.Found)
	}
	return "none"
}

// Discover resolves the configured endpoint: a named one as given, "auto" as the first Service (by
// namespace and name) that carries an exporter label. It returns why there is none otherwise.
func Discover(ctx context.Context, kube kubernetes.Interface, configured string) (Endpoint, string) {
	want, err := config.ParseMetricsEndpoint(configured)
	if err != nil {
		return Endpoint{}, err.Error()
	}
	switch want.Kind {
	case config.MetricsNone:
		return Endpoint{}, "--accelerator-metrics=none"
	case config.MetricsService:
		return Endpoint{Kind: want.Kind, Namespace: want.Namespace, Name: want.Name, Port: want.Port, Found: "--accelerator-metrics"}, ""
	case config.MetricsPrometheus:
		return Endpoint{Kind: want.Kind, URL: want.URL, Found: "--accelerator-metrics"}, ""
	}
	var tried []string
	for _, sel := range exporterSelectors {
		list, err := kube.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return Endpoint{}, fmt.Sprintf("cannot list Services to find a DCGM exporter (%v); name it with --accelerator-metrics=service:NAMESPACE/NAME[:PORT] or prometheus:URL", err)
		}
		if len(list.Items) == 0 {
			tried = append(tried, sel)
			continue
		}
		svcs := list.Items
		slices.SortFunc(svcs, func(a, b corev1.Service) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
		s := svcs[0]
		return Endpoint{Kind: config.MetricsService, Namespace: s.Namespace, Name: s.Name, Found: "auto: Service labelled " + sel}, ""
	}
	return Endpoint{}, fmt.Sprintf("no accelerator metrics endpoint: no Service is labelled %s (a DCGM exporter's); install one, or name it with --accelerator-metrics=service:NAMESPACE/NAME[:PORT] or prometheus:URL",
		strings.Join(tried, " or "))
}

// Sample is one metric sample with its labels.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// String is the sample as an exposition line.
func (s Sample) String() string {
	keys := slices.Sorted(maps.Keys(s.Labels))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, s.Labels[k])
	}
	return fmt.Sprintf("%s{%s} %g", s.Name, strings.Join(parts, ","), s.Value)
}

// ParseText parses the Prometheus text exposition format into samples.
func ParseText(text string) ([]Sample, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	var out []Sample
	for name, f := range families {
		for _, m := range f.GetMetric() {
			s := Sample{Name: name, Labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetGauge() != nil:
				s.Value = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				s.Value = m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				s.Value = m.GetUntyped().GetValue()
			}
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Sample) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// Holder is a running pod and the physical devices (GPU UUIDs) it holds on its node.
type Holder struct {
	Namespace, Pod, Node string
	Devices              []string
}

// Finding is what the check found for a holder's devices.
type Finding struct {
	// Samples are the holder's devices' utilisation and memory samples, as exposition lines.
	Samples []string
	// Attributed is false when the exporter attributes no device to any pod (its Kubernetes mapping is
	// off), so only the devices' presence was checked.
	Attributed bool
}

// Check requires, for every device of h, a utilisation sample (GPU_UTIL or GR_ENGINE_ACTIVE) and a
// framebuffer-used sample whose UUID label is the device; and, where the exporter attributes any sample
// to a pod, that the device's samples name h's pod and namespace. The error names the device and what
// the exporter showed instead.
func Check(samples []Sample, h Holder) (Finding, error) {
	if len(h.Devices) == 0 {
		return Finding{}, fmt.Errorf("pod %s/%s holds no device to look for", h.Namespace, h.Pod)
	}
	f := Finding{Attributed: slices.ContainsFunc(samples, func(s Sample) bool { _, _, ok := podOf(s); return ok })}
	var problems []string
	for _, dev := range h.Devices {
		mine := slices.DeleteFunc(slices.Clone(samples), func(s Sample) bool { return s.Labels[LabelUUID] != dev })
		util := slices.ContainsFunc(mine, func(s Sample) bool { return s.Name == GPUUtil || s.Name == EngineActive })
		mem := slices.ContainsFunc(mine, func(s Sample) bool { return s.Name == FBUsed })
		if !util || !mem {
			problems = append(problems, fmt.Sprintf("device %s held by pod %s/%s on %s has %s on the exporter (devices it lists: %s)",
				dev, h.Namespace, h.Pod, h.Node, missingWords(util, mem), strings.Join(devicesIn(samples), ", ")))
			continue
		}
		for _, s := range mine {
			if s.Name == GPUUtil || s.Name == EngineActive || s.Name == FBUsed {
				f.Samples = append(f.Samples, s.String())
			}
		}
		if !f.Attributed {
			continue
		}
		var others []string
		held := false
		for _, s := range mine {
			ns, pod, ok := podOf(s)
			switch {
			case !ok:
			case ns == h.Namespace && pod == h.Pod:
				held = true
			default:
				others = append(others, ns+"/"+pod)
			}
		}
		if !held {
			slices.Sort(others)
			problems = append(problems, fmt.Sprintf("device %s held by pod %s/%s is attributed to %s on the exporter, not to its holder",
				dev, h.Namespace, h.Pod, cmp.Or(strings.Join(slices.Compact(others), ", "), "no pod")))
		}
	}
	if len(problems) > 0 {
		return f, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return f, nil
}

// podOf is the namespace and pod a sample is attributed to, under either naming.
func podOf(s Sample) (ns, pod string, ok bool) {
	for _, l := range attributionLabels {
		if p := s.Labels[l[0]]; p != "" {
			return s.Labels[l[1]], p, true
		}
	}
	return "", "", false
}

func missingWords(util, mem bool) string {
	switch {
	case !util && !mem:
		return "no " + GPUUtil + " and no " + FBUsed + " sample"
	case !util:
		return "no " + GPUUtil + " (or " + EngineActive + ") sample"
	}
	return "no " + FBUsed + " sample"
}

// devicesIn are the distinct UUIDs the samples name.
func devicesIn(samples []Sample) []string {
	var out []string
	for _, s := range samples {
		if u := s.Labels[LabelUUID]; u != "" {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}
