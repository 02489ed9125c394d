package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/diagnose"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/testenv"
)

// holdFor keeps probe pods (and their devices) alive while the suite compares them; they are deleted
// with the spec's namespace long before.
const holdFor = "30m"

// fillNode fills the eligible node with the most free devices: on a shared cluster other workloads hold
// some, and only the free ones can be handed out to the suite's pods.
func fillNode(ctx context.Context, env *testenv.Env, path gpu.Path, ns string, candidates []string) {
	node, n, held := freestNode(ctx, env, path, candidates)
	switch {
	case n == 0 && held == "":
		// Nothing free and nobody holding anything is not "busy": the devices cannot be handed out.
		ginkgo.Fail(fmt.Sprintf("no device of the eligible nodes %v is free on the %s path, and no workload holds one: the advertised devices cannot be allocated (capacity now: %v)",
			candidates, path.Name(), path.Capacity()))
	case n == 0:
		ginkgo.AddReportEntry("not exercised: filling a node", fmt.Sprintf("every device of the eligible nodes %v is held by other workloads (%s)", candidates, held))
		return
	}
	if held != "" {
		ginkgo.AddReportEntry("devices of "+node+" held by other workloads", held)
	}
	ginkgo.By(fmt.Sprintf("starting %d one-device pods on %s, which has %d free devices on the %s path", n, node, n, path.Name()))
	var names []string
	for i := range n {
		w := env.Factory.GPUPod(fmt.Sprintf("fill-%d", i), ns).Path(path).Devices(1).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...).OnNodes(node)
		pod := w.Obj()
		for _, pre := range w.Prerequisites() {
			env.Create(ctx, pre)
		}
		env.Create(ctx, pod)
		names = append(names, pod.Name)
	}
	// What the node's labels allow: on a time-sliced node distinct replicas of one GPU go to different pods.
	nodeObj, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading node %s's sharing labels", node)
	sharing := gpu.SharingFor(path, nodeObj.Labels)
	var holdings []gpu.Holding
	var union []string
	reports, allocations := runningProbes(ctx, env, path, ns, names)
	for i, name := range names {
		report, given := reports[i], allocations[i]
		h := gpu.Holding{Pod: name, Seen: report.Devices}
		if given.CountOnly {
			ginkgo.AddReportEntry("not exercised: device identity check", given.Note)
		} else {
			expectSameDevices(report, given)
			h.Allocated, h.Seen = given.Allocated(), given.Normalize(report.Devices)
		}
		gomega.Expect(report.Devices).To(gomega.HaveLen(1), "pod %s asked for 1 device and sees %s (%s)", name, gpu.FormatDevices(report.Devices), report.Message)
		holdings = append(holdings, h)
		if err := gpu.CheckExclusive(node, sharing, holdings); err != nil {
			ginkgo.Fail(err.Error())
		}
		union = append(union, cmp.Or(strings.Join(h.Allocated, " "), report.Devices[0]))
	}
	ginkgo.AddReportEntry("evidence: devices of "+node+" ("+sharing.String()+"), one pod each", strings.Join(union, " "))

	ginkgo.By("asking for one more device on the full node")
	want := expectation{stage: diagnose.StageScheduling, layer: diagnose.LayerScheduler, reason: diagnose.InsufficientDevice,
		messages: []string{"Insufficient " + string(path.QuotaResource())}}
	if path.ClaimBased() {
		want = expectation{stage: diagnose.StageScheduling, layer: diagnose.LayerDRA, reason: diagnose.DRAAllocationFailed,
			messages: []string{"cannot allocate all claims"}}
	}
	pendingPodDiagnosed(ctx, env, env.Factory.GPUPod("one-more", ns).Path(path).Devices(1).Args(fixtures.ProbeArgs(1)...).OnNodes(node), want)
}

// runningProbes waits for each probe pod to run and report, then reads what each was given from the path's
// authority, all at once (gpu.GivenAll: one kubelet reader per node on the device-plugin path).
func runningProbes(ctx context.Context, env *testenv.Env, path gpu.Path, ns string, names []string) ([]gpu.ProbeReport, []gpu.Allocation) {
	ginkgo.GinkgoHelper()
	reports := make([]gpu.ProbeReport, len(names))
	ins := make([]gpu.GivenInput, len(names))
	for i, name := range names {
		pod := pods.ExpectPodRunning(ctx, env, ns, name)
		reports[i] = pods.ExpectProbeReport(ctx, env, ns, name)
		ins[i] = givenInput(env, pod, nil)
	}
	given, err := gpu.GivenAll(ctx, path, ins)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the allocations of pods %v from %s", names, path.Authority())
	return reports, given
}

// freestNode returns the candidate with the most free devices on path now (advertised minus held by
// other workloads), how many, and who holds the rest. When what others hold cannot be read (team RBAC
// reads no other namespace), the advertised devices from discovery count as free and the report says so.
func freestNode(ctx context.Context, env *testenv.Env, path gpu.Path, candidates []string) (string, int, string) {
	usage, err := gpu.InUse(ctx, env.Clients.Kube, path, candidates...)
	if err != nil {
		usage = map[string]gpu.Usage{}
		for _, n := range candidates {
			usage[n] = gpu.Usage{Capacity: path.Capacity()[n]}
		}
	}
	best, bestFree := candidates[0], int64(-1)
	for _, n := range candidates {
		if f := usage[n].Free(); f > bestFree {
			best, bestFree = n, f
		}
	}
	held := ""
	switch u := usage[best]; {
	case err != nil:
		held = fmt.Sprintf("not read: %v; every advertised device counted as free", err)
	case u.Devices > 0:
		held = fmt.Sprintf("%d device(s) held by %s", u.Devices, strings.Join(u.Holders, ", "))
	}
	return best, int(bestFree), held
}

func isolation(ctx context.Context, env *testenv.Env, path gpu.Path, ns, node string) {
	ginkgo.By(fmt.Sprintf("starting a one-device pod with a second container and an init container, and a pod without devices, on %s", node))
	w := env.Factory.GPUPod("isolated", ns).Path(path).Devices(1).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...).OnNodes(node).
		SidecarProbe("sidecar", holdFor).InitProbe("init")
	pod := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	env.Create(ctx, pod)
	neighbour := env.Factory.GPUPod("neighbour", ns).Args(append(fixtures.ProbeArgs(0), "--hold", holdFor)...).OnNodes(node).Obj()
	env.Create(ctx, neighbour)

	running := pods.ExpectPodRunning(ctx, env, ns, pod.Name)
	report := pods.ExpectProbeReport(ctx, env, ns, pod.Name)
	gomega.Expect(report.Devices).To(gomega.HaveLen(1), "the GPU container asked for 1 device and sees %s (%s)", gpu.FormatDevices(report.Devices), report.Message)
	given, err := path.Given(ctx, givenInput(env, running, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	if !given.CountOnly {
		expectSameDevices(report, given)
	}
	for _, c := range []struct{ pod, container, what string }{
		{pod.Name, "sidecar", "the GPU pod's second container, which asked for no device"},
		{pod.Name, "init", "the GPU pod's init container, which asked for no device"},
		{neighbour.Name, fixtures.WorkloadContainer, "a pod beside it on " + node + " that asked for no device"},
	} {
		r := pods.ExpectContainerProbeReport(ctx, env, ns, c.pod, c.container)
		gomega.Expect(r.Devices).To(gomega.BeEmpty(), "%s sees %s (device nodes %v, nvidia-smi %v)", c.what, gpu.FormatDevices(r.Devices), r.Sources.DevFiles, r.Sources.NvidiaSMI)
		gomega.Expect(r.Sources.DevFiles).To(gomega.BeEmpty(), "%s has GPU device nodes", c.what)
		evidenceSeen(c.what, r)
	}
}
