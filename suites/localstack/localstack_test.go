// Package localstack checks the project's own fake GPU stack on the local kind cluster: that the fakes
// behave like the real stack where the conformance suite relies on it (allocatable follows configuration
// and device health, Allocate hands out exactly the devices, DRA claims are allocated from the node's slice
// and released, the plugin survives a kubelet restart). It is not a conformance suite: it only runs
// against the cluster that `gpuconform cluster up` made.
package localstack

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/faults"
	"gpuconform.io/gpuconform/infra/localcluster"
	"gpuconform.io/gpuconform/internal/fakeplugin"
	"gpuconform.io/gpuconform/internal/workload/probe"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var (
	kubeconfig = flag.String("kubeconfig", "", "kubeconfig of the local cluster (default: _output/kubeconfig of this checkout)")
	devices    = flag.Int("devices", 4, "fake devices per GPU/canary node, as the cluster was brought up with")
	cs         kubernetes.Interface
)

const resourceName corev1.ResourceName = "nvidia.com/gpu"

func TestLocalStack(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "local fake GPU stack")
}

var _ = BeforeSuite(func() {
	path := *kubeconfig
	if path == "" {
		root, err := localcluster.FindRepoRoot(".")
		Expect(err).NotTo(HaveOccurred())
		path = filepath.Join(root, "_output", "kubeconfig")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	Expect(err).NotTo(HaveOccurred(), "the local cluster's kubeconfig %s: run `make cluster` first", path)
	cs = kubernetes.NewForConfigOrDie(cfg)
})

// poolNodes returns the GPU and canary nodes that run the device plugin (all but the DRA-only workers).
func poolNodes(ctx context.Context) []corev1.Node {
	GinkgoHelper()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: localcluster.PoolLabel + "," + localcluster.DevicePluginOffLabel + "!=false"})
	Expect(err).NotTo(HaveOccurred())
	Expect(nodes.Items).NotTo(BeEmpty(), "no node carries %s without %s=false", localcluster.PoolLabel, localcluster.DevicePluginOffLabel)
	return nodes.Items
}

// draOnlyNodes returns the GPU workers that run no device plugin (make cluster's --dra-only-workers).
func draOnlyNodes(ctx context.Context) []corev1.Node {
	GinkgoHelper()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: localcluster.PoolLabel + "," + localcluster.DevicePluginOffLabel + "=false"})
	Expect(err).NotTo(HaveOccurred())
	return nodes.Items
}

func allocatable(ctx context.Context, node string) int64 {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return -1
	}
	q := n.Status.Allocatable[resourceName]
	return q.Value()
}

// testNamespace creates a namespace for one spec and deletes it afterwards.
func testNamespace(ctx context.Context) string {
	GinkgoHelper()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "localstack-"}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		_ = cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// probePod runs the workload's probe on node with the given resources and returns its report.
func probePod(ctx context.Context, ns, node string, mutate func(*corev1.Pod)) probe.Report {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:  map[string]string{corev1.LabelHostname: node},
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "probe", Image: localcluster.ImageWorkload, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/usr/local/bin/gpu-workload", "probe"},
			}},
		},
	}
	if mutate != nil {
		mutate(pod)
	}
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		// A held probe has reported once its container runs and its log holds the line.
		g.Expect(p.Status.Phase).To(BeElementOf(corev1.PodSucceeded, corev1.PodRunning), "pod %s: %s", p.Name, podState(p))
		logs, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.TrimSpace(string(logs))).NotTo(BeEmpty(), "no probe output yet from %s", p.Name)
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	logs, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred())
	var r probe.Report
	Expect(json.Unmarshal([]byte(strings.TrimSpace(string(logs))), &r)).To(Succeed(), "probe output: %s", logs)
	return r
}

// waitPluginServing waits until the fake device plugin on node runs, is Ready and has sent its device list
// to the kubelet since the given time: only then does the kubelet admit pods asking for its devices.
func waitPluginServing(ctx context.Context, node string, since time.Time) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		pods, err := cs.CoreV1().Pods(localcluster.SystemNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=fake-device-plugin", FieldSelector: "spec.nodeName=" + node,
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pods.Items).To(HaveLen(1), "fake device plugin pods on %s", node)
		p := pods.Items[0]
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "plugin pod %s: %s", p.Name, podState(&p))
		// The log's timestamps come from the node's clock, which is this host's (kind nodes are containers).
		since := metav1.NewTime(since.Add(-time.Second))
		logs, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &since}).DoRaw(ctx)
		g.Expect(err).NotTo(HaveOccurred(), "logs of %s", p.Name)
		g.Expect(string(logs)).To(ContainSubstring(fakeplugin.LogSentDeviceList), "plugin %s has not served the kubelet since %s", p.Name, since.Format(time.RFC3339))
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

func podState(p *corev1.Pod) string {
	var parts []string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("%s=%s %s", c.Type, c.Reason, c.Message))
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil {
			parts = append(parts, "waiting "+s.State.Waiting.Reason+" "+s.State.Waiting.Message)
		}
	}
	return fmt.Sprintf("phase %s %s", p.Status.Phase, strings.Join(parts, "; "))
}

var _ = Describe("The fake device plugin", func() {
	It("advertises the configured devices and GFD labels on every GPU and canary node", func(ctx SpecContext) {
		for _, n := range poolNodes(ctx) {
			q := n.Status.Allocatable[resourceName]
			Expect(q.Value()).To(BeEquivalentTo(*devices), "allocatable %s on %s", resourceName, n.Name)
			Expect(n.Labels).To(HaveKeyWithValue("nvidia.com/gpu.count", strconv.Itoa(*devices)), "node %s", n.Name)
			Expect(n.Labels).To(HaveKey("nvidia.com/gpu.product"))
			Expect(n.Labels).To(HaveKey("nvidia.com/cuda.driver-version.full"))
			Expect(n.Labels).To(HaveKeyWithValue("nvidia.com/gpu.sharing-strategy", "none"))
		}
	})

	It("drops allocatable by one for an unhealthy device and restores it", Serial, func(ctx SpecContext) {
		node := poolNodes(ctx)[0].Name
		// Through the fault layer's local provider, which the conformance suite's failure scenario uses.
		local := &faults.Local{Kube: cs}
		dev := faults.Device{Node: node, ID: "0"}
		DeferCleanup(func(ctx SpecContext) { Expect(local.SetHealth(ctx, dev, true)).To(Succeed()) })
		start := time.Now()
		Expect(local.SetHealth(ctx, dev, false)).To(Succeed())
		Eventually(func() int64 { return allocatable(ctx, node) }).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).
			Should(BeEquivalentTo(*devices-1), "allocatable on %s after marking device 0 unhealthy", node)
		AddReportEntry("unhealthy → allocatable dropped", time.Since(start).Round(100*time.Millisecond).String())
		start = time.Now()
		Expect(local.SetHealth(ctx, dev, true)).To(Succeed())
		Eventually(func() int64 { return allocatable(ctx, node) }).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).
			Should(BeEquivalentTo(*devices), "allocatable on %s after restoring device 0", node)
		AddReportEntry("healthy → allocatable restored", time.Since(start).Round(100*time.Millisecond).String())
	})

	It("gives a pod asking for 2 devices exactly 2 distinct device IDs", func(ctx SpecContext) {
		ns := testNamespace(ctx)
		node := poolNodes(ctx)[0].Name
		r := probePod(ctx, ns, node, func(p *corev1.Pod) {
			p.Spec.Containers[0].Args = []string{"--expect", "2"}
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{resourceName: resource.MustParse("2")}
		})
		Expect(r.Devices).To(HaveLen(2), "probe: %+v", r)
		Expect(r.Devices[0]).NotTo(Equal(r.Devices[1]))
		for _, d := range r.Devices {
			Expect(d).To(HavePrefix("GPU-"))
		}
		Expect(r.Sources.NvidiaVisibleDevices).To(ConsistOf(r.Devices))
	})

	It("keeps the resource advertised across a kubelet restart on a GPU node", Serial, func(ctx SpecContext) {
		node := poolNodes(ctx)[0].Name
		Expect((&faults.Local{Kube: cs}).RestartKubelet(ctx, node)).To(Succeed())
		start := time.Now()
		// The restarted kubelet wipes the device-plugins directory; the plugin must notice and register again.
		// Allocatable alone proves nothing here: the kubelet restores the devices from its checkpoint and keeps
		// advertising them for a grace period while no plugin serves them, and a pod admitted in that window
		// fails with UnexpectedAdmissionError. The plugin has re-registered once the kubelet has opened its new
		// endpoint and received the device list.
		waitPluginServing(ctx, node, start)
		AddReportEntry("kubelet restart → plugin serving again", time.Since(start).Round(100*time.Millisecond).String())
		ns := testNamespace(ctx)
		Eventually(func() int64 { return allocatable(ctx, node) }).WithTimeout(90 * time.Second).WithPolling(500 * time.Millisecond).
			Should(BeEquivalentTo(*devices))
		r := probePod(ctx, ns, node, func(p *corev1.Pod) {
			p.Spec.Containers[0].Args = []string{"--expect", "1"}
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{resourceName: resource.MustParse("1")}
		})
		Expect(r.Devices).To(HaveLen(1))
		AddReportEntry("kubelet restart → device allocated again", time.Since(start).Round(100*time.Millisecond).String())
	})
})

// setPluginArgs replaces the fake device plugin's arguments, waits for the DaemonSet's new revision to be
// rolled out, and restores the previous arguments (and waits again) when the spec ends.
func setPluginArgs(ctx context.Context, mutate func(args []string) []string) {
	GinkgoHelper()
	dsc := cs.AppsV1().DaemonSets(localcluster.SystemNamespace)
	// Every agent DaemonSet (the GPU pool's and the canary pool's): the change reaches every pool node.
	orig := map[string][]string{}
	for _, a := range (localcluster.GPUStackOptions{}).Agents() {
		ds, err := dsc.Get(ctx, a.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && a.Name != localcluster.PluginDaemonSet {
			continue
		}
		Expect(err).NotTo(HaveOccurred())
		orig[a.Name] = append([]string(nil), ds.Spec.Template.Spec.Containers[0].Args...)
	}
	apply := func(ctx context.Context, args func(name string) []string) {
		GinkgoHelper()
		for name := range orig {
			Eventually(func() error {
				ds, err := dsc.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				ds.Spec.Template.Spec.Containers[0].Args = args(name)
				_, err = dsc.Update(ctx, ds, metav1.UpdateOptions{})
				return err
			}).WithTimeout(30 * time.Second).Should(Succeed())
		}
		for name := range orig {
			Eventually(func(g Gomega) {
				ds, err := dsc.Get(ctx, name, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(ds.Status.ObservedGeneration).To(Equal(ds.Generation))
				g.Expect(ds.Status.UpdatedNumberScheduled).To(Equal(ds.Status.DesiredNumberScheduled))
				g.Expect(ds.Status.NumberAvailable).To(Equal(ds.Status.DesiredNumberScheduled))
			}).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(Succeed(), name+" rollout")
		}
	}
	DeferCleanup(func(ctx SpecContext) {
		apply(ctx, func(name string) []string { return orig[name] })
		// The rollout is done when the pods are; the kubelets report the restored devices a little later.
		// The next spec must find the steady state.
		Eventually(func(g Gomega) {
			for _, n := range poolNodes(ctx) {
				g.Expect(allocatable(ctx, n.Name)).To(BeEquivalentTo(*devices), "allocatable on %s", n.Name)
			}
		}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	})
	apply(ctx, func(name string) []string { return mutate(append([]string(nil), orig[name]...)) })
}

// withArg replaces (or adds) one --name=value argument.
func withArg(args []string, name, value string) []string {
	for i, a := range args {
		if strings.HasPrefix(a, "--"+name+"=") {
			args[i] = "--" + name + "=" + value
			return args
		}
	}
	return append(args, "--"+name+"="+value)
}

var _ = Describe("The fake device plugin's layers", Serial, func() {
	It("advertises replicas × devices under time-slicing and labels the node as shared", func(ctx SpecContext) {
		setPluginArgs(ctx, func(a []string) []string { return withArg(a, "replicas", "2") })
		for _, n := range poolNodes(ctx) {
			Eventually(func(g Gomega) {
				node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				q := node.Status.Allocatable[resourceName]
				g.Expect(q.Value()).To(BeEquivalentTo(2**devices), "allocatable on %s", n.Name)
				g.Expect(node.Labels).To(HaveKeyWithValue("nvidia.com/gpu.sharing-strategy", "time-slicing"))
				g.Expect(node.Labels).To(HaveKeyWithValue("nvidia.com/gpu.replicas", "2"))
			}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		}
	})

	It("rolls a driver/plugin version out as a new DaemonSet revision", func(ctx SpecContext) {
		By("the node labels follow the new revision")
		// The DaemonSet controller stamps each pod with the hash of the revision it runs.
		revisions := func() map[string]int {
			GinkgoHelper()
			pods, err := cs.CoreV1().Pods(localcluster.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=fake-device-plugin"})
			Expect(err).NotTo(HaveOccurred())
			// Per DaemonSet (the GPU pool's and the canary pool's agents), its revisions.
			seen := map[string]int{}
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil {
					seen[metav1.GetControllerOf(&p).Name+"@"+p.Labels["controller-revision-hash"]]++
				}
			}
			return seen
		}
		agents := func() int {
			GinkgoHelper()
			owners := map[string]bool{}
			for k := range revisions() {
				owner, _, _ := strings.Cut(k, "@")
				owners[owner] = true
			}
			return len(owners)
		}
		before, daemonSets := revisions(), agents()
		setPluginArgs(ctx, func(a []string) []string {
			return withArg(withArg(a, "driver-version", "560.35.03"), "version", "v2")
		})
		Eventually(revisions).WithTimeout(time.Minute).Should(HaveLen(daemonSets), "an agent DaemonSet's pods of more than one revision after the rollout")
		for hash := range revisions() {
			Expect(before).NotTo(HaveKey(hash), "the version change did not produce a new DaemonSet revision")
		}
		for _, n := range poolNodes(ctx) {
			Eventually(func(g Gomega) {
				node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(node.Labels).To(HaveKeyWithValue("nvidia.com/cuda.driver-version.full", "560.35.03"))
				g.Expect(node.Labels).To(HaveKeyWithValue("gpuconform.io/fake-device-plugin-version", "v2"))
			}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		}
	})
})

// A GPU worker stopped and started through framework/faults' local provider is the conformance suite's
// failed-worker spec (scenarios/failure.go), which checks everything this suite used to here (NotReady,
// Ready again, devices back, a pod gets one) and more; it is not repeated.

var _ = Describe("The DRA driver", func() {
	It("allocates a claim on the pod's node, shows it the device, and releases it", func(ctx SpecContext) {
		ns := testNamespace(ctx)
		node := poolNodes(ctx)[0].Name
		tmpl := &resourcev1.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: ns},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: localcluster.DRADriverName, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}},
		}
		_, err := cs.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		r := probePod(ctx, ns, node, func(p *corev1.Pod) {
			// Held: a finished pod's generated claim is released (deleted) at once, before it can be read.
			p.Spec.Containers[0].Args = []string{"--expect", "1", "--hold", "10m"}
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}}
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		})
		claims, err := cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(claims.Items).To(HaveLen(1))
		claim := claims.Items[0]
		Expect(claim.Status.Allocation).NotTo(BeNil(), "claim %s not allocated", claim.Name)
		results := claim.Status.Allocation.Devices.Results
		Expect(results).To(HaveLen(1))
		Expect(results[0].Driver).To(Equal(localcluster.DRADriverName))
		Expect(results[0].Pool).To(Equal(node), "allocated from another node's pool")
		slices, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		found := false
		for _, s := range slices.Items {
			if s.Spec.Driver != localcluster.DRADriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
				continue
			}
			for _, d := range s.Spec.Devices {
				found = found || d.Name == results[0].Device
			}
		}
		Expect(found).To(BeTrue(), "device %s is not in a ResourceSlice of node %s", results[0].Device, node)
		// The container names its GPU by UUID (nvidia-smi), the claim by device name: the slice's uuid
		// attribute links them.
		var uuid string
		for _, s := range slices.Items {
			for _, d := range s.Spec.Devices {
				if s.Spec.NodeName != nil && *s.Spec.NodeName == node && d.Name == results[0].Device && d.Attributes["uuid"].StringValue != nil {
					uuid = *d.Attributes["uuid"].StringValue
				}
			}
		}
		Expect(uuid).NotTo(BeEmpty(), "device %s publishes no uuid attribute", results[0].Device)
		Expect(r.Devices).To(ConsistOf(uuid), "container saw %v, claim allocated %s (%s)", r.Devices, results[0].Device, uuid)
		// The generated claim belongs to the pod: deleting the pod releases (deletes) it.
		Expect(cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})).To(Succeed())
		Eventually(func() bool {
			_, err := cs.ResourceV1().ResourceClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(90*time.Second).WithPolling(time.Second).Should(BeTrue(), "claim %s still exists after its pod was deleted", claim.Name)
	})
})
