package fakeplugin

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// serveDRA runs the DRA half of an agent with two DRA GPUs on node-a against a fake API server until the
// test ends, and returns the agent, the client and the registration directory.
func serveDRA(t *testing.T, unregistered bool) (*Plugin, *fake.Clientset, string) {
	t.Helper()
	cfg := testConfig(t, shortDir(t), "node-a")
	cfg.DRADevices = 2
	cfg.KubeletRegistryDir, cfg.KubeletPluginsDir = shortDir(t), shortDir(t)
	cfg.DRAUnregistered = unregistered
	p := mustNew(t, cfg)
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-a-uid"}})
	// The fake API server does not generate names; the ResourceSlice controller asks for one.
	var n atomic.Int64
	kube.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice); ok && s.Name == "" {
			s.Name = s.GenerateName + strconv.FormatInt(n.Add(1), 10)
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- p.ServeDRA(ctx, kube) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeDRA: %v", err)
		}
	})
	return p, kube, cfg.KubeletRegistryDir
}

// theSlice waits until the fake API server holds one ResourceSlice and returns its name.
func theSlice(t *testing.T, kube *fake.Clientset) string {
	t.Helper()
	var name string
	eventually(t, "the node's slice", func() bool {
		list, err := kube.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return false
		}
		name = list.Items[0].Name
		return true
	})
	return name
}

func (p *Plugin) isDRAReady() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.draReady
}

// Unregistered on purpose, the DRA half publishes its node's slice and counts as ready, and no
// registration socket appears for the kubelet to find.
func TestServeDRAUnregisteredPublishesWithoutRegistering(t *testing.T) {
	p, kube, registry := serveDRA(t, true)
	eventually(t, "the node's slice with both GPUs", func() bool {
		list, err := kube.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
		return err == nil && len(list.Items) == 1 && len(list.Items[0].Spec.Devices) == 2 && *list.Items[0].Spec.NodeName == "node-a"
	})
	eventually(t, "ready without the kubelet's registration", p.isDRAReady)
	if entries, err := os.ReadDir(registry); err != nil || len(entries) != 0 {
		t.Errorf("registration directory holds %v (%v), want nothing for the kubelet to find", entries, err)
	}
}

// Registered as usual, the DRA half puts its registration socket where the kubelet looks, and is not
// ready until the kubelet has registered it.
func TestServeDRARegistersByDefault(t *testing.T) {
	p, _, registry := serveDRA(t, false)
	eventually(t, "a registration socket", func() bool {
		entries, err := os.ReadDir(registry)
		return err == nil && len(entries) == 1
	})
	if p.isDRAReady() {
		t.Error("ready although no kubelet registered the plugin")
	}
}

// A slice deleted moments after the agent created it (a kubelet that starts wipes its node's slices) comes
// back without waiting out the ResourceSlice controller's one-minute cache of the slices it created, in
// which the deleted slice would still exist (sliceMutationCacheTTL).
func TestServeDRAPublishesASliceDeletedJustAfterItsCreationAgain(t *testing.T) {
	_, kube, _ := serveDRA(t, true)
	first := theSlice(t, kube)
	if err := kube.ResourceV1().ResourceSlices().Delete(t.Context(), first, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the slice published again after "+first+" was deleted", func() bool {
		list, err := kube.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
		return err == nil && len(list.Items) == 1 && list.Items[0].Name != first && len(list.Items[0].Spec.Devices) == 2
	})
}

// Under FaultDRANoRepublish the agent publishes its slice once: deleted (the starting kubelet's wipe), it
// stays gone while the fault is on, and comes back once the fault is switched off.
func TestServeDRANoRepublishLeavesADeletedSliceGoneUntilSwitchedOff(t *testing.T) {
	p, kube, _ := serveDRA(t, true)
	p.SetFaultsFromAnnotation(string(FaultDRANoRepublish))
	first := theSlice(t, kube)
	time.Sleep(2 * time.Second) // the agent's tick sees the slice and stops publishing
	if err := kube.ResourceV1().ResourceSlices().Delete(t.Context(), first, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The agent's own publishing would have it back within sliceSyncDelay and its 10 s check.
	time.Sleep(sliceSyncDelay + 11*time.Second)
	if list, err := kube.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("under %s the deleted slice came back: %d slices (%v)", FaultDRANoRepublish, len(list.Items), err)
	}
	p.SetFaultsFromAnnotation("")
	eventually(t, "the slice published again once the fault is off", func() bool {
		list, err := kube.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
		return err == nil && len(list.Items) == 1 && list.Items[0].Name != first && len(list.Items[0].Spec.Devices) == 2
	})
}

// On a node labelled nvidia.com/gpu.deploy.device-plugin=false the agent serves its DRA devices only: it
// never registers a device plugin with the kubelet, and is ready once its DRA half is.
func TestDevicePluginOffByNodeLabel(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, "node-a")
	cfg.DRADevices, cfg.DRAUnregistered = 2, true
	cfg.KubeletRegistryDir, cfg.KubeletPluginsDir = shortDir(t), shortDir(t)
	cfg.ReadyFile = dir + "/serving"
	kubelet := startFakeKubelet(t, dir)
	p := mustNew(t, cfg)
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-a-uid",
		Labels: map[string]string{DevicePluginDeployLabel: "false"}}})
	var n atomic.Int64
	kube.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice); ok && s.Name == "" {
			s.Name = s.GenerateName + strconv.FormatInt(n.Add(1), 10)
		}
		return false, nil, nil
	})
	startPlugin(t, func(ctx context.Context) error { return p.Run(ctx, kube) })
	theSlice(t, kube)
	eventually(t, "ready with the DRA half alone", func() bool { return CheckReady(cfg.ReadyFile) == nil })
	time.Sleep(200 * time.Millisecond)
	if got := kubelet.requests(); len(got) != 0 {
		t.Errorf("the device plugin registered with the kubelet on a node that turns it off: %v", got)
	}
}
