package upgrade

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// pluginPod is a DaemonSet's pod on node that mounts the kubelet's plugin registry.
func pluginPod(name, ds, version string, ready bool) *corev1.Pod {
	const node = "n1"
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "nvidia-dra-driver-gpu", Name: name, UID: types.UID(name), Labels: map[string]string{VersionLabel: version},
			OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: ds, Controller: ptr.To(true), APIVersion: "apps/v1"}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "plugin", Image: "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0"}},
			Volumes: []corev1.Volume{{Name: "reg", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/kubelet/plugins_registry/"}}}}},
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return p
}

func TestPluginPodOf(t *testing.T) {
	p := pluginPod("a", "dra-plugin", "", true)
	got, ok := pluginPodOf(p)
	if !ok || got.DaemonSet != "dra-plugin" || got.Version != "v25.8.0" || !got.Ready {
		t.Errorf("a DaemonSet pod mounting the plugin registry: %+v %t, want version from the image tag", got, ok)
	}
	noRegistry := pluginPod("b", "dp", "1", true)
	noRegistry.Spec.Volumes[0].HostPath.Path = "/var/lib/kubelet/device-plugins"
	if _, ok := pluginPodOf(noRegistry); ok {
		t.Error("a pod without the plugin registry is no kubelet plugin's")
	}
	notDS := pluginPod("c", "x", "1", true)
	notDS.OwnerReferences[0].Kind = "ReplicaSet"
	if _, ok := pluginPodOf(notDS); ok {
		t.Error("a ReplicaSet's pod is no kubelet plugin's")
	}
	crashing := pluginPod("d", "dra-plugin", "v2", false)
	crashing.Status.ContainerStatuses = []corev1.ContainerStatus{{RestartCount: 2,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 20s"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1, Message: "cannot start\n"}}}}
	got, _ = pluginPodOf(crashing)
	if why := cannotStart(got); !strings.Contains(why, "CrashLoopBackOff: back-off 20s; last exit: Error, exit code 1: cannot start, 2 restarts") {
		t.Errorf("cannotStart = %q", why)
	}
	got.Restarts = 1
	if why := cannotStart(got); why != "" {
		t.Errorf("one restart is not yet a pod that cannot start: %q", why)
	}
}

func TestImageTag(t *testing.T) {
	for ref, want := range map[string]string{
		"nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0": "v25.8.0", "localhost:5000/driver": "", "driver@sha256:abc": "",
		"localhost:5000/driver:1.2@sha256:abc": "1.2", "driver": "",
	} {
		if got := imageTag(ref); got != want {
			t.Errorf("imageTag(%q) = %q, want %q", ref, got, want)
		}
	}
}

func plugins(ps ...*corev1.Pod) map[string][]PluginPod {
	out := map[string][]PluginPod{}
	for _, p := range ps {
		pp, _ := pluginPodOf(p)
		out[pp.Node] = append(out[pp.Node], pp)
	}
	return out
}

func TestRollState(t *testing.T) {
	old := pluginPod("old", "dra", "v1", true)
	csi := pluginPod("csi", "csi-node", "1.0", true)
	before := plugins(old, csi)
	newReady := pluginPod("new", "dra", "v2", true)
	newNotReady := pluginPod("new", "dra", "v2", false)

	if done, term, _ := RollState(before, before, "v2"); done || term != "" {
		t.Errorf("nothing rolled yet: done=%t terminal=%q", done, term)
	}
	if done, _, progress := RollState(before, plugins(old, csi, newNotReady), "v2"); done || !strings.Contains(progress, "no new plugin pod of version v2 Ready") {
		t.Errorf("surge pod not Ready: done=%t %q", done, progress)
	}
	if done, _, progress := RollState(before, plugins(old, csi, newReady), "v2"); done || !strings.Contains(progress, "the old plugin pod nvidia-dra-driver-gpu/old") {
		t.Errorf("old pod still there: done=%t %q", done, progress)
	}
	if done, term, progress := RollState(before, plugins(csi, newReady), "v2"); !done || term != "" {
		t.Errorf("rolled (the CSI plugin, untouched, does not count): done=%t terminal=%q progress=%q", done, term, progress)
	}
	crashing := pluginPod("new", "dra", "v2", false)
	crashing.Status.ContainerStatuses = []corev1.ContainerStatus{{RestartCount: 3, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
	_, term, _ := RollState(before, plugins(old, csi, crashing), "v2")
	if !strings.Contains(term, "the new plugin pod nvidia-dra-driver-gpu/new (DaemonSet dra, version v2) cannot start") || !strings.Contains(term, "old (DaemonSet dra, version v1) Ready=true") {
		t.Errorf("terminal = %q, want the crashing pod and the old one still serving named", term)
	}
}

func TestRollbackState(t *testing.T) {
	old := pluginPod("old", "dra", "v1", true)
	crashing := pluginPod("new", "dra", "v2", false)
	// After a failed roll the old pod kept serving: the rollback is done once the crashing pod is gone.
	began := plugins(old, crashing)
	if done, _, progress := RollbackState(began, began, "v1"); done || !strings.Contains(progress, "still left") {
		t.Errorf("crashing pod still there: done=%t %q", done, progress)
	}
	if done, term, _ := RollbackState(began, plugins(old), "v1"); !done || term != "" {
		t.Errorf("back on the pod that served through: done=%t %q", done, term)
	}
	// After a roll that passed, a new pod of the old version replaces the new one.
	rolled := plugins(pluginPod("v2pod", "dra", "v2", true))
	if done, _, _ := RollbackState(rolled, rolled, "v1"); done {
		t.Error("not rolled back while only v2 runs")
	}
	if done, _, _ := RollbackState(rolled, plugins(pluginPod("back", "dra", "v1", true)), "v1"); !done {
		t.Error("a Ready v1 pod and no v2 pod is rolled back")
	}
}

func slice(name, node string, devices int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)},
		Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node}}}
	for range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: "gpu"})
	}
	return s
}

func TestSliceWatchObserve(t *testing.T) {
	w := &SliceWatch{driver: "gpu.nvidia.com", nodes: []string{"n1"}, current: map[types.UID]sliceState{"s1": {name: "s1", node: "n1", devices: 4}},
		initial: map[string]int{"n1": 4}, short: map[string]bool{}}
	w.observe(watch.Modified, slice("s1", "n1", 4))
	w.observe(watch.Modified, slice("other", "n2", 1)) // another node's: not watched
	if len(w.findings) != 0 || w.events != 1 {
		t.Fatalf("an unchanged slice is no finding: %v (%d events)", w.findings, w.events)
	}
	w.observe(watch.Deleted, slice("s1", "n1", 4))
	w.observe(watch.Added, slice("s2", "n1", 4))
	got := strings.Join(w.findings, "\n")
	for _, want := range []string{"ResourceSlice s1 of n1 (4 devices) deleted", "n1 offered 0 of its 4 devices of gpu.nvidia.com", "ResourceSlice s2 of n1 (4 devices) created"} {
		if !strings.Contains(got, want) {
			t.Errorf("findings lack %q:\n%s", want, got)
		}
	}
	w.observe(watch.Modified, slice("s2", "n1", 3))
	if !strings.Contains(w.findings[len(w.findings)-1], "n1 offered 3 of its 4 devices") {
		t.Errorf("a slice that lost a device: %v", w.findings)
	}
}

func TestWatchSlicesNeedsDevices(t *testing.T) {
	kube := fake.NewClientset(slice("s1", "n1", 2))
	if _, err := WatchSlices(t.Context(), kube, "gpu.nvidia.com", []string{"n1", "n2"}); err == nil || !strings.Contains(err.Error(), "node n2 publishes no device of gpu.nvidia.com") {
		t.Errorf("a node without devices has nothing to keep through a roll: %v", err)
	}
}

func TestLocalDRASet(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: LocalNamespace, Name: localCanaryDaemonSet, UID: "ds",
		Annotations: map[string]string{localPluginTargetAnnotn: "v2"}},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: localCanaryContainer, Args: []string{"--devices=4", "--version=v1"}}}}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: LocalNamespace, Name: "p", Labels: map[string]string{"a": "b"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: ds.Name, UID: "ds", Controller: ptr.To(true)}}}, Spec: corev1.PodSpec{NodeName: "canary"}}
	kube := fake.NewClientset(ds, pod)
	l := &LocalDRA{Kube: kube, Namespace: LocalNamespace}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if to, err := l.LocalTarget(ctx); err != nil || to != "v2" || !l.LocalDRAServes(ctx) {
		t.Fatalf("LocalTarget = %q, %v", to, err)
	}
	if err := l.Apply(ctx, []string{"canary", "good"}, "v2"); err == nil || !strings.Contains(err.Error(), "not on exactly the nodes to roll") {
		t.Errorf("rolling a DaemonSet that does not cover exactly the nodes: %v", err)
	}
	if err := l.Apply(ctx, []string{"canary"}, "v2"); err != nil {
		t.Fatal(err)
	}
	got, _ := kube.AppsV1().DaemonSets(LocalNamespace).Get(ctx, ds.Name, metav1.GetOptions{})
	if args := got.Spec.Template.Spec.Containers[0].Args; strings.Join(args, " ") != "--devices=4 --version=v2" || got.Spec.Template.Labels[VersionLabel] != "v2" {
		t.Errorf("after Apply: args %v, labels %v", args, got.Spec.Template.Labels)
	}
}

func TestDriverPluginVersion(t *testing.T) {
	dra1 := PluginPod{Namespace: "ns", DaemonSet: "dra", Node: "n1", Version: "v1"}
	dra2 := PluginPod{Namespace: "ns", DaemonSet: "dra", Node: "n2", Version: "v1"}
	csi1 := PluginPod{Namespace: "ns", DaemonSet: "csi", Node: "n1", Version: "1.0"}
	if got := DriverPluginVersion(map[string][]PluginPod{"n1": {dra1, csi1}, "n2": {dra2}}, []string{"n1", "n2"}); got != "v1" {
		t.Errorf("one DaemonSet on every node: %q, want v1", got)
	}
	csi2 := csi1
	csi2.Node = "n2"
	if got := DriverPluginVersion(map[string][]PluginPod{"n1": {dra1, csi1}, "n2": {dra2, csi2}}, []string{"n1", "n2"}); got != "" {
		t.Errorf("two DaemonSets on every node cannot be told apart: %q", got)
	}
	dra2.Version = "v0"
	if got := DriverPluginVersion(map[string][]PluginPod{"n1": {dra1}, "n2": {dra2}}, []string{"n1", "n2"}); got != "" {
		t.Errorf("versions that disagree: %q", got)
	}
}
