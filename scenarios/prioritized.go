package scenarios

import (
	"context"
	"fmt"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/suite"
)

// PrioritizedInput is the input of PrioritizedSpec.
type PrioritizedInput struct{ Base }

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
	func(r *suite.Run) PrioritizedInput { return PrioritizedInput{Base: baseOf(r)} },
	PrioritizedSpec)

// PrioritizedSpec registers the checks on each DRA path: an alternative larger than the node, and one
// whose only device another pod holds, each followed by one device of the class.
func PrioritizedSpec(input func() PrioritizedInput) {
	reg := input()
	for _, regPath := range reg.draPaths() {
		one, two := reg.withDevices(regPath, "prioritized alternatives"), reg.eligible(regPath, 2)
		if len(one) == 0 {
			continue
		}
		describePath(input, regPath, "DRA prioritized alternatives", "prio", []any{labels.Of(labels.Scenario(prioritizedName))}, func(s *Spec[PrioritizedInput]) {
			ginkgo.It("allocates the first alternative that fits and names it in the result", labels.Of(labels.OnNode), func(ctx context.Context) {
				ginkgo.By("the first alternative asks for one device more than the node has")
				node := s.lease(ctx, one)[0]
				dra := s.Path.(*gpu.DRA)
				n := int(s.Path.Capacity()[node])
				allocatedAlternative(ctx, s, node, "", fixtures.Alternative{Name: "more-than-the-node", DeviceClass: dra.DeviceClass, Count: n + 1})
			})
			if len(two) == 0 {
				reg.notExercised(regPath.Name()+": prioritized alternatives, the first one's device held", "no node in the GPU pool has 2 devices on this path")
				return
			}
			ginkgo.It("falls to the next alternative while the first one's device is held", labels.Of(labels.OnNode), func(ctx context.Context) {
				ginkgo.By("the first alternative asks for the one device another pod holds")
				node := s.lease(ctx, two)[0]
				held := startHeldPod(ctx, s.Env, s.Path, s.NS, "holder", node).report.Devices[0]
				ginkgo.AddReportEntry("evidence: held", fmt.Sprintf("pod %s/holder holds %s on %s", s.NS, held, node))
				dra := s.Path.(*gpu.DRA)
				allocatedAlternative(ctx, s, node, held, fixtures.Alternative{Name: "the-held-device", DeviceClass: dra.DeviceClass, Count: 1, Selector: dra.UUIDSelector(held)})
			})
		})
	}
}

// allocatedAlternative runs a pod on node whose claim lists first, then one device of the path's class,
// and requires the second to be allocated (not the device held, when set), named in the allocation
// result, and the one device the pod sees.
func allocatedAlternative(ctx context.Context, s *Spec[PrioritizedInput], node, held string, first fixtures.Alternative) {
	env := s.Env
	tmpl := env.Factory.ResourceClaimTemplate("prio", s.NS).FirstAvailable(prioritizedRequest, first,
		fixtures.Alternative{Name: altOne, DeviceClass: s.Path.(*gpu.DRA).DeviceClass, Count: 1}).Obj()
	env.Create(ctx, tmpl)
	pod := env.Factory.GPUPod("prio", s.NS).Args(fixtures.ProbeArgs(1)...).RestartAlways().OnNodes(node).ClaimTemplate(prioritizedRequest, tmpl).Obj()
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
	want := prioritizedRequest + "/" + altOne
	gomega.Expect(results).To(gomega.HaveLen(1), "claim %s: alternative %s cannot be had on %s, so %s (one device) must be allocated; got %s",
		claim.Name, first.Name, node, want, strings.Join(lines, "; "))
	gomega.Expect(results[0].Request).To(gomega.Equal(want), "claim %s's result does not name the alternative that fits", claim.Name)

	given, err := s.Path.Given(ctx, givenInput(env, running, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading pod %s's allocation from %s", pod.Name, s.Path.Authority())
	expectSameDevices(report, given)
	if held != "" {
		gomega.Expect(report.Devices).NotTo(gomega.ContainElement(held), "pod %s sees %s, which another pod holds", pod.Name, held)
	}
	evidenceSeen("a pod whose claim's alternative "+want+" was allocated", report)
}
