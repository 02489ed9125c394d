package scenarios

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/diagnose"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/testenv"
)

// migDeviceClass is the DeviceClass of NVIDIA's DRA driver that selects MIG partitions (type == 'mig'),
// beside gpu.nvidia.com, which selects whole GPUs only.
const migDeviceClass = "mig.nvidia.com"

// fillParentWithPartitions fills one free parent GPU with claims for one profile's partitions: as many as
// its published counters let run together (capacity against consumption), each seeing one distinct MIG
// device of that parent, their counters never over capacity; one more then waits.
func fillParentWithPartitions[I scenarioInput](ctx context.Context, s *Spec[I], m cluster.NodeSharingMode) {
	env, ns, node := s.Env, s.NS, m.Node
	dra := draOf(s)
	expectDeviceClass(ctx, env, migDeviceClass)
	parent := freeParent(ctx, env, dra, m, false)
	plan, err := planPartitions(parent, maxPartitionPods)
	if err != nil {
		ginkgo.Fail(err.Error())
	}
	domain := driverDomain(dra)
	selector := attributeIs(domain, "parentUUID", parent.UUID) + " && " + attributeIs(domain, "profile", plan.Profile)
	template := func(name string) *fixtures.GPUPodWrapper {
		tmpl := env.Factory.ResourceClaimTemplate(name+"-gpus", ns).ExactCount(gpu.DRAClaimName, migDeviceClass, 1).Selector(gpu.DRAClaimName, selector).Obj()
		return env.Factory.GPUPod(name, ns).ClaimTemplate(gpu.DRAClaimName, tmpl).OnNodes(node)
	}

	ginkgo.By(fmt.Sprintf("claiming %d %s partitions of GPU %s, as many as counter set %s allows together (e.g. %s)",
		plan.Count, plan.Profile, parent.UUID, parent.CounterSet, strings.Join(plan.Devices, ", ")))
	var names []string
	for i := range plan.Count {
		names = append(names, createPod(ctx, s, template(fmt.Sprintf("part-%d", i)).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...)))
	}
	var migs []migHolding
	for _, name := range names {
		pod := pods.ExpectPodRunning(ctx, env, ns, name)
		report := pods.ExpectProbeReport(ctx, env, ns, name)
		given, err := s.Path.Given(ctx, givenInput(env, pod, nil))
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading pod %s's allocation from its ResourceClaim", name)
		expectSameDevices(report, given)
		gomega.Expect(given.Devices).To(gomega.HaveLen(1), "pod %s claimed one partition and was allocated %s", name, gpu.FormatDevices(given.Devices))
		h, err := checkMIGSeen(name, report.MIGDevices, given.Devices[0], plan.Profile, parent.UUID)
		if err != nil {
			ginkgo.Fail(err.Error())
		}
		migs = append(migs, h)
		ginkgo.AddReportEntry(gpu.SharingObservedEntry, migObservation(node, s.Path.Name(), m.Mode, h))
	}
	if err := checkMIGParents(node, nil, migs); err != nil {
		ginkgo.Fail(err.Error())
	}

	ginkgo.By(fmt.Sprintf("adding up the counters of every device of GPU %s now allocated", parent.UUID))
	held, err := heldDevices(ctx, env, dra, node)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the ResourceClaims allocated from %s's pools", node)
	gomega.Expect(held).NotTo(gomega.HaveKey(parent.Whole), "GPU %s is allocated whole (claim %s) while its partitions run", parent.UUID, held[parent.Whole])
	var allocated []cluster.PartitionDevice
	for _, d := range parent.Partitions {
		if _, ok := held[d.Name]; ok {
			allocated = append(allocated, d)
		}
	}
	gomega.Expect(len(allocated)).To(gomega.BeNumerically(">=", plan.Count), "the claims of the running pods hold %d of GPU %s's partitions, want %d", len(allocated), parent.UUID, plan.Count)
	if err := counterOverrun(parent.Counters, allocated); err != nil {
		ginkgo.Fail(fmt.Sprintf("GPU %s (counter set %s): %v: partitions that overlap were handed out together", parent.UUID, parent.CounterSet, err))
	}

	ginkgo.By(fmt.Sprintf("claiming one more %s partition of GPU %s", plan.Profile, parent.UUID))
	pendingPodDiagnosed(ctx, env, template("part-more").Args(fixtures.ProbeArgs(1)...), expectation{
		stage: diagnose.StageScheduling, layer: diagnose.LayerDRA, reason: diagnose.DRAAllocationFailed,
		messages: []string{"cannot allocate all claims"},
		bound: func(ctx context.Context, pod *corev1.Pod) string {
			return fmt.Sprintf("GPU %s's counters allow %d %s partitions together, and partition %s was handed out beside them", parent.UUID, plan.Count, plan.Profile, claimedDevices(ctx, env, pod))
		}})
}

func draOf[I scenarioInput](s *Spec[I]) *gpu.DRA {
	ginkgo.GinkgoHelper()
	dra, ok := s.Path.(*gpu.DRA)
	gomega.Expect(ok).To(gomega.BeTrue(), "partitions are DRA devices; the %s path is not DRA", s.Path.Name())
	return dra
}

// driverDomain is the domain the DRA driver's unqualified attributes live in, as a CEL selector names them
// (device.attributes['gpu.nvidia.com'].uuid).
func driverDomain(dra *gpu.DRA) string { return strings.Split(dra.Driver, ",")[0] }

// attributeIs is a CEL selector on one string attribute of the driver's domain.
func attributeIs(domain, attribute, value string) string {
	return fmt.Sprintf("device.attributes['%s'].%s == '%s'", domain, attribute, value)
}

// expectDeviceClass fails, saying what to install, when the cluster lacks the DeviceClass: a claim for it
// would wait for a class that does not exist, which is not the wait the check is about.
func expectDeviceClass(ctx context.Context, env *testenv.Env, name string) {
	ginkgo.GinkgoHelper()
	_, err := env.Clients.Kube.ResourceV1().DeviceClasses().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		ginkgo.Fail(fmt.Sprintf("the node publishes partitions but the cluster has no DeviceClass %s to claim them with; install NVIDIA's DRA driver's class (selecting type == 'mig')", name))
	}
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading DeviceClass %s", name)
}

// freeParent is the first partitionable GPU of the node none of whose devices a claim holds now (with its
// whole device published when needWhole). When the claims cannot be read (team RBAC), the first one is
// taken and the report says so.
func freeParent(ctx context.Context, env *testenv.Env, dra *gpu.DRA, m cluster.NodeSharingMode, needWhole bool) cluster.PartitionableGPU {
	ginkgo.GinkgoHelper()
	held, err := heldDevices(ctx, env, dra, m.Node)
	if err != nil {
		ginkgo.AddReportEntry("partitions of "+m.Node+" held by others", fmt.Sprintf("not read: %v; the first parent GPU is taken as free", err))
		held = map[string]string{}
	}
	var busy []string
	for _, g := range m.Partitions {
		if needWhole && g.Whole == "" {
			continue
		}
		names := []string{g.Whole}
		for _, d := range g.Partitions {
			names = append(names, d.Name)
		}
		holders := map[string]bool{}
		for _, n := range names {
			if c, ok := held[n]; ok && n != "" {
				holders[c] = true
			}
		}
		if len(holders) == 0 {
			return g
		}
		busy = append(busy, fmt.Sprintf("%s (held by %s)", g.UUID, strings.Join(slices.Sorted(maps.Keys(holders)), ", ")))
	}
	ginkgo.Fail(fmt.Sprintf("no partitionable GPU of %s is free: %s; free one, or run where one is", m.Node, strings.Join(busy, "; ")))
	return cluster.PartitionableGPU{}
}

// heldDevices maps each device of the node's pools (of the DRA path's drivers) that a ResourceClaim holds
// to that claim (namespace/name).
func heldDevices(ctx context.Context, env *testenv.Env, dra *gpu.DRA, node string) (map[string]string, error) {
	kube := env.Clients.Kube
	drivers := strings.Split(dra.Driver, ",")
	list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	pools := map[string]bool{}
	for _, sl := range list.Items {
		if slices.Contains(drivers, sl.Spec.Driver) && sl.Spec.NodeName != nil && *sl.Spec.NodeName == node {
			pools[sl.Spec.Driver+"/"+sl.Spec.Pool.Name] = true
		}
	}
	claims, err := kube.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	out := map[string]string{}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if pools[r.Driver+"/"+r.Pool] {
				out[r.Device] = c.Namespace + "/" + c.Name
			}
		}
	}
	return out, nil
}

// claimedDevices names the devices a bound pod's claims were allocated, for the message that says they
// should not have been.
func claimedDevices(ctx context.Context, env *testenv.Env, pod *corev1.Pod) string {
	// The pod handed in may be the diagnosis's snapshot, older than the claim controller's status update
	// that names its generated claim: read it again.
	if fresh, err := env.Clients.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
		pod = fresh
	}
	var out, why []string
	names := gpu.ClaimNames(pod)
	for _, name := range names {
		c, err := env.Clients.Kube.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			why = append(why, fmt.Sprintf("reading ResourceClaim %s: %v", name, err))
			continue
		case c.Status.Allocation == nil:
			why = append(why, "ResourceClaim "+name+" has no allocation")
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			out = append(out, r.Pool+"/"+r.Device)
		}
	}
	if len(names) == 0 {
		why = append(why, fmt.Sprintf("pod %s names no generated ResourceClaim in its status (%d claim statuses)", pod.Name, len(pod.Status.ResourceClaimStatuses)))
	}
	if len(out) == 0 {
		return "(its claim's allocation could not be read: " + strings.Join(why, "; ") + ")"
	}
	return strings.Join(out, ", ")
}

// maxPartitionPods bounds the pods one parent GPU is filled with: enough to show the counters at work
// (three 2g.20gb on an H100), few enough for a spec of a few minutes.
const maxPartitionPods = 4

// partitionBesideWhole: a claim for one parent's whole GPU runs; a claim for a partition of that parent must
// then wait, since the whole device consumes every counter the partitions need.
func partitionBesideWhole[I scenarioInput](ctx context.Context, s *Spec[I], m cluster.NodeSharingMode) {
	env, ns, node := s.Env, s.NS, m.Node
	dra := draOf(s)
	expectDeviceClass(ctx, env, migDeviceClass)
	parent := freeParent(ctx, env, dra, m, true)
	domain := driverDomain(dra)

	ginkgo.By(fmt.Sprintf("running a pod that claims GPU %s (%s) whole", parent.UUID, parent.Whole))
	wholeTmpl := env.Factory.ResourceClaimTemplate("whole-gpus", ns).ExactCount(gpu.DRAClaimName, dra.DeviceClass, 1).
		Selector(gpu.DRAClaimName, attributeIs(domain, "uuid", parent.UUID)).Obj()
	name := createPod(ctx, s, env.Factory.GPUPod("whole", ns).ClaimTemplate(gpu.DRAClaimName, wholeTmpl).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...).OnNodes(node))
	pod := pods.ExpectPodRunning(ctx, env, ns, name)
	report := pods.ExpectProbeReport(ctx, env, ns, name)
	given, err := s.Path.Given(ctx, givenInput(env, pod, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading pod %s's allocation from its ResourceClaim", name)
	expectSameDevices(report, given)
	gomega.Expect(given.Devices).To(gomega.Equal([]string{parent.UUID}), "pod %s claimed GPU %s by its uuid and was allocated %s", name, parent.UUID, gpu.FormatDevices(given.Devices))
	gomega.Expect(report.MIGDevices).To(gomega.BeEmpty(), "pod %s claimed GPU %s whole and its nvidia-smi lists MIG devices", name, parent.UUID)
	ginkgo.AddReportEntry(gpu.SharingObservedEntry, gpu.SharingObservation{Node: node, Path: s.Path.Name(), Mode: m.Mode, Pod: name, Saw: parent.UUID + " whole"})

	ginkgo.By(fmt.Sprintf("claiming a partition of the same GPU (DeviceClass %s)", migDeviceClass))
	partTmpl := env.Factory.ResourceClaimTemplate("part-gpus", ns).ExactCount(gpu.DRAClaimName, migDeviceClass, 1).
		Selector(gpu.DRAClaimName, attributeIs(domain, "parentUUID", parent.UUID)).Obj()
	// Held: a partition handed out by mistake must still be allocated when the failure names it (the claim
	// of a pod that completed is deleted with it).
	w := env.Factory.GPUPod("part", ns).ClaimTemplate(gpu.DRAClaimName, partTmpl).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...).OnNodes(node)
	pendingPodDiagnosed(ctx, env, w, expectation{
		stage: diagnose.StageScheduling, layer: diagnose.LayerDRA, reason: diagnose.DRAAllocationFailed,
		messages: []string{"cannot allocate all claims"},
		bound: func(ctx context.Context, pod *corev1.Pod) string {
			return fmt.Sprintf("GPU %s and its partition %s were handed out together", parent.UUID, claimedDevices(ctx, env, pod))
		}})
}
