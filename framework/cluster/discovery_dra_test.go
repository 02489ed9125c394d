package cluster

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/config"
)

// pluginPod is a running, Ready DaemonSet pod on node that mounts the given host paths, as a DRA driver's
// kubelet plugin does.
func pluginPod(node string, hostPaths ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plugin-" + node, Namespace: "gpu-operator"}, Spec: corev1.PodSpec{NodeName: node}}
	for i, hp := range hostPaths {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "v" + string(rune('a'+i)), VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hp}}})
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	return p
}

// nvidiaSlice is a node's slice of gpu.nvidia.com with GPUs named and described as NVIDIA's driver does.
func nvidiaSlice(node string, n int) resourcev1.ResourceSlice {
	s := resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu.nvidia.com"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.nvidia.com", NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1},
	}}
	for i := range n {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: "gpu-" + string(rune('0'+i)), Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptr.To("gpu")}, "productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")}, "index": {IntValue: ptr.To(int64(i))},
			"driverVersion": {VersionValue: ptr.To("550.54.15")},
		}})
	}
	return s
}

func nvidiaClass(extra ...string) resourcev1.DeviceClass {
	dc := resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"}}
	for _, e := range append([]string{`device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'`}, extra...) {
		dc.Spec.Selectors = append(dc.Spec.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: e}})
	}
	return dc
}

// draSnapshot is two GPU workers publishing four gpu.nvidia.com GPUs each, whose pods were read.
func draSnapshot(class resourcev1.DeviceClass, pods map[string][]corev1.Pod) Snapshot {
	return Snapshot{
		Nodes:       []corev1.Node{*gpuNode("w1", nil, nil), *gpuNode("w2", nil, nil)},
		ResourceAPI: true, DeviceClasses: []resourcev1.DeviceClass{class},
		ResourceSlices: []resourcev1.ResourceSlice{nvidiaSlice("w1", 4), nvidiaSlice("w2", 4)},
		NodePods:       pods,
	}
}

func served(nodes ...string) map[string][]corev1.Pod {
	out := map[string][]corev1.Pod{}
	for _, n := range nodes {
		out[n] = []corev1.Pod{*pluginPod(n, "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/gpu.nvidia.com")}
	}
	return out
}

func TestDiscoverDRAClassAndPlugin(t *testing.T) {
	both := served("w1", "w2")
	onlyW1 := served("w1")
	onlyW1["w2"] = []corev1.Pod{}
	for _, tc := range []struct {
		name string
		snap Snapshot
		// devices are the selected devices per node ("w1=2,w2=2"); "" when the path must be nil.
		devices string
		broken  []string // texts Broken[dra] must contain; none: no broken path
		settled bool
		note    string // a text one note must contain
	}{
		{name: "the class selects every published GPU", snap: draSnapshot(nvidiaClass(), both), devices: "w1=4,w2=4"},
		{name: "a class narrowed by attribute selects some", snap: draSnapshot(nvidiaClass(`device.attributes['gpu.nvidia.com'].index < 2`), both), devices: "w1=2,w2=2"},
		{name: "a class that selects none of the published GPUs is broken and settled",
			snap: draSnapshot(nvidiaClass(`device.attributes['gpu.nvidia.com'].productName == 'gpuconform-never-published'`), both),
			broken: []string{"DeviceClass gpu.nvidia.com selects 0 of 8 published devices",
				`expression "device.attributes['gpu.nvidia.com'].productName == 'gpuconform-never-published'" is false for gpu-0 on node w1`,
				"productName=NVIDIA H100 80GB HBM3"}, settled: true},
		{name: "a selector that does not compile is broken and settled", snap: draSnapshot(nvidiaClass(`device.attributes['gpu.nvidia.com'].type.size() > `), both),
			broken: []string{"DeviceClass gpu.nvidia.com selects 0 of 8 published devices", "does not compile"}, settled: true},
		{name: "no plugin pod on any publishing node is broken and settled", snap: draSnapshot(nvidiaClass(), map[string][]corev1.Pod{"w1": {}, "w2": {}}),
			broken: []string{"DRA driver gpu.nvidia.com publishes ResourceSlices, but no plugin pod is Ready on node(s) w1, w2", `is not registered`}, settled: true},
		{name: "a plugin pod that is not Ready does not serve", snap: draSnapshot(nvidiaClass(), unready(both)),
			broken: []string{"no plugin pod is Ready on node(s) w1, w2"}, settled: true},
		{name: "a CSI node plugin mounting the registry is not the driver's plugin",
			snap: draSnapshot(nvidiaClass(), map[string][]corev1.Pod{
				"w1": {*pluginPod("w1", "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/ebs.csi.aws.com")}, "w2": {}}),
			broken: []string{"no plugin pod is Ready on node(s) w1, w2"}, settled: true},
		{name: "a plugin under another kubelet root directory serves", snap: draSnapshot(nvidiaClass(), map[string][]corev1.Pod{
			"w1": {*pluginPod("w1", "/data/kubelet/plugins_registry/")}, "w2": {*pluginPod("w2", "/data/kubelet/plugins/gpu.nvidia.com")}}), devices: "w1=4,w2=4"},
		{name: "a plugin missing on some publishing nodes is a note, not a broken path", snap: draSnapshot(nvidiaClass(), onlyW1), devices: "w1=4,w2=4",
			note: "DRA driver gpu.nvidia.com publishes ResourceSlices, but no plugin pod is Ready on node(s) w2"},
		{name: "pods that may not be listed leave the plugin unchecked, never broken",
			snap: func() Snapshot {
				s := draSnapshot(nvidiaClass(), nil)
				s.NodePodsUnread = `may not list pods on node w1: pods is forbidden`
				return s
			}(), devices: "w1=4,w2=4", note: "was not checked: may not list pods on node w1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caps := Discover(tc.snap, config.Default())
			if got := devicesPerNode(caps.DRA); got != tc.devices {
				t.Errorf("DRA devices %q, want %q (broken %q, not exercised %q)", got, tc.devices, caps.Broken[config.PathDRA], caps.NotExercised[config.PathDRA])
			}
			why := caps.Broken[config.PathDRA]
			if len(tc.broken) == 0 && why != "" {
				t.Errorf("broken %q, want none", why)
			}
			for _, want := range tc.broken {
				if !strings.Contains(why, want) {
					t.Errorf("broken %q, want it to contain %q", why, want)
				}
			}
			if caps.Settled[config.PathDRA] != tc.settled || (caps.SettledBroken() != "") != tc.settled {
				t.Errorf("settled %v (%q), want %v", caps.Settled[config.PathDRA], caps.SettledBroken(), tc.settled)
			}
			if _, ok := caps.NotExercised[config.PathDRA]; ok && why != "" {
				t.Errorf("a broken path is also not exercised: %q", caps.NotExercised[config.PathDRA])
			}
			if tc.note != "" && !slices.ContainsFunc(caps.Notes, func(n string) bool { return strings.Contains(n, tc.note) }) {
				t.Errorf("notes %q lack %q", caps.Notes, tc.note)
			}
		})
	}
}

func unready(pods map[string][]corev1.Pod) map[string][]corev1.Pod {
	out := map[string][]corev1.Pod{}
	for n, ps := range pods {
		for _, p := range ps {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
			out[n] = append(out[n], p)
		}
	}
	return out
}

func devicesPerNode(p *DRAPath) string {
	if p == nil {
		return ""
	}
	var out []string
	for _, n := range []string{"w1", "w2"} {
		out = append(out, n+"="+string(rune('0'+len(p.Devices[n]))))
		if p.Published[n] != 4 {
			out = append(out, "published "+n+" is not 4")
		}
	}
	return strings.Join(out, ",")
}

// The stack-ready check does not wait for a settled broken path, even when the path was asked for.
func TestCheckStackReadySettled(t *testing.T) {
	class := nvidiaClass(`device.attributes['gpu.nvidia.com'].productName == 'gpuconform-never-published'`)
	s1, s2 := nvidiaSlice("w1", 4), nvidiaSlice("w2", 4)
	kube := fake.NewClientset(gpuNode("w1", nil, nil), gpuNode("w2", nil, nil), &class, &s1, &s2,
		pluginPod("w1", "/var/lib/kubelet/plugins_registry"), pluginPod("w2", "/var/lib/kubelet/plugins_registry"))
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{
		{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "deviceclasses"}, {Name: "resourceslices"}}},
	}
	for _, args := range [][]string{nil, {"--allocation-paths", "dra"}} {
		cfg, err := config.Parse(args)
		if err != nil {
			t.Fatal(err)
		}
		caps, err := CheckStackReady(t.Context(), kube, cfg, nil)
		if err != nil || !strings.Contains(caps.SettledBroken(), "dra: DeviceClass gpu.nvidia.com selects 0 of 8") {
			t.Errorf("%v: err %v, settled %q", args, err, caps.SettledBroken())
		}
	}
}

// Collect lists pods only on the nodes that publish slices, and a refusal is a note.
func TestCollectPluginPods(t *testing.T) {
	s1, s2 := nvidiaSlice("w1", 4), nvidiaSlice("w2", 4)
	kube := fake.NewClientset(&s1, &s2, pluginPod("w1", "/var/lib/kubelet/plugins_registry"), pluginPod("cpu-1", "/var/lib/kubelet/plugins_registry"))
	pods, why := collectPluginPods(t.Context(), kube, []resourcev1.ResourceSlice{s1, s2})
	if why != "" || len(pods) != 2 || len(pods["w1"]) != 1 || len(pods["w2"]) != 0 {
		t.Errorf("pods %v (%s), want w1's plugin and none on w2", pods, why)
	}
	var selectors []string
	for _, a := range kube.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource == "pods" {
			selectors = append(selectors, l.GetListRestrictions().Fields.String())
		}
	}
	if !slices.Equal(selectors, []string{"spec.nodeName=w1", "spec.nodeName=w2"}) {
		t.Errorf("pod lists %v, want one per publishing node", selectors)
	}
	kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", nil)
	})
	if pods, why := collectPluginPods(t.Context(), kube, []resourcev1.ResourceSlice{s1}); pods != nil || !strings.Contains(why, "may not list pods on node w1") {
		t.Errorf("forbidden: %v %q", pods, why)
	}
}

// At most maxPluginNodes nodes are read, every driver's first nodes among them.
func TestPluginNodesBounded(t *testing.T) {
	var published []resourcev1.ResourceSlice
	for i := range 20 {
		published = append(published, nvidiaSlice("n"+string(rune('a'+i)), 1))
	}
	other := nvidiaSlice("z-only", 1)
	other.Spec.Driver = "gpu.example.com"
	nodes := pluginNodes(append(published, other))
	if len(nodes) != maxPluginNodes || !slices.Contains(nodes, "z-only") || nodes[0] != "z-only" && nodes[1] != "z-only" {
		t.Errorf("nodes %v: want %d, the other driver's node among the first", nodes, maxPluginNodes)
	}
}

// The extended-resource path (DRAExtendedResource): a DeviceClass mapping nvidia.com/gpu is a path only
// where some node with its devices has no device plugin advertising the name.
func TestDiscoverExtendedResourceDRA(t *testing.T) {
	mapped := nvidiaClass()
	mapped.Spec.ExtendedResourceName = ptr.To("nvidia.com/gpu")
	snap := func(class resourcev1.DeviceClass, pluginOn ...string) Snapshot {
		s := draSnapshot(class, served("w1", "w2"))
		for i := range s.Nodes {
			if slices.Contains(pluginOn, s.Nodes[i].Name) {
				s.Nodes[i] = *gpuNode(s.Nodes[i].Name, nil, map[string]int64{"nvidia.com/gpu": 4})
			}
		}
		return s
	}
	for _, tc := range []struct {
		name            string
		snap            Snapshot
		dra, plugin     []string
		absent, present string
	}{
		{name: "no mapping", snap: snap(nvidiaClass()), absent: "not present: no DeviceClass sets spec.extendedResourceName"},
		{name: "mapping, the device plugin on every node", snap: snap(mapped, "w1", "w2"),
			absent: "not present: DeviceClass gpu.nvidia.com maps nvidia.com/gpu, but every node with its devices also advertises nvidia.com/gpu through a device plugin, which serves the name there: w1 (4), w2 (4)"},
		{name: "half-migrated pool", snap: snap(mapped, "w1"), dra: []string{"w2"}, plugin: []string{"w1"},
			present: "nvidia.com/gpu through DeviceClass gpu.nvidia.com: by the DRA driver on w2 (4); by a device plugin on w1 (4)"},
		{name: "migrated pool", snap: snap(mapped), dra: []string{"w1", "w2"}, present: "by the DRA driver on w1 (4), w2 (4)"},
		{name: "no DRA API", snap: Snapshot{Nodes: []corev1.Node{*gpuNode("w1", nil, map[string]int64{"nvidia.com/gpu": 4})}}, absent: "resource.k8s.io/v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caps := Discover(tc.snap, config.Default())
			why := caps.NotExercised[ExtendedDRAPathName]
			if tc.absent != "" {
				if caps.ExtendedDRA != nil || !strings.Contains(why, tc.absent) {
					t.Fatalf("path %+v, why %q: want absent with %q", caps.ExtendedDRA, why, tc.absent)
				}
				return
			}
			p := caps.ExtendedDRA
			if p == nil {
				t.Fatalf("no path (%s)", why)
			}
			if got := slices.Sorted(maps.Keys(p.DRANodes)); !slices.Equal(got, tc.dra) {
				t.Errorf("DRA-served nodes %v, want %v", got, tc.dra)
			}
			if got := slices.Sorted(maps.Keys(p.PluginNodes)); !slices.Equal(got, tc.plugin) {
				t.Errorf("plugin-served nodes %v, want %v", got, tc.plugin)
			}
			if !strings.Contains(p.Served(), tc.present) || why != "" {
				t.Errorf("Served %q / not exercised %q, want %q and nothing not exercised", p.Served(), why, tc.present)
			}
			if p.Driver != "gpu.nvidia.com" || len(p.Devices[tc.dra[0]]) != p.DRANodes[tc.dra[0]] {
				t.Errorf("driver %q, devices %v: want the class's driver and the devices counted", p.Driver, p.Devices)
			}
			// The labelled GPU node without a device plugin is the DRA driver's, not a broken plugin.
			if why := caps.Broken[config.PathDevicePlugin]; why != "" {
				t.Errorf("device-plugin path broken: %s", why)
			}
		})
	}
	cfg := config.Default()
	cfg.AllocationPaths = []string{config.PathDevicePlugin, config.PathDRA}
	if caps := Discover(snap(mapped, "w1"), cfg); caps.ExtendedDRA != nil || caps.NotExercised[ExtendedDRAPathName] != "not selected by allocationPaths" {
		t.Errorf("path left out by allocationPaths: %+v, %q", caps.ExtendedDRA, caps.NotExercised[ExtendedDRAPathName])
	}
}
