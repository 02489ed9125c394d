package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/faults"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/wait"
)

// expectLiveCapacity waits until node offers want devices on path.
func expectLiveCapacity(ctx context.Context, env *testenv.Env, path gpu.Path, node string, want int64, why string, timeout time.Duration) {
	ginkgo.GinkgoHelper()
	waitLiveCapacity(ctx, env, path, node, want, why, timeout, nil)
}

// waitLiveCapacity is expectLiveCapacity whose failure also quotes explain's answer (nil: nothing more).
func waitLiveCapacity(ctx context.Context, env *testenv.Env, path gpu.Path, node string, want int64, why string, timeout time.Duration, explain func(context.Context) (string, error)) {
	ginkgo.GinkgoHelper()
	env.Wait.For(ctx, fmt.Sprintf("%s to offer %d devices on the %s path (%s)", node, want, path.Name(), why), wait.Target{Kind: "Node", Name: node}, timeout, func(g gomega.Gomega) {
		got, err := gpu.LiveCapacity(ctx, env.Clients.Kube, path, node)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		more := ""
		if explain != nil && got != want {
			s, err := explain(ctx)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			more = "; " + s
		}
		g.Expect(got).To(gomega.Equal(want), "%s offers %d devices on the %s path%s", node, got, path.Name(), more)
	})
}

// expectWithdrawn waits until node offers want devices once dev was reported unhealthy through provider.
// On a DRA path the failure quotes how the ResourceSlices show the device (a driver that tainted it without
// a scheduling effect, or not at all), and a pass records it: the health signal the scheduler was given
// (NVIDIA's driver taints the device in its slice; others withdraw it; a DeviceTaintRule leaves the slice
// as it was).
func expectWithdrawn(ctx context.Context, env *testenv.Env, path gpu.Path, node string, want int64, dev faults.Device, provider string, timeout time.Duration) {
	ginkgo.GinkgoHelper()
	dra, ok := gpu.ClaimPath(path)
	if !ok || dev.Name == "" {
		expectLiveCapacity(ctx, env, path, node, want, dev.ID+" withdrawn", timeout)
		return
	}
	signal := func(ctx context.Context) (string, error) {
		s, err := dra.DeviceSignal(ctx, env.Clients.Kube, dev.Pool, dev.Name)
		return fmt.Sprintf("%s (%s/%s), reported unhealthy through %s, is %s", dev.ID, dev.Pool, dev.Name, provider, s), err
	}
	waitLiveCapacity(ctx, env, path, node, want, dev.ID+" withdrawn", timeout, signal)
	if s, err := signal(ctx); err == nil {
		ginkgo.AddReportEntry("health signal", s)
	}
}

// publishedBefore reads the ResourceSlices node has on path before its kubelet or the node restarts
// (none on a device-plugin path), for expectCapacityAfterRestart.
func publishedBefore(ctx context.Context, env *testenv.Env, path gpu.Path, node string) map[string]string {
	ginkgo.GinkgoHelper()
	before, err := gpu.PublishedSlices(ctx, env.Clients.Kube, path, node)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading %s's ResourceSlices on the %s path before the restart", node, path.Name())
	return before
}

// expectCapacityAfterRestart waits until node offers want devices on path after its kubelet or the node
// restarted. On a DRA path those must be in ResourceSlices published after the restart, none of before:
// the starting kubelet deletes its node's slices (gpu.PublishedSlices), so a slice from before is one
// about to go, and the devices it shows are not back yet (read right after a restart, they would be
// counted before the kubelet deleted them).
func expectCapacityAfterRestart(ctx context.Context, env *testenv.Env, path gpu.Path, node string, want int64, before map[string]string, why string, timeout time.Duration) {
	ginkgo.GinkgoHelper()
	if !path.ClaimBased() {
		expectLiveCapacity(ctx, env, path, node, want, why, timeout)
		return
	}
	env.Wait.For(ctx, fmt.Sprintf("%s to offer %d devices on the %s path (%s, in ResourceSlices published anew)", node, want, path.Name(), why), wait.Target{Kind: "Node", Name: node}, timeout, func(g gomega.Gomega) {
		now, err := gpu.PublishedSlices(ctx, env.Clients.Kube, path, node)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		var old []string
		for uid, name := range now {
			if _, ok := before[uid]; ok {
				old = append(old, name)
			}
		}
		slices.Sort(old)
		g.Expect(old).To(gomega.BeEmpty(), "%s still has the ResourceSlices %v from before the restart: the starting kubelet deletes its node's slices until its drivers register, and the driver publishes them anew", node, old)
		got, err := gpu.LiveCapacity(ctx, env.Clients.Kube, path, node)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(got).To(gomega.Equal(want), "%s offers %d devices on the %s path in %d ResourceSlices published after the restart", node, got, path.Name(), len(now))
	})
}

// withdrawnWith is how many of the node's advertised devices go when the device victim is reported
// unhealthy, and how many pods each healthy device may go to. A sick GPU is sick for every tenant: on a
// node whose labels say its GPUs are time-sliced or shared through MPS, the plugin withdraws every replica
// of it (NVIDIA's plugin marks each replica of an unhealthy GPU unhealthy), and the healthy GPUs' replicas
// may each go to as many pods as the labels allow. A MIG device, or a claim's device, is its own unit.
func withdrawnWith(ctx context.Context, env *testenv.Env, path gpu.Path, node, victim string) (withdrawn, perDevice int64) {
	ginkgo.GinkgoHelper()
	nodeObj, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading node %s's sharing labels", node)
	perDevice = int64(gpu.SharingFor(path, nodeObj.Labels).HoldersPerDevice())
	if strings.HasPrefix(victim, "MIG-") {
		return 1, perDevice
	}
	return perDevice, perDevice
}

func deviceHealth(ctx context.Context, env *testenv.Env, inj *faults.Injector, devices faults.DeviceProvider, path gpu.Path, ns, node string) {
	failingDevices()
	n := path.Capacity()[node]
	ginkgo.By("finding a device of " + node + " by running a pod on it")
	probe := startHeldPod(ctx, env, path, ns, "pick", node)
	victim := probe.report.Devices[0]
	if path.ClaimBased() {
		// A device fault through the API (a DeviceTaintRule) names the device as the slice does.
		pod, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, probe.name, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		probe.given, err = path.Given(ctx, givenInput(env, pod, nil))
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	}
	deletePodAndWait(ctx, env, ns, probe.name)

	ginkgo.By(fmt.Sprintf("reporting %s unhealthy through %s", victim, devices.Name()))
	dev := faults.Device{Node: node, ID: victim}
	if len(probe.given.DeviceRefs) == 1 {
		dev.Pool, dev.Name, _ = strings.Cut(probe.given.DeviceRefs[0], "/")
		if dra, ok := gpu.ClaimPath(path); ok && !strings.Contains(dra.Driver, ",") {
			dev.Driver = dra.Driver
		}
	}
	withdrawn, perDevice := withdrawnWith(ctx, env, path, node, victim)
	undo, err := inj.MarkDeviceUnhealthy(ctx, devices, dev)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	unhealthy := testenv.DeferUndo(undo)
	start := time.Now()
	healthy := n - withdrawn
	expectWithdrawn(ctx, env, path, node, healthy, dev, devices.Name(), env.Timeouts.Release)
	ginkgo.AddReportEntry("unhealthy → withdrawn", time.Since(start).Round(100*time.Millisecond).String())

	ginkgo.By(fmt.Sprintf("filling the %d healthy devices of %s: none of the pods may see %s", healthy, node, victim))
	seen := map[string][]string{}
	names := make([]string, healthy)
	for i := range names {
		names[i] = createHeldPod(ctx, env, path, ns, fmt.Sprintf("healthy-%d", i), node)
	}
	for _, name := range names {
		p := awaitHeldPod(ctx, env, ns, name)
		d := p.report.Devices[0]
		gomega.Expect(d).NotTo(gomega.Equal(victim), "pod %s was given %s, which is reported unhealthy", p.name, victim)
		seen[d] = append(seen[d], p.name)
		gomega.Expect(int64(len(seen[d]))).To(gomega.BeNumerically("<=", perDevice), "pods %s all see %s, which %s's labels share %d way(s)", strings.Join(seen[d], " and "), d, node, perDevice)
	}
	ginkgo.By("asking for one more device: it must wait while the only free device is unhealthy")
	w := env.Factory.GPUPod("after-recovery", ns).Path(path).Devices(1).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...).OnNodes(node)
	last := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	env.Create(ctx, last)
	env.Wait.Consistently(ctx, fmt.Sprintf("pod %s/%s to wait while %s is unhealthy", ns, last.Name, victim), wait.Target{Kind: "Pod", Namespace: ns, Name: last.Name}, 10*env.Timeouts.Poll, func(g gomega.Gomega) {
		got, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, last.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(got.Status.Phase).To(gomega.Equal(corev1.PodPending), "pod %s runs although the only free device (%s) is unhealthy", last.Name, victim)
	})

	ginkgo.By(fmt.Sprintf("reporting %s healthy again", victim))
	gomega.Expect(unhealthy.Now(ctx)).To(gomega.Succeed())
	start = time.Now()
	expectLiveCapacity(ctx, env, path, node, n, victim+" back", env.Timeouts.Release)
	ginkgo.AddReportEntry("healthy → advertised", time.Since(start).Round(100*time.Millisecond).String())
	pods.ExpectPodRunning(ctx, env, ns, last.Name)
	report := pods.ExpectProbeReport(ctx, env, ns, last.Name)
	gomega.Expect(report.Devices).To(gomega.Equal([]string{victim}), "the waiting pod should get the recovered device %s; it sees %s (%s)", victim, gpu.FormatDevices(report.Devices), report.Message)
}

func kubeletRestart(ctx context.Context, env *testenv.Env, inj *faults.Injector, path gpu.Path, ns, node string) {
	n := path.Capacity()[node]
	before, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	slicesBefore := publishedBefore(ctx, env, path, node)
	ginkgo.By(fmt.Sprintf("restarting the kubelet of %s through %s", node, inj.Nodes.Name()))
	start := time.Now()
	gomega.Expect(inj.RestartKubelet(ctx, node)).To(gomega.Succeed())
	env.Wait.For(ctx, fmt.Sprintf("node %s to report Ready from the restarted kubelet", node), wait.Target{Kind: "Node", Name: node}, env.Timeouts.StackReady, func(g gomega.Gomega) {
		got, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(cluster.NodeReady(*got)).To(gomega.Equal(corev1.ConditionTrue))
		g.Expect(got.ResourceVersion).NotTo(gomega.Equal(before.ResourceVersion))
	})
	expectCapacityAfterRestart(ctx, env, path, node, n, slicesBefore, "after the kubelet restart", env.Timeouts.StackReady)
	ginkgo.AddReportEntry("kubelet restart → devices advertised", time.Since(start).Round(100*time.Millisecond).String())

	ginkgo.By("running a one-device pod on " + node)
	runOnceDevicesBack(ctx, env, path, ns, node, "after-restart", "after its kubelet restarted")
	ginkgo.AddReportEntry("kubelet restart → device allocated", time.Since(start).Round(100*time.Millisecond).String())
}

// expectEveryPathBack waits until node offers, on every path, the devices discovery saw there. A kubelet
// or node restart takes every path's devices on the node, and each path's plugin registers again on its
// own time: a stops:node spec returns the node only then (Spec.stopping), and the upgrade rehearsal
// waits for it before its snapshot of the known-good pool.
func expectEveryPathBack(ctx context.Context, env *testenv.Env, every []gpu.Path, node, why string, timeout time.Duration) {
	ginkgo.GinkgoHelper()
	for _, p := range every {
		if want := p.Capacity()[node]; want > 0 {
			expectLiveCapacity(ctx, env, p, node, want, why, timeout)
		}
	}
}

// runOnceDevicesBack runs a one-device pod on node, whose kubelet or machine just restarted, and checks
// it sees one device; it returns the pod's name. Right after a restart the kubelet may advertise devices
// it restored from its checkpoint before the plugin has registered again; a pod admitted in that window
// is rejected (UnexpectedAdmissionError). The check is that devices come back, so a rejected pod is
// recorded and a new one tried.
func runOnceDevicesBack(ctx context.Context, env *testenv.Env, path gpu.Path, ns, node, prefix, after string) string {
	ginkgo.GinkgoHelper()
	var got string
	attempt := 0
	env.Wait.For(ctx, fmt.Sprintf("a one-device pod to run on %s on the %s path %s", node, path.Name(), after), wait.Target{Kind: "Node", Name: node}, env.Timeouts.StackReady, func(g gomega.Gomega) {
		attempt++
		w := env.Factory.GPUPod(fmt.Sprintf("%s-%d", prefix, attempt), ns).Path(path).Devices(1).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...).OnNodes(node)
		pod := w.Obj()
		for _, pre := range w.Prerequisites() {
			env.Create(ctx, pre)
		}
		env.Create(ctx, pod)
		var phase corev1.PodPhase
		g.Eventually(func(g gomega.Gomega) {
			p, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			phase = p.Status.Phase
			g.Expect(phase).To(gomega.BeElementOf(corev1.PodRunning, corev1.PodFailed, corev1.PodSucceeded))
			if phase == corev1.PodFailed {
				ginkgo.AddReportEntry("rejected after the restart", fmt.Sprintf("%s: %s %s", p.Name, p.Status.Reason, p.Status.Message))
			}
		}).WithTimeout(env.Timeouts.PodStart).WithPolling(env.Timeouts.Poll).Should(gomega.Succeed())
		g.Expect(phase).To(gomega.Equal(corev1.PodRunning), "pod %s did not run", pod.Name)
		got = pod.Name
	})
	report := pods.ExpectProbeReport(ctx, env, ns, got)
	gomega.Expect(report.Devices).To(gomega.HaveLen(1), "pod %s sees %s (%s)", got, gpu.FormatDevices(report.Devices), report.Message)
	return got
}

type heldPod struct {
	name   string
	report gpu.ProbeReport
	// given is what the path's authority allocated (read only where a caller needs it).
	given gpu.Allocation
}

// startHeldPod runs a pod asking for one device on node, holding it, and returns what it sees.
func startHeldPod(ctx context.Context, env *testenv.Env, path gpu.Path, ns, name, node string) heldPod {
	ginkgo.GinkgoHelper()
	return awaitHeldPod(ctx, env, ns, createHeldPod(ctx, env, path, ns, name, node))
}

// createHeldPod creates a one-device probe pod that holds its device on node, and returns its name; pods
// created together start together (awaitHeldPod waits for each).
func createHeldPod(ctx context.Context, env *testenv.Env, path gpu.Path, ns, name, node string) string {
	ginkgo.GinkgoHelper()
	w := env.Factory.GPUPod(name, ns).Path(path).Devices(1).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...).OnNodes(node)
	pod := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	env.Create(ctx, pod)
	return pod.Name
}

// awaitHeldPod waits for a held probe pod to run and report the one device it sees.
func awaitHeldPod(ctx context.Context, env *testenv.Env, ns, name string) heldPod {
	ginkgo.GinkgoHelper()
	pods.ExpectPodRunning(ctx, env, ns, name)
	report := pods.ExpectProbeReport(ctx, env, ns, name)
	gomega.Expect(report.Devices).To(gomega.HaveLen(1), "pod %s asked for 1 device and sees %s (%s)", name, gpu.FormatDevices(report.Devices), report.Message)
	return heldPod{name: name, report: report}
}

// deletePodAndWait deletes a pod and waits until it is gone (its devices are free again).
func deletePodAndWait(ctx context.Context, env *testenv.Env, ns, name string) {
	ginkgo.GinkgoHelper()
	gomega.Expect(env.Clients.Kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})).To(gomega.Succeed())
	env.Wait.For(ctx, fmt.Sprintf("pod %s/%s to be gone", ns, name), wait.Target{Kind: "Pod", Namespace: ns, Name: name}, env.Timeouts.Release, func(g gomega.Gomega) {
		_, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "pod still exists (err=%v)", err)
	})
}

// victimDevice is the one device a pod was given, as a fault names it (on a claim-based path also its pool
// and name: the scheduler's claim on extended-resource-dra names them as a pod's own claim does).
func victimDevice(path gpu.Path, node string, given gpu.Allocation) faults.Device {
	victim := faults.Device{Node: node, ID: given.Devices[0]}
	if dra, ok := gpu.ClaimPath(path); ok && len(given.DeviceRefs) == 1 {
		pool, name, _ := strings.Cut(given.DeviceRefs[0], "/")
		victim.Pool, victim.Name = pool, name
		if !strings.Contains(dra.Driver, ",") {
			victim.Driver = dra.Driver
		}
	}
	return victim
}
