package localcluster

import (
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/diagnose"
)

// agentSlice is a node's ResourceSlice as the fake agent publishes it: GPUs of type gpu with a productName.
func agentSlice(node string) *resourcev1.ResourceSlice {
	attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}, "productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")}}
	return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + DRADriverName}, Spec: resourcev1.ResourceSliceSpec{
		Driver: DRADriverName, NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "gpu-4", Attributes: attrs}, {Name: "gpu-5", Attributes: attrs}},
	}}
}

// agentClass is the DeviceClass of manifests/fake-device-plugin.yaml.
func agentClass() *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: DRADriverName}, Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
		CEL: &resourcev1.CELDeviceSelector{Expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"},
	}}}}
}

// The row's class selects none of the agent's GPUs, as the suite's own evaluation sees it; the undo takes
// away its selector and nothing else.
func TestApplyDeviceClassSelectsNothing(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset(agentClass(), agentSlice("w1"), agentSlice("w2"))
	undo, err := ApplyDeviceClassSelectsNothing(ctx, kube)
	if err != nil {
		t.Fatal(err)
	}
	dc, _ := kube.ResourceV1().DeviceClasses().Get(ctx, DRADriverName, metav1.GetOptions{})
	slicesList, _ := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	m := diagnose.MatchDeviceClass(ctx, dc, slicesList.Items)
	if why := m.SelectsNothing(); !strings.Contains(why, "selects 0 of 4 published devices") || !strings.Contains(why, NeverPublishedProduct) {
		t.Errorf("the class with the row's selector: %q (%s)", why, m.Summary())
	}
	if _, err := ApplyDeviceClassSelectsNothing(ctx, kube); err == nil || !strings.Contains(err.Error(), "not undone") {
		t.Errorf("applying twice: %v", err)
	}
	// A selector someone else adds meanwhile stays.
	other := resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['gpu.nvidia.com'].type != ''"}}
	dc.Spec.Selectors = append(dc.Spec.Selectors, other)
	if _, err := kube.ResourceV1().DeviceClasses().Update(ctx, dc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	dc, _ = kube.ResourceV1().DeviceClasses().Get(ctx, DRADriverName, metav1.GetOptions{})
	want := append(agentClass().Spec.Selectors, other)
	if len(dc.Spec.Selectors) != len(want) || dc.Spec.Selectors[0].CEL.Expression != want[0].CEL.Expression || dc.Spec.Selectors[1].CEL.Expression != other.CEL.Expression {
		t.Errorf("selectors after the undo: %+v, want the original and the other's", dc.Spec.Selectors)
	}
	if why := diagnose.MatchDeviceClass(ctx, dc, slicesList.Items).SelectsNothing(); why != "" {
		t.Errorf("after the undo: %s", why)
	}
}

// agentDaemonSet is the fake agent's DaemonSet, rolled out on two nodes.
func agentDaemonSet(args ...string) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: fakeAgentDaemonSet, Namespace: SystemNamespace}}
	ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: fakeAgentContainer, Args: args}}
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberReady: 2, NumberAvailable: 2}
	return ds
}

func fastUnregistered(kube *fake.Clientset) draUnregistered {
	return draUnregistered{kube: kube, poll: time.Millisecond, rollout: time.Second, settle: 0}
}

// The row adds --dra-unregistered to the agent's arguments and waits for the roll and the slices; the undo
// takes the flag away and leaves the other arguments.
func TestApplyDRAUnregistered(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset(agentDaemonSet("--devices=4", "--dra-devices=4"), agentSlice("w1"), agentSlice("w2"))
	undo, err := fastUnregistered(kube).apply(ctx)
	if err != nil {
		t.Fatal(err)
	}
	args := func() []string {
		ds, err := kube.AppsV1().DaemonSets(SystemNamespace).Get(ctx, fakeAgentDaemonSet, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ds.Spec.Template.Spec.Containers[0].Args
	}
	if got := args(); !slices.Equal(got, []string{"--devices=4", "--dra-devices=4", draUnregisteredFlag}) {
		t.Errorf("args under the row: %v", got)
	}
	if _, err := fastUnregistered(kube).apply(ctx); err == nil || !strings.Contains(err.Error(), "not undone") {
		t.Errorf("applying twice: %v", err)
	}
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	if got := args(); !slices.Equal(got, []string{"--devices=4", "--dra-devices=4"}) {
		t.Errorf("args after the undo: %v", got)
	}
}

// Without published slices there is nothing to keep published; a DaemonSet that never rolls out, or slices
// that never come back, fail the set-up and undo it.
func TestApplyDRAUnregisteredFails(t *testing.T) {
	ctx := t.Context()
	if _, err := fastUnregistered(fake.NewClientset(agentDaemonSet())).apply(ctx); err == nil || !strings.Contains(err.Error(), "no node publishes") {
		t.Errorf("no slices: %v", err)
	}
	stuck := agentDaemonSet("--devices=4")
	stuck.Status.NumberReady = 1
	kube := fake.NewClientset(stuck, agentSlice("w1"))
	if _, err := fastUnregistered(kube).apply(ctx); err == nil || !strings.Contains(err.Error(), "did not roll out") {
		t.Errorf("stuck roll: %v", err)
	}
	ds, _ := kube.AppsV1().DaemonSets(SystemNamespace).Get(ctx, fakeAgentDaemonSet, metav1.GetOptions{})
	if slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, draUnregisteredFlag) {
		t.Error("a failed set-up left the flag on")
	}
}

func TestRolledOut(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*appsv1.DaemonSet)
		want   bool
	}{
		"every node runs the current template, Ready": {func(*appsv1.DaemonSet) {}, true},
		"the controller has not seen the new spec":    {func(ds *appsv1.DaemonSet) { ds.Generation = 2; ds.Status.ObservedGeneration = 1 }, false},
		"one node still runs the old template":        {func(ds *appsv1.DaemonSet) { ds.Status.UpdatedNumberScheduled = 1 }, false},
		"one new pod is not Ready":                    {func(ds *appsv1.DaemonSet) { ds.Status.NumberReady, ds.Status.NumberAvailable = 1, 1 }, false},
	} {
		ds := agentDaemonSet()
		tc.change(ds)
		if got := rolledOut(ds); got != tc.want {
			t.Errorf("%s: rolledOut = %v, want %v", name, got, tc.want)
		}
	}
}
