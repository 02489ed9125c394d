package fakeplugin

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/internal/workload/podresources"
)

// The agent's stand-in for NVIDIA's dcgm-exporter: a Prometheus endpoint with the exporter's default field
// names and labels for every GPU of the node, whichever path serves it, and, as the exporter does on
// Kubernetes, the pod, namespace and container that hold each GPU, read from the kubelet's PodResources API
// at every scrape. Monitoring queries and dashboards written for a real GPU node read the fake one the same
// way, and the suite can check that the exporter sees every GPU a pod holds and names the right pod.

// DefaultMetricsAddress is dcgm-exporter's listen address (its port 9400).
const DefaultMetricsAddress = ":9400"

// MetricsPath is where the samples are served, as dcgm-exporter serves them.
const MetricsPath = "/metrics"

// MetricsWrongPodSuffix is appended to the holder's pod name under FaultMetricsWrongPod.
const MetricsWrongPodSuffix = "-misattributed"

// The gauges served, under the DCGM field names dcgm-exporter's default counters use.
const (
	MetricGPUUtil     = "DCGM_FI_DEV_GPU_UTIL"      // GPU utilisation, percent
	MetricMemCopyUtil = "DCGM_FI_DEV_MEM_COPY_UTIL" // memory bandwidth utilisation, percent
	MetricFBUsed      = "DCGM_FI_DEV_FB_USED"       // framebuffer memory in use, MiB
	MetricFBFree      = "DCGM_FI_DEV_FB_FREE"       // framebuffer memory free, MiB
	MetricGPUTemp     = "DCGM_FI_DEV_GPU_TEMP"      // GPU temperature, °C
	MetricPowerUsage  = "DCGM_FI_DEV_POWER_USAGE"   // power draw, W
)

// The labels of every sample, spelt as dcgm-exporter writes them, and the three it adds to the samples of a
// GPU a container holds (its current names; older releases wrote pod_name, pod_namespace, container_name).
const (
	MetricLabelGPU           = "gpu"        // the GPU's index (its minor)
	MetricLabelUUID          = "UUID"       // "GPU-…"
	MetricLabelPCIBusID      = "pci_bus_id" // as nvidia-smi prints it, "00000000:18:00.0"
	MetricLabelDevice        = "device"     // "nvidia<index>"
	MetricLabelModelName     = "modelName"  // the product name
	MetricLabelHostname      = "Hostname"   // the node
	MetricLabelDriverVersion = "DCGM_FI_DRIVER_VERSION"
	MetricLabelPod           = "pod"
	MetricLabelNamespace     = "namespace"
	MetricLabelContainer     = "container"
)

// What the fake reports for a GPU's temperature and power. The fake GPUs run nothing, so utilisation and
// used memory are honestly zero; temperature and power are made-up constants in the range an idle H100
// reports, present so that queries expecting those series find them. They say nothing about the pods.
const (
	idleTemperatureC = 31
	idlePowerW       = 69.5
)

// podResourcesTimeout bounds one scrape's question to the kubelet: its socket is local, so a slow answer is
// a wedged kubelet, and well under Prometheus's default 10 s scrape timeout the samples go out without
// their pods rather than not at all.
const podResourcesTimeout = 3 * time.Second

// attributionLogEvery is how often a PodResources API that keeps failing is logged again (each scrape
// would flood the log).
const attributionLogEvery = 5 * time.Minute

// metricsShutdownGrace is how long a scrape under way may finish once the agent stops.
const metricsShutdownGrace = 5 * time.Second

// gpuGauge is one gauge of every GPU and how its value follows from the GPU.
type gpuGauge struct {
	name, help string
	value      func(fakegpu.GPU) float64
}

func gpuGauges() []gpuGauge {
	zero := func(fakegpu.GPU) float64 { return 0 }
	return []gpuGauge{
		{MetricGPUUtil, "GPU utilisation (percent).", zero},
		{MetricMemCopyUtil, "Memory bandwidth utilisation (percent).", zero},
		{MetricFBUsed, "Framebuffer memory in use (MiB).", zero},
		{MetricFBFree, "Framebuffer memory free (MiB).", func(g fakegpu.GPU) float64 { return float64(g.MemoryMiB) }},
		{MetricGPUTemp, "GPU temperature (degrees C); a constant of the fake.", func(fakegpu.GPU) float64 { return idleTemperatureC }},
		{MetricPowerUsage, "Power draw (W); a constant of the fake.", func(fakegpu.GPU) float64 { return idlePowerW }},
	}
}

// holder is a container that holds a GPU, as the kubelet records it.
type holder struct{ namespace, pod, container string }

// gpuCollector emits every GPU's gauges at each scrape as const metrics. It is unchecked (Describe sends
// nothing): a held GPU's samples carry the pod labels and a free GPU's do not, as dcgm-exporter writes them,
// so one metric has two label sets.
type gpuCollector struct {
	p      *Plugin
	gauges []gpuGauge
	free   map[string]*prometheus.Desc // per gauge: the labels of a GPU nobody holds
	held   map[string]*prometheus.Desc // per gauge: the same and the holder's

	mu        sync.Mutex
	failing   bool      // the last question to the kubelet failed
	warnedAt  time.Time // when a failure was last logged
	faultNote string    // what the metrics faults did at the last scrape
}

func newGPUCollector(p *Plugin) *gpuCollector {
	c := &gpuCollector{p: p, gauges: gpuGauges(), free: map[string]*prometheus.Desc{}, held: map[string]*prometheus.Desc{}}
	labels := []string{MetricLabelGPU, MetricLabelUUID, MetricLabelPCIBusID, MetricLabelDevice, MetricLabelModelName, MetricLabelHostname, MetricLabelDriverVersion}
	for _, g := range c.gauges {
		c.free[g.name] = prometheus.NewDesc(g.name, g.help, labels, nil)
		c.held[g.name] = prometheus.NewDesc(g.name, g.help, append(slices.Clone(labels), MetricLabelPod, MetricLabelNamespace, MetricLabelContainer), nil)
	}
	return c
}

// Describe implements prometheus.Collector; see gpuCollector for why it describes nothing.
func (c *gpuCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector: every GPU of the inventory, once per container holding it (a GPU
// shared through replicas, MIG devices or DRA shares has a sample set per holder, as dcgm-exporter clones a
// shared GPU's samples), or once without holder labels when none does.
func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	// The inventory is what the fake driver says, so the driver version is the one nvidia-smi in a container
	// prints (FaultDriverMismatch included), as dcgm-exporter reads it from the driver.
	inv := p.Inventory()
	held := c.holders()
	p.mu.Lock()
	missing, wrongPod := p.faults[FaultMetricsMissingDevice], p.faults[FaultMetricsWrongPod]
	p.mu.Unlock()
	var omit []int
	if missing {
		omit = firstOfEachPod(held)
	}
	c.noteFaults(omit, wrongPod && len(held) > 0)
	for _, g := range inv.GPUs {
		if slices.Contains(omit, g.Minor) {
			continue
		}
		// The fake's inventory gives every GPU a PCI bus ID, so pci_bus_id is always there.
		labels := []string{strconv.Itoa(g.Minor), g.UUID, g.PCIBusID, "nvidia" + strconv.Itoa(g.Minor), g.Product, p.cfg.NodeName, inv.DriverVersion}
		for _, gauge := range c.gauges {
			v := gauge.value(g)
			if len(held[g.Minor]) == 0 {
				ch <- prometheus.MustNewConstMetric(c.free[gauge.name], prometheus.GaugeValue, v, labels...)
				continue
			}
			for _, h := range held[g.Minor] {
				pod := h.pod
				if wrongPod {
					pod += MetricsWrongPodSuffix
				}
				ch <- prometheus.MustNewConstMetric(c.held[gauge.name], prometheus.GaugeValue, v, append(slices.Clone(labels), pod, h.namespace, h.container)...)
			}
		}
	}
}

// holders asks the kubelet which containers hold which of the node's GPUs (heldGPUs). It returns nil when
// it cannot tell (no socket configured, none there, the kubelet not answering): the samples then go out
// without their pods, and the failure is logged at most every attributionLogEvery.
func (c *gpuCollector) holders() map[int][]holder {
	socket := c.p.cfg.PodResourcesSocket
	if socket == "" {
		return nil
	}
	// A missing socket fails at once instead of waiting out the timeout for it (the kubelet makes it at start).
	var report podresources.Report
	_, err := os.Stat(socket)
	if err == nil {
		report, err = podresources.Query(context.Background(), socket, podresources.Filter{}, podResourcesTimeout)
	}
	c.noteAttribution(socket, err)
	if err != nil {
		return nil
	}
	return c.p.heldGPUs(report.Pods)
}

func (c *gpuCollector) noteAttribution(socket string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil && c.failing:
		c.failing = false
		c.p.log.Info("metrics: the kubelet's PodResources API answers again; samples carry their pods", "socket", socket)
	case err != nil && (!c.failing || time.Since(c.warnedAt) >= attributionLogEvery):
		c.failing, c.warnedAt = true, time.Now()
		c.p.log.Warn("metrics: cannot ask the kubelet which pods hold the GPUs; serving the samples without pod labels",
			"socket", socket, "err", err, "logged_again_after", attributionLogEvery)
	}
}

// noteFaults logs what the metrics faults do to the scrapes when that changes, so a fault shows in the log
// without a line per scrape.
func (c *gpuCollector) noteFaults(omitted []int, misattributed bool) {
	var what []string
	if len(omitted) > 0 {
		what = append(what, fmt.Sprintf("%s: every sample of GPU(s) %v left out", FaultMetricsMissingDevice, omitted))
	}
	if misattributed {
		what = append(what, fmt.Sprintf("%s: held GPUs attributed to their pods' names with %q appended", FaultMetricsWrongPod, MetricsWrongPodSuffix))
	}
	note := strings.Join(what, "; ")
	c.mu.Lock()
	defer c.mu.Unlock()
	if note != c.faultNote && note != "" {
		c.p.log.Warn("FAULT INJECTION: the metrics endpoint misreports", "what", note)
	}
	c.faultNote = note
}

// firstOfEachPod are, for each pod holding GPUs, the lowest-indexed of them, sorted: what
// FaultMetricsMissingDevice leaves out, so every holder misses one of its GPUs whoever else holds others.
func firstOfEachPod(held map[int][]holder) []int {
	first := map[string]int{}
	for _, i := range slices.Sorted(maps.Keys(held)) {
		for _, h := range held[i] {
			if _, seen := first[h.namespace+"/"+h.pod]; !seen {
				first[h.namespace+"/"+h.pod] = i
			}
		}
	}
	out := slices.Sorted(maps.Values(first))
	return slices.Compact(out)
}

// heldGPUs maps the kubelet's record of allocations onto the node's GPUs: per physical index, the containers
// holding it, each once, in the report's order (pods by namespace and name, containers by name).
//
// A device-plugin ID of one of the agent's resources stands for its GPU: the GPU's UUID itself, a replica
// ID "<uuid>::<n>" (time-slicing, MPS), or a MIG device's UUID (its parent GPU). A DRA device counts when it
// is the agent's (its driver name, the node's pool): a whole GPU "gpu-<index>" (a share of a shared GPU has
// the same name) or a MIG partition, which stands for its parent GPU. Anything else (another resource or
// driver, another node's pool, the phantoms of the faults) holds none of this node's GPUs.
func (p *Plugin) heldGPUs(pods []podresources.Pod) map[int][]holder {
	held := map[int][]holder{}
	hold := func(i int, h holder) {
		if i >= 0 && i < len(p.table.uuids) && !slices.Contains(held[i], h) {
			held[i] = append(held[i], h)
		}
	}
	for _, pod := range pods {
		for _, c := range pod.Containers {
			h := holder{namespace: pod.Namespace, pod: pod.Name, container: c.Name}
			for _, res := range slices.Sorted(maps.Keys(c.Devices)) {
				if _, ours := p.table.resource(res); !ours {
					continue
				}
				for _, id := range c.Devices[res] {
					if i, ok := p.table.parentOf(id); ok {
						hold(i, h)
					}
				}
			}
			for _, d := range c.DynamicResources {
				if d.Driver != p.cfg.DRADriverName || d.Pool != p.cfg.NodeName {
					continue
				}
				if i, ok := p.draGPU(d.Device); ok {
					hold(i, h)
				}
			}
		}
	}
	return held
}

// draGPU is the physical index behind one of the agent's DRA device names: a whole GPU's, or a MIG
// partition's parent GPU. ok is false for any other name and for a GPU that is not on the DRA path.
func (p *Plugin) draGPU(name string) (int, bool) {
	i, ok := draIndex(name)
	if !ok || name != DRADeviceName(i) {
		if i, _, ok = draPartition(name); !ok {
			return 0, false
		}
	}
	return i, i >= p.table.dp && i < len(p.table.uuids)
}

// metricsHandler serves the GPU samples from a registry of their own: no Go runtime or process metrics,
// only what the exporter of a GPU node serves.
func (p *Plugin) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newGPUCollector(p))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(p.log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// ServeMetrics serves MetricsPath on l until ctx ends; scrapes under way get metricsShutdownGrace to finish.
// It returns an error only when the server stopped on its own.
func (p *Plugin) ServeMetrics(ctx context.Context, l net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle(MetricsPath, p.metricsHandler())
	p.log.Info("serving metrics", "address", l.Addr().String(), "path", MetricsPath, "pod_resources", p.cfg.PodResourcesSocket)
	return p.serveHTTP(ctx, l, mux, "metrics endpoint")
}

// serveHTTP serves handler on l until ctx ends; requests under way get metricsShutdownGrace to finish. It
// returns an error only when the server stopped on its own.
func (p *Plugin) serveHTTP(ctx context.Context, l net.Listener, handler http.Handler, what string) error {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	shutDown := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(shutDown)
		sctx, cancel := context.WithTimeout(context.Background(), metricsShutdownGrace)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	err := srv.Serve(l) // closes l
	if stop() {
		return fmt.Errorf("%s on %s: %w", what, l.Addr(), err)
	}
	<-shutDown
	p.log.Info(what+" stopped", "address", l.Addr().String())
	return nil
}
