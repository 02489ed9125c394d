package scenarios

import (
	"context"
	"fmt"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/suite"
)

// AdminAccessInput is the input of AdminAccessSpec.
type AdminAccessInput struct{ Base }

const adminAccessName = "adminaccess"

// adminAccessRefusal is what the API server answers a claim with admin access outside a labelled
// namespace (k8s.io/kubernetes pkg/apis/resource/validation).
const adminAccessRefusal = "admin access to devices requires the `" + resourcev1.DRAAdminNamespaceLabelKey + ": true` label"

// AdminAccess is the DRA admin-access scenario (DRAAdminAccess, GA since Kubernetes 1.36): a monitoring
// claim with adminAccess in a namespace labelled for it is given a device a workload holds, without
// taking it from the workload; the same claim elsewhere is refused by the API server. Not required by the
// signoff.
var AdminAccess = Define(Scenario{Name: adminAccessName, Title: "a monitor's admin-access claim is given a device a workload holds, only in a namespace labelled for it"},
	func(r *suite.Run) AdminAccessInput { return AdminAccessInput{Base: baseOf(r)} },
	AdminAccessSpec)

// AdminAccessSpec registers the check on each DRA path.
func AdminAccessSpec(input func() AdminAccessInput) {
	reg := input()
	for _, regPath := range reg.draPaths() {
		nodes := reg.withDevices(regPath, "admin access")
		if len(nodes) == 0 {
			continue
		}
		describePath(input, regPath, "DRA admin access", "admin", []any{labels.Of(labels.Scenario(adminAccessName))}, func(s *Spec[AdminAccessInput]) {
			ginkgo.It("gives a monitor a held device only in an admin-access namespace", takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
				ginkgo.By("the workload keeps its device; outside the labelled namespace the claim is refused")
				monitorSharesHeldDevice(ctx, s, s.lease(ctx, nodes)[0])
			})
		})
	}
}

// monitorSharesHeldDevice runs a workload holding one device on node, then a monitor whose admin-access
// claim selects that device: refused in the spec's own namespace, run in a namespace labelled for admin
// access, where it must see the device while the workload still runs with it.
func monitorSharesHeldDevice(ctx context.Context, s *Spec[AdminAccessInput], node string) {
	env := s.Env
	dra := s.Path.(*gpu.DRA)
	workload := startHeldPod(ctx, env, s.Path, s.NS, "workload", node)
	held, device := workload.report, workload.report.Devices[0]
	ginkgo.AddReportEntry("evidence: held", fmt.Sprintf("pod %s/%s holds %s on %s", s.NS, workload.name, device, node))

	monitorClaim := func(ns string) *resourcev1.ResourceClaimTemplate {
		return env.Factory.ResourceClaimTemplate("monitor", ns).ExactCount(gpu.DRAClaimName, dra.DeviceClass, 1).
			Selector(gpu.DRAClaimName, dra.UUIDSelector(device)).AdminAccess(gpu.DRAClaimName).Obj()
	}
	ginkgo.By("an admin-access claim in namespace " + s.NS + ", which is not labelled for it")
	err := env.TryCreate(ctx, monitorClaim(s.NS))
	gomega.Expect(err).To(gomega.HaveOccurred(), "the API server accepted an admin-access ResourceClaimTemplate in namespace %s, which lacks the label %s=true", s.NS, resourcev1.DRAAdminNamespaceLabelKey)
	gomega.Expect(err.Error()).To(gomega.ContainSubstring(adminAccessRefusal), "the refusal of an admin-access claim outside a labelled namespace")
	ginkgo.AddReportEntry("evidence: refused outside", err.Error())

	admin := env.NewLabelledNamespace(ctx, "admin-mon", map[string]string{resourcev1.DRAAdminNamespaceLabelKey: "true"})
	if admin == nil {
		ginkgo.Skip("not exercised: team-namespace mode: the suite labels no namespace for admin access (" + resourcev1.DRAAdminNamespaceLabelKey + ")")
	}
	tmpl := monitorClaim(admin.Name)
	env.Create(ctx, tmpl)
	monitor := env.Factory.GPUPod("monitor", admin.Name).Args(fixtures.ProbeArgs(1)...).RestartAlways().OnNodes(node).ClaimTemplate(gpu.DRAClaimName, tmpl).Obj()
	env.Create(ctx, monitor)
	pods.ExpectPodRunning(ctx, env, admin.Name, monitor.Name)
	seen := pods.ExpectProbeReport(ctx, env, admin.Name, monitor.Name)
	gomega.Expect(seen.Devices).To(gomega.Equal([]string{device}), "the monitor's admin-access claim selects %s, held by pod %s; the monitor sees %s (%s)",
		device, workload.name, gpu.FormatDevices(seen.Devices), seen.Message)
	evidenceSeen("the monitor with admin access", seen)

	now, err := env.Clients.Kube.CoreV1().Pods(s.NS).Get(ctx, workload.name, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the workload %s", workload.name)
	gomega.Expect(now.Status.Phase).To(gomega.Equal(corev1.PodRunning), "the workload %s holding %s is %s after the monitor was given its device", workload.name, device, now.Status.Phase)
	given, err := s.Path.Given(ctx, givenInput(env, now, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the workload's allocation from %s", s.Path.Authority())
	expectSameDevices(held, given)
	ginkgo.AddReportEntry("evidence: workload kept", fmt.Sprintf("pod %s/%s still Running with %s", s.NS, workload.name, device))
}
