package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/config"
)

const agentNS, agentName = "gpu-operator", "nvidia-device-plugin-daemonset"

// agentNodes are three GPU nodes whose device plugin stopped serving (capacity kept, nothing
// allocatable, GFD's label still there) and a control plane; set changes each GPU node.
func agentNodes(set func(*corev1.Node)) []corev1.Node {
	out := []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "cp", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}}}}
	for _, name := range []string{"gpu-1", "gpu-2", "gpu-3"} {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nvidia.com/gpu.present": "true", "gpuconform.io/pool": "gpu"}}}
		n.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(4, resource.DecimalSI)}
		n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(0, resource.DecimalSI)}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if set != nil {
			set(&n)
		}
		out = append(out, n)
	}
	return out
}

// agentDS is a DaemonSet whose template mounts the host paths; desired and ready are its status counts
// (every pod updated), its generation observed.
func agentDS(ns, name string, desired, ready int32, hostPaths ...string) *appsv1.DaemonSet {
	lbls := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: lbls}, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbls}}},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: desired, CurrentNumberScheduled: desired, NumberReady: ready,
			NumberAvailable: ready, UpdatedNumberScheduled: desired}}
	c := corev1.Container{Name: "plugin", Image: "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}
	for i, p := range hostPaths {
		v := string(rune('a' + i))
		ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v, MountPath: p})
	}
	ds.Spec.Template.Spec.Containers = []corev1.Container{c}
	return ds
}

// agentPod is ds's pod on node, created age before testNow, in the state set gives it (Running and
// Ready when set is nil).
func agentPod(ds *appsv1.DaemonSet, node string, age time.Duration, set func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: ds.Name + "-" + node, Labels: ds.Spec.Template.Labels,
		CreationTimestamp: metav1.NewTime(testNow().Add(-age)),
		OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, Controller: ptr.To(true)}}},
		Spec: *ds.Spec.Template.Spec.DeepCopy()}
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if set != nil {
		set(p)
	}
	return p
}

func crashLooping(restarts int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "plugin", RestartCount: restarts,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s restarting failed container=plugin"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND"}}}}
	}
}

// With no GPU-node-wide reason to read them, the states of a GPU node agent's DaemonSet: scheduled
// nowhere (and why, by what excludes the GPU nodes), failing for good on a GPU node, or only coming up.
func TestDescribeAgent(t *testing.T) {
	now := testNow()
	const dp = devicePluginDir
	selector := func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.NodeSelector = map[string]string{"nvidia.com/gpu.deploy.device-plugin": "true"}
	}
	affinity := func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpuconform.io/pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"nowhere"}}}}}}}}
	}
	tainted := func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}
		if n.Name == "gpu-3" { // a cordon is no reason: every daemon pod tolerates it
			n.Spec.Taints = append([]corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}, n.Spec.Taints...)
		}
	}
	cases := []struct {
		name  string
		ds    func() *appsv1.DaemonSet
		nodes func(*corev1.Node)
		pods  func(*appsv1.DaemonSet) []runtime.Object
		// ready: no ComponentDown; comingUp: for a wait that begins now.
		ready, terminal, comingUp bool
		// exact is the whole message, when set; says are fragments of it.
		exact string
		says  []string
	}{
		{name: "scheduled nowhere by its nodeSelector", terminal: true,
			ds: func() *appsv1.DaemonSet { ds := agentDS(agentNS, agentName, 0, 0, dp); selector(ds); return ds },
			exact: "device plugin: DaemonSet gpu-operator/nvidia-device-plugin-daemonset is scheduled on no node (desired 0): its nodeSelector nvidia.com/gpu.deploy.device-plugin=true " +
				"matches none of the 3 GPU nodes (gpu-1, gpu-2, gpu-3); label the GPU nodes or fix the selector"},
		{name: "scheduled nowhere by its required node affinity", terminal: true,
			ds:   func() *appsv1.DaemonSet { ds := agentDS(agentNS, agentName, 0, 0, dp); affinity(ds); return ds },
			says: []string{"is scheduled on no node (desired 0): its required node affinity gpuconform.io/pool In (nowhere) matches none of the 3 GPU nodes (gpu-1, gpu-2, gpu-3); label the GPU nodes or fix the affinity"}},
		{name: "scheduled nowhere by a taint on every GPU node", terminal: true, nodes: tainted,
			ds: func() *appsv1.DaemonSet { return agentDS(agentNS, agentName, 0, 0, dp) },
			says: []string{"the 3 GPU nodes (gpu-1, gpu-2, gpu-3) carry taint nvidia.com/gpu=present:NoSchedule, which its pods do not tolerate; " +
				"tolerate the taint in the DaemonSet's pod template or remove it from the nodes"}},
		{name: "scheduled nowhere for two reasons", terminal: true,
			nodes: func(n *corev1.Node) {
				if n.Name == "gpu-3" {
					n.Labels["nvidia.com/gpu.deploy.device-plugin"] = "true"
					tainted(n)
				}
			},
			ds: func() *appsv1.DaemonSet { ds := agentDS(agentNS, agentName, 0, 0, dp); selector(ds); return ds },
			says: []string{"its nodeSelector nvidia.com/gpu.deploy.device-plugin=true does not match GPU node(s) gpu-1, gpu-2; GPU node(s) gpu-3 carry taint nvidia.com/gpu=present:NoSchedule",
				"label the GPU nodes or fix the selector; tolerate the taint"}},
		{name: "desired 0 while its template fits a GPU node: the count is behind",
			ds:   func() *appsv1.DaemonSet { return agentDS(agentNS, agentName, 0, 0, dp) },
			says: []string{"scheduled on no node (desired 0)", "not final: GPU node(s) gpu-1, gpu-2, gpu-3 fit its pod template"}},
		{name: "a new spec not observed yet", comingUp: false,
			ds: func() *appsv1.DaemonSet {
				ds := agentDS(agentNS, agentName, 0, 0, dp)
				selector(ds)
				ds.Generation = 2
				return ds
			},
			says: []string{"not final: its controller has not observed generation 2 yet"}},
		{name: "crash loop", terminal: true,
			ds: func() *appsv1.DaemonSet { return agentDS(agentNS, agentName, 3, 2, dp) },
			pods: func(ds *appsv1.DaemonSet) []runtime.Object {
				return []runtime.Object{agentPod(ds, "gpu-1", time.Hour, crashLooping(5)), agentPod(ds, "gpu-2", time.Hour, nil), agentPod(ds, "gpu-3", time.Hour, nil)}
			},
			says: []string{"DaemonSet gpu-operator/nvidia-device-plugin-daemonset: 2 of 3 scheduled pods Ready; pods not Ready: nvidia-device-plugin-daemonset-gpu-1 on gpu-1: CrashLoopBackOff (container plugin, 5 restarts)",
				"it last exited with code 1 (Error): failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND",
				"(final: its pods on GPU node(s) gpu-1 fail for good", "container plugin of pod nvidia-device-plugin-daemonset-gpu-1 is in a crash loop after 5 restarts",
				"`kubectl -n gpu-operator logs nvidia-device-plugin-daemonset-gpu-1 -c plugin --previous`"}},
		{name: "a crash loop of one restart is not final yet",
			ds: func() *appsv1.DaemonSet { return agentDS(agentNS, agentName, 3, 2, dp) },
			pods: func(ds *appsv1.DaemonSet) []runtime.Object {
				return []runtime.Object{agentPod(ds, "gpu-1", time.Hour, crashLooping(1)), agentPod(ds, "gpu-2", time.Hour, nil), agentPod(ds, "gpu-3", time.Hour, nil)}
			},
			says: []string{"CrashLoopBackOff (container plugin, 1 restarts)", "not final before 3 restarts", "(not final: 1 of its 3 pods are not Ready)"}},
		{name: "a crash loop on a node without GPUs is not the GPU nodes'",
			ds: func() *appsv1.DaemonSet { return agentDS(agentNS, agentName, 4, 3, dp) },
			pods: func(ds *appsv1.DaemonSet) []runtime.Object {
				return []runtime.Object{agentPod(ds, "cp", time.Hour, crashLooping(9)), agentPod(ds, "gpu-1", time.Hour, nil), agentPod(ds, "gpu-2", time.Hour, nil), agentPod(ds, "gpu-3", time.Hour, nil)}
			},
			says: []string{"on cp: CrashLoopBackOff", "not final"}},
		{name: "image not pullable", terminal: true,
			ds: func() *appsv1.DaemonSet { return agentDS(agentNS, agentName, 3, 0, dp) },
			pods: func(ds *appsv1.DaemonSet) []runtime.Object {
				var out []runtime.Object
				for _, n := range []string{"gpu-1", "gpu-2", "gpu-3"} {
					out = append(out, agentPod(ds, n, time.Minute, func(p *corev1.Pod) {
						p.Spec.Containers[0].Image = "nvcr.io/nvidia/k8s-device-plugin:v9.9"
						p.Status.Phase, p.Status.Conditions = corev1.PodPending, nil
						p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "plugin", Image: "nvcr.io/nvidia/k8s-device-plugin:v9.9",
							State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "nvcr.io/nvidia/k8s-device-plugin:v9.9"`}}}}
					}))
				}
				return out
			},
			says: []string{"0 of 3 scheduled pods Ready", "ImagePullBackOff (container plugin, image nvcr.io/nvidia/k8s-device-plugin:v9.9, 0 restarts)",
				"its pods on GPU node(s) gpu-1, gpu-2, gpu-3 fail for good", "the image nvcr.io/nvidia/k8s-device-plugin:v9.9 of container plugin of pod nvidia-device-plugin-daemonset-gpu-1 is not pullable (ImagePullBackOff)",
				"fix the image reference, or the nodes' access to its registry"}},
		{name: "a pod the scheduler cannot place is not final",
			ds: func() *appsv1.DaemonSet { return agentDS(agentNS, agentName, 3, 2, dp) },
			pods: func(ds *appsv1.DaemonSet) []runtime.Object {
				pending := agentPod(ds, "gpu-1", time.Hour, unschedulable)
				pending.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu-1"}}}}}}}}
				return []runtime.Object{pending, agentPod(ds, "gpu-2", time.Hour, nil), agentPod(ds, "gpu-3", time.Hour, nil)}
			},
			says: []string{"on gpu-1: Pending, Unschedulable: 0/4 nodes are available", "(not final: 1 of its pods cannot be scheduled"}},
		{name: "healthy", ready: true,
			ds: func() *appsv1.DaemonSet { return agentDS(agentNS, agentName, 3, 3, dp) },
		},
		{name: "rolling: pods young and being replaced", comingUp: true,
			ds: func() *appsv1.DaemonSet {
				ds := agentDS(agentNS, agentName, 3, 1, dp)
				ds.Status.UpdatedNumberScheduled = 2
				return ds
			},
			pods: func(ds *appsv1.DaemonSet) []runtime.Object {
				leaving := agentPod(ds, "gpu-1", time.Hour, func(p *corev1.Pod) {
					p.DeletionTimestamp, p.Finalizers = ptr.To(metav1.NewTime(testNow())), []string{"x"}
				})
				starting := agentPod(ds, "gpu-2", 3*time.Second, func(p *corev1.Pod) { p.Status.Conditions = nil; runningNotReady(p) })
				starting.Name += "-new"
				return []runtime.Object{leaving, starting, agentPod(ds, "gpu-3", 20*time.Second, nil)}
			},
			says: []string{"1 of 3 scheduled pods Ready", "on gpu-1: Terminating", "on gpu-2: Running, not Ready", "(not final: a rollout is in progress (2 of 3 pods updated) and pods are starting)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ds := tc.ds()
			objs := []runtime.Object{ds}
			if tc.pods != nil {
				objs = append(objs, tc.pods(ds)...)
			}
			agents := findGPUAgents([]appsv1.DaemonSet{*ds}, nil)
			if len(agents) != 1 {
				t.Fatalf("found %d agents", len(agents))
			}
			c := describeAgent(t.Context(), fake.NewClientset(objs...), agents[0], agentNodes(tc.nodes), now)
			if tc.ready {
				if c != nil {
					t.Errorf("a ready DaemonSet is down: %s", c.Error())
				}
				return
			}
			if c == nil {
				t.Fatal("not read as down")
			}
			msg := c.Error()
			if c.Terminal != tc.terminal || c.ComingUp(now, 30*time.Second) != tc.comingUp {
				t.Errorf("terminal %v coming up %v, want %v %v: %s", c.Terminal, c.ComingUp(now, 30*time.Second), tc.terminal, tc.comingUp, msg)
			}
			if tc.exact != "" && msg != tc.exact {
				t.Errorf("message\n got %s\nwant %s", msg, tc.exact)
			}
			for _, s := range tc.says {
				if !strings.Contains(msg, s) {
					t.Errorf("message lacks %q:\n%s", s, msg)
				}
			}
		})
	}
}

// Agents are found by what their templates mount, whatever their names: a vendor's device plugin, a
// vendor's DRA kubelet plugin (its own plugin directory, or the registry and the plugins directory), and
// not a CSI node plugin beside them, nor a DaemonSet that mounts no kubelet directory.
func TestFindGPUAgentsByTheirMounts(t *testing.T) {
	all := []appsv1.DaemonSet{
		*agentDS("kube-amd-gpu", "amd-gpu-device-plugin", 1, 1, "/var/lib/kubelet/device-plugins"),
		*agentDS("acme", "acme-accelerator-node-agent", 1, 1, "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/gpu.acme.com"),
		*agentDS("gpuconform-system", "fake-device-plugin", 1, 1, "/var/lib/kubelet/device-plugins", "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins"),
		*agentDS("kube-system", "ebs-csi-node", 1, 1, "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/ebs.csi.aws.com"),
		*agentDS("kube-system", "kube-proxy", 1, 1, "/run/xtables.lock"),
	}
	var got []string
	for _, a := range findGPUAgents(all, []string{"gpu.acme.com", "gpu.nvidia.com"}) {
		got = append(got, a.ds.Namespace+"/"+a.ds.Name+": "+a.component())
	}
	want := []string{
		"acme/acme-accelerator-node-agent: DRA kubelet plugin (driver gpu.acme.com)",
		"gpuconform-system/fake-device-plugin: device plugin and DRA kubelet plugin (driver gpu.acme.com, gpu.nvidia.com)",
		"kube-amd-gpu/amd-gpu-device-plugin: device plugin",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("agents\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// agentCluster is agentNodes with a DeviceClass of gpu.nvidia.com whose slices are gone, and objs.
func agentCluster(objs ...runtime.Object) *fake.Clientset {
	class := nvidiaClass()
	for _, n := range agentNodes(nil) {
		objs = append(objs, &n)
	}
	kube := fake.NewClientset(append(objs, &class)...)
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{
		{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "deviceclasses"}, {Name: "resourceslices"}}},
	}
	return kube
}

// The case of the issue, end to end: the GPU agent's DaemonSet patched to a nodeSelector no node has.
// The nodes keep their capacity without allocatable, the DRA slices are gone, and the stack check names
// the DaemonSet, why it runs nowhere and the fix, as a final *ComponentDown, and notes it for the record.
func TestCheckStackReadyNamesTheAgentScheduledNowhere(t *testing.T) {
	ds := agentDS(agentNS, agentName, 0, 0, devicePluginDir, "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins")
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"nvidia.com/gpu.deploy.device-plugin": "true"}
	caps, err := CheckStackReady(t.Context(), agentCluster(ds), config.Default(), NewSettle(time.Now()))
	want := "GPU stack not ready:\n" +
		"  - device plugin and DRA kubelet plugin (driver gpu.nvidia.com): DaemonSet gpu-operator/nvidia-device-plugin-daemonset is scheduled on no node (desired 0): " +
		"its nodeSelector nvidia.com/gpu.deploy.device-plugin=true matches none of the 3 GPU nodes (gpu-1, gpu-2, gpu-3); label the GPU nodes or fix the selector\n" +
		"  - no allocation path has devices yet: device-plugin: node(s) gpu-1, gpu-2, gpu-3 report capacity for nvidia.com/gpu but 0 allocatable"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("stack error\n got %v\nwant it to begin %s", err, want)
	}
	if !strings.Contains(err.Error(), "; dra: DeviceClass gpu.nvidia.com selects driver gpu.nvidia.com, but no ResourceSlice") {
		t.Errorf("the no-devices line lacks the DRA path's reason: %v", err)
	}
	downs := ComponentsDown(err)
	if len(downs) != 1 || !downs[0].Terminal {
		t.Errorf("components down %v", downs)
	}
	if notes := strings.Join(caps.Notes, "\n"); !strings.Contains(notes, "GPU node agent not ready: device plugin and DRA kubelet plugin (driver gpu.nvidia.com): DaemonSet gpu-operator/nvidia-device-plugin-daemonset is scheduled on no node") {
		t.Errorf("the record's notes lack the agent: %q", caps.Notes)
	}
}

// An agent that is only coming up while its path has no devices is a problem that is not final; one
// the settling waits for is not a problem at all (the settle window decides); a path with devices holds
// nothing on an agent that is down but not for good, nor on one scheduled nowhere beside another agent
// of its kind (an AMD plugin on an NVIDIA cluster).
func TestCheckStackReadyAgentsThatAreNotFinal(t *testing.T) {
	now := time.Now()
	young := agentDS(agentNS, agentName, 3, 0, devicePluginDir)
	young.Status.UpdatedNumberScheduled = 0
	var pods []runtime.Object
	for _, n := range []string{"gpu-1", "gpu-2", "gpu-3"} {
		p := agentPod(young, n, 0, runningNotReady)
		p.CreationTimestamp = metav1.NewTime(now.Add(-2 * time.Second))
		pods = append(pods, p)
	}
	// Without a Settle nothing is settling: the agent coming up is named, not final.
	_, err := CheckStackReady(t.Context(), agentCluster(append(pods, young)...), config.Default(), nil)
	downs := ComponentsDown(err)
	if len(downs) != 1 || downs[0].Terminal || !downs[0].ComingUp(now, 30*time.Second) {
		t.Fatalf("components down %v in %v", downs, err)
	}
	// With one, the plugin's settling holds the run instead.
	_, err = CheckStackReady(t.Context(), agentCluster(append(pods, young)...), config.Default(), NewSettle(now))
	if downs := ComponentsDown(err); len(downs) != 0 || err == nil || !strings.Contains(err.Error(), "device plugin settling on gpu-1") {
		t.Errorf("settling: components down %v in %v", downs, err)
	}

	// gpu-1 serves its devices; the NVIDIA plugin is down on gpu-2 (not for good); AMD's runs nowhere.
	nvidia := agentDS(agentNS, agentName, 3, 2, devicePluginDir)
	amd := agentDS("kube-amd-gpu", "amd-gpu-device-plugin", 0, 0, devicePluginDir)
	amd.Spec.Template.Spec.NodeSelector = map[string]string{"feature.node.kubernetes.io/amd-gpu": "true"}
	kube := agentCluster(nvidia, amd, agentPod(nvidia, "gpu-1", time.Hour, nil), agentPod(nvidia, "gpu-2", time.Hour, runningNotReady), agentPod(nvidia, "gpu-3", time.Hour, nil))
	n1, _ := kube.CoreV1().Nodes().Get(t.Context(), "gpu-1", metav1.GetOptions{})
	n1.Status.Allocatable["nvidia.com/gpu"] = *resource.NewQuantity(4, resource.DecimalSI)
	if _, err := kube.CoreV1().Nodes().UpdateStatus(t.Context(), n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	caps, err := CheckStackReady(t.Context(), kube, config.Default(), nil)
	if err != nil {
		t.Errorf("a path with devices is judged by its specs: %v", err)
	}
	notes := strings.Join(caps.Notes, "\n")
	for _, s := range []string{"GPU node agent not ready: device plugin: DaemonSet gpu-operator/nvidia-device-plugin-daemonset: 2 of 3 scheduled pods Ready",
		"GPU node agent device plugin (another DaemonSet serves its path on the nodes): device plugin: DaemonSet kube-amd-gpu/amd-gpu-device-plugin is scheduled on no node"} {
		if !strings.Contains(notes, s) {
			t.Errorf("notes lack %q:\n%s", s, notes)
		}
	}
}

// Every *ComponentDown of a stack error is found, wrapped or not, in order.
func TestComponentsDown(t *testing.T) {
	a, b := &ComponentDown{Component: "a"}, &ComponentDown{Component: "b", Terminal: true}
	err := &StackNotReady{Problems: []error{errors.New("no devices"), a, errors.Join(errors.New("x"), errors.New("y")), wrapf(b)}}
	if got := ComponentsDown(err); len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("components down %v", got)
	}
	if got := ComponentsDown(nil); got != nil {
		t.Errorf("nil error: %v", got)
	}
}

func wrapf(err error) error { return errors.Join(errors.New("webhook"), err) }
