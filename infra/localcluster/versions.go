package localcluster

import "gpuconform.io/gpuconform/framework/checkpoints"

// Versions of everything the local cluster is built from. Changing one changes the content keys of the
// steps that use it, so the next `make cluster` rebuilds exactly what depends on it.
const (
	KubernetesVersion = "v1.37.2"
	ContainerdVersion = "v2.4.2"
	KindVersion       = "v0.33.0"
	KueueVersion      = "v0.17.0"
	DRADriverVersion  = "v0.4.0"
	// PrometheusVersion is the release the module github.com/prometheus/prometheus v0.316.0 is (its VERSION
	// file; the module's v0.3MM.P tags are releases 3.MM.P).
	PrometheusVersion = "3.16.0"
	// MetricsAdapterVersion is prometheus-adapter's release (the module sigs.k8s.io/prometheus-adapter).
	MetricsAdapterVersion = "v0.12.0"
	// KarpenterVersion is the release of sigs.k8s.io/karpenter whose KWOK provider is the local node
	// autoscaler, and KWOKVersion that of sigs.k8s.io/kwok, the kubelet of its simulated nodes.
	KarpenterVersion = "v1.13.0"
	KWOKVersion      = "v0.8.0"
	// TraefikVersion is the release of Traefik Proxy that is the local cluster's Gateway API implementation.
	TraefikVersion = "v3.6.12"
	DebianSuite    = "bookworm"
)

// Image names inside the nodes. The control-plane names must be exactly what kubeadm v1.37.2 asks for, and
// containerd's sandbox_image must name the same pause image: any mismatch turns into a registry pull, which
// fails offline after a silent multi-minute kubeadm timeout.
const (
	ImageAPIServer      = "registry.k8s.io/kube-apiserver:" + KubernetesVersion
	ImageController     = "registry.k8s.io/kube-controller-manager:" + KubernetesVersion
	ImageScheduler      = "registry.k8s.io/kube-scheduler:" + KubernetesVersion
	ImageProxy          = "registry.k8s.io/kube-proxy:" + KubernetesVersion
	ImageEtcd           = "registry.k8s.io/etcd:3.7.0-0" // kubeadm's default tag; etcd v3.7.3 is shipped under it
	ImagePause          = "registry.k8s.io/pause:3.10.2"
	ImageCoreDNS        = "registry.k8s.io/coredns/coredns:v1.14.6"
	ImageKueue          = "gpuconform.local/kueue:" + KueueVersion
	ImageDRADriver      = "gpuconform.local/dra-example-driver:" + DRADriverVersion
	ImagePrometheus     = "gpuconform.local/prometheus:v" + PrometheusVersion
	ImageMetricsAdapter = "gpuconform.local/prometheus-adapter:" + MetricsAdapterVersion
	ImageKarpenter      = "gpuconform.local/karpenter:" + KarpenterVersion
	ImageKWOK           = "gpuconform.local/kwok:" + KWOKVersion
	ImageTraefik        = "gpuconform.local/traefik:" + TraefikVersion
	ImageNet            = "gpuconform.local/gpuconform-net:dev"
	ImageWorkload       = "gpuconform.local/gpu-workload:dev"
	NodeImageRepo       = "gpuconform.local/kind-node"
	rootfsImageRepo     = "gpuconform.local/rootfs"
	toolsImageRepo      = "gpuconform.local/tools"
	// exampleDRAImageRepo and kueueImageRepo hold ImageDRADriver and ImageKueue under their content keys,
	// the references the manifests name.
	exampleDRAImageRepo     = "gpuconform.local/dra-example-kubeletplugin"
	kueueImageRepo          = "gpuconform.local/kueue-manager"
	prometheusImageRepo     = "gpuconform.local/prometheus-server"
	metricsAdapterImageRepo = "gpuconform.local/prometheus-adapter-server"
	karpenterImageRepo      = "gpuconform.local/karpenter-controller"
	kwokImageRepo           = "gpuconform.local/kwok-controller"
	traefikImageRepo        = "gpuconform.local/traefik-proxy"
	// MonitoringNamespace holds the local cluster's Prometheus (manifests/prometheus.yaml).
	MonitoringNamespace = "monitoring"
	PoolLabel           = "gpuconform.io/pool"
	GPUPool             = "gpu"
	CanaryPool          = "canary"
	// NodeSharedDir is where every worker mounts the cluster's shared host directory; the nodes carry
	// it in the annotation SharedDirAnnotation, which the suite discovers as checkpoint storage.
	NodeSharedDir       = "/var/lib/gpuconform-shared"
	SharedDirAnnotation = checkpoints.SharedDirAnnotation
	SystemNamespace     = "gpuconform-system"
)
