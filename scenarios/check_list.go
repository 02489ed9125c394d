package scenarios

import (
	"context"
	"fmt"

	"github.com/onsi/ginkgo/v2"

	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/testenv"
)

// deviceCheck is one application check of a path's devices, by name. The allocation scenario registers
// each as a spec on the GPU pool; the upgrade rehearsal runs each on the upgraded canary. One list, so
// the canary is held to what the pool is.
type deviceCheck struct {
	// name is the check's row in the rehearsal's table.
	name string
	// title is its spec's title for pods of n devices.
	title func(n int) string
	// perCount: the allocation scenario registers it for each device count it asks for (else once, with
	// one device).
	perCount bool
	// takes is what its spec takes of the path.
	takes Takes
	// proves are the requirements its spec proves; claimProves those it proves on a claim-based path too.
	proves, claimProves []conformance.ID
	// run checks the devices of c.path with pods of c.devices devices in c.ns, on c.nodes (the spec's, or
	// the canary's), and says what it did instead of the real thing, if anything (a device test without
	// the vendor's library).
	run func(ctx context.Context, c checkOn) (standIn string)
}

// checkOn is where a deviceCheck runs.
type checkOn struct {
	env        *testenv.Env
	path       gpu.Path
	ns         string
	nodes      []string
	devices    int
	deviceTest DeviceTestSpec
}

// titled is a title that does not depend on the device count.
func titled(title string) func(int) string { return func(int) string { return title } }

// deviceChecks are the application checks of a path's devices, in the order the rehearsal runs them.
var deviceChecks = []deviceCheck{
	{
		name: "device identity",
		title: func(n int) string {
			return fmt.Sprintf("shows a running pod exactly the %s allocated to it", plural(n))
		},
		perCount: true, takes: Takes{Devices: FewOnOneNode},
		proves: []conformance.ID{conformance.SecureAcceleratorAccess}, claimProves: []conformance.ID{conformance.DRASupport},
		run: func(ctx context.Context, c checkOn) string {
			ginkgo.By(fmt.Sprintf("the devices the pod sees are those %s allocated", c.path.Authority()))
			ginkgo.By("the devices are freed when the pod is deleted")
			runningPodSeesGivenDevices(ctx, c.env, c.path, c.ns, c.devices, c.nodes)
			return ""
		},
	},
	{
		name:  "exclusivity (a filled node)",
		title: titled("gives each device of a full node to exactly one pod, and one more pod waits"),
		takes: Takes{Devices: OneWholeNode}, proves: []conformance.ID{conformance.SecureAcceleratorAccess},
		run: func(ctx context.Context, c checkOn) string {
			ginkgo.By("every device goes to one of the pods running side by side, all of them")
			fillNode(ctx, c.env, c.path, c.ns, c.nodes)
			return ""
		},
	},
	{
		name:  "isolation",
		title: titled("hides a pod's devices from its second container, init container and neighbour"),
		takes: Takes{Devices: FewOnOneNode}, proves: []conformance.ID{conformance.SecureAcceleratorAccess},
		run: func(ctx context.Context, c checkOn) string {
			ginkgo.By("a GPU pod's second container, its init container and a pod beside it see none of its devices")
			isolation(ctx, c.env, c.path, c.ns, c.nodes[0])
			return ""
		},
	},
	{
		name:  "vendor device test",
		title: titled("runs the vendor's device test in a pod with one device"),
		takes: Takes{Devices: FewOnOneNode},
		run: func(ctx context.Context, c checkOn) string {
			return deviceTest(ctx, c.env, c.path, c.ns, c.nodes, c.deviceTest)
		},
	},
}
