package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/testenv"
)

// DriverInput is the input of DriverSpec.
type DriverInput struct {
	Base
	// VersionLabel is the node label that advertises the driver version (GPU feature discovery's).
	VersionLabel string
}

// cudaVersionLabel is where GPU feature discovery advertises the CUDA version the driver supports, which
// nvidia-smi prints as "CUDA Version"; the DRA attribute cudaDriverVersion carries the same.
const cudaVersionLabel = "nvidia.com/cuda.runtime-version.full"

const driverName = "driver"

// Driver is the driver/runtime agreement scenario (DriverSpec). Not required by default: a cluster whose
// nodes advertise no versions cannot be checked, which is not a reason to hold a signoff back; a
// disagreement found is NO-GO like any failed spec.
var Driver = Define(Scenario{Name: driverName, Title: "the driver and CUDA versions a node advertises are the ones a pod there gets",
	Proves: []conformance.Proof{{Requirement: conformance.DriverRuntimeManagement,
		How: "on every GPU node of the pool a pod holding one device runs nvidia-smi, and the driver and CUDA versions it prints must equal " +
			"what the node advertises on that path: GPU feature discovery's labels for the device plugin, the ResourceSlice attributes " +
			"driverVersion and cudaDriverVersion for DRA; a mismatch names both values"}}},
	func(r *suite.Run) DriverInput {
		return DriverInput{Base: baseOf(r), VersionLabel: r.Upgrade.VersionLabel}
	},
	DriverSpec)

// DriverSpec registers, per path, a check that every GPU node of the pool gives its pods the driver the
// cluster says it has: a pod holding one device runs the vendor tool (the probe's nvidia-smi query), and
// the driver and CUDA versions it prints must equal what the node advertises on that path (the node's
// GPU feature discovery labels for the device plugin, the ResourceSlice attributes driverVersion and
// cudaDriverVersion for DRA). A stale label after a host driver upgrade, or a container given another
// driver's libraries, fails it, naming both values.
func DriverSpec(input func() DriverInput) {
	reg := input()
	for _, regPath := range reg.Paths {
		nodes := reg.withDevices(regPath, "driver version agreement")
		if len(nodes) == 0 {
			continue
		}
		describePath(input, regPath, "GPU driver and runtime versions", "driver", []any{labels.Of(labels.Scenario(driverName))}, func(s *Spec[DriverInput]) {
			ginkgo.It("shows a pod on each GPU node the driver and CUDA versions the node advertises", proves(driverName, conformance.DriverRuntimeManagement), takes(Takes{Devices: EachNode}), func(ctx context.Context) {
				ginkgo.By("on every GPU node of this path")
				driverAgreement(ctx, s, nodes)
			})
		})
	}
}

// driverAgreement runs one probe pod per node, all at once, and compares what each saw with what its node
// advertises.
func driverAgreement(ctx context.Context, s *Spec[DriverInput], nodes []string) {
	env := s.Env
	names := make([]string, len(nodes))
	for i, n := range nodes {
		w := env.Factory.GPUPod(fmt.Sprintf("driver-%d", i), s.NS).Path(s.Path).Devices(1).Args(fixtures.ProbeArgs(1)...).OnNodes(n)
		pod := w.Obj()
		for _, pre := range w.Prerequisites() {
			env.Create(ctx, pre)
		}
		env.Create(ctx, pod)
		names[i] = pod.Name
	}
	compared := 0
	for i, n := range nodes {
		report := pods.ExpectProbeReport(ctx, env, s.NS, names[i])
		if report.DriverVersion == "" {
			ginkgo.AddReportEntry("not compared: "+n, fmt.Sprintf("nvidia-smi in pod %s printed no driver version (%s)", names[i], report.VersionError))
			continue
		}
		adv := advertisedVersions(ctx, env, s.Path, n, s.In.VersionLabel)
		if adv.driver == "" {
			ginkgo.AddReportEntry("not compared: "+n, "the node advertises no driver version on this path ("+adv.where+")")
			continue
		}
		gomega.Expect(semverOf(report.DriverVersion)).To(gomega.Equal(semverOf(adv.driver)),
			"node %s advertises driver %s (%s) but nvidia-smi in pod %s prints %s", n, adv.driver, adv.where, names[i], report.DriverVersion)
		if adv.cuda != "" && report.CUDAVersion != "" {
			gomega.Expect(semverOf(report.CUDAVersion)).To(gomega.Equal(semverOf(adv.cuda)),
				"node %s advertises CUDA %s (%s) but nvidia-smi in pod %s prints %s", n, adv.cuda, adv.where, names[i], report.CUDAVersion)
		}
		ginkgo.AddReportEntry("versions on "+n, fmt.Sprintf("driver %s, CUDA %s: advertised (%s) and seen in pod %s", report.DriverVersion, report.CUDAVersion, adv.where, names[i]))
		compared++
	}
	// A check that compared nothing must say so, never pass: the reasons are the entries above.
	gomega.Expect(compared).To(gomega.BeNumerically(">", 0), "no node's versions could be compared on the %s path (see the report entries)", s.Path.Name())
}

// advertised are the versions a node advertises on one path, and where they were read.
type advertised struct{ driver, cuda, where string }

// advertisedVersions reads what node advertises on path: its labels for the device plugin, its slices'
// device attributes for DRA (every device of the path's driver on the node must agree).
func advertisedVersions(ctx context.Context, env *testenv.Env, path gpu.Path, node, versionLabel string) advertised {
	ginkgo.GinkgoHelper()
	dra, ok := gpu.ClaimPath(path)
	if !ok {
		n, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		return advertised{driver: n.Labels[versionLabel], cuda: n.Labels[cudaVersionLabel], where: "node labels " + versionLabel + ", " + cudaVersionLabel}
	}
	list, err := env.Clients.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	adv := advertised{where: "ResourceSlice attributes driverVersion, cudaDriverVersion"}
	for _, sl := range list.Items {
		if !slices.Contains(strings.Split(dra.Driver, ","), sl.Spec.Driver) {
			continue
		}
		for _, d := range sl.Spec.Devices {
			for name, into := range map[resourcev1.QualifiedName]*string{"driverVersion": &adv.driver, "cudaDriverVersion": &adv.cuda} {
				a, ok := d.Attributes[name]
				if !ok {
					continue
				}
				v := cmp.Or(ptr.Deref(a.VersionValue, ""), ptr.Deref(a.StringValue, ""))
				gomega.Expect(*into == "" || semverOf(*into) == semverOf(v)).To(gomega.BeTrue(),
					"the %s devices of %s disagree on %s: %s and %s (device %s)", sl.Spec.Driver, node, name, *into, v, d.Name)
				*into = v
			}
		}
	}
	return adv
}
