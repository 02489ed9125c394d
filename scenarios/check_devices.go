package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/wait"
)

func runningPodSeesGivenDevices(ctx context.Context, env *testenv.Env, path gpu.Path, ns string, n int, nodes []string) {
	// RestartAlways keeps the pod active after the probe exits, so the kubelet still reports its devices.
	w := env.Factory.GPUPod(fmt.Sprintf("held-%d", n), ns).Path(path).Devices(n).Args(fixtures.ProbeArgs(n)...).RestartAlways().OnNodes(nodes...)
	podObj := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	env.Create(ctx, podObj)

	pod := pods.ExpectPodRunning(ctx, env, ns, podObj.Name)
	report := pods.ExpectProbeReport(ctx, env, ns, pod.Name)

	ginkgo.By(fmt.Sprintf("asking %s which devices it allocated", path.Authority()))
	given, err := path.Given(ctx, givenInput(env, pod, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the pod's allocation from %s", path.Authority())
	gomega.Expect(given.Node).To(gomega.Equal(pod.Spec.NodeName))
	if given.CountOnly {
		ginkgo.AddReportEntry("not exercised: device identity check", given.Note)
		gomega.Expect(report.Devices).To(gomega.HaveLen(given.Count), "container saw %s but %s", gpu.FormatDevices(report.Devices), given.Note)
	} else {
		expectSameDevices(report, given)
		ginkgo.AddReportEntry("evidence: allocated by "+path.Authority(), strings.Join(given.Allocated(), " "))
	}
	evidenceSeen(fmt.Sprintf("a pod that asked for %s", plural(n)), report)
	if dra, ok := path.(gpu.SliceChecker); ok {
		gomega.Expect(dra.CheckFromNodeSlices(ctx, env.Clients.Kube, given)).To(gomega.Succeed())
		for _, c := range given.Claims {
			gomega.Expect(c.ReservedFor).To(gomega.ContainElement(string(pod.UID)), "claim %s is not reserved for the running pod %s", c.Name, pod.Name)
		}
	}

	ginkgo.By("deleting the pod and waiting for its devices to be released")
	gomega.Expect(env.Clients.Kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})).To(gomega.Succeed())
	env.Wait.For(ctx, fmt.Sprintf("pod %s/%s to be gone", ns, pod.Name), wait.Target{Kind: "Pod", Namespace: ns, Name: pod.Name}, env.Timeouts.Release, func(g gomega.Gomega) {
		_, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "pod still exists (err=%v)", err)
	})
	expectClaimsReleased(ctx, env, ns, pod, given.Claims)
}

// expectClaimsReleased waits until each generated claim is deleted or no longer reserved for the pod.
func expectClaimsReleased(ctx context.Context, env *testenv.Env, ns string, pod *corev1.Pod, claims []gpu.ClaimInfo) {
	ginkgo.GinkgoHelper()
	for _, c := range claims {
		env.Wait.For(ctx, fmt.Sprintf("ResourceClaim %s/%s to be released by pod %s", ns, c.Name, pod.Name), wait.Target{Kind: "Pod", Namespace: ns, Name: pod.Name},
			env.Timeouts.Release, func(g gomega.Gomega) {
				claim, err := env.Clients.Kube.ResourceV1().ResourceClaims(ns).Get(ctx, c.Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return
				}
				g.Expect(err).NotTo(gomega.HaveOccurred())
				for _, r := range claim.Status.ReservedFor {
					g.Expect(string(r.UID)).NotTo(gomega.Equal(string(pod.UID)), "claim %s is still reserved for pod %s", c.Name, pod.Name)
				}
			})
	}
}

// expectSameDevices compares what the container saw with what the path's authority allocated: at the
// physical level when it handed out time-slicing or MPS replicas, which the report then records.
func expectSameDevices(report gpu.ProbeReport, given gpu.Allocation) {
	ginkgo.GinkgoHelper()
	if given.Replicas != nil {
		ginkgo.AddReportEntry(gpu.ReplicasEntry, gpu.ReplicaObservation{Node: given.Node, IDs: given.Replicas})
	}
	if err := given.CheckSeen(report.Devices); err != nil {
		ginkgo.Fail(fmt.Sprintf("%v (node %s; probe: %s)", err, given.Node, report.Message))
	}
	if report.Node != "" {
		gomega.Expect(report.Node).To(gomega.Equal(given.Node), "the probe ran on %s but the devices were allocated on %s", report.Node, given.Node)
	}
}

func givenInput(env *testenv.Env, pod *corev1.Pod, rec *gpu.ClaimRecorder) gpu.GivenInput {
	return gpu.GivenInput{
		Kube: env.Clients.Kube, Pod: pod, Container: fixtures.WorkloadContainer, Factory: env.Factory, Claims: rec,
		HelperTimeout: env.Timeouts.HelperPod, HelperNamespace: env.HelperNamespace,
	}
}

func eligibleNodes(p gpu.Path, n int, pool []string) []string {
	var out []string
	for _, node := range gpu.NodesWithAtLeast(p, int64(n)) {
		if len(pool) == 0 || slices.Contains(pool, node) {
			out = append(out, node)
		}
	}
	return out
}

func plural(n int) string {
	if n == 1 {
		return "1 device"
	}
	return fmt.Sprintf("%d devices", n)
}

// evidenceSeen records, for the conformance evidence, what a container saw and from which sources: the
// device nodes, nvidia-smi's list and the runtime's environment, so "no device" reads as the absence of
// each, never as a tool that was missing.
func evidenceSeen(what string, r gpu.ProbeReport) {
	smi := strings.Join(r.Sources.NvidiaSMI, " ")
	switch {
	case r.Sources.NvidiaSMIError != "":
		smi = "failed: " + r.Sources.NvidiaSMIError
	case r.Sources.NvidiaSMI == nil:
		smi = "not in the container"
	case smi == "":
		smi = "lists none"
	}
	ginkgo.AddReportEntry("evidence: "+what, fmt.Sprintf("pod %s on %s sees %s; device nodes %s; nvidia-smi %s; NVIDIA_VISIBLE_DEVICES %s",
		cmp.Or(r.Pod, "?"), cmp.Or(r.Node, "?"), listOrNone(r.Devices), listOrNone(r.Sources.DevFiles), smi, listOrNone(r.Sources.NvidiaVisibleDevices)))
}

// listOrNone is a list for the evidence, "none" when empty.
func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return "[" + strings.Join(l, " ") + "]"
}
