package localstack

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/accelmetrics"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/diagnose"
	"gpuconform.io/gpuconform/infra/localcluster"
	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/internal/fakeplugin"
	"gpuconform.io/gpuconform/internal/workload/probe"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Specs of the fake GPU agent's fidelity (containers see their GPUs as device nodes and in nvidia-smi, and
// nothing else) and of every fault mode it can play (each switched on through the node annotation and its
// symptom observed). The conformance suite's checks are proven against the same faults by `make selfcheck`.

// agentPod returns the running fake GPU agent pod on node.
func agentPod(ctx context.Context, g Gomega, node string) corev1.Pod {
	pods, err := cs.CoreV1().Pods(localcluster.SystemNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=fake-device-plugin", FieldSelector: "spec.nodeName=" + node,
	})
	g.Expect(err).NotTo(HaveOccurred())
	var running []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			running = append(running, p)
		}
	}
	g.Expect(running).To(HaveLen(1), "running fake GPU agent pods on %s", node)
	return running[0]
}

// waitAgentLogged waits until the agent on node has logged a line containing every part since the given time.
func waitAgentLogged(ctx context.Context, node string, since time.Time, parts ...string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		p := agentPod(ctx, g, node)
		t := metav1.NewTime(since.Add(-time.Second))
		logs, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &t}).DoRaw(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		found := slices.ContainsFunc(strings.Split(string(logs), "\n"), func(line string) bool {
			for _, part := range parts {
				if !strings.Contains(line, part) {
					return false
				}
			}
			return true
		})
		g.Expect(found).To(BeTrue(), "agent %s has not logged %q since %s", p.Name, parts, since.Format(time.RFC3339))
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
}

// annotateNode sets (value != nil) or removes one annotation of node.
func annotateNode(ctx context.Context, node, key string, value *string) {
	GinkgoHelper()
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{})
	Expect(err).NotTo(HaveOccurred())
}

// withFault switches fault on for node through the agent's annotation, waits until the agent applied it,
// and switches it off (waiting again) when the spec ends.
func withFault(ctx context.Context, node string, fault fakeplugin.Fault) {
	GinkgoHelper()
	DeferCleanup(func(ctx SpecContext) {
		start := time.Now()
		annotateNode(ctx, node, fakeplugin.FaultsAnnotation, nil)
		waitAgentLogged(ctx, node, start, fakeplugin.LogFaultsChanged, "was="+string(fault))
	})
	start := time.Now()
	annotateNode(ctx, node, fakeplugin.FaultsAnnotation, ptr.To(string(fault)))
	waitAgentLogged(ctx, node, start, fakeplugin.LogFaultsChanged, "faults="+string(fault))
}

// podSpec is a pod pinned to node whose containers run the probe; extra containers are named "c1", "c2"….
func podSpec(ns, node string, containers int) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: node},
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	for i := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: fmt.Sprintf("c%d", i), Image: localcluster.ImageWorkload, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"/usr/local/bin/gpu-workload", "probe", "--hold", "10m"},
		})
	}
	return pod
}

// withDPGPUs gives container c one GPU of the agent's device-plugin half.
func withDPGPUs(c *corev1.Container) {
	c.Resources.Limits = corev1.ResourceList{resourceName: resource.MustParse("1")}
}

// withDRAGPU makes pod claim one GPU of the agent's DRA half through a template, for its first container only.
func withDRAGPU(ctx context.Context, pod *corev1.Pod) {
	GinkgoHelper()
	const name = "gpus-1"
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pod.Namespace},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: localcluster.DRADriverName, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}},
	}
	if _, err := cs.ResourceV1().ResourceClaimTemplates(pod.Namespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
		_, err := cs.ResourceV1().ResourceClaimTemplates(pod.Namespace).Create(ctx, tmpl, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	}
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(name)}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
}

// runProbes creates pod, waits until every container has printed its probe report, and returns the
// reports by container name (init containers included).
func runProbes(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, map[string]probe.Report) {
	GinkgoHelper()
	pod = createPod(ctx, pod)
	reports := map[string]probe.Report{}
	var names []string
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		names = append(names, c.Name)
	}
	Eventually(func(g Gomega) {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		pod = p
		g.Expect(p.Status.Phase).To(BeElementOf(corev1.PodRunning, corev1.PodSucceeded), "pod %s: %s", p.Name, podState(p))
		for _, name := range names {
			logs, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: name}).DoRaw(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			line := strings.TrimSpace(strings.SplitN(string(logs), "\n", 2)[0])
			g.Expect(line).NotTo(BeEmpty(), "no probe output yet from %s/%s", p.Name, name)
			var r probe.Report
			g.Expect(json.Unmarshal([]byte(line), &r)).To(Succeed(), "probe output of %s: %s", name, line)
			reports[name] = r
		}
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	return pod, reports
}

// createPod creates pod, retrying while an admission webhook cannot be reached: Kueue's pod webhook fails
// closed, and Kueue may be restarting after a node of the pool was stopped by an earlier spec.
func createPod(ctx context.Context, pod *corev1.Pod) *corev1.Pod {
	GinkgoHelper()
	var created *corev1.Pod
	Eventually(func(g Gomega) {
		var err error
		created, err = cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod.DeepCopy(), metav1.CreateOptions{})
		if apierrors.IsInternalError(err) && strings.Contains(err.Error(), "failed calling webhook") {
			g.Expect(err).NotTo(HaveOccurred(), "admission webhook not reachable yet")
		}
		Expect(err).NotTo(HaveOccurred())
	}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	return created
}

// expectSeesExactly asserts that a container sees exactly the GPUs with these minors of node, through both
// primary sources.
func expectSeesExactly(r probe.Report, node string, minors ...int) {
	GinkgoHelper()
	var uuids, devs []string
	for _, m := range minors {
		uuids = append(uuids, fakeplugin.DeviceUUID(node, m))
		devs = append(devs, fakegpu.DeviceNode("/dev", m))
	}
	Expect(r.Sources.DevFiles).To(ConsistOf(devs), "device nodes in the container (probe: %s)", r.Message)
	Expect(r.Sources.NvidiaSMI).To(ConsistOf(uuids), "nvidia-smi -L in the container (error %q)", r.Sources.NvidiaSMIError)
	Expect(r.Devices).To(ConsistOf(uuids))
	Expect(r.CountedFrom).To(Equal([]string{probe.SourceNvidiaSMI}))
}

// expectSeesNone asserts a container has no GPU device node and no nvidia-smi listing a GPU.
func expectSeesNone(r probe.Report, what string) {
	GinkgoHelper()
	Expect(r.Sources.DevFiles).To(BeEmpty(), "%s has GPU device nodes", what)
	Expect(r.Sources.NvidiaSMI).To(BeEmpty(), "%s: nvidia-smi lists GPUs", what)
	Expect(r.Devices).To(BeEmpty(), "%s sees GPUs: %s", what, r.Message)
}

// minorOf returns the physical index (device minor) of one of node's fake GPU UUIDs.
func minorOf(node, uuid string) int {
	GinkgoHelper()
	for i := range 2 * *devices {
		if fakeplugin.DeviceUUID(node, i) == uuid {
			return i
		}
	}
	Fail(fmt.Sprintf("%s is not a GPU of node %s", uuid, node))
	return -1
}

// claimDevices returns the devices allocated to the pod's generated claim.
func claimDevices(ctx context.Context, pod *corev1.Pod) []string {
	GinkgoHelper()
	Expect(pod.Status.ResourceClaimStatuses).To(HaveLen(1))
	claim, err := cs.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(claim.Status.Allocation).NotTo(BeNil())
	var out []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		out = append(out, r.Device)
	}
	return out
}

func sliceDeviceNames(ctx context.Context, g Gomega, node string) []string {
	list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, s := range list.Items {
		if s.Spec.Driver == localcluster.DRADriverName && s.Spec.NodeName != nil && *s.Spec.NodeName == node {
			for _, d := range s.Spec.Devices {
				out = append(out, d.Name)
			}
		}
	}
	return out
}

// sliceDeviceTaints are the taints ("key=value:Effect") of each device the DRA half publishes for node.
func sliceDeviceTaints(ctx context.Context, g Gomega, node string) map[string][]string {
	list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	out := map[string][]string{}
	for _, s := range list.Items {
		if s.Spec.Driver == localcluster.DRADriverName && s.Spec.NodeName != nil && *s.Spec.NodeName == node {
			for _, d := range s.Spec.Devices {
				out[d.Name] = []string{}
				for _, t := range d.Taints {
					out[d.Name] = append(out[d.Name], fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect))
				}
			}
		}
	}
	return out
}

// xidTaint is the taint the fake's DRA half puts on an unhealthy GPU, with effect.
func xidTaint(effect string) string {
	return fakeplugin.XIDTaintKey(localcluster.DRADriverName) + "=" + fakeplugin.HealthFaultXID + ":" + effect
}

var _ = Describe("The fake GPU agent", func() {
	It("gives a device-plugin container exactly its GPU, its other containers nothing", func(ctx SpecContext) {
		By("the GPU is the container's only device node and the only GPU nvidia-smi lists")
		ns := testNamespace(ctx)
		node := poolNodes(ctx)[0].Name
		pod := podSpec(ns, node, 2)
		withDPGPUs(&pod.Spec.Containers[0])
		pod.Spec.InitContainers = []corev1.Container{*pod.Spec.Containers[1].DeepCopy()}
		pod.Spec.InitContainers[0].Name = "init"
		pod.Spec.InitContainers[0].Command = []string{"/usr/local/bin/gpu-workload", "probe"}
		_, r := runProbes(ctx, pod)
		Expect(r["c0"].Sources.NvidiaSMI).To(HaveLen(1), "probe: %+v", r["c0"])
		m := minorOf(node, r["c0"].Sources.NvidiaSMI[0])
		Expect(m).To(BeNumerically("<", *devices), "the device plugin handed out GPU %d, which belongs to the DRA half", m)
		expectSeesExactly(r["c0"], node, m)
		Expect(r["c0"].Sources.NvidiaVisibleDevices).To(ConsistOf(fakeplugin.DeviceUUID(node, m)))
		expectSeesNone(r["c1"], "a second container without a GPU request")
		expectSeesNone(r["init"], "an init container without a GPU request")
		AddReportEntry("device-plugin container view", r["c0"])
	})

	It("serves nvidia.com/gpu through DRA on a worker without the device plugin", func(ctx SpecContext) {
		dra := draOnlyNodes(ctx)
		if len(dra) == 0 {
			Skip(fmt.Sprintf("no worker carries %s=false (make cluster --dra-only-workers 0)", localcluster.DevicePluginOffLabel))
		}
		node := dra[0]
		By("the node advertises no device-plugin GPU and publishes its GPUs in a ResourceSlice")
		q := node.Status.Allocatable[resourceName]
		Expect(q.Value()).To(BeZero(), "allocatable %s on %s, whose device plugin is off", resourceName, node.Name)
		ns := testNamespace(ctx)
		pod := podSpec(ns, node.Name, 1)
		withDPGPUs(&pod.Spec.Containers[0])
		By("an unchanged nvidia.com/gpu pod gets a claim the scheduler created, and sees exactly its device")
		pod, r := runProbes(ctx, pod)
		ext := pod.Status.ExtendedResourceClaimStatus
		Expect(ext).NotTo(BeNil(), "pod %s has no status.extendedResourceClaimStatus", pod.Name)
		claim, err := cs.ResourceV1().ResourceClaims(ns).Get(ctx, ext.ResourceClaimName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(claim.Status.Allocation).NotTo(BeNil(), "claim %s is not allocated", claim.Name)
		Expect(claim.Status.Allocation.Devices.Results).To(HaveLen(1))
		res := claim.Status.Allocation.Devices.Results[0]
		Expect(res.Driver).To(Equal(localcluster.DRADriverName))
		Expect(r["c0"].Sources.NvidiaSMI).To(HaveLen(1), "probe: %+v", r["c0"])
		m := minorOf(node.Name, r["c0"].Sources.NvidiaSMI[0])
		Expect(m).To(BeNumerically(">=", *devices), "the container got GPU %d, which belongs to the (off) device-plugin half", m)
		expectSeesExactly(r["c0"], node.Name, m)
		AddReportEntry("extended resource through DRA", fmt.Sprintf("claim %s: %s/%s/%s", claim.Name, res.Driver, res.Pool, res.Device))
	})

	It("names Kubernetes v1.37's PreBind defect for a pod asking both ways", func(ctx SpecContext) {
		By("a pod asking for a GPU by claim and by extended resource on a device-plugin node stays unbound")
		class, err := cs.ResourceV1().DeviceClasses().Get(ctx, localcluster.DRADriverName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		if class.Spec.ExtendedResourceName == nil {
			Skip(fmt.Sprintf("DeviceClass %s maps no extended resource (make cluster --dra-only-workers 0)", class.Name))
		}
		v, err := cs.Discovery().ServerVersion()
		Expect(err).NotTo(HaveOccurred())
		if v.Major != "1" || strings.TrimSuffix(v.Minor, "+") != "37" {
			Skip(fmt.Sprintf("the defect is known in Kubernetes v1.37; this cluster runs %s", v.GitVersion))
		}
		ns := testNamespace(ctx)
		node := poolNodes(ctx)[0].Name
		pod := podSpec(ns, node, 1)
		withDPGPUs(&pod.Spec.Containers[0])
		withDRAGPU(ctx, pod)
		By(fmt.Sprintf("a pod on %s (device plugin) with a claim of its own and %s, which DeviceClass %s maps", node, resourceName, class.Name))
		pod = createPod(ctx, pod)
		var res *diagnose.Result
		Eventually(func(g Gomega) {
			r, err := diagnose.Run(ctx, diagnose.Clients{Kube: cs}, diagnose.Target{Kind: "Pod", Namespace: ns, Name: pod.Name})
			g.Expect(err).NotTo(HaveOccurred())
			res = r
			g.Expect(r.Reason).To(Equal(diagnose.KnownDefect), "%s", r)
		}).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		Expect(res.Terminal).To(BeTrue(), "%s", res)
		Expect(strings.Join(res.Messages, "\n")).To(ContainSubstring(`running PreBind plugin "DynamicResources"`), "%s", res)
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(p.Spec.NodeName).To(BeEmpty(), "pod %s was bound to %s", p.Name, p.Spec.NodeName)
		AddReportEntry("diagnosis", res.String())
	})

	It("gives a DRA container exactly its claim's GPU, other containers nothing", func(ctx SpecContext) {
		By("the GPU is the container's only device node and the only GPU nvidia-smi lists")
		ns := testNamespace(ctx)
		node := poolNodes(ctx)[0].Name
		pod := podSpec(ns, node, 2)
		withDRAGPU(ctx, pod)
		pod, r := runProbes(ctx, pod)
		devs := claimDevices(ctx, pod)
		Expect(devs).To(HaveLen(1))
		m := 0
		_, err := fmt.Sscanf(devs[0], "gpu-%d", &m)
		Expect(err).NotTo(HaveOccurred())
		Expect(m).To(BeNumerically(">=", *devices), "the DRA half allocated %s, which belongs to the device plugin", devs[0])
		expectSeesExactly(r["c0"], node, m)
		expectSeesNone(r["c1"], "a container that does not reference the claim")
		AddReportEntry("DRA container view", r["c0"])
	})

	It("shows a pod that asks for no GPU no device node and no nvidia-smi", func(ctx SpecContext) {
		ns := testNamespace(ctx)
		_, r := runProbes(ctx, podSpec(ns, poolNodes(ctx)[0].Name, 1))
		expectSeesNone(r["c0"], "a pod without GPU requests")
		Expect(r["c0"].Sources.NvidiaSMI).To(BeNil(), "nvidia-smi is mounted only into GPU containers")
	})

	It("taints an unhealthy DRA GPU in its slice and lifts the taint on recovery", Serial, func(ctx SpecContext) {
		By("as NVIDIA's DRA driver does on a critical XID; the device keeps its name when it recovers")
		node := poolNodes(ctx)[0].Name
		bad := fakeplugin.DRADeviceName(*devices) // the first GPU of the DRA half
		DeferCleanup(func(ctx SpecContext) { annotateNode(ctx, node, fakeplugin.UnhealthyDevicesAnnotation, nil) })
		start := time.Now()
		annotateNode(ctx, node, fakeplugin.UnhealthyDevicesAnnotation, ptr.To(strconv.Itoa(*devices)))
		Eventually(func(g Gomega) []string { return sliceDeviceTaints(ctx, g, node)[bad] }).WithTimeout(time.Minute).WithPolling(250*time.Millisecond).
			Should(Equal([]string{xidTaint("NoSchedule")}), "unhealthy %s on %s is not tainted as NVIDIA's driver taints a critical XID", bad, node)
		AddReportEntry("DRA unhealthy → tainted", time.Since(start).Round(100*time.Millisecond).String())
		start = time.Now()
		annotateNode(ctx, node, fakeplugin.UnhealthyDevicesAnnotation, nil)
		Eventually(func(g Gomega) []string { return sliceDeviceTaints(ctx, g, node)[bad] }).WithTimeout(time.Minute).WithPolling(250*time.Millisecond).
			Should(BeEmpty(), "recovered %s on %s is still tainted (or gone)", bad, node)
		Expect(sliceDeviceNames(ctx, Default, node)).To(ContainElement(bad), "recovered %s is published under its name", bad)
		AddReportEntry("DRA healthy → untainted", time.Since(start).Round(100*time.Millisecond).String())
	})
})

var _ = Describe("The fake GPU agent's fault modes", Serial, func() {
	var node, ns string
	BeforeEach(func(ctx SpecContext) {
		node = poolNodes(ctx)[0].Name
		ns = testNamespace(ctx)
	})

	It("wrong-ids: a DRA container sees another GPU than its claim's", func(ctx SpecContext) {
		withFault(ctx, node, fakeplugin.FaultWrongIDs)
		pod := podSpec(ns, node, 1)
		withDRAGPU(ctx, pod)
		pod, r := runProbes(ctx, pod)
		devs := claimDevices(ctx, pod)
		var m int
		_, _ = fmt.Sscanf(devs[0], "gpu-%d", &m)
		Expect(r["c0"].Devices).To(HaveLen(1))
		Expect(r["c0"].Devices[0]).NotTo(Equal(fakeplugin.DeviceUUID(node, m)), "under wrong-ids the container saw its own GPU")
	})

	It("over-advertise: the node advertises one GPU more than it has", func(ctx SpecContext) {
		// Registered first, so it runs after withFault's cleanup has switched the fault off (LIFO).
		DeferCleanup(func(ctx SpecContext) {
			Eventually(func() int64 { return allocatable(ctx, node) }).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(BeEquivalentTo(*devices))
		})
		withFault(ctx, node, fakeplugin.FaultOverAdvertise)
		Eventually(func() int64 { return allocatable(ctx, node) }).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(BeEquivalentTo(*devices + 1))
	})

	It("double-allocate: two pods running side by side see the same GPU", func(ctx SpecContext) {
		withFault(ctx, node, fakeplugin.FaultDoubleAllocate)
		a := podSpec(ns, node, 1)
		withDPGPUs(&a.Spec.Containers[0])
		_, ra := runProbes(ctx, a)
		b := podSpec(ns, node, 1)
		withDPGPUs(&b.Spec.Containers[0])
		_, rb := runProbes(ctx, b)
		Expect(rb["c0"].Devices).To(Equal(ra["c0"].Devices), "under double-allocate the second pod got its own GPU")
	})

	It("ignore-health: a GPU marked unhealthy stays advertised", func(ctx SpecContext) {
		withFault(ctx, node, fakeplugin.FaultIgnoreHealth)
		DeferCleanup(func(ctx SpecContext) { annotateNode(ctx, node, fakeplugin.UnhealthyDevicesAnnotation, nil) })
		start := time.Now()
		annotateNode(ctx, node, fakeplugin.UnhealthyDevicesAnnotation, ptr.To(fmt.Sprintf("0,%d", *devices)))
		waitAgentLogged(ctx, node, start, "device health changed", "index=0")
		Consistently(func(g Gomega) {
			g.Expect(allocatable(ctx, node)).To(BeEquivalentTo(*devices))
			g.Expect(sliceDeviceTaints(ctx, g, node)).To(HaveKeyWithValue(fakeplugin.DRADeviceName(*devices), BeEmpty()))
		}).WithTimeout(15 * time.Second).WithPolling(time.Second).Should(Succeed())
	})

	It("dra-xid-ignored: an unhealthy DRA GPU stays allocatable (taint effect None)", func(ctx SpecContext) {
		withFault(ctx, node, fakeplugin.FaultDRAXIDIgnored)
		DeferCleanup(func(ctx SpecContext) { annotateNode(ctx, node, fakeplugin.UnhealthyDevicesAnnotation, nil) })
		bad := fakeplugin.DRADeviceName(*devices)
		annotateNode(ctx, node, fakeplugin.UnhealthyDevicesAnnotation, ptr.To(strconv.Itoa(*devices)))
		Eventually(func(g Gomega) []string { return sliceDeviceTaints(ctx, g, node)[bad] }).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).
			Should(Equal([]string{xidTaint("None")}))
	})

	It("leak-all: a container that asked for no GPU sees every GPU of the node", func(ctx SpecContext) {
		withFault(ctx, node, fakeplugin.FaultLeakAll)
		_, r := runProbes(ctx, podSpec(ns, node, 1))
		Expect(r["c0"].Devices).To(HaveLen(2**devices), "probe: %s", r["c0"].Message)
		Expect(r["c0"].Sources.NvidiaVisibleDevices).To(Equal([]string{"all"}))
	})

	It("dra-prepare-fail: a DRA pod never starts; the kubelet reports the prepare", func(ctx SpecContext) {
		withFault(ctx, node, fakeplugin.FaultDRAPrepareFail)
		pod := podSpec(ns, node, 1)
		withDRAGPU(ctx, pod)
		pod = createPod(ctx, pod)
		Eventually(func(g Gomega) {
			evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(evs.Items).To(ContainElement(And(
				HaveField("Reason", "FailedPrepareDynamicResources"),
				HaveField("Message", ContainSubstring(string(fakeplugin.FaultDRAPrepareFail))))))
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		p, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(p.Status.Phase).To(Equal(corev1.PodPending))
	})

	It("phantom-slice-device: the ResourceSlice publishes a GPU the node does not have", func(ctx SpecContext) {
		phantom := fakeplugin.DRADeviceName(2 * *devices)
		DeferCleanup(func(ctx SpecContext) {
			Eventually(func(g Gomega) []string { return sliceDeviceNames(ctx, g, node) }).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).
				ShouldNot(ContainElement(phantom))
		})
		withFault(ctx, node, fakeplugin.FaultPhantomSliceDevice)
		Eventually(func(g Gomega) []string { return sliceDeviceNames(ctx, g, node) }).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).
			Should(ContainElement(phantom))
	})

	It("driver-mismatch: nvidia-smi's driver version differs from the node's", func(ctx SpecContext) {
		By("with the fault on, a GPU pod's nvidia-smi prints another driver version than its node advertises; with it off, the same")
		// What the node advertises: the GFD label, and the driverVersion attribute of its DRA devices.
		advertised := func() (label string, attrs []string) {
			GinkgoHelper()
			n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(n.Labels).To(HaveKey(fakeplugin.LabelDriverFull), "node %s", node)
			list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
			Expect(err).NotTo(HaveOccurred())
			for _, s := range list.Items {
				if s.Spec.Driver != localcluster.DRADriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
					continue
				}
				for _, d := range s.Spec.Devices {
					if v := d.Attributes["driverVersion"].VersionValue; v != nil {
						attrs = append(attrs, *v)
					}
				}
			}
			Expect(attrs).NotTo(BeEmpty(), "no driverVersion attribute in the slices of %s", node)
			return n.Labels[fakeplugin.LabelDriverFull], attrs
		}
		// The driver version nvidia-smi prints in a new pod holding one device-plugin GPU of the node.
		printed := func() string {
			GinkgoHelper()
			pod := podSpec(ns, node, 1)
			withDPGPUs(&pod.Spec.Containers[0])
			_, r := runProbes(ctx, pod)
			Expect(r["c0"].DriverVersion).NotTo(BeEmpty(), "no driver version from nvidia-smi (version_error %q, nvidia_smi_error %q)",
				r["c0"].VersionError, r["c0"].Sources.NvidiaSMIError)
			return r["c0"].DriverVersion
		}

		label, attrs := advertised()
		Expect(printed()).To(Equal(label), "without the fault nvidia-smi must print the driver version of the node's label")

		mismatched := fakeplugin.MismatchedDriverVersion(label)
		start := time.Now()
		withFault(ctx, node, fakeplugin.FaultDriverMismatch)
		waitAgentLogged(ctx, node, start, fakeplugin.LogInventoryWritten, "driver_version="+mismatched)
		Expect(printed()).To(And(Equal(mismatched), Not(Equal(label))), "under driver-mismatch nvidia-smi must print another driver version than the label's %s", label)
		labelNow, attrsNow := advertised()
		Expect(labelNow).To(Equal(label), "driver-mismatch must leave the node's label alone")
		Expect(attrsNow).To(ConsistOf(attrs), "driver-mismatch must leave the slice's driverVersion alone")
	})

	It("missing-nvidia-smi: GPU containers get their device nodes, no nvidia-smi", func(ctx SpecContext) {
		start := time.Now()
		withFault(ctx, node, fakeplugin.FaultMissingNvidiaSMI)
		waitAgentLogged(ctx, node, start, fakeplugin.LogCDISpecWritten, "nvidia_smi=false")
		// One pod per path: Kubernetes v1.37.2's scheduler does not bind a pod that has a ResourceClaim and a
		// device plugin's nvidia.com/gpu on a device-plugin node while a DeviceClass maps nvidia.com/gpu (the
		// local cluster's DRA-only worker): PreBind fails with "nil or empty request mappings, no update of
		// pod … ExtendedResourceClaimStatus" on every attempt.
		dp, dra := podSpec(ns, node, 1), podSpec(ns, node, 1)
		withDPGPUs(&dp.Spec.Containers[0])
		withDRAGPU(ctx, dra)
		for path, pod := range map[string]*corev1.Pod{"device plugin": dp, "DRA": dra} {
			_, r := runProbes(ctx, pod)
			Expect(r["c0"].Sources.DevFiles).To(HaveLen(1), "the %s container under missing-nvidia-smi must keep its GPU's device node", path)
			Expect(r["c0"].Sources.NvidiaSMI).To(BeNil(), "the %s container under missing-nvidia-smi must have no nvidia-smi on PATH (nvidia_smi_error %q)", path, r["c0"].Sources.NvidiaSMIError)
		}
	})

	// heldGPUOnMetrics runs a pod holding one device-plugin GPU on node and returns a check of the fake
	// exporter's samples for it, after the exporter attributes it correctly without a fault.
	heldGPUOnMetrics := func(ctx context.Context) (string, func() error) {
		exporter := accelmetrics.Endpoint{Kind: config.MetricsService, Namespace: localcluster.SystemNamespace, Name: "fake-dcgm-exporter"}
		pod := podSpec(ns, node, 1)
		withDPGPUs(&pod.Spec.Containers[0])
		pod, r := runProbes(ctx, pod)
		holder := accelmetrics.Holder{Namespace: ns, Pod: pod.Name, Node: node, Devices: r["c0"].Devices}
		check := func() error {
			scrape, err := accelmetrics.Read(ctx, cs, exporter, node)
			if err != nil {
				return err
			}
			_, err = accelmetrics.Check(scrape.Samples, holder)
			return err
		}
		Eventually(check).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed(), "without a fault the exporter must attribute %v to %s", holder.Devices, pod.Name)
		return pod.Name, check
	}

	It("metrics-missing-device: the exporter drops the GPU a pod holds", func(ctx SpecContext) {
		_, check := heldGPUOnMetrics(ctx)
		withFault(ctx, node, fakeplugin.FaultMetricsMissingDevice)
		Expect(check()).To(MatchError(ContainSubstring("has no DCGM_FI_DEV_GPU_UTIL and no DCGM_FI_DEV_FB_USED sample")))
	})

	It("metrics-wrong-pod: the exporter attributes the GPU a pod holds to another pod", func(ctx SpecContext) {
		name, check := heldGPUOnMetrics(ctx)
		withFault(ctx, node, fakeplugin.FaultMetricsWrongPod)
		Expect(check()).To(MatchError(ContainSubstring("is attributed to " + ns + "/" + name + fakeplugin.MetricsWrongPodSuffix)))
	})

	It("no-reregister: after a kubelet restart the node's GPUs disappear", func(ctx SpecContext) {
		By("the device plugin does not register again")
		// The agent publishes the node's DRA devices too; the node is whole again only when both paths are
		// back, or a run started right after this suite (make e2e) finds the DRA path on one node fewer.
		draDevices := sliceDeviceNames(ctx, Default, node)
		Expect(draDevices).NotTo(BeEmpty(), "node %s publishes no %s devices before the fault", node, localcluster.DRADriverName)
		DeferCleanup(func(ctx SpecContext) {
			// The plugin process sits the fault out; restarting its pod (as an operator would) brings it back.
			start := time.Now()
			Eventually(func(g Gomega) {
				p := agentPod(ctx, g, node)
				g.Expect(cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})).To(Succeed())
			}).WithTimeout(time.Minute).Should(Succeed())
			waitPluginServing(ctx, node, start)
			Eventually(func() int64 { return allocatable(ctx, node) }).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(BeEquivalentTo(*devices))
			Eventually(func(g Gomega) {
				g.Expect(sliceDeviceNames(ctx, g, node)).To(ConsistOf(draDevices))
			}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Succeed(), "the DRA devices of %s must be published again", node)
		})
		withFault(ctx, node, fakeplugin.FaultNoReregister)
		start := time.Now()
		out, err := exec.CommandContext(ctx, "docker", "exec", node, "systemctl", "restart", "kubelet").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "restart kubelet on %s: %s", node, out)
		waitAgentLogged(ctx, node, start, "will not register again")
		// The restarted kubelet keeps no capacity for a resource whose plugin never registered again.
		Eventually(func() int64 { return allocatable(ctx, node) }).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(BeEquivalentTo(0))
		AddReportEntry("kubelet restart → GPUs gone", time.Since(start).Round(100*time.Millisecond).String())
	})
})
