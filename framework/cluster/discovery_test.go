package cluster

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/config"
)

func gpuNode(name string, lbls map[string]string, alloc map[string]int64) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
	for k, v := range alloc {
		n.Status.Allocatable[corev1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	n.Status.NodeInfo = corev1.NodeSystemInfo{OSImage: "Debian", KernelVersion: "6.1", ContainerRuntimeVersion: "containerd://2.1", KubeletVersion: "v1.37.2"}
	return n
}

func slice(node string, devices ...string) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.example.com", NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1},
	}}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: d, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"driverVersion": {VersionValue: ptr.To("1.0.0")}, "model": {StringValue: ptr.To("LATEST-GPU-MODEL")},
		}})
	}
	return s
}

// localCluster records the shape of the local kind cluster: 2 GPU workers, 1 canary, DRA, Kueue.
func localCluster() *fake.Clientset {
	gfd := func(pool string) map[string]string {
		return map[string]string{"gpuconform.io/pool": pool, LabelGPUProduct: "Fake-GPU", LabelDriverVersion: "550.1", LabelSharingStrategy: "none"}
	}
	objs := []runtime.Object{
		gpuNode("cp", map[string]string{"node-role.kubernetes.io/control-plane": ""}, nil),
		gpuNode("w1", gfd("gpu"), map[string]int64{"nvidia.com/gpu": 4}),
		gpuNode("w2", gfd("gpu"), map[string]int64{"nvidia.com/gpu": 4}),
		gpuNode("c1", gfd("canary"), map[string]int64{"nvidia.com/gpu": 4}),
		&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com"}, Spec: resourcev1.DeviceClassSpec{
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}},
		}},
		slice("w1", "gpu-0", "gpu-1"), slice("w2", "gpu-0", "gpu-1"),
		pluginPod("w1", "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins"), pluginPod("w2", "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins"),
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "kueue-controller-manager", Namespace: "kueue-system"}, Spec: appsv1.DeploymentSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "registry.k8s.io/kueue/kueue:v0.17.0"}}}},
		}},
	}
	c := fake.NewClientset(objs...)
	d := c.Discovery().(*fakediscovery.FakeDiscovery)
	d.Resources = []*metav1.APIResourceList{
		{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "deviceclasses"}, {Name: "resourceslices"}, {Name: "resourceclaims"}}},
		{GroupVersion: "kueue.x-k8s.io/v1beta2", APIResources: []metav1.APIResource{{Name: "clusterqueues"}, {Name: "localqueues"}, {Name: "resourceflavors"}, {Name: "workloads"}, {Name: "workloads/status"}}},
	}
	return c
}

func TestDiscoverLocalCluster(t *testing.T) {
	snap, err := Collect(t.Context(), localCluster(), "kueue-system")
	if err != nil {
		t.Fatal(err)
	}
	caps := Discover(snap, config.Default())
	if caps.DevicePlugin == nil || caps.DevicePlugin.ResourceName != "nvidia.com/gpu" || len(caps.DevicePlugin.Allocatable) != 3 {
		t.Errorf("device plugin: %+v (%v)", caps.DevicePlugin, caps.NotExercised)
	}
	if caps.DRA == nil || caps.DRA.DeviceClass != "gpu.example.com" || len(caps.DRA.Devices["w1"]) != 2 || caps.DRA.DriverVersion != "1.0.0" {
		t.Errorf("dra: %+v (%v)", caps.DRA, caps.NotExercised)
	}
	if !caps.Kueue.Present || caps.Kueue.Version != "v0.17.0" {
		t.Errorf("kueue: %+v", caps.Kueue)
	}
	if caps.Sharing.Mode != "exclusive" {
		t.Errorf("sharing: %+v", caps.Sharing)
	}
	if strings.Join(caps.Pools.GPU.Nodes, ",") != "w1,w2" || caps.Pools.GPU.FellBack || strings.Join(caps.Pools.Canary.Nodes, ",") != "c1" {
		t.Errorf("pools: %+v", caps.Pools)
	}
	if len(caps.Nodes) != 3 || caps.Nodes[0].Name != "c1" || caps.Nodes[1].Kernel != "6.1" || caps.Nodes[1].DRADevices != 2 {
		t.Errorf("nodes: %+v", caps.Nodes)
	}
	// No DeviceClass maps an extended resource: the third path is absent, and says why.
	if why := caps.NotExercised[ExtendedDRAPathName]; len(caps.NotExercised) != 1 || !strings.Contains(why, "no DeviceClass sets spec.extendedResourceName") {
		t.Errorf("nothing but the extended-resource DRA path should be missing: %v", caps.NotExercised)
	}
}

func TestDiscoverRealClusterShapes(t *testing.T) {
	// A real cluster: no pool labels, MIG + time-slicing, no DRA API, no Kueue.
	n := gpuNode("gpu-a", map[string]string{LabelSharingStrategy: "time-slicing", LabelSharingReplicas: "4"}, map[string]int64{"nvidia.com/gpu": 32, "nvidia.com/mig-1g.10gb": 7})
	snap := Snapshot{Nodes: []corev1.Node{*n, *gpuNode("cpu-a", nil, nil)}}
	caps := Discover(snap, config.Default())
	if caps.DRA != nil || !strings.Contains(caps.NotExercised["dra"], "resource.k8s.io/v1") {
		t.Errorf("dra must be absent with a reason: %v", caps.NotExercised)
	}
	if caps.Kueue.Present || !strings.Contains(caps.NotExercised["kueue"], "not installed") {
		t.Errorf("kueue must be absent with a reason: %+v", caps.Kueue)
	}
	// Per-profile MIG resources are the mixed strategy; the time-slicing labels then speak of the MIG
	// devices' replicas.
	if caps.Sharing.Mode != "mig-mixed" || caps.Sharing.Replicas != 4 || caps.Sharing.MIGResources[0] != "nvidia.com/mig-1g.10gb" {
		t.Errorf("sharing: %+v", caps.Sharing)
	}
	if len(caps.SharingModes) != 1 || caps.SharingModes[0].Node != "gpu-a" || caps.SharingModes[0].Mode != ModeMIGMixed || caps.SharingModes[0].WholeGPUs != 32 {
		t.Errorf("sharing modes: %+v", caps.SharingModes)
	}
	if !caps.Pools.GPU.FellBack || strings.Join(caps.Pools.GPU.Nodes, ",") != "gpu-a" {
		t.Errorf("default GPU pool must fall back to nodes with devices: %+v", caps.Pools.GPU)
	}
	if len(caps.Pools.Canary.Nodes) != 0 || caps.Pools.Canary.Note == "" {
		t.Errorf("canary pool must never fall back: %+v", caps.Pools.Canary)
	}
	// An explicit selector that matches nothing does not fall back.
	cfg, _ := config.Parse([]string{"--gpu-pool", "team=ml"})
	caps = Discover(snap, cfg)
	if len(caps.Pools.GPU.Nodes) != 0 || !strings.Contains(caps.Pools.GPU.Note, "matches no node") {
		t.Errorf("explicit pool: %+v", caps.Pools.GPU)
	}
}

func TestDevicePluginResourceSelection(t *testing.T) {
	amd := gpuNode("a", nil, map[string]int64{"amd.com/gpu": 8})
	if p, why := discoverDevicePlugin([]corev1.Node{*amd}, ""); p == nil || p.ResourceName != "amd.com/gpu" {
		t.Errorf("fallback to another GPU resource: %+v %s", p, why)
	}
	if p, why := discoverDevicePlugin([]corev1.Node{*amd}, "nvidia.com/gpu"); p != nil || !strings.Contains(why, "nvidia.com/gpu") {
		t.Errorf("configured but absent resource must say so: %s", why)
	}
	if p, why := discoverDevicePlugin([]corev1.Node{*gpuNode("c", nil, nil)}, ""); p != nil || !strings.Contains(why, "no node advertises") {
		t.Errorf("no GPU resource: %s", why)
	}
	// renameByDefault: nvidia.com/gpu at 0, the replicas as nvidia.com/gpu.shared, which wins over another
	// vendor's resource that sorts first.
	renamed := gpuNode("r", map[string]string{LabelSharingStrategy: "time-slicing", LabelSharingReplicas: "2", LabelGPUCount: "4"}, map[string]int64{"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 8})
	if p, why := discoverDevicePlugin([]corev1.Node{*amd, *renamed}, ""); p == nil || p.ResourceName != "nvidia.com/gpu.shared" || p.Allocatable["r"] != 8 {
		t.Errorf("renamed shared resource: %+v %s", p, why)
	}
	// The record says time-slicing on it, with no conflict and no disagreement note.
	caps := Discover(Snapshot{Nodes: []corev1.Node{*renamed}}, config.Default())
	if caps.Sharing.Mode != ModeTimeSlicing || caps.Sharing.Replicas != 2 || len(caps.SharingModes) != 1 || caps.SharingModes[0].Conflict != "" || len(caps.Notes) != 0 {
		t.Errorf("renamed shared resource: sharing %+v, modes %+v, notes %q", caps.Sharing, caps.SharingModes, caps.Notes)
	}
}

func TestDRAConfiguredClassMissing(t *testing.T) {
	snap, _ := Collect(t.Context(), localCluster(), "kueue-system")
	cfg, _ := config.Parse([]string{"--dra-device-class", "nope"})
	caps := Discover(snap, cfg)
	if caps.DRA != nil || !strings.Contains(caps.NotExercised["dra"], `"nope"`) {
		t.Errorf("missing configured class: %v", caps.NotExercised)
	}
}

func TestImageTag(t *testing.T) {
	for in, want := range map[string]string{
		"registry.k8s.io/kueue/kueue:v0.17.0": "v0.17.0", "localhost:5000/kueue": "", "kueue:v1@sha256:abc": "v1", "kueue@sha256:abc": "",
	} {
		if got := imageTag(in); got != want {
			t.Errorf("imageTag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnreachableErrorNamesServer(t *testing.T) {
	err := UnreachableError("https://127.0.0.1:6443", "kind-gpuconform", errString("dial tcp 127.0.0.1:6443: connect: connection refused"))
	if !strings.Contains(err.Error(), "https://127.0.0.1:6443") || !strings.Contains(err.Error(), "kind-gpuconform") {
		t.Error(err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestDiscoverTellsBrokenFromAbsent(t *testing.T) {
	ctx := t.Context()
	// The device plugin stopped serving: capacity stays, allocatable is 0. The DRA driver's kubelet plugin
	// is gone: its DeviceClass is there, no slice publishes devices.
	stopped := gpuNode("w1", map[string]string{"nvidia.com/gpu.count": "4"}, map[string]int64{"nvidia.com/gpu": 0})
	stopped.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}
	c := fake.NewClientset(stopped, &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'`}}},
	}})
	c.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{
		{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "deviceclasses"}, {Name: "resourceslices"}, {Name: "resourceclaims"}}},
	}
	snap, err := Collect(ctx, c, "kueue-system")
	if err != nil {
		t.Fatal(err)
	}
	caps := Discover(snap, config.Default())
	if caps.DevicePlugin != nil || caps.DRA != nil {
		t.Fatalf("broken paths discovered as working: %+v %+v", caps.DevicePlugin, caps.DRA)
	}
	if why := caps.Broken[config.PathDevicePlugin]; !strings.Contains(why, "w1 report capacity for nvidia.com/gpu but 0 allocatable") {
		t.Errorf("device plugin broken = %q", why)
	}
	if why := caps.Broken[config.PathDRA]; !strings.Contains(why, "DeviceClass gpu.nvidia.com selects driver gpu.nvidia.com, but no ResourceSlice") {
		t.Errorf("dra broken = %q", why)
	}
	if _, ok := caps.NotExercised[config.PathDevicePlugin]; ok {
		t.Errorf("a broken path must not be 'not exercised': %v", caps.NotExercised)
	}

	// GPU nodes by label, no resource at all: the plugin never registered.
	unserved := gpuNode("w2", map[string]string{"nvidia.com/gpu.present": "true"}, nil)
	snap, err = Collect(ctx, fake.NewClientset(unserved), "kueue-system")
	if err != nil {
		t.Fatal(err)
	}
	if why := Discover(snap, config.Default()).Broken[config.PathDevicePlugin]; !strings.Contains(why, "w2 are labelled as GPU nodes") {
		t.Errorf("labelled, unserved: %q", why)
	}

	// Nothing GPU at all: absent, not broken.
	snap, err = Collect(ctx, fake.NewClientset(gpuNode("cpu", nil, nil)), "kueue-system")
	if err != nil {
		t.Fatal(err)
	}
	if caps := Discover(snap, config.Default()); len(caps.Broken) != 0 || caps.NotExercised[config.PathDevicePlugin] == "" {
		t.Errorf("CPU-only cluster: broken %v, not exercised %v", caps.Broken, caps.NotExercised)
	}
}

func TestDiscoverBrokenNodeBesideWorkingOnes(t *testing.T) {
	// w1 serves; w2's plugin stopped (capacity, no allocatable); w3 is MIG-only (labelled, a GPU resource
	// of another name: not broken).
	dead := gpuNode("w2", map[string]string{"nvidia.com/gpu.count": "4"}, map[string]int64{"nvidia.com/gpu": 0})
	dead.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}
	mig := gpuNode("w3", map[string]string{"nvidia.com/gpu.count": "1"}, map[string]int64{"nvidia.com/mig-1g.10gb": 7})
	snap, err := Collect(t.Context(), fake.NewClientset(gpuNode("w1", map[string]string{"nvidia.com/gpu.count": "4"}, map[string]int64{"nvidia.com/gpu": 4}), dead, mig), "kueue-system")
	if err != nil {
		t.Fatal(err)
	}
	caps := Discover(snap, config.Default())
	if caps.DevicePlugin == nil || caps.DevicePlugin.Allocatable["w1"] != 4 {
		t.Fatalf("the working node's path: %+v", caps.DevicePlugin)
	}
	if why := caps.Broken[config.PathDevicePlugin]; !strings.Contains(why, "w2 report capacity") || strings.Contains(why, "w3") {
		t.Errorf("broken = %q, want w2 named and the MIG node not", why)
	}
}

// A node whose resources changed (MIG mixed back to whole GPUs) keeps the old resources in capacity with
// nothing allocatable for the kubelet's endpoint grace period; while it serves nvidia.com/gpu that is
// not a broken plugin. A node serving no GPU resource at all still is, named once.
func TestStaleResourceAfterReconfigurationIsNotBroken(t *testing.T) {
	reconfigured := gpuNode("w1", nil, map[string]int64{"nvidia.com/gpu": 4, "nvidia.com/mig-3g.40gb": 0, "nvidia.com/mig-1g.10gb": 0})
	reconfigured.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4"),
		"nvidia.com/mig-3g.40gb": resource.MustParse("2"), "nvidia.com/mig-1g.10gb": resource.MustParse("1")}
	if why := brokenDevicePlugin([]corev1.Node{*reconfigured}, "", nil); why != "" {
		t.Errorf("a node serving nvidia.com/gpu with stale MIG capacity called broken: %s", why)
	}
	stopped := gpuNode("w2", nil, map[string]int64{"nvidia.com/mig-3g.40gb": 0, "nvidia.com/mig-1g.10gb": 0})
	stopped.Status.Capacity = reconfigured.Status.Capacity.DeepCopy()
	stopped.Status.Capacity["nvidia.com/gpu"] = resource.MustParse("0")
	why := brokenDevicePlugin([]corev1.Node{*reconfigured, *stopped}, "", nil)
	if !strings.Contains(why, "node(s) w2 report capacity for nvidia.com/mig-") || strings.Contains(why, "w1") {
		t.Errorf("a node serving nothing must be broken, once: %q", why)
	}
	// The configured resource is judged as it always was.
	if why := brokenDevicePlugin([]corev1.Node{*reconfigured}, "nvidia.com/mig-3g.40gb", nil); !strings.Contains(why, "w1 report capacity for nvidia.com/mig-3g.40gb") {
		t.Errorf("configured resource with 0 allocatable: %q", why)
	}
}

// A node labelled as a GPU node that advertises no GPU resource has a broken device plugin, unless a DRA
// driver publishes its devices (a node migrated to DRA, its device plugin off).
func TestLabelledNodeServedByDRAIsNotBroken(t *testing.T) {
	labelled := gpuNode("w3", map[string]string{"nvidia.com/gpu.present": "true"}, nil)
	serving := gpuNode("w1", nil, map[string]int64{"nvidia.com/gpu": 4})
	if why := brokenDevicePlugin([]corev1.Node{*serving, *labelled}, "", publishingNodes([]resourcev1.ResourceSlice{*slice("w3", "gpu-0")})); why != "" {
		t.Errorf("a DRA-served GPU node called a broken device plugin: %s", why)
	}
	if why := brokenDevicePlugin([]corev1.Node{*serving, *labelled}, "", publishingNodes([]resourcev1.ResourceSlice{*slice("w1", "gpu-0")})); !strings.Contains(why, "node(s) w3 are labelled as GPU nodes") {
		t.Errorf("a labelled node nothing serves: %q", why)
	}
}

// A device its driver taints NoSchedule (NVIDIA's driver on a critical XID) is not counted: a spec that
// fills a node must not wait for it. A None taint is information only. With every device tainted the path
// is absent, and the reason names the taints.
func TestDRADiscoveryLeavesOutTaintedDevices(t *testing.T) {
	snap, err := Collect(t.Context(), localCluster(), "kueue-system")
	if err != nil {
		t.Fatal(err)
	}
	taint := func(node, device string, effect resourcev1.DeviceTaintEffect) {
		for i := range snap.ResourceSlices {
			s := &snap.ResourceSlices[i]
			for j := range s.Spec.Devices {
				if *s.Spec.NodeName == node && s.Spec.Devices[j].Name == device {
					s.Spec.Devices[j].Taints = append(s.Spec.Devices[j].Taints, resourcev1.DeviceTaint{Key: "gpu.example.com/xid", Value: "79", Effect: effect})
				}
			}
		}
	}
	taint("w1", "gpu-1", resourcev1.DeviceTaintEffectNoSchedule)
	taint("w2", "gpu-0", resourcev1.DeviceTaintEffectNone)
	caps := Discover(snap, config.Default())
	if caps.DRA == nil || !slices.Equal(caps.DRA.Devices["w1"], []string{"gpu-0"}) || len(caps.DRA.Devices["w2"]) != 2 {
		t.Fatalf("dra devices: %+v (%v)", caps.DRA, caps.NotExercised)
	}
	if got := DescribeTainted(caps.DRA.Tainted); got != "w1: gpu-1 gpu.example.com/xid=79:NoSchedule" {
		t.Errorf("tainted: %q", got)
	}
	for _, d := range []string{"gpu-0", "gpu-1"} {
		taint("w1", d, resourcev1.DeviceTaintEffectNoExecute)
		taint("w2", d, resourcev1.DeviceTaintEffectNoExecute)
	}
	caps = Discover(snap, config.Default())
	if caps.DRA != nil || !strings.Contains(caps.NotExercised["dra"], "kept from new allocations by a taint in its ResourceSlice: w1: gpu-0 gpu.example.com/xid=79:NoExecute") {
		t.Errorf("every device tainted: %+v, %q", caps.DRA, caps.NotExercised["dra"])
	}
}
