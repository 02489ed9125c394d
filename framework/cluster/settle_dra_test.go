package cluster

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"gpuconform.io/gpuconform/framework/config"
)

// draDS is a DaemonSet running gpu.nvidia.com's kubelet plugin (it mounts the plugin registry).
func draDS() *appsv1.DaemonSet {
	ds := pluginDS("dra", "/var/lib/kubelet/plugins_registry", 2, 2)
	ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "dra"}}
	return ds
}

// draPluginPod is a pod of draDS on node, started age before t0.
func draPluginPod(node string, age time.Duration, ready bool) *corev1.Pod {
	p := dpPluginPod("dra-"+node, "dra", node, age, ready)
	p.Labels = map[string]string{"app": "dra"}
	return p
}

// draSettleSnapshot is two labelled GPU nodes, w1 and w2, and the slices of those that publish.
func draSettleSnapshot(publishing ...string) Snapshot {
	s := Snapshot{Nodes: []corev1.Node{settleNode("w1", -1, 0), settleNode("w2", -1, 0)}, ResourceAPI: true}
	for _, n := range publishing {
		s.ResourceSlices = append(s.ResourceSlices, nvidiaSlice(n, 4))
	}
	return s
}

// A run that starts while a node's DRA plugin publishes its slices again waits for it, and the record
// says for how long; a plugin that never publishes is judged when the window ends, and the record says so.
func TestSettleDRAWaitsForANodesSlices(t *testing.T) {
	ctx := t.Context()
	drivers := []string{"gpu.nvidia.com"}
	kube := fake.NewClientset(draDS(), draPluginPod("w1", time.Hour, true), draPluginPod("w2", 2*time.Second, true))
	s := NewSettle(t0)
	err := s.CheckDRA(ctx, kube, draSettleSnapshot("w1"), drivers, t0.Add(time.Second))
	if err == nil || !strings.Contains(err.Error(), "gpu.nvidia.com on w2 (pod gpu/dra-w2 was Ready, 3s old, and the node published none of its devices)") {
		t.Fatalf("w2's plugin started 3 s ago and its slices are not back: %v", err)
	}
	if strings.Contains(err.Error(), " w1 ") {
		t.Errorf("w1 publishes: %v", err)
	}
	if err := s.CheckDRA(ctx, kube, draSettleSnapshot("w1", "w2"), drivers, t0.Add(4*time.Second)); err != nil {
		t.Fatalf("w2 publishes again: %v", err)
	}
	notes := s.Notes()
	if len(notes) != 1 || !strings.Contains(notes[0], "DRA driver gpu.nvidia.com on w2 published its devices again 4s after the run started (when first seen, pod gpu/dra-w2 was Ready, 3s old") {
		t.Errorf("notes = %q", notes)
	}

	// A plugin pod that is not Ready and never publishes: waited for until the window ends.
	kube = fake.NewClientset(draDS(), draPluginPod("w1", time.Hour, true), draPluginPod("w2", time.Hour, false))
	s = NewSettle(t0)
	for _, at := range []time.Duration{time.Second, 30 * time.Second} {
		if err := s.CheckDRA(ctx, kube, draSettleSnapshot("w1"), drivers, t0.Add(at)); err == nil {
			t.Fatalf("check at %s: not settling", at)
		}
	}
	if err := s.CheckDRA(ctx, kube, draSettleSnapshot("w1"), drivers, t0.Add(SettleWindow)); err != nil {
		t.Fatalf("after the window the path must be judged: %v", err)
	}
	notes = s.Notes()
	if len(notes) != 1 || !strings.Contains(notes[0], "DRA driver gpu.nvidia.com on w2 had published no device 1m0s after the run started") ||
		!strings.Contains(notes[0], "the dra path was judged without the node") {
		t.Errorf("notes = %q", notes)
	}
}

// Nodes that are not waited for: an old Ready plugin on a node without devices (a DaemonSet that runs
// everywhere), a young plugin on a node that is neither labelled a GPU node nor published before, and
// pods of DaemonSets that are no plugin of the path's drivers.
func TestSettleDRALeavesNodesThatAreNotRestarting(t *testing.T) {
	ctx := t.Context()
	cpu := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-1"}}
	snap := draSettleSnapshot("w1")
	snap.Nodes = append(snap.Nodes, cpu)
	other := pluginDS("csi", "/var/lib/kubelet/plugins/csi.example.com", 1, 1)
	other.Spec.Template.Spec.Volumes = append(other.Spec.Template.Spec.Volumes, corev1.Volume{Name: "reg", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/kubelet/plugins_registry"}}})
	other.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "csi"}}
	csiPod := dpPluginPod("csi-w2", "csi", "w2", time.Second, false)
	csiPod.Labels = map[string]string{"app": "csi"}
	kube := fake.NewClientset(draDS(), other, csiPod, draPluginPod("w1", time.Second, true), draPluginPod("w2", time.Hour, true), draPluginPod("cpu-1", time.Second, true))
	s := NewSettle(t0)
	if err := s.CheckDRA(ctx, kube, snap, []string{"gpu.nvidia.com"}, t0.Add(time.Second)); err != nil {
		t.Errorf("nothing is restarting: %v", err)
	}
	if notes := s.Notes(); len(notes) != 0 {
		t.Errorf("notes = %q", notes)
	}

	// A node that published earlier in the run is waited for even without a GPU label.
	unlabelled := snap
	unlabelled.ResourceSlices = []resourcev1.ResourceSlice{nvidiaSlice("w1", 4), nvidiaSlice("cpu-1", 2)}
	if err := s.CheckDRA(ctx, kube, unlabelled, []string{"gpu.nvidia.com"}, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	unlabelled.ResourceSlices = unlabelled.ResourceSlices[:1]
	if err := s.CheckDRA(ctx, kube, unlabelled, []string{"gpu.nvidia.com"}, t0.Add(3*time.Second)); err == nil || !strings.Contains(err.Error(), "on cpu-1") {
		t.Errorf("cpu-1 published before and its plugin is 4 s old: %v", err)
	}
}

// A DaemonSet's pods are listed by its selector, one request per plugin DaemonSet, and a refusal is a
// note rather than a wait.
func TestSettleDRAListsPodsByDaemonSet(t *testing.T) {
	kube := fake.NewClientset(draDS(), draPluginPod("w2", time.Second, true), pluginDS("dp", devicePluginDir, 1, 1))
	var selectors []string
	kube.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		selectors = append(selectors, a.(k8stesting.ListAction).GetListRestrictions().Labels.String())
		return false, nil, nil
	})
	s := NewSettle(t0)
	if err := s.CheckDRA(t.Context(), kube, draSettleSnapshot("w1"), []string{"gpu.nvidia.com"}, t0.Add(time.Second)); err == nil {
		t.Error("w2 is restarting")
	}
	if len(selectors) != 1 || selectors[0] != "app=dra" {
		t.Errorf("pod lists by %q, want one by app=dra", selectors)
	}

	kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", nil)
	})
	s = NewSettle(t0)
	if err := s.CheckDRA(t.Context(), kube, draSettleSnapshot("w1"), []string{"gpu.nvidia.com"}, t0.Add(time.Second)); err != nil {
		t.Errorf("unreadable pods are judged as they stand: %v", err)
	}
	if notes := strings.Join(s.Notes(), "\n"); !strings.Contains(notes, "cannot list the pods of DaemonSet gpu/dra, a DRA kubelet plugin") {
		t.Errorf("notes = %q", notes)
	}
}

// The stack-ready check holds the run while a GPU node's DRA plugin publishes its slices again, so the
// run does not start with the DRA path on one node of two.
func TestStackNotReadyWhileADRAPluginRepublishes(t *testing.T) {
	now := time.Now()
	class := nvidiaClass()
	s1 := nvidiaSlice("w1", 4)
	w1, w2 := settleNode("w1", -1, 0), settleNode("w2", -1, 0)
	pods := []*corev1.Pod{draPluginPod("w1", 0, true), draPluginPod("w2", 0, true)}
	for _, p := range pods {
		p.Spec.Volumes = draDS().Spec.Template.Spec.Volumes
		p.Status.Phase = corev1.PodRunning
	}
	// w1's plugin is old and publishes; w2's started a second ago and has not published yet.
	pods[0].CreationTimestamp, pods[1].CreationTimestamp = metav1.NewTime(now.Add(-time.Hour)), metav1.NewTime(now.Add(-time.Second))
	kube := fake.NewClientset(&w1, &w2, &class, &s1, draDS(), pods[0], pods[1])
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{
		{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "deviceclasses"}, {Name: "resourceslices"}}},
	}
	caps, err := CheckStackReady(t.Context(), kube, config.Default(), NewSettle(now))
	if err == nil || !strings.Contains(err.Error(), "gpu.nvidia.com on w2") {
		t.Errorf("w2's plugin is republishing: %v", err)
	}
	if caps.DRA == nil || len(caps.DRA.Devices) != 1 {
		t.Fatalf("discovery itself sees the path on w1 only: %+v", caps.DRA)
	}
	if _, err := CheckStackReady(t.Context(), kube, config.Default(), nil); err != nil {
		t.Errorf("without a Settle the path is judged at once: %v", err)
	}
}
