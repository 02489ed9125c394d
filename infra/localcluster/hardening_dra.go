package localcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// The DRA path broken in the two ways discovery and the diagnosis settle (hardening rows
// deviceclass-selects-nothing and dra-unregistered): each run must be NO-GO, say why, and not wait out
// its timeouts.

// NeverPublishedProduct is a productName no GPU of the fake agent publishes.
const NeverPublishedProduct = "gpuconform-never-published"

const (
	// fakeAgentDaemonSet and fakeAgentContainer are the fake GPU agent's GPU-pool DaemonSet and its container
	// (manifests/fake-device-plugin.yaml; agentDaemonSets lists the canary pool's too).
	fakeAgentDaemonSet = PluginDaemonSet
	fakeAgentContainer = "fake-device-plugin"
	// draUnregisteredFlag is the agent's start-up switch (internal/fakeplugin Config.DRAUnregistered).
	draUnregisteredFlag = "--dra-unregistered"
	// kubeletWipeDelay is how long the kubelet waits after a DRA plugin unregistered before it deletes the
	// driver's ResourceSlices on the node (defaultWipingDelay, pkg/kubelet/cm/dra/manager.go in k8s v1.37).
	kubeletWipeDelay = 30 * time.Second
	// wipeMargin covers the kubelet's DeleteCollection and the agent republishing after it (it checks for
	// its slice every 10 s).
	wipeMargin = 15 * time.Second
	// agentRollout bounds a roll of the agent's DaemonSet over the GPU and canary pools (one node at a
	// time, each pod Ready once the kubelet has connected to it).
	agentRollout = 5 * time.Minute
)

// neverSelecting is the selector ApplyDeviceClassSelectsNothing adds to the class of driver: the
// attribute the driver publishes, a value it never does.
func neverSelecting(driver string) resourcev1.DeviceSelector {
	return resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{
		Expression: fmt.Sprintf("device.attributes['%s'].productName == '%s'", driver, NeverPublishedProduct),
	}}
}

// withoutSelector returns sels without the selectors whose expression is that of s.
func withoutSelector(sels []resourcev1.DeviceSelector, s resourcev1.DeviceSelector) []resourcev1.DeviceSelector {
	return slices.DeleteFunc(slices.Clone(sels), func(x resourcev1.DeviceSelector) bool {
		return x.CEL != nil && s.CEL != nil && x.CEL.Expression == s.CEL.Expression
	})
}

// ApplyDeviceClassSelectsNothing adds to the fake agent's DeviceClass (DRADriverName) a selector that
// requires a productName its GPUs never publish, as a driver upgrade that renamed the product leaves a
// class written for the old one. Every selector must accept a device, so the class selects none. The undo
// removes that selector and nothing else.
func ApplyDeviceClassSelectsNothing(ctx context.Context, kube kubernetes.Interface) (Undo, error) {
	classes := kube.ResourceV1().DeviceClasses()
	dc, err := classes.Get(ctx, DRADriverName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading DeviceClass %s (is the DRA half of the fake agent on?): %w", DRADriverName, err)
	}
	added := neverSelecting(DRADriverName)
	if len(withoutSelector(dc.Spec.Selectors, added)) != len(dc.Spec.Selectors) {
		return nil, fmt.Errorf("DeviceClass %s already requires productName %s: a previous run was not undone", DRADriverName, NeverPublishedProduct)
	}
	dc.Spec.Selectors = append(dc.Spec.Selectors, added)
	if _, err := classes.Update(ctx, dc, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("adding a selector to DeviceClass %s: %w", DRADriverName, err)
	}
	return func(ctx context.Context) error {
		dc, err := classes.Get(ctx, DRADriverName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading DeviceClass %s to restore it: %w", DRADriverName, err)
		}
		dc.Spec.Selectors = withoutSelector(dc.Spec.Selectors, added)
		if _, err := classes.Update(ctx, dc, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("restoring DeviceClass %s: %w", DRADriverName, err)
		}
		return nil
	}, nil
}

// The dra-unregistered row needs ResourceSlices that stay published while no kubelet knows their
// driver. Removing the agent's pods is racy: the kubelet wipes a driver's slices 30 s after its plugin
// unregisters, and a spec sees slices or none depending on when it looks. The agent's start-up flag
// --dra-unregistered instead runs the DRA half without registering (kubeletplugin's registration service
// off) and keeps publishing through the API, as a driver with a broken registrar does; the row rolls the
// agent's DaemonSet with it, then waits out the kubelet's wipe of the slices the registered pods left,
// until the agent has republished them: from then on the state holds still. The device-plugin half
// restarts with the roll and serves as before.

// draUnregistered is the dra-unregistered row's set-up, its waits adjustable for tests.
type draUnregistered struct {
	kube kubernetes.Interface
	// poll, rollout and settle: how often to look, how long a roll of the agent may take, and how long
	// after a roll the kubelet's wipe is surely done (kubeletWipeDelay and wipeMargin).
	poll, rollout, settle time.Duration
}

// ApplyDRAUnregistered rolls the fake agent's DaemonSet with --dra-unregistered and returns once every
// node that published DRA devices publishes them again, with no plugin registered. The undo removes the
// flag and waits for the roll back.
func ApplyDRAUnregistered(ctx context.Context, kube kubernetes.Interface) (Undo, error) {
	return draUnregistered{kube: kube, poll: 2 * time.Second, rollout: agentRollout, settle: kubeletWipeDelay + wipeMargin}.apply(ctx)
}

func (d draUnregistered) apply(ctx context.Context) (Undo, error) {
	nodes, err := d.publishingNodes(ctx)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("no node publishes ResourceSlices of %s: is the DRA half of the fake agent on?", DRADriverName)
	}
	if err := d.setFlag(ctx, true); err != nil {
		return nil, err
	}
	undo := func(ctx context.Context) error {
		if err := d.setFlag(ctx, false); err != nil {
			return err
		}
		return d.waitRolled(ctx)
	}
	fail := func(err error) (Undo, error) { return nil, errors.Join(err, undo(ctx)) }
	if err := d.waitRolled(ctx); err != nil {
		return fail(err)
	}
	// Every registered pod is gone now, so every wipe is due within the kubelet's delay from here.
	rolled := time.Now()
	err = wait.PollUntilContextTimeout(ctx, d.poll, d.settle+d.rollout, true, func(ctx context.Context) (bool, error) {
		now, err := d.publishingNodes(ctx)
		return err == nil && time.Since(rolled) >= d.settle && len(missingNodes(nodes, now)) == 0, nil
	})
	if err != nil {
		now, _ := d.publishingNodes(ctx)
		return fail(fmt.Errorf("nodes %s publish no ResourceSlice of %s %s after the agent rolled without registering: %w",
			strings.Join(missingNodes(nodes, now), ", "), DRADriverName, d.settle+d.rollout, err))
	}
	return undo, nil
}

// publishingNodes lists the nodes with a ResourceSlice of DRADriverName that has devices.
func (d draUnregistered) publishingNodes(ctx context.Context) ([]string, error) {
	list, err := d.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorDriver, DRADriverName).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices of %s: %w", DRADriverName, err)
	}
	var out []string
	for _, s := range list.Items {
		if s.Spec.Driver == DRADriverName && s.Spec.NodeName != nil && len(s.Spec.Devices) > 0 && !slices.Contains(out, *s.Spec.NodeName) {
			out = append(out, *s.Spec.NodeName)
		}
	}
	slices.Sort(out)
	return out, nil
}

// missingNodes are the nodes of want that are not in have.
func missingNodes(want, have []string) []string {
	return slices.DeleteFunc(slices.Clone(want), func(n string) bool { return slices.Contains(have, n) })
}

// setFlag switches --dra-unregistered on or off in the agent container's arguments, leaving the others.
func (d draUnregistered) setFlag(ctx context.Context, on bool) error {
	dss, err := agentDaemonSets(ctx, d.kube)
	if err != nil {
		return err
	}
	for _, ds := range dss {
		i := slices.IndexFunc(ds.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == fakeAgentContainer })
		if i < 0 {
			return fmt.Errorf("DaemonSet %s/%s has no container %s", SystemNamespace, ds.Name, fakeAgentContainer)
		}
		c := &ds.Spec.Template.Spec.Containers[i]
		has := slices.Contains(c.Args, draUnregisteredFlag)
		switch {
		case on && has:
			return fmt.Errorf("DaemonSet %s/%s already runs the agent with %s: a previous run was not undone", SystemNamespace, ds.Name, draUnregisteredFlag)
		case on:
			c.Args = append(c.Args, draUnregisteredFlag)
		case !has:
			continue
		default:
			c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return a == draUnregisteredFlag })
		}
		if _, err := d.kube.AppsV1().DaemonSets(SystemNamespace).Update(ctx, &ds, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating DaemonSet %s/%s: %w", SystemNamespace, ds.Name, err)
		}
	}
	return nil
}

// waitRolled waits until each of the agent's DaemonSets runs its current template, Ready, on every node.
func (d draUnregistered) waitRolled(ctx context.Context) error {
	var last *appsv1.DaemonSet
	err := wait.PollUntilContextTimeout(ctx, d.poll, d.rollout, true, func(ctx context.Context) (bool, error) {
		dss, err := agentDaemonSets(ctx, d.kube)
		if err != nil {
			return false, nil //nolint:nilerr // a failed read is tried again
		}
		for _, ds := range dss {
			if !rolledOut(&ds) {
				last = &ds
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && last != nil {
		st := last.Status
		return fmt.Errorf("DaemonSet %s/%s did not roll out within %s (generation %d observed %d; %d desired, %d updated, %d ready): %w",
			SystemNamespace, last.Name, d.rollout, last.Generation, st.ObservedGeneration, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberReady, err)
	}
	return err
}

// rolledOut reports a DaemonSet whose controller has seen its current spec and runs it, Ready, on every
// node it should (kubectl rollout status's test for a DaemonSet).
func rolledOut(ds *appsv1.DaemonSet) bool {
	st := ds.Status
	return st.ObservedGeneration >= ds.Generation && st.UpdatedNumberScheduled == st.DesiredNumberScheduled &&
		st.NumberAvailable == st.DesiredNumberScheduled && st.NumberReady == st.DesiredNumberScheduled
}
