package cluster

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/config"
)

// t0 is the run's start in every settle test.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// settleNode is a Ready GPU node with capacity and allocatable of nvidia.com/gpu (cap < 0: no resource).
func settleNode(name string, capacity, allocatable int64) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nvidia.com/gpu.present": "true"}}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if capacity >= 0 {
		n.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(capacity, resource.DecimalSI)}
		n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(allocatable, resource.DecimalSI)}
	}
	return n
}

// pluginDS is a device plugin DaemonSet mounting hostPath dir, with available of desired pods available.
func pluginDS(name, dir string, available, desired int32) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "gpu"}}
	ds.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "dp", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}}}
	ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: "plugin", VolumeMounts: []corev1.VolumeMount{{Name: "dp", MountPath: dir}}}}
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, NumberAvailable: available, UpdatedNumberScheduled: desired, NumberReady: available}
	return ds
}

// pluginPod is a pod of DaemonSet ds on node, created age before t0, Ready or not.
func dpPluginPod(name, ds, node string, age time.Duration, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "gpu", CreationTimestamp: metav1.NewTime(t0.Add(-age)),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds, Controller: ptr.To(true)}}}}
	p.Spec.NodeName = node
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return p
}

func TestDevicePluginDirIsTheKubeletsOwn(t *testing.T) {
	if want := strings.TrimSuffix(pluginapi.DevicePluginPath, "/"); devicePluginDir != want {
		t.Errorf("devicePluginDir = %q, the device plugin API says %q", devicePluginDir, want)
	}
}

func TestSettleFirstCheck(t *testing.T) {
	const dir = "/var/lib/kubelet/device-plugins"
	worker := settleNode("w1", 4, 0)
	for _, tc := range []struct {
		name  string
		nodes []corev1.Node
		objs  []runtime.Object
		// forbid makes the fake API server refuse lists of this resource.
		forbid string
		// settling: Check must say the node is settling, with these words; "" means it is judged.
		settling string
		// note: a note must carry these words ("" means no note).
		note string
	}{
		{name: "young pod, not Ready: settling", nodes: []corev1.Node{worker},
			objs:     []runtime.Object{pluginDS("nvidia-device-plugin", dir, 0, 1), dpPluginPod("dp-a", "nvidia-device-plugin", "w1", 3*time.Second, false)},
			settling: "w1 (pod gpu/dp-a was not Ready, 3s old)"},
		{name: "young pod, Ready, node status not written yet: settling", nodes: []corev1.Node{worker},
			objs:     []runtime.Object{pluginDS("nvidia-device-plugin", dir, 1, 1), dpPluginPod("dp-a", "nvidia-device-plugin", "w1", 5*time.Second, true)},
			settling: "pod gpu/dp-a was Ready, 5s old"},
		{name: "old Ready pod with nothing allocatable: broken, judged at once", nodes: []corev1.Node{worker},
			objs: []runtime.Object{pluginDS("nvidia-device-plugin", dir, 1, 1), dpPluginPod("dp-a", "nvidia-device-plugin", "w1", 2*time.Hour, true)}},
		{name: "a plugin mounting a directory under device-plugins counts", nodes: []corev1.Node{worker},
			objs:     []runtime.Object{pluginDS("dp", dir+"/vendor/", 0, 1), dpPluginPod("dp-a", "dp", "w1", 2*time.Hour, false)},
			settling: "pod gpu/dp-a was not Ready, 2h0m0s old"},
		{name: "old pod being replaced: settling", nodes: []corev1.Node{worker},
			objs: []runtime.Object{pluginDS("dp", dir, 1, 1), func() *corev1.Pod {
				p := dpPluginPod("dp-a", "dp", "w1", 2*time.Hour, true)
				p.DeletionTimestamp = &metav1.Time{Time: t0}
				p.Finalizers = []string{"test/keep"} // the fake tracker refuses a deletion timestamp without one
				return p
			}()},
			settling: "pod gpu/dp-a was being deleted"},
		{name: "no pod yet while the DaemonSet recreates it: settling", nodes: []corev1.Node{worker},
			objs:     []runtime.Object{pluginDS("dp", dir, 2, 3)},
			settling: "DaemonSet gpu/dp had 2 of 3 pods available"},
		{name: "no pod and the DaemonSet is settled: judged, noted", nodes: []corev1.Node{worker},
			objs: []runtime.Object{pluginDS("dp", dir, 3, 3)},
			note: "no device plugin pod runs on node w1 (looked for pods of gpu/dp)"},
		{name: "no DaemonSet mounts device-plugins: judged as today, noted", nodes: []corev1.Node{worker},
			objs: []runtime.Object{pluginDS("csi", "/var/lib/kubelet/plugins", 0, 1), dpPluginPod("csi-a", "csi", "w1", time.Second, false)},
			note: "no DaemonSet mounts /var/lib/kubelet/device-plugins, so the device plugin's pods on node(s) w1 could not be found"},
		{name: "pods forbidden: judged, noted", nodes: []corev1.Node{worker}, forbid: "pods",
			objs: []runtime.Object{pluginDS("dp", dir, 0, 1), dpPluginPod("dp-a", "dp", "w1", time.Second, false)},
			note: "cannot list the pods on node w1 to find its device plugin"},
		{name: "DaemonSets forbidden: judged, noted", nodes: []corev1.Node{worker}, forbid: "daemonsets",
			objs: []runtime.Object{pluginDS("dp", dir, 0, 1), dpPluginPod("dp-a", "dp", "w1", time.Second, false)},
			note: "cannot list DaemonSets to find the device plugin's pods"},
		{name: "labelled GPU node without a resource, plugin starting: settling", nodes: []corev1.Node{settleNode("w1", -1, 0)},
			objs:     []runtime.Object{pluginDS("dp", dir, 0, 1), dpPluginPod("dp-a", "dp", "w1", time.Second, false)},
			settling: "w1 (pod gpu/dp-a was not Ready"},
		{name: "a node serving fewer than its capacity, plugin just restarted: settling", nodes: []corev1.Node{settleNode("w1", 4, 2)},
			objs:     []runtime.Object{pluginDS("dp", dir, 1, 1), dpPluginPod("dp-a", "dp", "w1", 10*time.Second, true)},
			settling: "pod gpu/dp-a was Ready, 10s old"},
		{name: "every node serves its capacity and the DaemonSet is settled: nothing read beyond it", nodes: []corev1.Node{settleNode("w1", 4, 4)},
			objs: []runtime.Object{pluginDS("dp", dir, 1, 1), dpPluginPod("dp-a", "dp", "w1", time.Second, false)}},
		{name: "node still shows its devices but its plugin is being replaced (status lags the kubelet): settling",
			nodes: []corev1.Node{settleNode("w1", 4, 4), settleNode("w2", 4, 4)},
			objs: []runtime.Object{pluginDS("dp", dir, 1, 2), dpPluginPod("dp-a", "dp", "w1", 2*time.Hour, true),
				dpPluginPod("dp-b", "dp", "w2", time.Second, false)},
			settling: "device plugin settling on w2 (pod gpu/dp-b was not Ready, 1s old)"},
		{name: "a stuck old pod on a node that serves its capacity does not hold the run up",
			nodes: []corev1.Node{settleNode("w1", 4, 4)},
			objs:  []runtime.Object{pluginDS("dp", dir, 0, 1), dpPluginPod("dp-a", "dp", "w1", 2*time.Hour, false)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(tc.objs...)
			if tc.forbid != "" {
				kube.PrependReactor("list", tc.forbid, func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: tc.forbid}, "", errors.New("RBAC: not allowed"))
				})
			}
			s := NewSettle(t0)
			err := s.Check(t.Context(), kube, tc.nodes, "", t0)
			switch {
			case tc.settling == "" && err != nil:
				t.Errorf("judged case reported settling: %v", err)
			case tc.settling != "" && (err == nil || !strings.Contains(err.Error(), tc.settling)):
				t.Errorf("settling = %v, want it to contain %q", err, tc.settling)
			}
			notes := strings.Join(s.Notes(), "\n")
			if tc.note != "" && !strings.Contains(notes, tc.note) {
				t.Errorf("notes %q lack %q", notes, tc.note)
			}
			if tc.note == "" && tc.settling == "" && notes != "" {
				t.Errorf("unexpected notes %q", notes)
			}
		})
	}
}

// A run that starts while the plugin re-registers waits, and the record says for how long; one whose
// plugin never comes back is judged when the window ends, and the record says that.
func TestSettleWaitsThenNotes(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset(pluginDS("dp", devicePluginDir, 0, 1), dpPluginPod("dp-a", "dp", "w1", time.Second, false))
	s := NewSettle(t0)
	down := []corev1.Node{settleNode("w1", 4, 0)}
	if err := s.Check(ctx, kube, down, "nvidia.com/gpu", t0.Add(time.Second)); err == nil {
		t.Fatal("first check: not settling")
	}
	// The plugin registered: its pod is Ready, its DaemonSet available, the node status says so.
	if _, err := kube.CoreV1().Pods("gpu").Update(ctx, dpPluginPod("dp-a", "dp", "w1", time.Second, true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.AppsV1().DaemonSets("gpu").Update(ctx, pluginDS("dp", devicePluginDir, 1, 1), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, kube, []corev1.Node{settleNode("w1", 4, 4)}, "nvidia.com/gpu", t0.Add(3*time.Second)); err != nil {
		t.Fatalf("the node serves its devices again: %v", err)
	}
	notes := s.Notes()
	if len(notes) != 1 || !strings.Contains(notes[0], "device plugin on w1 re-registered 3s after the run started (when first seen, pod gpu/dp-a was not Ready, 2s old)") {
		t.Errorf("notes = %q", notes)
	}

	kube = fake.NewClientset(pluginDS("dp", devicePluginDir, 0, 1), dpPluginPod("dp-a", "dp", "w1", time.Second, false))
	s = NewSettle(t0)
	for _, at := range []time.Duration{time.Second, 30 * time.Second} {
		if err := s.Check(ctx, kube, down, "", t0.Add(at)); err == nil {
			t.Fatalf("check at %s: not settling", at)
		}
	}
	if err := s.Check(ctx, kube, down, "", t0.Add(SettleWindow)); err != nil {
		t.Fatalf("after the window the path must be judged: %v", err)
	}
	notes = s.Notes()
	if len(notes) != 1 || !strings.Contains(notes[0], "device plugin on w1 had not settled 1m0s after the run started") ||
		!strings.Contains(notes[0], "the node served 0 of 4 nvidia.com/gpu") {
		t.Errorf("notes = %q", notes)
	}
}

// Polls repeat a failed read; the record says it once.
func TestSettleNotesOnce(t *testing.T) {
	kube := fake.NewClientset()
	s := NewSettle(t0)
	for i := range 3 {
		_ = s.Check(t.Context(), kube, []corev1.Node{settleNode("w1", 4, 0)}, "", t0.Add(time.Duration(i)*5*time.Second))
	}
	if n := len(s.Notes()); n != 1 {
		t.Errorf("%d notes, want 1: %q", n, s.Notes())
	}
}

// Pods are looked for on a bounded number of nodes per check, and the record says the rest were not.
func TestSettleIsBounded(t *testing.T) {
	var nodes []corev1.Node
	for i := range maxSettleNodes + 4 {
		nodes = append(nodes, settleNode(string(rune('a'+i)), 4, 0))
	}
	kube := fake.NewClientset(pluginDS("dp", devicePluginDir, 0, 1))
	lists := 0
	kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		return false, nil, nil
	})
	s := NewSettle(t0)
	_ = s.Check(t.Context(), kube, nodes, "", t0)
	if lists != maxSettleNodes {
		t.Errorf("%d pod lists, want %d", lists, maxSettleNodes)
	}
	if notes := strings.Join(s.Notes(), "\n"); !strings.Contains(notes, "looked for on 16 of 20 nodes") {
		t.Errorf("notes = %q", notes)
	}
}

// The stack-ready check holds the run while a plugin settles; without a Settle it judges at once, as
// callers that do not wait (diagnose, preflight) do.
func TestStackNotReadyWhileAPluginSettles(t *testing.T) {
	now := time.Now()
	w1, w2 := settleNode("w1", 4, 0), settleNode("w2", 4, 4)
	pod := dpPluginPod("dp-a", "dp", "w1", 0, false)
	pod.CreationTimestamp = metav1.NewTime(now.Add(-2 * time.Second))
	kube := fake.NewClientset(&w1, &w2, pluginDS("dp", devicePluginDir, 1, 2), pod)
	caps, err := CheckStackReady(t.Context(), kube, config.Default(), NewSettle(now))
	if err == nil || !strings.Contains(err.Error(), "device plugin settling on w1") {
		t.Errorf("settling plugin: %v", err)
	}
	if caps.Broken[config.PathDevicePlugin] == "" {
		t.Errorf("discovery itself still sees w1 as it is: %+v", caps.Broken)
	}
	if _, err := CheckStackReady(t.Context(), kube, config.Default(), nil); err != nil {
		t.Errorf("without a Settle the path is judged at once: %v", err)
	}
}

// A MIG resource the node's labels no longer account for, kept by the kubelet without allocatable after
// a MIG layout change, is no plugin settling; a MIG resource the labels count, or one on a node without
// GFD's strategy label, still is.
func TestShortNodesLeavesStaleMIGResources(t *testing.T) {
	withMIG := func(labels map[string]string, profile string, capacity, allocatable int64) corev1.Node {
		n := settleNode("w1", 4, 4)
		maps.Copy(n.Labels, labels)
		name := corev1.ResourceName("nvidia.com/mig-" + profile)
		n.Status.Capacity[name] = *resource.NewQuantity(capacity, resource.DecimalSI)
		n.Status.Allocatable[name] = *resource.NewQuantity(allocatable, resource.DecimalSI)
		return n
	}
	cases := []struct {
		why  string
		node corev1.Node
		want string
	}{
		{"time-sliced now, mixed before", withMIG(map[string]string{"nvidia.com/mig.strategy": "none"}, "3g.40gb", 2, 0), ""},
		{"single now, mixed before", withMIG(map[string]string{"nvidia.com/mig.strategy": "single"}, "3g.40gb", 2, 0), ""},
		{"mixed with another layout", withMIG(map[string]string{"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.10gb.count": "7"}, "3g.40gb", 2, 0), ""},
		{"mixed, profile counted 0", withMIG(map[string]string{"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-3g.40gb.count": "0"}, "3g.40gb", 2, 0), ""},
		{"mixed, profile counted: restarting", withMIG(map[string]string{"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-3g.40gb.count": "2"}, "3g.40gb", 2, 0), "served 0 of 2 nvidia.com/mig-3g.40gb"},
		{"no strategy label: no evidence", withMIG(nil, "3g.40gb", 2, 0), "served 0 of 2 nvidia.com/mig-3g.40gb"},
		{"stale but partly allocatable: not stale", withMIG(map[string]string{"nvidia.com/mig.strategy": "none"}, "3g.40gb", 2, 1), "served 1 of 2 nvidia.com/mig-3g.40gb"},
	}
	for _, c := range cases {
		if got := shortNodes([]corev1.Node{c.node}, "")["w1"]; got != c.want {
			t.Errorf("%s: %q, want %q", c.why, got, c.want)
		}
	}
	// renameByDefault switched on: nvidia.com/gpu kept at capacity 4, allocatable 0, while
	// nvidia.com/gpu.shared serves the same GPUs; switched off again, the reverse.
	renamedNode := func(plain, shared int64) corev1.Node {
		n := settleNode("w1", 4, plain)
		n.Status.Capacity["nvidia.com/gpu.shared"] = *resource.NewQuantity(8, resource.DecimalSI)
		n.Status.Allocatable["nvidia.com/gpu.shared"] = *resource.NewQuantity(shared, resource.DecimalSI)
		return n
	}
	for _, c := range []struct {
		why           string
		plain, shared int64
		want          string
	}{
		{"renamed on", 0, 8, ""}, {"renamed off", 4, 0, ""}, {"neither serves", 0, 0, "served 0 of "},
	} {
		if got := shortNodes([]corev1.Node{renamedNode(c.plain, c.shared)}, "")["w1"]; !strings.HasPrefix(got, c.want) || (c.want == "") != (got == "") {
			t.Errorf("%s: %q, want %q", c.why, got, c.want)
		}
	}
	// Only stale MIG resources and no GPU resource served: the node advertises no GPU resource.
	n := settleNode("w1", -1, 0)
	n.Labels["nvidia.com/mig.strategy"] = "none"
	n.Status.Capacity = corev1.ResourceList{"nvidia.com/mig-3g.40gb": *resource.NewQuantity(2, resource.DecimalSI)}
	n.Status.Allocatable = corev1.ResourceList{"nvidia.com/mig-3g.40gb": *resource.NewQuantity(0, resource.DecimalSI)}
	if got := shortNodes([]corev1.Node{n}, "")["w1"]; got != "advertised no GPU resource though labelled as a GPU node" {
		t.Errorf("only stale MIG resources: %q", got)
	}
}
