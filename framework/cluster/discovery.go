package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/diagnose"
)

// GFD (GPU Feature Discovery) node labels read by discovery.
const (
	LabelGPUProduct      = "nvidia.com/gpu.product"
	LabelGPUCount        = "nvidia.com/gpu.count"
	LabelDriverVersion   = "nvidia.com/cuda.driver-version.full"
	LabelSharingStrategy = "nvidia.com/gpu.sharing-strategy"
	LabelSharingReplicas = "nvidia.com/gpu.replicas"
	PreferredGPUResource = "nvidia.com/gpu"
	KueueGroupVersion    = "kueue.x-k8s.io/v1beta2"
	ResourceGroupVersion = "resource.k8s.io/v1"
	kueueManagerName     = "kueue-controller-manager"
	migResourcePrefix    = "nvidia.com/mig-"
	unknownVersion       = "unknown"
)

// Snapshot is what discovery reads from the API server, recorded so the decisions can be made (and
// tested) without a cluster.
type Snapshot struct {
	ServerVersion *version.Info
	Nodes         []corev1.Node
	// ResourceAPI is true when resource.k8s.io/v1 is served.
	ResourceAPI    bool
	DeviceClasses  []resourcev1.DeviceClass
	ResourceSlices []resourcev1.ResourceSlice
	// KueueResources are the resource names served under kueue.x-k8s.io/v1beta2 (empty: not installed).
	KueueResources []string
	// KueueDeployment is Kueue's controller Deployment, nil when unreadable.
	KueueDeployment *appsv1.Deployment
	// KueueConfig is the Configuration document Kueue's controller runs with; KueueConfigUnread says why
	// it could not be read ("" when it was).
	KueueConfig, KueueConfigUnread string
	// KueueTopologies are Kueue's Topologies (TAS); KueueTopologiesUnread says why they could not be read.
	KueueTopologies       []Topology
	KueueTopologiesUnread string
	// NodePods are, per node whose pods were listed (nodes that publish node-local ResourceSlices, at most
	// maxPluginNodes), the pods there that mount a hostPath: where a DRA driver's kubelet plugin is looked
	// for. NodePodsUnread says why they could not be listed ("" when they were).
	NodePods       map[string][]corev1.Pod
	NodePodsUnread string
	// Notes record what could not be read and why (e.g. forbidden), for the report.
	Notes []string
}

// Collect reads a Snapshot. Only an unreachable server or unreadable nodes are errors; any other
// missing piece becomes a note and an absent capability.
func Collect(ctx context.Context, kube kubernetes.Interface, kueueNamespace string) (Snapshot, error) {
	var s Snapshot
	v, err := kube.Discovery().ServerVersion()
	if err != nil {
		return s, fmt.Errorf("reading server version: %w", err)
	}
	s.ServerVersion = v
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("listing nodes (needed to find GPU nodes): %w", err)
	}
	s.Nodes = nodes.Items

	if res, err := kube.Discovery().ServerResourcesForGroupVersion(ResourceGroupVersion); err == nil && len(res.APIResources) > 0 {
		s.ResourceAPI = true
		if dcs, err := kube.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{}); err == nil {
			s.DeviceClasses = dcs.Items
		} else {
			s.Notes = append(s.Notes, fmt.Sprintf("cannot list DeviceClasses: %v", err))
		}
		if rs, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{}); err == nil {
			s.ResourceSlices = rs.Items
			s.NodePods, s.NodePodsUnread = collectPluginPods(ctx, kube, s.ResourceSlices)
		} else {
			s.Notes = append(s.Notes, fmt.Sprintf("cannot list ResourceSlices: %v", err))
		}
	}
	if res, err := kube.Discovery().ServerResourcesForGroupVersion(KueueGroupVersion); err == nil {
		for _, r := range res.APIResources {
			if !strings.Contains(r.Name, "/") {
				s.KueueResources = append(s.KueueResources, r.Name)
			}
		}
	}
	if slices.Contains(s.KueueResources, "topologies") {
		s.KueueTopologies, s.KueueTopologiesUnread = readTopologies(ctx, kube)
	}
	if len(s.KueueResources) > 0 {
		d, err := kube.AppsV1().Deployments(kueueNamespace).Get(ctx, kueueManagerName, metav1.GetOptions{})
		switch {
		case err == nil:
			s.KueueDeployment = d
			s.KueueConfig, s.KueueConfigUnread = readKueueConfig(ctx, kube, d)
		case apierrors.IsNotFound(err):
			s.Notes = append(s.Notes, fmt.Sprintf("Kueue CRDs are served but deployment %s/%s was not found; Kueue version unknown", kueueNamespace, kueueManagerName))
		default:
			s.Notes = append(s.Notes, fmt.Sprintf("cannot read deployment %s/%s: %v; Kueue version unknown", kueueNamespace, kueueManagerName, err))
		}
	}
	return s, nil
}

// Capabilities is what the suite decided the cluster offers.
type Capabilities struct {
	// ServerVersion is the API server's git version.
	ServerVersion string
	// DevicePlugin is the device-plugin path; nil when absent (see NotExercised).
	DevicePlugin *DevicePluginPath
	// DRA is the DRA path; nil when absent.
	DRA *DRAPath
	// ExtendedDRA is the extended-resource mapping of a DeviceClass where DRA serves it on some node
	// (ExtendedDRAPathName); nil when absent (NotExercised says why).
	ExtendedDRA *ExtendedDRAPath
	// Kueue describes the Kueue installation.
	Kueue KueueInfo
	// Sharing is the GPU sharing mode of the whole cluster, summarised from SharingModes.
	Sharing Sharing
	// SharingModes are, per node and discovered path, how the node shares its GPUs, read from evidence
	// (DiscoverSharingModes).
	SharingModes []NodeSharingMode
	// Pools are the resolved node pools.
	Pools Pools
	// Nodes describes every node that has devices on some path.
	Nodes []NodeInfo
	// NotExercised says, per absent capability, why it is absent. Keys are path or feature names.
	NotExercised map[string]string
	// Broken says, per allocation path that is present but does not work, what is wrong and where:
	// capacity without allocatable, GPU nodes whose device plugin serves nothing, a DeviceClass whose
	// driver publishes no devices, a DeviceClass that selects none of the published devices, a DRA driver
	// whose kubelet plugin runs on none of the nodes that publish its devices. A broken path is never "not
	// exercised": the suite registers a failing spec for it, so the signoff is NO-GO.
	Broken map[string]string
	// Settled marks the broken paths that waiting will not mend (a DeviceClass that selects nothing, a DRA
	// driver without its kubelet plugin): the stack-ready wait does not wait for them (SettledFor).
	Settled map[string]bool
	// GateNode is the Ready GPU node whose kubelet's feature gates the record reads ("" when none).
	GateNode string
	// Taints are the GPU pool's dedication taints, which of them test pods tolerate, and the pool nodes
	// left out because a taint of their own keeps the pods off.
	Taints Taints
	// KindCluster is true when every node's providerID is kind://: the timeout profile "auto" is local.
	KindCluster bool
	// Notes carry Snapshot notes.
	Notes []string
}

// DevicePluginPath is the discovered extended-resource path.
type DevicePluginPath struct {
	// ResourceName is the extended resource, e.g. nvidia.com/gpu.
	ResourceName corev1.ResourceName
	// Allocatable is the devices per node, for nodes with a non-zero amount.
	Allocatable map[string]int64
}

// DRAPath is the discovered DRA path.
type DRAPath struct {
	// DeviceClass is the class pods ask for.
	DeviceClass string
	// Driver is the driver publishing the slices that class selects.
	Driver string
	// Devices lists per node the names of the devices of node-local slices that the class selects.
	Devices map[string][]string
	// Published counts per node the devices of the driver's node-local slices, selected or not.
	Published map[string]int
	// DriverVersion is a driverVersion attribute from the slices, when present.
	DriverVersion string
	// Model is a model/productName attribute from the slices, when present.
	Model string
	// Tainted lists per node the devices the class selects that a NoSchedule or NoExecute taint in their
	// slice keeps from new allocations (a driver's health report, as NVIDIA's on a critical XID), as
	// "name key=value:Effect": they are not in Devices, so no spec counts on them.
	Tainted map[string][]string
}

// schedulingTaints maps "node/device" of the drivers' node-local devices to their NoSchedule and NoExecute
// taints ("key=value:Effect", joined): what keeps a device from new allocations at discovery.
func schedulingTaints(published []resourcev1.ResourceSlice, drivers []string) map[string]string {
	out := map[string]string{}
	for _, s := range published {
		if s.Spec.NodeName == nil || !slices.Contains(drivers, s.Spec.Driver) {
			continue
		}
		for _, d := range s.Spec.Devices {
			var ts []string
			for _, t := range d.Taints {
				if KeepsFromAllocation(t.Effect) {
					ts = append(ts, FormatDeviceTaint(t))
				}
			}
			if len(ts) > 0 {
				out[*s.Spec.NodeName+"/"+d.Name] = strings.Join(ts, ",")
			}
		}
	}
	return out
}

// DescribeTainted renders DRAPath.Tainted for messages: node by node, sorted.
func DescribeTainted(tainted map[string][]string) string {
	var out []string
	for _, node := range slices.Sorted(maps.Keys(tainted)) {
		out = append(out, node+": "+strings.Join(tainted[node], ", "))
	}
	return strings.Join(out, "; ")
}

// KueueInfo describes Kueue.
type KueueInfo struct {
	Present bool
	Version string
	// PodsReady is its waitForPodsReady, nil when off or unknown; PodsReadyWhy says which, and why
	// ("off in Kueue's Configuration", or why the Configuration could not be read).
	PodsReady    *PodsReady
	PodsReadyWhy string
	// Topologies are its Topologies for topology-aware scheduling (none: TAS is not configured);
	// TopologiesWhy says why there are none or they are unknown.
	Topologies    []Topology
	TopologiesWhy string
	// Reason says why Kueue is considered absent.
	Reason string
}

// Sharing is the GPU sharing mode of the cluster, the summary of its nodes' NodeSharingMode.
type Sharing struct {
	// Mode is "exclusive", one of the shared Mode constants ("time-slicing", "mps", "mig-single",
	// "mig-mixed", "dra-partitionable"), or a mix "a+b" of the modes nodes show.
	Mode string
	// Replicas is the largest time-slicing/MPS replica count of a node, 0 when none is replicated.
	Replicas int
	// MIGResources are the nvidia.com/mig-* resources that carry MIG devices.
	MIGResources []string
}

// Pools are the resolved pools.
type Pools struct {
	GPU, Canary, KnownGood Pool
}

// Pool is one resolved pool.
type Pool struct {
	// Selector is the configured label selector.
	Selector string
	// Nodes are the member node names, sorted.
	Nodes []string
	// FellBack is true when the (default) selector matched nothing and the pool is "nodes with devices".
	FellBack bool
	// Note explains an empty pool or a fallback.
	Note string
}

// NodeInfo describes one GPU node for the compatibility record.
type NodeInfo struct {
	Name             string
	Product          string
	Driver           string
	OSImage          string
	Kernel           string
	ContainerRuntime string
	Kubelet          string
	// DevicePluginDevices is allocatable of the device-plugin resource.
	DevicePluginDevices int64
	// DRADevices counts devices of the DRA driver on the node.
	DRADevices int
	// FakeGPUs is the evidence that the node's GPUs are the project's fakes (LabelFakeGPUs), "" otherwise.
	FakeGPUs string
}

// LabelFakeGPUs is the label the project's fake GPU agent (internal/fakeplugin) puts on every node it
// serves. It decides only whether stand-ins count as evidence: a node without it has GPUs taken as real.
const LabelFakeGPUs = "gpuconform.io/fake-device-plugin-version"

// HasPath reports whether the named path was discovered.
func (c Capabilities) HasPath(path string) bool {
	switch path {
	case config.PathDevicePlugin:
		return c.DevicePlugin != nil
	case config.PathDRA:
		return c.DRA != nil
	}
	return false
}

// Discover decides the capabilities from a snapshot and the configuration. It never calls the API.
func Discover(s Snapshot, cfg config.Config) Capabilities {
	c := Capabilities{NotExercised: map[string]string{}, Broken: map[string]string{}, Settled: map[string]bool{}, Notes: slices.Clone(s.Notes), GateNode: gateNode(s)}
	if s.ServerVersion != nil {
		c.ServerVersion = s.ServerVersion.GitVersion
	}

	if cfg.WantsPath(config.PathDevicePlugin) {
		c.DevicePlugin, c.NotExercised[config.PathDevicePlugin] = discoverDevicePlugin(s.Nodes, cfg.DevicePlugin.ResourceName)
		// Broken also when the path works elsewhere: a GPU node whose plugin stopped serving is advertised
		// capacity the cluster cannot use, and the specs would silently avoid it.
		if why := brokenDevicePlugin(s.Nodes, cfg.DevicePlugin.ResourceName, publishingNodes(s.ResourceSlices)); why != "" {
			c.Broken[config.PathDevicePlugin], c.NotExercised[config.PathDevicePlugin] = why, ""
		}
	} else {
		c.NotExercised[config.PathDevicePlugin] = "not selected by allocationPaths"
	}
	if cfg.WantsPath(config.PathDRA) {
		d := decideDRA(s, cfg.DRA.DeviceClass)
		c.DRA, c.NotExercised[config.PathDRA] = d.path, d.absent
		if d.broken != "" {
			c.Broken[config.PathDRA], c.NotExercised[config.PathDRA] = d.broken, ""
			if d.settled {
				c.Settled[config.PathDRA] = true
			}
		}
		c.Notes = append(c.Notes, d.notes...)
	} else {
		c.NotExercised[config.PathDRA] = "not selected by allocationPaths"
	}
	switch p, why := discoverExtendedDRA(s); {
	case !cfg.WantsPath(config.PathExtendedDRA):
		c.NotExercised[ExtendedDRAPathName] = "not selected by allocationPaths"
	case p != nil:
		c.ExtendedDRA = p
	default:
		c.NotExercised[ExtendedDRAPathName] = "not present: " + why
	}
	c.Kueue = discoverKueue(s)
	if !c.Kueue.Present {
		c.NotExercised["kueue"] = c.Kueue.Reason
	}
	draDriver := ""
	if c.DRA != nil {
		draDriver = c.DRA.Driver
	}
	// Only the discovered paths: a node's plugin resources say nothing when the run leaves that path out.
	c.SharingModes = slices.DeleteFunc(DiscoverSharingModes(s.Nodes, s.ResourceSlices, draDriver), func(m NodeSharingMode) bool {
		return m.Path == config.PathDevicePlugin && c.DevicePlugin == nil
	})
	c.Sharing = summariseSharing(c.SharingModes)
	if c.DevicePlugin != nil {
		c.Notes = append(c.Notes, sharingDisagreements(s.Nodes, c.DevicePlugin.ResourceName)...)
	}
	c.Nodes = nodeInfos(s.Nodes, c.DevicePlugin, c.DRA)
	withDevices := make([]string, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		withDevices = append(withDevices, n.Name)
	}
	c.Pools = Pools{
		GPU:       resolvePool("gpu", cfg.Pools.GPU, cfg.Pools.Explicit("gpu"), s.Nodes, withDevices, true),
		Canary:    resolvePool("canary", cfg.Pools.Canary, cfg.Pools.Explicit("canary"), s.Nodes, withDevices, false),
		KnownGood: resolvePool("knownGood", cfg.Pools.KnownGood, cfg.Pools.Explicit("knownGood"), s.Nodes, withDevices, true),
	}
	c.Taints = discoverTaints(c.Pools.GPU.Nodes, s.Nodes, cfg.DedicationTaints, cfg.AutoTolerate(), cfg.Tolerations)
	if len(c.Taints.Excluding) > 0 {
		// Nodes the test pods cannot use are not part of the pool the specs size and pin to.
		c.Pools.GPU.Nodes = slices.DeleteFunc(c.Pools.GPU.Nodes, func(n string) bool { return c.Taints.Excluding[n] != nil })
		for _, n := range slices.Sorted(maps.Keys(c.Taints.Excluding)) {
			names := make([]string, 0, len(c.Taints.Excluding[n]))
			advice := "tolerate it with --toleration or --dedication-taint to use the node"
			for _, t := range c.Taints.Excluding[n] {
				names = append(names, FormatTaint(t))
				if diagnose.LifecycleTaint(t) {
					advice = "Kubernetes put it there: the node is not usable now"
				}
			}
			c.Notes = append(c.Notes, fmt.Sprintf("GPU node %s is left out of the pool: taint %s keeps the suite's pods off it and the rest of the pool does not carry it (%s)", n, strings.Join(names, ", "), advice))
		}
	}
	c.KindCluster = len(s.Nodes) > 0 && !slices.ContainsFunc(s.Nodes, func(n corev1.Node) bool { return !strings.HasPrefix(n.Spec.ProviderID, "kind://") })
	for k, v := range c.NotExercised {
		if v == "" {
			delete(c.NotExercised, k)
		}
	}
	return c
}

func discoverDevicePlugin(nodes []corev1.Node, configured string) (*DevicePluginPath, string) {
	totals := map[corev1.ResourceName]int64{}
	for _, n := range nodes {
		for name, q := range n.Status.Allocatable {
			if q.Value() > 0 && isExtendedGPUResource(name) {
				totals[name] += q.Value()
			}
		}
	}
	var resource corev1.ResourceName
	switch {
	case configured != "":
		resource = corev1.ResourceName(configured)
		if totals[resource] == 0 {
			return nil, fmt.Sprintf("no node has allocatable %s (set by devicePlugin.resourceName)", configured)
		}
	case totals[PreferredGPUResource] > 0:
		resource = PreferredGPUResource
	case totals[PreferredGPUResource+SharedResourceSuffix] > 0:
		// NVIDIA's plugin renames a time-sliced or MPS nvidia.com/gpu (renameByDefault).
		resource = PreferredGPUResource + SharedResourceSuffix
	default:
		var candidates []string
		for name := range totals {
			if !strings.HasPrefix(string(name), migResourcePrefix) {
				candidates = append(candidates, string(name))
			}
		}
		if len(candidates) == 0 {
			return nil, "no node advertises a GPU extended resource in allocatable (looked for nvidia.com/gpu and */*gpu*); set devicePlugin.resourceName if yours is named differently"
		}
		slices.Sort(candidates)
		resource = corev1.ResourceName(candidates[0])
	}
	p := &DevicePluginPath{ResourceName: resource, Allocatable: map[string]int64{}}
	for _, n := range nodes {
		if q, ok := n.Status.Allocatable[resource]; ok && q.Value() > 0 {
			p.Allocatable[n.Name] = q.Value()
		}
	}
	return p, ""
}

// gpuNodeLabels are labels that say a node has GPUs whatever its allocatable says: GPU Feature Discovery's
// count and the GPU Operator's presence label.
var gpuNodeLabels = []string{"nvidia.com/gpu.count", "nvidia.com/gpu.present"}

// brokenDevicePlugin tells a device-plugin path that is present but not working from an absent one: nodes
// that report capacity for a GPU resource with nothing allocatable (the kubelet keeps the capacity of a
// plugin that stopped serving), or nodes labelled as GPU nodes with no GPU resource at all. "" when neither.
func brokenDevicePlugin(nodes []corev1.Node, configured string, dra map[string][]string) string {
	var capOnly, labelled []string
	resource := ""
	for _, n := range nodes {
		// A node that still serves another GPU resource changed its set of resources (a MIG or sharing
		// reconfiguration): the kubelet keeps a resource whose plugin endpoint stopped in capacity, with
		// nothing allocatable, for its endpoint grace period (5 minutes, devicemanager's
		// endpointStopGracePeriod). Only the configured resource, or a node serving none, is broken.
		serving := false
		for name, q := range n.Status.Allocatable {
			serving = serving || q.Value() > 0 && isExtendedGPUResource(name)
		}
		for name, q := range n.Status.Capacity {
			if q.Value() > 0 && isExtendedGPUResource(name) && (configured == "" && !serving || string(name) == configured) {
				if a := n.Status.Allocatable[name]; a.Value() == 0 {
					capOnly = append(capOnly, n.Name)
					resource = string(name)
				}
			}
		}
		hasGPUResource := false
		for name, q := range n.Status.Capacity {
			hasGPUResource = hasGPUResource || q.Value() > 0 && isExtendedGPUResource(name)
		}
		for name, q := range n.Status.Allocatable {
			hasGPUResource = hasGPUResource || q.Value() > 0 && isExtendedGPUResource(name)
		}
		for _, l := range gpuNodeLabels {
			// A GPU node whose devices a DRA driver publishes (and no device plugin) is served, not broken.
			if v, ok := n.Labels[l]; ok && v != "0" && v != "false" && !hasGPUResource && !servedByDRA(dra, n.Name) {
				labelled = append(labelled, n.Name)
				break
			}
		}
	}
	slices.Sort(capOnly)
	capOnly = slices.Compact(capOnly) // a node with several such resources is named once
	slices.Sort(labelled)
	switch {
	case len(capOnly) > 0:
		return fmt.Sprintf("node(s) %s report capacity for %s but 0 allocatable: the device plugin registered and no longer serves (check its pods and the kubelet's log on those nodes)",
			strings.Join(firstN(capOnly, 5), ", "), resource)
	case len(labelled) > 0:
		return fmt.Sprintf("node(s) %s are labelled as GPU nodes (%s) but advertise no GPU resource: the device plugin is not running or not registered there",
			strings.Join(firstN(labelled, 5), ", "), strings.Join(gpuNodeLabels, " or "))
	}
	return ""
}

// servedByDRA reports whether some driver publishes devices on node (byDriver: publishingNodes).
func servedByDRA(byDriver map[string][]string, node string) bool {
	for _, nodes := range byDriver {
		if slices.Contains(nodes, node) {
			return true
		}
	}
	return false
}

// brokenDRA tells a DRA path that is present but not working from an absent one: a DeviceClass that
// selects a driver with no ResourceSlice publishing devices (its kubelet plugin is not running or not
// registered). "" when no such class exists.
func brokenDRA(s Snapshot, configured string) string {
	if !s.ResourceAPI {
		return ""
	}
	publishing := map[string]bool{}
	for _, sl := range s.ResourceSlices {
		if len(sl.Spec.Devices) > 0 {
			publishing[sl.Spec.Driver] = true
		}
	}
	for _, dc := range s.DeviceClasses {
		if configured != "" && dc.Name != configured {
			continue
		}
		if ds := diagnose.ClassDrivers(&dc); len(ds) > 0 && !slices.ContainsFunc(ds, func(d string) bool { return publishing[d] }) {
			d := strings.Join(ds, ", ")
			return fmt.Sprintf("DeviceClass %s selects driver %s, but no ResourceSlice of %s publishes devices: its kubelet plugin is not running or not registered (kubectl get resourceslices; the driver's pods and the kubelet's log)",
				dc.Name, d, d)
		}
	}
	return ""
}

// firstN keeps the first n names and says how many more there are, for messages that list nodes.
func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}

// isExtendedGPUResource matches vendor resources that name a GPU (nvidia.com/gpu, amd.com/gpu,
// gpu.intel.com/i915, nvidia.com/mig-1g.5gb), not kubernetes.io or hugepages resources.
func isExtendedGPUResource(name corev1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.Contains(s, "kubernetes.io/") {
		return false
	}
	return strings.Contains(strings.ToLower(s), "gpu") || strings.HasPrefix(s, migResourcePrefix)
}

// deviceClassDriver returns the drivers a DeviceClass compares device.driver with that publish devices
// (comma-separated), else the first it names, or "" when it names none.
func deviceClassDriver(dc *resourcev1.DeviceClass, publishing map[string]bool) string {
	named := diagnose.ClassDrivers(dc)
	if on := slices.DeleteFunc(slices.Clone(named), func(d string) bool { return !publishing[d] }); len(on) > 0 {
		return strings.Join(on, ",")
	}
	if len(named) > 0 {
		return named[0]
	}
	return ""
}

// discoverDRA finds the DRA path: the DeviceClass (configured, else the first by name that selects a
// driver publishing devices) and the devices it selects per node, evaluated with CEL. It returns why the
// path is absent, or, when the class selects none of the published devices, why (a broken path).
func discoverDRA(s Snapshot, configured string) (*DRAPath, string, string) {
	if !s.ResourceAPI {
		return nil, "the API server does not serve resource.k8s.io/v1 (DRA is not enabled)", ""
	}
	drivers := map[string]bool{}
	for _, sl := range s.ResourceSlices {
		if len(sl.Spec.Devices) > 0 {
			drivers[sl.Spec.Driver] = true
		}
	}
	if len(drivers) == 0 {
		return nil, "no ResourceSlice publishes devices (no DRA driver is running)", ""
	}
	var class *resourcev1.DeviceClass
	driver := ""
	for i := range s.DeviceClasses {
		dc := &s.DeviceClasses[i]
		d := deviceClassDriver(dc, drivers)
		if d == "" && drivers[dc.Name] { // classes named after their driver, selecting by other means
			d = dc.Name
		}
		if configured != "" {
			if dc.Name == configured {
				class, driver = dc, d
			}
			continue
		}
		if d != "" && drivers[strings.Split(d, ",")[0]] && (class == nil || dc.Name < class.Name) {
			class, driver = dc, d
		}
	}
	if class == nil {
		if configured != "" {
			return nil, fmt.Sprintf("DeviceClass %q (set by dra.deviceClass) does not exist", configured), ""
		}
		return nil, fmt.Sprintf("no DeviceClass selects a driver that publishes ResourceSlices (drivers: %s); set dra.deviceClass", strings.Join(slices.Sorted(maps.Keys(drivers)), ", ")), ""
	}
	if driver == "" {
		// A configured class selecting by attributes only: count every node-local device.
		driver = strings.Join(slices.Sorted(maps.Keys(drivers)), ",")
	}
	// Discovery is pure and each evaluation is bounded by the API's CEL cost limit: no context to honour.
	match := diagnose.MatchDeviceClass(context.Background(), class, s.ResourceSlices)
	if why := match.SelectsNothing(); why != "" {
		return nil, "", why
	}
	p := &DRAPath{DeviceClass: class.Name, Driver: driver, Devices: map[string][]string{}, Published: map[string]int{}}
	taints := schedulingTaints(s.ResourceSlices, strings.Split(driver, ","))
	for node, names := range match.Matched {
		if node == "" {
			continue
		}
		for _, n := range names {
			if t := taints[node+"/"+n]; t != "" {
				if p.Tainted == nil {
					p.Tainted = map[string][]string{}
				}
				p.Tainted[node] = append(p.Tainted[node], n+" "+t)
				continue
			}
			p.Devices[node] = append(p.Devices[node], n)
		}
	}
	for node, n := range match.Published {
		if node != "" {
			p.Published[node] = n
		}
	}
	p.DriverVersion, p.Model = draModel(s.ResourceSlices, strings.Split(driver, ","))
	if len(p.Devices) == 0 && len(p.Tainted) > 0 {
		return nil, fmt.Sprintf("every device DeviceClass %q selects is kept from new allocations by a taint in its ResourceSlice: %s", class.Name, DescribeTainted(p.Tainted)), ""
	}
	if len(p.Devices) == 0 {
		return nil, fmt.Sprintf("DeviceClass %q selects driver %s, but no node-local ResourceSlice of it has devices", class.Name, driver), ""
	}
	return p, "", ""
}

// attr is the value of a device's attribute name, qualified by any domain, or "" when it has none.
func attr(d resourcev1.Device, name string) string {
	for k, v := range d.Attributes {
		if string(k) == name || strings.HasSuffix(string(k), "/"+name) {
			if s := diagnose.AttributeValue(v); s != "?" {
				return s
			}
		}
	}
	return ""
}

func discoverKueue(s Snapshot) KueueInfo {
	need := []string{"clusterqueues", "localqueues", "resourceflavors", "workloads"}
	var missing []string
	for _, r := range need {
		if !slices.Contains(s.KueueResources, r) {
			missing = append(missing, r)
		}
	}
	if len(missing) == len(need) {
		return KueueInfo{Reason: "Kueue is not installed (kueue.x-k8s.io/v1beta2 is not served)"}
	}
	if len(missing) > 0 {
		return KueueInfo{Reason: fmt.Sprintf("Kueue API kueue.x-k8s.io/v1beta2 lacks %s", strings.Join(missing, ", "))}
	}
	info := KueueInfo{Present: true, Version: unknownVersion, Topologies: s.KueueTopologies}
	switch {
	case !slices.Contains(s.KueueResources, "topologies"):
		info.TopologiesWhy = "Kueue serves no Topology API (topology-aware scheduling is off or older than this Kueue)"
	case s.KueueTopologiesUnread != "":
		info.TopologiesWhy = "unknown: Kueue's Topologies could not be listed (" + s.KueueTopologiesUnread + ")"
	case len(s.KueueTopologies) == 0:
		info.TopologiesWhy = "no Kueue Topology is defined: topology-aware scheduling is not configured"
	}
	switch {
	case s.KueueDeployment == nil:
		info.PodsReadyWhy = "unknown: Kueue's Deployment could not be read"
	case s.KueueConfigUnread != "":
		info.PodsReadyWhy = "unknown: Kueue's Configuration could not be read (" + s.KueueConfigUnread + ")"
	default:
		p, err := parsePodsReady(s.KueueConfig)
		switch {
		case err != nil:
			info.PodsReadyWhy = "unknown: " + err.Error()
		case p == nil:
			info.PodsReadyWhy = "off: Kueue's Configuration has no waitForPodsReady"
		default:
			info.PodsReady = p
		}
	}
	if s.KueueDeployment != nil {
		for _, ctr := range s.KueueDeployment.Spec.Template.Spec.Containers {
			if tag := imageTag(ctr.Image); tag != "" && (ctr.Name == "manager" || info.Version == unknownVersion) {
				info.Version = tag
			}
		}
	}
	return info
}

// imageTag returns the tag of an image reference ("" when absent or only a digest).
func imageTag(image string) string {
	ref, _, _ := strings.Cut(image, "@")
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash {
		return ""
	}
	return ref[colon+1:]
}

func nodeInfos(nodes []corev1.Node, dp *DevicePluginPath, dra *DRAPath) []NodeInfo {
	var out []NodeInfo
	for _, n := range nodes {
		ni := NodeInfo{
			Name: n.Name, Product: strings.TrimSuffix(n.Labels[LabelGPUProduct], SharedProductSuffix), Driver: n.Labels[LabelDriverVersion],
			OSImage: n.Status.NodeInfo.OSImage, Kernel: n.Status.NodeInfo.KernelVersion,
			ContainerRuntime: n.Status.NodeInfo.ContainerRuntimeVersion, Kubelet: n.Status.NodeInfo.KubeletVersion,
		}
		if v, ok := n.Labels[LabelFakeGPUs]; ok {
			ni.FakeGPUs = "label " + LabelFakeGPUs + "=" + v
		}
		if dp != nil {
			ni.DevicePluginDevices = dp.Allocatable[n.Name]
		}
		if dra != nil {
			ni.DRADevices = len(dra.Devices[n.Name])
			if ni.Driver == "" && ni.DRADevices > 0 {
				ni.Driver = dra.DriverVersion
			}
			if ni.Product == "" && ni.DRADevices > 0 {
				ni.Product = dra.Model
			}
		}
		if ni.DevicePluginDevices > 0 || ni.DRADevices > 0 {
			out = append(out, ni)
		}
	}
	slices.SortFunc(out, func(a, b NodeInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func resolvePool(name, selector string, explicit bool, nodes []corev1.Node, withDevices []string, fallBack bool) Pool {
	p := Pool{Selector: selector}
	sel, err := labels.Parse(selector)
	if err != nil {
		p.Note = fmt.Sprintf("selector %q is invalid: %v", selector, err)
		return p
	}
	for _, n := range nodes {
		if sel.Matches(labels.Set(n.Labels)) {
			p.Nodes = append(p.Nodes, n.Name)
		}
	}
	slices.Sort(p.Nodes)
	switch {
	case len(p.Nodes) > 0:
	case explicit:
		p.Note = fmt.Sprintf("the configured %s pool selector %q matches no node", name, selector)
	case fallBack:
		p.Nodes, p.FellBack = slices.Clone(withDevices), true
		p.Note = fmt.Sprintf("default selector %q matches no node; using the nodes that have devices", selector)
	default:
		p.Note = fmt.Sprintf("default selector %q matches no node and the %s pool never falls back (it may be changed by disruptive specs); configure pools.%s", selector, name, name)
	}
	return p
}
