package scenarios

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/poollock"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/testenv"
)

// Base is what every scenario's input carries. Each input embeds it; the suite fills it once.
type Base struct {
	// Env is the run's environment (nil while the spec tree is built).
	Env *testenv.Env
	// Paths are the discovered allocation paths.
	Paths []gpu.Path
	// GPUPool are the nodes test pods may use.
	GPUPool []string
	// NotExercised records a check that is not registered and why.
	NotExercised func(what, why string)
	// QueueGaps are the paths whose Kueue resource the team's ClusterQueue does not cover
	// (team-namespace mode), with why (recorded as not exercised): they submit nothing through Kueue.
	QueueGaps map[string]string
	// DeviceTest is the vendor's device test (config deviceTest): the allocation scenario runs it on each
	// path, and the upgrade rehearsal on the canary pool, so every input carries it.
	DeviceTest DeviceTestSpec
}

func (b Base) base() Base { return b }

// baseOf is the Base of every scenario's input: the run's environment (live when specs run), paths, pool,
// not-exercised record and device test.
func baseOf(r *suite.Run) Base {
	return Base{Env: r.Env, Paths: r.Paths, GPUPool: r.Caps.Pools.GPU.Nodes, NotExercised: r.NotExercised, QueueGaps: r.QueueGaps(),
		DeviceTest: deviceTestOf(r.Config.DeviceTest)}
}

// queued reports whether specs on the path named path submit through Kueue: kueue (the scenario's
// KueuePresent) and the path's Kueue resource covered by the queue.
func (b Base) queued(kueue bool, path string) bool { return kueue && b.QueueGaps[path] == "" }

// notExercised records what is not registered; without a recorder it does nothing.
func (b Base) notExercised(what, why string) {
	if b.NotExercised != nil {
		b.NotExercised(what, why)
	}
}

// eligible are the GPU pool's nodes with at least n devices on path.
func (b Base) eligible(path gpu.Path, n int) []string { return eligibleNodes(path, n, b.GPUPool) }

// scenarioInput is any scenario input (it embeds Base).
type scenarioInput interface{ base() Base }

// Spec is the live state of one spec inside a per-path container: the input read again when the spec
// runs, the path by the name it was registered under, and the spec's own namespace.
type Spec[I scenarioInput] struct {
	In   I
	Env  *testenv.Env
	Path gpu.Path
	NS   string
}

// describePath registers the container "<title> on the <path> path" for one discovered path, labelled
// with the path's label and decorators (scenario label, holds:path, …). Its BeforeEach reads the input
// again, resolves the live path registered under the same name, takes the spec's pool locks (holdPool)
// and creates the spec's namespace (nsPrefix); body registers the container's specs, reading the live
// state from s inside them.
func describePath[I scenarioInput](input func() I, regPath gpu.Path, title, nsPrefix string, decorators []any, body func(s *Spec[I])) {
	pathName := regPath.Name()
	args := append([]any{ginkgo.Label(labels.ForPath(pathName))}, decorators...)
	s := &Spec[I]{}
	args = append(args, func() {
		ginkgo.BeforeEach(func(ctx context.Context) {
			s.In = input()
			s.Env = s.In.base().Env
			s.Path = pathByName(s.In.base().Paths, pathName)
			gomega.Expect(s.Path).NotTo(gomega.BeNil(), "path %s vanished between registration and run", pathName)
			holdPool(ctx, s.Env, pathName, s.In.base().Paths)
			s.NS = s.Env.NewNamespace(ctx, nsPrefix).Name
		})
		body(s)
	})
	ginkgo.Describe(fmt.Sprintf("%s on the %s path", title, pathName), args...)
}

func pathByName(paths []gpu.Path, name string) gpu.Path {
	for _, p := range paths {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// holdPool takes the spec's pool locks (framework/poollock) before the spec creates anything, and
// releases them after its cleanup (registered first, the release runs last, once the spec's pods and
// claims are gone): its path's shared; its path's exclusive when the spec is labelled holds:path (it needs
// every device of the path on a node); every path's exclusive when it is labelled holds:nodes (it stops
// nodes or kubelets, or measures a node). In one process nothing ever waits; with several (--procs), a
// spec that holds one path runs beside the other path's specs instead of alone, as Serial would.
func holdPool(ctx context.Context, env *testenv.Env, path string, paths []gpu.Path) {
	ginkgo.GinkgoHelper()
	mode, names := poolHold(ginkgo.CurrentSpecReport().Labels(), path, paths)
	release, waited, err := poollock.Hold(ctx, poollock.Dir(env.Factory.RunID), names, mode)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "taking the %s pool lock on %v", mode, names)
	ginkgo.DeferCleanup(release)
	if waited > 0 { // the bench keeps it out of the spec's own cost
		ginkgo.AddReportEntry(poollock.WaitEntry, waited.Seconds(), ginkgo.ReportEntryVisibilityNever)
	}
	if waited >= time.Second {
		ginkgo.GinkgoWriter.Printf("waited %s for the %s pool lock on %v (another process's spec held it)\n", waited.Round(time.Second), mode, names)
	}
}

// poolHold is how a spec with specLabels on path holds the pool locks, and which.
func poolHold(specLabels []string, path string, paths []gpu.Path) (poollock.Mode, []string) {
	switch {
	case slices.Contains(specLabels, labels.HoldsNodes):
		names := make([]string, 0, len(paths))
		for _, p := range paths {
			names = append(names, "path-"+p.Name())
		}
		return poollock.Exclusive, names
	case slices.Contains(specLabels, labels.HoldsPath):
		return poollock.Exclusive, []string{"path-" + path}
	}
	return poollock.Shared, []string{"path-" + path}
}
