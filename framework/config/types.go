// Package config is the suite's configuration: one YAML file (--config) plus flags, flags winning.
// Everything that differs between the local kind cluster and a real cluster lives here, and nothing
// else in the suite may assume a value the user could configure.
package config

import (
	"cmp"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/timeouts"
)

// Allocation path names, as used in config, labels and reports.
const (
	// PathAuto selects every allocation path discovery finds.
	PathAuto = "auto"
	// PathDevicePlugin is the extended-resource path (nvidia.com/gpu limits).
	PathDevicePlugin = "device-plugin"
	// PathDRA is the Dynamic Resource Allocation path (DeviceClass, ResourceClaimTemplate).
	PathDRA = "dra"
	// PathExtendedDRA is an extended resource (nvidia.com/gpu limits) served by a DRA driver through a
	// DeviceClass's spec.extendedResourceName, on nodes where no device plugin advertises it.
	PathExtendedDRA = "extended-resource-dra"
)

// Queue modes.
const (
	// QueuesOwn creates a ResourceFlavor, ClusterQueue and LocalQueue per spec (the default).
	QueuesOwn = "own"
	// QueuesExisting submits to an existing LocalQueue, named in Queues.LocalQueue, in every spec namespace.
	QueuesExisting = "existing"
)

// Default pool selectors. They match the local kind cluster; on a real cluster they usually match
// nothing, and discovery then falls back to "the nodes that have the devices".
const (
	DefaultGPUPoolSelector       = "gpuconform.io/pool=gpu"
	DefaultCanaryPoolSelector    = "gpuconform.io/pool=canary"
	DefaultKnownGoodPoolSelector = "gpuconform.io/pool=known-good"
)

// Config is the whole configuration. Field names are the YAML keys.
type Config struct {
	// Kubeconfig is the kubeconfig file; empty means $KUBECONFIG or ~/.kube/config.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Context is the kubeconfig context; empty means the kubeconfig's current context.
	Context string `json:"context,omitempty"`
	// NamespacePrefix starts every namespace the suite creates.
	NamespacePrefix string `json:"namespacePrefix,omitempty"`
	// AllocationPaths is ["auto"] or an explicit subset of "device-plugin", "dra". An explicit path that
	// discovery does not find fails the run instead of being skipped.
	AllocationPaths []string `json:"allocationPaths,omitempty"`
	// DevicePlugin configures the device-plugin path.
	DevicePlugin DevicePluginConfig `json:"devicePlugin,omitempty"`
	// DRA configures the DRA path.
	DRA DRAConfig `json:"dra,omitempty"`
	// Pools selects the node pools by label selector.
	Pools PoolsConfig `json:"pools,omitempty"`
	// Queues says whether specs create their own Kueue queues or reuse one.
	Queues QueuesConfig `json:"queues,omitempty"`
	// Kueue locates the Kueue installation.
	Kueue KueueConfig `json:"kueue,omitempty"`
	// Gateway says which Gateway API implementation the inference gateway scenario routes through.
	Gateway GatewayConfig `json:"gateway,omitempty"`
	// Disruptive opts in to specs that change nodes. Off by default.
	Disruptive bool `json:"disruptive,omitempty"`
	// Image is the workload image.
	Image string `json:"image,omitempty"`
	// TimeoutProfile is "auto" (default: local on a kind cluster, real otherwise), "local" or "real".
	TimeoutProfile string `json:"timeoutProfile,omitempty"`
	// RunTimeout bounds the whole run (the suite's timeout); zero means the later of Ginkgo's --timeout
	// and 90 minutes.
	RunTimeout metav1.Duration `json:"timeout,omitempty"`
	// Namespace, when set, is an existing namespace every spec runs in (team-namespace mode): the suite
	// creates no namespace and no cluster-scoped object, names and labels its objects per spec, and
	// cleans up by label. Kueue specs then need queues.localQueue in it (NS/NAME there sets Namespace).
	Namespace string `json:"namespace,omitempty"`
	// HelperNamespace is where the device-plugin path's podresources helper runs: it reads the kubelet's
	// pod-resources socket through a hostPath, as root, which Pod Security "restricted" refuses. Name a
	// namespace your policies exempt (empty: the spec's namespace; refused there, the identity check
	// falls back to a count and the verdict is INCOMPLETE).
	HelperNamespace string `json:"helperNamespace,omitempty"`
	// DedicationTaints are taint keys that reserve GPU nodes (e.g. nvidia.com/gpu); test pods tolerate them
	// wherever they appear in the GPU pool. Taints every GPU node carries are found without this list.
	DedicationTaints []string `json:"dedicationTaints,omitempty"`
	// AutoTolerateDedicationTaints lets test pods tolerate the dedication taints (default true). Off, the
	// pods carry only Tolerations, and a pool reserved by a taint shows as UntoleratedTaint.
	AutoTolerateDedicationTaints *bool `json:"autoTolerateDedicationTaints,omitempty"`
	// ArtifactsDir receives reports, dumps and logs; default $ARTIFACTS or _artifacts.
	ArtifactsDir string `json:"artifactsDir,omitempty"`
	// KeepResources leaves every created object in place for debugging (the leak audit then reports them
	// as kept instead of failing).
	KeepResources bool `json:"keepResources,omitempty"`
	// CleanupLeftovers deletes an earlier run's labelled objects at suite start instead of refusing to run:
	// only a dead run's (no current lease), never those of a run that is still going.
	CleanupLeftovers bool `json:"cleanupLeftovers,omitempty"`
	// WaitForOtherRuns bounds how long a run waits for live runs on the cluster that hold what it needs (a
	// path, the nodes, the canary); past it the run is INCOMPLETE, naming them. Nil means the default,
	// zero not to wait.
	WaitForOtherRuns *metav1.Duration `json:"waitForOtherRuns,omitempty"`
	// RunLeaseNamespace is where runs keep the Leases that say they are alive (default: the team namespace
	// in team-namespace mode, else "default").
	RunLeaseNamespace string `json:"runLeaseNamespace,omitempty"`
	// Tolerations are added to every test pod (real clusters taint GPU nodes).
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// PodResources is the CPU and memory every container the suite runs requests and is limited to.
	PodResources PodResourcesConfig `json:"podResources,omitempty"`
	// Signoff is the verdict policy: what must be exercised, and the baseline to compare with.
	Signoff SignoffConfig `json:"signoff,omitempty"`
	// Faults chooses how the failure scenario injects node and device faults (with Disruptive only).
	Faults FaultsConfig `json:"faults,omitempty"`
	// Checkpoints is storage that outlives a node, for the scenarios that resume a job elsewhere.
	Checkpoints CheckpointConfig `json:"checkpoints,omitempty"`
	// Upgrade configures the driver-upgrade rehearsal on the canary pool (with Disruptive only).
	Upgrade UpgradeConfig `json:"upgrade,omitempty"`
	// DRAUpgrade configures the DRA driver's rolling-upgrade rehearsal on the canary pool (with
	// Disruptive only).
	DRAUpgrade DRAUpgradeConfig `json:"draUpgrade,omitzero"`
	// Preemption names what the preemption scenario uses on an existing installation (queues.mode
	// existing): the WorkloadPriorityClasses of the preemptible and of the urgent job.
	Preemption PreemptionConfig `json:"preemption,omitempty"`
	// NoisyNeighbour is the workload the sharing scenario measures GPU latency with, alone and beside a
	// memory-heavy and a compute-heavy neighbour on one shared GPU. Without an image it is the workload
	// image's `gpu-workload noisy` (CUDA kernels through libcuda; a stand-in where the container has none).
	NoisyNeighbour NoisyNeighbourConfig `json:"noisyNeighbour,omitempty"`
	// DeviceTest is the GPU vendor's own small device test that the allocation scenario runs in a pod given
	// one device on each path (NVIDIA's CUDA vectorAdd sample on a real cluster). Empty: the workload image's
	// stand-in, `gpu-workload device-test`.
	DeviceTest DeviceTestConfig `json:"deviceTest,omitempty"`
	// Profile is what the run is for: "signoff" (default: every scenario) or "ai-conformance" /
	// "ai-conformance-1.NN" (only the specs that prove a Kubernetes AI Conformance requirement of that
	// checklist version, the latest without one, with an evidence page per requirement and the checklist
	// filled in).
	Profile string `json:"profile,omitempty"`
	// AcceleratorMetrics is where the accelerator metrics scenario reads per-device metrics: "auto"
	// (default: a Service labelled as NVIDIA's DCGM exporter), "none", "service:NAMESPACE/NAME[:PORT]" (a
	// DCGM exporter Service, scraped per node through the API server's pod proxy) or "prometheus:URL" (a
	// Prometheus that scrapes the exporter, queried over HTTP from where the suite runs).
	AcceleratorMetrics string `json:"acceleratorMetrics,omitempty"`
	// Monitoring is the cluster's monitoring system, which the service metrics scenario asks whether it
	// collected a workload's own metrics: "auto" (default: the accelerator metrics' Prometheus, else a
	// Service labelled as a Prometheus server's), "none", "service:NAMESPACE/NAME[:PORT]" (a Prometheus
	// Service, queried through the API server's service proxy) or "prometheus:URL".
	Monitoring string `json:"monitoring,omitempty"`
	// HPAMetric is the pods metric of the custom metrics API (custom.metrics.k8s.io) on which the pod
	// autoscaling scenario's HPA scales a GPU Deployment of the model-server stand-in (default
	// DefaultHPAMetric: the rate of its request counter, the name prometheus-adapter's documented rule
	// X_total → X_per_second gives it). Name the metric the platform's adapter serves for it.
	HPAMetric string `json:"hpaMetric,omitempty"`
	// Product is the AI Conformance submission's metadata (who certifies which product), written into
	// PRODUCT.yaml; a field left out stays blank there with a TODO.
	Product conformance.Metadata `json:"product,omitempty"`
}

// DefaultHPAMetric is HPAMetric's default.
const DefaultHPAMetric = "gpuconform_inference_requests_per_second"

// HPAMetricName is the configured HPA metric, or its default.
func (c Config) HPAMetricName() string { return cmp.Or(c.HPAMetric, DefaultHPAMetric) }

// MetricsEndpoint is a parsed AcceleratorMetrics value.
type MetricsEndpoint struct {
	// Kind is MetricsAuto, MetricsNone, MetricsService or MetricsPrometheus.
	Kind string
	// Namespace, Name and Port name the exporter Service (Port 0: the Service's port named "metrics", or
	// its only port).
	Namespace, Name string
	Port            int
	// URL is the Prometheus base URL.
	URL string
}

// The kinds of accelerator metrics endpoint.
const (
	MetricsAuto       = "auto"
	MetricsNone       = "none"
	MetricsService    = "service"
	MetricsPrometheus = "prometheus"
)

// ParseMetricsEndpoint parses an AcceleratorMetrics value ("" is auto).
func ParseMetricsEndpoint(v string) (MetricsEndpoint, error) {
	switch v {
	case "", MetricsAuto:
		return MetricsEndpoint{Kind: MetricsAuto}, nil
	case MetricsNone:
		return MetricsEndpoint{Kind: MetricsNone}, nil
	}
	kind, rest, _ := strings.Cut(v, ":")
	switch kind {
	case MetricsService:
		ref, port, hasPort := strings.Cut(rest, ":")
		ns, name, ok := strings.Cut(ref, "/")
		if !ok || !isDNSLabel(ns) || !isDNSLabel(name) {
			return MetricsEndpoint{}, fmt.Errorf("%q: want service:NAMESPACE/NAME[:PORT], e.g. service:gpu-operator/nvidia-dcgm-exporter:9400", v)
		}
		e := MetricsEndpoint{Kind: MetricsService, Namespace: ns, Name: name}
		if hasPort {
			n, err := strconv.Atoi(port)
			if err != nil || n <= 0 || n > 65535 {
				return MetricsEndpoint{}, fmt.Errorf("%q: port %q is not a port number", v, port)
			}
			e.Port = n
		}
		return e, nil
	case MetricsPrometheus:
		u, err := url.Parse(rest)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return MetricsEndpoint{}, fmt.Errorf("%q: want prometheus:URL with an http(s) URL, e.g. prometheus:http://prometheus.monitoring:9090", v)
		}
		return MetricsEndpoint{Kind: MetricsPrometheus, URL: strings.TrimSuffix(rest, "/")}, nil
	}
	return MetricsEndpoint{}, fmt.Errorf("%q: want auto, none, service:NAMESPACE/NAME[:PORT] or prometheus:URL", v)
}

// NoisyNeighbourRoleEnv is the environment variable that tells the noisy-neighbour workload its role: the
// latency probe, or one of the two neighbours that load the GPU until they are deleted.
const NoisyNeighbourRoleEnv = "GPUCONFORM_NOISY_ROLE"

// The roles of the noisy-neighbour workload, the values of NoisyNeighbourRoleEnv.
const (
	// NoisyRoleProbe runs a short latency measurement and ends its log with one JSON line
	// {"p50_ms": …, "p99_ms": …}.
	NoisyRoleProbe = "probe"
	// NoisyRoleMemory keeps the GPU's memory busy (allocation and copies) until it is deleted.
	NoisyRoleMemory = "memory-heavy"
	// NoisyRoleCompute keeps the GPU's compute units busy until it is deleted.
	NoisyRoleCompute = "compute-heavy"
)

// NoisyNeighbourConfig names the workload of the noisy-neighbour measurement: one image whose command
// plays the role NoisyNeighbourRoleEnv names.
type NoisyNeighbourConfig struct {
	// Image is a workload image that drives the device (CUDA); empty: the workload image's own.
	Image string `json:"image,omitempty"`
	// Command is the container's command; empty runs the image's entrypoint.
	Command []string `json:"command,omitempty"`
	// MaxP99 is the probe's highest p99 latency beside a neighbour that passes (default
	// DefaultNoisyMaxP99): above it a tenant of the shared GPU is starved by its neighbour.
	MaxP99 metav1.Duration `json:"maxP99,omitempty"`
}

// DefaultNoisyMaxP99 is NoisyNeighbourConfig.MaxP99's default. A probe kernel takes well under a
// millisecond alone; beside a neighbour, time-slicing adds the neighbour's slices (milliseconds) and MPS
// shares the SMs. A p99 above 100 ms means a latency-bound tenant waits for whole kernels of its
// neighbour, which no serving workload on a shared GPU can live with.
const DefaultNoisyMaxP99 = 100 * time.Millisecond

// DeviceTestConfig names the vendor's device test: an image that exits 0 when a CUDA program runs on the
// GPU it is given (the sample's own "Test PASSED" is printed, not read), and non-zero otherwise.
type DeviceTestConfig struct {
	// Image is the test's image, e.g. nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0; empty: the
	// workload image running `gpu-workload device-test`.
	Image string `json:"image,omitempty"`
	// Command is the container's command (the flag splits it on white space); empty runs the image's
	// entrypoint. Only with Image: the workload image has one command of its own.
	Command []string `json:"command,omitempty"`
}

// PodResourcesConfig is what every container of every pod the suite runs (test pods, their init and
// sidecar containers, the helper pods) requests, with limits equal: a namespace whose ResourceQuota covers
// limits.cpu or limits.memory refuses pods that declare none, and a LimitRange bounds them. Values are
// Kubernetes quantities; empty means the suite's defaults (fixtures.DefaultCPU, fixtures.DefaultMemory).
type PodResourcesConfig struct {
	// CPU, e.g. 100m.
	CPU string `json:"cpu,omitempty"`
	// Memory, e.g. 128Mi.
	Memory string `json:"memory,omitempty"`
}

// Quantities returns CPU and Memory parsed; an empty one (the default) or one Validate refuses is zero.
func (p PodResourcesConfig) Quantities() (cpu, memory resource.Quantity) {
	parse := func(s string) resource.Quantity {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return resource.Quantity{}
		}
		return q
	}
	return parse(p.CPU), parse(p.Memory)
}

// UpgradeConfig configures the upgrade rehearsal.
type UpgradeConfig struct {
	// To is the driver version to rehearse; on the project's local cluster the default is 560.35.03.
	To string `json:"to,omitempty"`
	// Command is the user's upgrade script: `SCRIPT upgrade|rollback VERSION NODE...`; without it only the
	// local cluster's provider exists.
	Command string `json:"command,omitempty"`
	// VersionLabel is the node label that reports the driver version (default NVIDIA GFD's
	// nvidia.com/cuda.driver-version.full).
	VersionLabel string `json:"versionLabel,omitempty"`
	// KeepUpgraded leaves the canary pool on the new version when the rehearsal passes (default: it is rolled
	// back; a failed rehearsal is always rolled back).
	KeepUpgraded bool `json:"keepUpgraded,omitempty"`
	// Load is the representative load run on the upgraded canary and on the known-good pool side by side.
	Load UpgradeLoadConfig `json:"load,omitzero"`
	// Serving is the serving reserve the drain of the canary pool must keep.
	Serving ServingReserveConfig `json:"serving,omitzero"`
}

// DRAUpgradeConfig configures the DRA driver's rolling-upgrade rehearsal.
type DRAUpgradeConfig struct {
	// To is the version the DRA kubelet plugin rolls to; on the project's local cluster the default is
	// the one its canary agent declares (v2).
	To string `json:"to,omitempty"`
	// Command is the user's script that rolls the DRA driver's kubelet plugin on the given nodes:
	// `SCRIPT upgrade|rollback VERSION NODE...` (a Helm upgrade of the canary pool's release, say).
	Command string `json:"command,omitempty"`
}

// UpgradeLoadConfig is the rehearsal's representative load. Its progress is the largest "step" of the JSON
// lines it prints on stdout (the suite's training workload prints one per checkpoint); its rate on the
// upgraded canary is compared with the same load's on the known-good pool.
type UpgradeLoadConfig struct {
	// Image and Command: the load (default: the workload image's training loop).
	Image   string   `json:"image,omitempty"`
	Command []string `json:"command,omitempty"`
	// Duration is how long each copy runs (default 30s on the local cluster, 2m on a real one).
	Duration metav1.Duration `json:"duration,omitzero"`
	// MinRatio is the lowest canary/known-good progress-rate ratio that passes (default 0.8).
	MinRatio float64 `json:"minRatio,omitempty"`
}

// ServingReserveConfig is the serving Deployment the rehearsal starts on the canary pool before the drain,
// with a PodDisruptionBudget: the drain must keep MinAvailable replicas serving throughout.
type ServingReserveConfig struct {
	// Replicas of the serving Deployment, one device each (nil: 2; 0: no serving reserve).
	Replicas *int `json:"replicas,omitempty"`
	// MinAvailable is the PodDisruptionBudget's minAvailable (nil: Replicas-1).
	MinAvailable *int `json:"minAvailable,omitempty"`
}

// ServingReplicas is the serving reserve's replicas and minimum, defaults applied.
func (u UpgradeConfig) ServingReplicas() (replicas, minAvailable int) {
	replicas = 2
	if u.Serving.Replicas != nil {
		replicas = *u.Serving.Replicas
	}
	minAvailable = max(replicas-1, 0)
	if u.Serving.MinAvailable != nil {
		minAvailable = *u.Serving.MinAvailable
	}
	return replicas, minAvailable
}

// DefaultLoadMinRatio is UpgradeLoadConfig.MinRatio's default: a canary that progresses at less than 80%
// of the known-good pool's rate under the same load is a regression.
const DefaultLoadMinRatio = 0.8

// PreemptionConfig names existing WorkloadPriorityClasses for the preemption scenario.
type PreemptionConfig struct {
	LowPriorityClass  string `json:"lowPriorityClass,omitempty"`
	HighPriorityClass string `json:"highPriorityClass,omitempty"`
}

// Fault providers (framework/faults).
const (
	FaultProviderAuto        = "auto"
	FaultProviderNone        = "none"
	FaultProviderLocal       = "local"
	FaultProviderCommand     = "command"
	FaultProviderKubeletStop = "kubelet-stop"
	FaultProviderTaintRule   = "device-taint-rule"
)

// FaultsConfig chooses the fault providers.
type FaultsConfig struct {
	// NodeProvider stops and starts GPU nodes: auto (local on the project's kind cluster, else command when
	// Command is set, else none), local, command, kubelet-stop or none.
	NodeProvider string `json:"nodeProvider,omitempty"`
	// DeviceProvider turns a device unhealthy: auto (local on the project's kind cluster, else command when
	// Command is set, else none), local, command or none. The DRA path uses DRADeviceProvider.
	DeviceProvider string `json:"deviceProvider,omitempty"`
	// DRADeviceProvider turns a DRA device unhealthy: auto (device-taint-rule where the API server serves
	// DeviceTaintRules, else as DeviceProvider), device-taint-rule, local, command or none.
	DRADeviceProvider string `json:"draDeviceProvider,omitempty"`
	// Command is the user's script for the command provider: `SCRIPT ACTION NODE [DEVICE]`.
	Command string `json:"command,omitempty"`
	// CommandDeviceEvicts says the command's device fault also evicts the pods using the device.
	CommandDeviceEvicts bool `json:"commandDeviceEvicts,omitempty"`
	// KubeletStopFor bounds each kubelet-stop outage (the helper thaws the kubelet after it).
	KubeletStopFor metav1.Duration `json:"kubeletStopFor,omitempty"`
	// EvictionToleration is the tolerationSeconds of the failure scenario's training pods for the
	// not-ready and unreachable taints: how long Kubernetes waits before evicting them from a lost node.
	EvictionToleration metav1.Duration `json:"evictionToleration,omitempty"`
}

// providers are the three provider choices.
func (f FaultsConfig) providers() []string {
	return []string{f.NodeProvider, f.DeviceProvider, f.DRADeviceProvider}
}

// CheckpointConfig is storage that outlives a node. Without either field, a directory every GPU node
// mounts from shared storage is discovered from the nodes' gpuconform.io/shared-dir annotation (the local
// cluster sets it); with none, specs that need it say "not exercised".
type CheckpointConfig struct {
	// StorageClass provisions a ReadWriteMany volume per spec.
	StorageClass string `json:"storageClass,omitempty"`
	// HostPath is a directory every GPU node mounts from the same shared storage (NFS, a kind extraMount),
	// offered to specs as a static ReadWriteMany PersistentVolume.
	HostPath string `json:"hostPath,omitempty"`
}

// SignoffConfig is the verdict policy (reports.Decide applies it).
type SignoffConfig struct {
	// Require are labels that must each have a passed spec: path:<name> or scenario:<name>. Empty means the
	// suite's default (every implemented scenario); every discovered path is always required.
	Require []string `json:"require,omitempty"`
	// AllowIncomplete signs off GO although something required was not exercised (the reasons stay listed).
	AllowIncomplete bool `json:"allowIncomplete,omitempty"`
	// Baseline is the compatibility record (gpuconform-record.json) of an earlier run: what passed there and
	// fails or is missing now is NO-GO.
	Baseline string `json:"baseline,omitempty"`
	// PreUpgrade declares the run a pre-upgrade signoff: without an upgrade rehearsal that passed (it needs
	// --disruptive, a canary pool and an upgrade provider) it is INCOMPLETE, whatever else passed.
	PreUpgrade bool `json:"preUpgrade,omitempty"`
}

// DevicePluginConfig configures the device-plugin path.
type DevicePluginConfig struct {
	// ResourceName is the extended resource; empty means discover it from node allocatable, preferring
	// nvidia.com/gpu.
	ResourceName string `json:"resourceName,omitempty"`
}

// DRAConfig configures the DRA path.
type DRAConfig struct {
	// DeviceClass is the DeviceClass to request; empty means a DeviceClass whose driver publishes
	// ResourceSlices.
	DeviceClass string `json:"deviceClass,omitempty"`
	// KueueResourceName is the resource Kueue accounts DRA devices as (Kueue's deviceClassMappings).
	KueueResourceName string `json:"kueueResourceName,omitempty"`
}

// PoolsConfig holds label selectors for the node pools.
type PoolsConfig struct {
	// GPU selects the nodes test workloads may land on.
	GPU string `json:"gpu,omitempty"`
	// Canary selects the nodes an upgrade rehearsal may change.
	Canary string `json:"canary,omitempty"`
	// KnownGood selects nodes on the last known-good stack, for comparison.
	KnownGood string `json:"knownGood,omitempty"`
	// Autoscaling selects the nodes of a node group a cluster autoscaler grows for pending GPU pods (the
	// cluster autoscaling scenario); empty: none named, and the scenario does not run.
	Autoscaling string `json:"autoscaling,omitempty"`
	// AutoscalingTolerations are added to the cluster autoscaling scenario's pod only: the taints of the
	// autoscaled pool, which the suite cannot read from a pool that has no node yet.
	AutoscalingTolerations []corev1.Toleration `json:"autoscalingTolerations,omitempty"`

	// explicit records which selectors the user set, so discovery only falls back for defaults.
	explicit map[string]bool
}

// Explicit reports whether the named pool ("gpu", "canary", "knownGood") was set by the user.
func (p PoolsConfig) Explicit(pool string) bool { return p.explicit[pool] }

// QueuesConfig says how specs reach Kueue.
type QueuesConfig struct {
	// Mode is "own" (default) or "existing".
	Mode string `json:"mode,omitempty"`
	// LocalQueue is the existing LocalQueue when Mode is "existing": NS/NAME, which sets Namespace to NS,
	// or NAME with Namespace set. It cannot be in the fresh namespaces the suite makes per spec.
	LocalQueue string `json:"localQueue,omitempty"`
}

// GatewayConfig names the Gateway API implementation to use.
type GatewayConfig struct {
	// Class is the GatewayClass of the inference gateway scenario's Gateway; empty: the one GatewayClass a
	// controller accepted (with several, the scenario is not exercised until one is named).
	Class string `json:"class,omitempty"`
}

// KueueConfig locates Kueue.
type KueueConfig struct {
	// Namespace is where Kueue's controller and webhook run.
	Namespace string `json:"namespace,omitempty"`
}

// Default returns the configuration used when nothing is set.
func Default() Config {
	return Config{
		NamespacePrefix: "gpuconform",
		AllocationPaths: []string{PathAuto},
		DRA:             DRAConfig{KueueResourceName: "example.com/gpu"},
		Pools: PoolsConfig{
			GPU: DefaultGPUPoolSelector, Canary: DefaultCanaryPoolSelector, KnownGood: DefaultKnownGoodPoolSelector,
		},
		Queues:         QueuesConfig{Mode: QueuesOwn},
		Kueue:          KueueConfig{Namespace: "kueue-system"},
		Image:          "gpuconform.local/gpu-workload:dev",
		TimeoutProfile: timeouts.ProfileAuto,
		ArtifactsDir:   cmp.Or(os.Getenv("ARTIFACTS"), "_artifacts"),
		Faults: FaultsConfig{NodeProvider: FaultProviderAuto, DeviceProvider: FaultProviderAuto, DRADeviceProvider: FaultProviderAuto,
			KubeletStopFor: metav1.Duration{Duration: 2 * time.Minute}, EvictionToleration: metav1.Duration{Duration: 10 * time.Second}},
	}
}

// withImplied applies what one setting says about another: queues.localQueue NS/NAME names the
// namespace. A namespace that disagrees is left for Validate to report.
func (c Config) withImplied() Config {
	if ns, name, namespaced := localQueueRef(c.Queues.LocalQueue); namespaced && ns != "" && (c.Namespace == "" || c.Namespace == ns) {
		c.Namespace, c.Queues.LocalQueue = ns, name
	}
	return c
}

// localQueueRef splits queues.localQueue, NS/NAME or NAME, into its namespace and name; namespaced says
// which form it is.
func localQueueRef(lq string) (ns, name string, namespaced bool) {
	if ns, name, ok := strings.Cut(lq, "/"); ok {
		return ns, name, true
	}
	return "", lq, false
}

// AutoTolerate reports whether test pods tolerate the discovered dedication taints.
func (c Config) AutoTolerate() bool {
	return c.AutoTolerateDedicationTaints == nil || *c.AutoTolerateDedicationTaints
}

// Timeouts returns the budgets of the configured profile ("auto" not yet resolved waits as real does).
func (c Config) Timeouts() timeouts.Timeouts {
	t, err := timeouts.ForProfile(c.TimeoutProfile)
	if err != nil {
		return timeouts.Local() // unreachable after Validate
	}
	return t
}

// WantsPath reports whether path is selected (explicitly or by "auto").
func (c Config) WantsPath(path string) bool {
	return slices.Contains(c.AllocationPaths, PathAuto) || slices.Contains(c.AllocationPaths, path)
}

// ExplicitPaths returns the paths named explicitly (empty for "auto").
func (c Config) ExplicitPaths() []string {
	if slices.Contains(c.AllocationPaths, PathAuto) {
		return nil
	}
	return c.AllocationPaths
}

// markExplicit records that the user set the named pool's selector.
func (p *PoolsConfig) markExplicit(pool string) {
	if p.explicit == nil {
		p.explicit = map[string]bool{}
	}
	p.explicit[pool] = true
}

// DefaultWaitForOtherRuns is how long a run waits, unless told otherwise, for the live runs whose holds
// conflict with its own: a whole local run takes about ten minutes, a real cluster's signoff longer.
const DefaultWaitForOtherRuns = 30 * time.Minute

// OtherRunsWait is how long the run waits for other live runs (WaitForOtherRuns, or its default).
func (c Config) OtherRunsWait() time.Duration {
	if c.WaitForOtherRuns != nil {
		return c.WaitForOtherRuns.Duration
	}
	return DefaultWaitForOtherRuns
}

// LeaseNamespace is where the run's Lease goes: RunLeaseNamespace, else the team namespace, else "default"
// (a namespace every cluster has, so the suite creates none for it).
func (c Config) LeaseNamespace() string {
	if c.RunLeaseNamespace != "" {
		return c.RunLeaseNamespace
	}
	if c.Namespace != "" {
		return c.Namespace
	}
	return "default"
}
