package fakeplugin

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakeCluster is a fake clientset holding two nodes, plus a signal that the plugin's node watch is open:
// the fake API server drops events sent before a watch exists, so tests change the node only after it.
type fakeCluster struct {
	*fake.Clientset
	watching chan struct{}
}

func newFakeCluster(t *testing.T) *fakeCluster {
	t.Helper()
	node := func(name string, labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	cs := fake.NewClientset(
		node("node-a", map[string]string{"gpuconform.io/pool": "gpu", LabelDriverRevision: "stale"}),
		node("node-b", nil),
	)
	c := &fakeCluster{Clientset: cs, watching: make(chan struct{})}
	var once sync.Once
	cs.PrependWatchReactor("nodes", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := cs.Tracker().Watch(a.GetResource(), a.GetNamespace())
		if err == nil {
			once.Do(func() { close(c.watching) })
		}
		return true, w, err
	})
	return c
}

func (c *fakeCluster) annotate(t *testing.T, node, value string) {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(n.Annotations, UnhealthyDevicesAnnotation)
	} else {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[UnhealthyDevicesAnnotation] = value
	}
	if _, err := c.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func unhealthyIDs(devs []*pluginapi.Device) []string {
	var out []string
	for _, d := range devs {
		if d.Health == pluginapi.Unhealthy {
			out = append(out, d.ID)
		} else if d.Health != pluginapi.Healthy {
			out = append(out, "bad-health:"+d.Health)
		}
	}
	return out
}

func TestListAndWatchFollowsHealthAnnotation(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, "node-a")
	cluster := newFakeCluster(t)
	kubelet := startFakeKubelet(t, dir)
	p := mustNew(t, cfg)
	startPlugin(t, func(ctx context.Context) error { return p.Run(ctx, cluster) })
	eventually(t, "registration", func() bool { return len(kubelet.requests()) == 1 })
	select {
	case <-cluster.watching:
	case <-time.After(testDeadline):
		t.Fatal("the plugin never opened a watch on its node")
	}
	ids := p.DeviceIDs()

	ctx, cancel := context.WithTimeout(t.Context(), testDeadline)
	defer cancel()
	stream, err := dialPlugin(t, cfg).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	next := func(step string) []*pluginapi.Device {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: ListAndWatch: %v", step, err)
		}
		if len(resp.Devices) != len(ids) {
			t.Fatalf("%s: %d devices listed, want %d", step, len(resp.Devices), len(ids))
		}
		return resp.Devices
	}
	expect := func(step string, want ...string) {
		t.Helper()
		got := unhealthyIDs(next(step))
		if len(got) != len(want) || (len(want) > 0 && !slices.Equal(got, want)) {
			t.Fatalf("%s: unhealthy devices %v, want %v", step, got, want)
		}
	}

	expect("initial list")
	// Another node's annotation is not ours: the next update we see must be node-a's alone.
	cluster.annotate(t, "node-b", "0,1,2,3")
	cluster.annotate(t, "node-a", "0,2")
	expect("after marking indexes 0,2 unhealthy", ids[0], ids[2])
	cluster.annotate(t, "node-a", ids[1])
	expect("after marking device 1 by ID", ids[1])
	cluster.annotate(t, "node-a", "")
	expect("after removing the annotation")
}

func TestPublishesGFDShapedLabels(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, "node-a")
	cfg.Replicas = 2
	cfg.Product = "NVIDIA H100 80GB HBM3"
	cfg.DriverVersion = "550.54" // no revision: the stale revision label on the node must go
	cfg.PluginVersion = "v2"
	cluster := newFakeCluster(t)
	p := mustNew(t, cfg)
	startFakeKubelet(t, dir)
	startPlugin(t, func(ctx context.Context) error { return p.Run(ctx, cluster) })

	want := map[string]string{
		"nvidia.com/gpu.product":                   "NVIDIA-H100-80GB-HBM3-SHARED", // GFD's rename under time-slicing
		"nvidia.com/gpu.count":                     "4",
		"nvidia.com/gpu.memory":                    "81559",
		"nvidia.com/gpu.family":                    "hopper",
		"nvidia.com/gpu.sharing-strategy":          "time-slicing",
		"nvidia.com/gpu.replicas":                  "2",
		"nvidia.com/cuda.driver-version.full":      "550.54",
		"nvidia.com/cuda.driver-version.major":     "550",
		"nvidia.com/cuda.driver-version.minor":     "54",
		"nvidia.com/cuda.runtime-version.full":     "12.4",
		"nvidia.com/cuda.runtime-version.major":    "12",
		"nvidia.com/cuda.runtime-version.minor":    "4",
		"gpuconform.io/fake-device-plugin-version": "v2",
		"gpuconform.io/pool":                       "gpu", // not ours: must survive the patch
	}
	var labels map[string]string
	eventually(t, "labels on node-a", func() bool {
		n, err := cluster.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
		if err != nil {
			return false
		}
		labels = n.Labels
		return n.Labels[LabelPluginVersion] == "v2"
	})
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, labels[k], v)
		}
	}
	if v, ok := labels[LabelDriverRevision]; ok {
		t.Errorf("stale label %s=%q kept; a version without a revision must remove it", LabelDriverRevision, v)
	}
	if len(labels) != len(want) {
		t.Errorf("node has %d labels, want %d: %v", len(labels), len(want), labels)
	}
	for k, v := range labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("label key %q invalid: %v", k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("label %s value %q invalid: %v", k, v, errs)
		}
	}
	if n, _ := cluster.CoreV1().Nodes().Get(t.Context(), "node-b", metav1.GetOptions{}); len(n.Labels) != 0 {
		t.Errorf("another node was labelled: %v", n.Labels)
	}
}

func TestDefaultLabelsAndLabelValue(t *testing.T) {
	cfg := DefaultConfig()
	l := cfg.NodeLabels()
	for k, v := range map[string]string{
		LabelDriverFull: "550.54.15", LabelDriverMajor: "550", LabelDriverMinor: "54", LabelDriverRevision: "15",
		LabelSharingStrategy: "none", LabelReplicas: "1", LabelProduct: "NVIDIA-H100-80GB-HBM3",
	} {
		if l[k] != v {
			t.Errorf("default label %s = %q, want %q", k, l[k], v)
		}
	}
	for in, want := range map[string]string{
		"NVIDIA A100-SXM4-40GB": "NVIDIA-A100-SXM4-40GB",
		" (weird)/name ":        "weird--name",
		"":                      "",
	} {
		if got := LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
}
