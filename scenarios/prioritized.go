package scenarios

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/suite"
)

// PrioritizedInput is the input of PrioritizedSpec.
type PrioritizedInput struct {
	Base
	// Modes are the nodes' sharing modes: the MIG-else-whole claim needs a node whose DRA GPUs are
	// partitionable.
	Modes []cluster.NodeSharingMode
}

const prioritizedName = "prioritized"

// The prioritized list's request and the alternative the specs expect allocated: one device of the
// path's class, after an alternative that cannot be had.
const (
	prioritizedRequest = gpu.DRAClaimName
	altOne             = "one"
)

// Prioritized is the DRA prioritized-list scenario (DRAPrioritizedList, GA since Kubernetes 1.36): a
// claim whose request lists alternatives is allocated the first that fits, the allocation names which,
// and the driver prepares the device of an alternative as it prepares any other. Not required by the
// signoff.
var Prioritized = Define(Scenario{Name: prioritizedName, Title: "a claim with prioritized alternatives is allocated the first that fits, names it, and its pod sees that device"},
	func(r *suite.Run) PrioritizedInput {
		return PrioritizedInput{Base: baseOf(r), Modes: r.Caps.SharingModes}
	},
	PrioritizedSpec)

// PrioritizedSpec registers the checks on each DRA path: an alternative larger than the node, and one
// whose only device another pod holds, each followed by one device of the class; and, where a node's GPUs
// are partitionable, a MIG partition of one GPU else a whole GPU.
func PrioritizedSpec(input func() PrioritizedInput) {
	reg := input()
	for _, regPath := range reg.draPaths() {
		one, two := reg.withDevices(regPath, "prioritized alternatives"), reg.eligible(regPath, 2)
		if len(one) == 0 {
			continue
		}
		partitionable := partitionableWithWhole(reg.Modes, regPath.Name(), reg.GPUPool)
		describePath(input, regPath, "DRA prioritized alternatives", "prio", []any{labels.Of(labels.Scenario(prioritizedName))}, func(s *Spec[PrioritizedInput]) {
			ginkgo.It("allocates the first alternative that fits and names it in the result", takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
				ginkgo.By("the first alternative asks for one device more than the node has")
				node := s.lease(ctx, one)[0]
				dra := s.Path.(*gpu.DRA)
				n := int(s.Path.Capacity()[node])
				allocatedAlternative(ctx, s, node, "", fixtures.Alternative{Name: "more-than-the-node", DeviceClass: dra.DeviceClass, Count: n + 1})
			})
			if len(two) == 0 {
				reg.notExercised(regPath.Name()+": prioritized alternatives, the first one's device held", "no node in the GPU pool has 2 devices on this path")
			} else {
				ginkgo.It("falls to the next alternative while the first one's device is held", takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
					ginkgo.By("the first alternative asks for the one device another pod holds")
					node := s.lease(ctx, two)[0]
					held := startHeldPod(ctx, s.Env, s.Path, s.NS, "holder", node).report.Devices[0]
					ginkgo.AddReportEntry("evidence: held", fmt.Sprintf("pod %s/holder holds %s on %s", s.NS, held, node))
					dra := s.Path.(*gpu.DRA)
					allocatedAlternative(ctx, s, node, held, fixtures.Alternative{Name: "the-held-device", DeviceClass: dra.DeviceClass, Count: 1, Selector: dra.UUIDSelector(held)})
				})
			}
			if len(partitionable) == 0 {
				reg.notExercised(regPath.Name()+": prioritized MIG partition, else a whole GPU", "no node of the GPU pool publishes a GPU both whole and as partitions on this path "+
					"(NVIDIA's DRA driver does in a MIG mode); the sharing modes discovery read are in the record")
				return
			}
			// leases:nodes: the spec needs one partitionable GPU of the node free throughout, whole and in part:
			// it leases the node alone.
			ginkgo.It("allocates a MIG partition first, and a whole GPU once none can be had", takes(Takes{Devices: WholeNodes}), func(ctx context.Context) {
				ginkgo.By("the claim lists a partition of one GPU, then any whole GPU; the GPU is then held whole")
				migElseWhole(ctx, s, partitionable)
			})
		})
	}
}

// partitionableWithWhole are the sharing modes of the pool's nodes on path that publish a GPU both whole
// and as partitions (cluster.ModePartitionable with a whole device), by node.
func partitionableWithWhole(modes []cluster.NodeSharingMode, path string, pool []string) map[string]cluster.NodeSharingMode {
	out := map[string]cluster.NodeSharingMode{}
	for _, m := range modes {
		if m.Path != path || m.Mode != cluster.ModePartitionable || !slices.Contains(pool, m.Node) {
			continue
		}
		if slices.ContainsFunc(m.Partitions, func(g cluster.PartitionableGPU) bool { return g.Whole != "" && len(g.Partitions) > 0 }) {
			out[m.Node] = m
		}
	}
	return out
}

// Alternatives of the MIG-else-whole claim.
const (
	altMIG   = "mig"
	altWhole = "whole"
)

// migElseWhole leases a partitionable node, picks a GPU of it that nothing holds, and runs a pod whose claim
// lists a partition of that GPU (NVIDIA's MIG DeviceClass, the GPU's parentUUID), then any whole GPU: the
// partition must be allocated, named in the result, and the only MIG device the pod sees. With the GPU then
// held whole by another pod (its counters all consumed), the same claim must fall to a whole GPU, another
// one, and the pod must see no MIG device.
func migElseWhole(ctx context.Context, s *Spec[PrioritizedInput], partitionable map[string]cluster.NodeSharingMode) {
	env, ns := s.Env, s.NS
	dra := s.Path.(*gpu.DRA)
	expectDeviceClass(ctx, env, migDeviceClass)
	node := s.leaseNodes(ctx, slices.Sorted(maps.Keys(partitionable)), 1)[0]
	m := partitionable[node]
	parent := freeParent(ctx, env, dra, m, true)
	domain := driverDomain(dra)
	mig := fixtures.Alternative{Name: altMIG, DeviceClass: migDeviceClass, Count: 1, Selector: attributeIs(domain, "parentUUID", parent.UUID)}
	whole := fixtures.Alternative{Name: altWhole, DeviceClass: dra.DeviceClass, Count: 1}

	ginkgo.By(fmt.Sprintf("GPU %s (%s) free: a partition of it is the first alternative", parent.UUID, parent.Whole))
	pod, given, report := allocatedAlternatives(ctx, s, "mig-first", node, altMIG, mig, whole)
	partitions := map[string]string{}
	for _, d := range parent.Partitions {
		partitions[d.UUID] = d.Profile
	}
	profile, ok := partitions[given.Devices[0]]
	gomega.Expect(ok).To(gomega.BeTrue(), "pod %s was allocated %s for alternative %s, which is not a partition of GPU %s", pod, given.Devices[0], altMIG, parent.UUID)
	if _, err := checkMIGSeen(pod, report.MIGDevices, given.Devices[0], profile, parent.UUID); err != nil {
		ginkgo.Fail(err.Error())
	}
	deletePodAndWait(ctx, env, ns, pod)

	ginkgo.By(fmt.Sprintf("GPU %s held whole by another pod: none of its partitions fits", parent.UUID))
	holderTmpl := env.Factory.ResourceClaimTemplate("whole-gpus", ns).ExactCount(gpu.DRAClaimName, dra.DeviceClass, 1).
		Selector(gpu.DRAClaimName, attributeIs(domain, "uuid", parent.UUID)).Obj()
	env.Create(ctx, holderTmpl)
	holder := env.Factory.GPUPod("holder", ns).ClaimTemplate(gpu.DRAClaimName, holderTmpl).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...).OnNodes(node).Obj()
	env.Create(ctx, holder)
	pods.ExpectPodRunning(ctx, env, ns, holder.Name)
	held := pods.ExpectProbeReport(ctx, env, ns, holder.Name)
	gomega.Expect(held.Devices).To(gomega.Equal([]string{parent.UUID}), "pod %s claimed GPU %s whole by its uuid and sees %s", holder.Name, parent.UUID, gpu.FormatDevices(held.Devices))
	ginkgo.AddReportEntry("evidence: held", fmt.Sprintf("pod %s/%s holds GPU %s whole on %s", ns, holder.Name, parent.UUID, node))
	pod, given, report = allocatedAlternatives(ctx, s, "whole-next", node, altWhole, mig, whole)
	gomega.Expect(given.Devices[0]).NotTo(gomega.Equal(parent.UUID), "pod %s was allocated GPU %s, which pod %s holds whole", pod, parent.UUID, holder.Name)
	gomega.Expect(report.MIGDevices).To(gomega.BeEmpty(), "pod %s was allocated a whole GPU (alternative %s) and its nvidia-smi lists MIG devices", pod, altWhole)
}

// allocatedAlternative runs a pod on node whose claim lists first, then one device of the path's class,
// and requires the second to be allocated (not the device held, when set), named in the allocation
// result, and the one device the pod sees.
func allocatedAlternative(ctx context.Context, s *Spec[PrioritizedInput], node, held string, first fixtures.Alternative) {
	_, _, report := allocatedAlternatives(ctx, s, "prio", node, altOne, first, fixtures.Alternative{Name: altOne, DeviceClass: s.Path.(*gpu.DRA).DeviceClass, Count: 1})
	if held != "" {
		gomega.Expect(report.Devices).NotTo(gomega.ContainElement(held), "the pod sees %s, which another pod holds", held)
	}
	evidenceSeen("a pod whose claim's alternative "+prioritizedRequest+"/"+altOne+" was allocated", report)
}

// allocatedAlternatives runs pod name on node whose claim lists alts in order, and requires alternative
// want to be allocated, named in the allocation result, and the one device the pod sees. It returns the
// pod's name, what its claim was allocated and what it saw.
func allocatedAlternatives(ctx context.Context, s *Spec[PrioritizedInput], name, node, want string, alts ...fixtures.Alternative) (string, gpu.Allocation, gpu.ProbeReport) {
	ginkgo.GinkgoHelper()
	env := s.Env
	tmpl := env.Factory.ResourceClaimTemplate(name, s.NS).FirstAvailable(prioritizedRequest, alts...).Obj()
	env.Create(ctx, tmpl)
	pod := env.Factory.GPUPod(name, s.NS).Args(fixtures.ProbeArgs(1)...).RestartAlways().OnNodes(node).ClaimTemplate(prioritizedRequest, tmpl).Obj()
	env.Create(ctx, pod)
	running := pods.ExpectPodRunning(ctx, env, s.NS, pod.Name)
	report := pods.ExpectProbeReport(ctx, env, s.NS, pod.Name)

	gomega.Expect(running.Status.ResourceClaimStatuses).To(gomega.HaveLen(1), "pod %s's generated claim", pod.Name)
	claimName := running.Status.ResourceClaimStatuses[0].ResourceClaimName
	gomega.Expect(claimName).NotTo(gomega.BeNil(), "pod %s runs without its generated claim's name", pod.Name)
	claim, err := env.Clients.Kube.ResourceV1().ResourceClaims(s.NS).Get(ctx, *claimName, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading claim %s", *claimName)
	gomega.Expect(claim.Status.Allocation).NotTo(gomega.BeNil(), "claim %s of running pod %s is not allocated", claim.Name, pod.Name)
	results := claim.Status.Allocation.Devices.Results
	lines := make([]string, len(results))
	for i, r := range results {
		lines[i] = fmt.Sprintf("%s → %s/%s/%s", r.Request, r.Driver, r.Pool, r.Device)
	}
	ginkgo.AddReportEntry("evidence: allocation", strings.Join(lines, "\n"))
	full := prioritizedRequest + "/" + want
	gomega.Expect(results).To(gomega.HaveLen(1), "claim %s: alternative %s must be allocated on %s (one device; the alternatives are %s); got %s",
		claim.Name, full, node, describeAlternatives(alts), strings.Join(lines, "; "))
	if results[0].Request != full {
		ginkgo.Fail(fmt.Sprintf("claim %s was allocated alternative %s (%s), where %s must be: the alternatives are %s", claim.Name, results[0].Request, lines[0], full, describeAlternatives(alts)))
	}

	given, err := s.Path.Given(ctx, givenInput(env, running, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading pod %s's allocation from %s", pod.Name, s.Path.Authority())
	expectSameDevices(report, given)
	gomega.Expect(given.Devices).To(gomega.HaveLen(1), "pod %s's claim asked for one device", pod.Name)
	return pod.Name, given, report
}

// describeAlternatives is the alternatives in order, for messages: "mig (mig.nvidia.com, 1, selector …), …".
func describeAlternatives(alts []fixtures.Alternative) string {
	out := make([]string, len(alts))
	for i, a := range alts {
		out[i] = fmt.Sprintf("%s (%s, %d", a.Name, a.DeviceClass, a.Count)
		if a.Selector != "" {
			out[i] += ", " + a.Selector
		}
		out[i] += ")"
	}
	return strings.Join(out, " then ")
}
