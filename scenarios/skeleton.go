package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"gpuconform.io/gpuconform/framework/checkpoints"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/faults"
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

// firstPathWith is the first of the run's paths on which a GPU pool node has n devices, and those nodes:
// where a check of the cluster's, not a path's (its monitoring, its HPA, its gateway), runs once. None:
// a nil path.
func (b Base) firstPathWith(n int) (gpu.Path, []string) {
	for _, p := range b.Paths {
		if nodes := b.eligible(p, n); len(nodes) > 0 {
			return p, nodes
		}
	}
	return nil, nil
}

// draPaths are the run's DRA paths, for a scenario that exists only where devices are claimed.
func (b Base) draPaths() []gpu.Path {
	return slices.DeleteFunc(slices.Clone(b.Paths), func(p gpu.Path) bool { _, ok := p.(*gpu.DRA); return !ok })
}

// noDevicesWhy is why a path's specs are not registered where no pool node has a device on it.
const noDevicesWhy = "no node in the GPU pool has a device on this path"

// withDevices are the GPU pool's nodes with a device on path; with none, what (on the path) is recorded
// as not exercised, with the reason.
func (b Base) withDevices(path gpu.Path, what string) []string {
	nodes := b.eligible(path, 1)
	if len(nodes) == 0 {
		b.notExercised(path.Name()+": "+what, noDevicesWhy)
	}
	return nodes
}

// scenarioInput is any scenario input (it embeds Base).
type scenarioInput interface{ base() Base }

// Spec is the live state of one spec inside a per-path container: the input read again when the spec
// runs, the path by the name it was registered under, and the spec's own namespace.
type Spec[I scenarioInput] struct {
	In   I
	Env  *testenv.Env
	Path gpu.Path
	NS   string
	// Node is the node the spec leased (labelled holds:node, or on:node once it called lease): it keeps its
	// pods there. Empty otherwise.
	Node string
	// unlease releases an on:node or leases:nodes spec's lease (nil until it leased).
	unlease func()
	// stopsLocks are a stops:node spec's pool locks (poolHold), which it takes with its nodes' at once
	// (stopping), not before its body starts.
	stopsLocks []poollock.Lock
}

// lease returns the nodes among candidates the spec may put its pods on, which every spec asks before
// it creates pods: candidates as they are for a plain spec (it holds each node of its path shared); its
// leased node for a holds:node spec; and for an on:node spec the node it leases now, shared, among the
// candidates (the first to come free: one a holds:node spec leases is not), held until its cleanup
// is done. Its pods then go there beside the other specs', while holders of the path's other nodes run.
func (s *Spec[I]) lease(ctx context.Context, candidates []string) []string {
	ginkgo.GinkgoHelper()
	if s.Node != "" || !slices.Contains(ginkgo.CurrentSpecReport().Labels(), labels.OnNode) {
		return s.on(candidates)
	}
	if len(candidates) == 0 {
		ginkgo.Fail(fmt.Sprintf("no node of the %s path to lease", s.Path.Name()))
	}
	release, name, waited, err := poollock.HoldAny(ctx, poollock.Dir(s.Env.Factory.RunID), nodeLocks(gpu.DeviceDomain(s.Path), candidates), poollock.Shared)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "leasing one node of %v", candidates)
	s.unlease = release
	s.Node = lockedNode(name)
	leased(s.Node, s.Path.Name(), waited)
	return []string{s.Node}
}

// leaseNodes leases n of candidates, exclusive and all at once, for a leases:nodes spec (a gang), whichever
// come free first, holds them until its cleanup is done, and returns them: the spec pins its pods there, so
// it runs beside the holders and stoppers of its path's other nodes instead of holding the whole path. It
// fails the spec when fewer than n nodes are candidates.
func (s *Spec[I]) leaseNodes(ctx context.Context, candidates []string, n int) []string {
	ginkgo.GinkgoHelper()
	if !slices.Contains(ginkgo.CurrentSpecReport().Labels(), labels.LeasesNodes) {
		ginkgo.Fail(fmt.Sprintf("the spec leases %d of %v but does not declare takes(Takes{Devices: WholeNodes}) (label %s): its path's other specs would not know", n, candidates, labels.LeasesNodes))
	}
	if s.unlease != nil {
		ginkgo.Fail("the spec leases nodes twice")
	}
	if len(candidates) < n {
		ginkgo.Fail(fmt.Sprintf("the spec needs %d nodes of the %s path and has %d candidates (%v)", n, s.Path.Name(), len(candidates), candidates))
	}
	release, chosen, waited, err := poollock.HoldSome(ctx, poollock.Dir(s.Env.Factory.RunID), nodeLocks(gpu.DeviceDomain(s.Path), candidates), n, poollock.Exclusive)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "leasing %d nodes of %v", n, candidates)
	s.unlease = release
	nodes := make([]string, len(chosen))
	for i, name := range chosen {
		nodes[i] = lockedNode(name)
		if i > 0 {
			waited = 0 // the wait is recorded once
		}
		leased(nodes[i], s.Path.Name(), waited)
	}
	slices.Sort(nodes)
	return nodes
}

// stopping holds each of candidates exclusive on every path before a stops:node spec stops one of them
// or its kubelet: it waits for the specs on those nodes to end and keeps new ones off them, while the
// other nodes' specs go on. A spec that cannot name the node before its workload lands (the failed
// worker stops the node its training runs on) names every node the workload may land on, then calls
// keep with the one it stops: the others are released at once.
//
// The kept node is returned after the spec's cleanup, and only once it offers every path's devices as
// discovery found them (a restart takes them all, and each path's plugin registers again on its own
// time): the next spec there, or the upgrade rehearsal's snapshot of the known-good pool, never finds
// a path still coming back. back bounds that wait.
//
// The nodes are taken at once, each on every path, with the spec's other pool locks (the stops lock,
// the paths: poolHold, which describePath leaves to this call for a stops:node spec) in one request
// (poollock.Take): the spec holds none while it waits for another.
func (s *Spec[I]) stopping(ctx context.Context, candidates []string, back time.Duration) (keep func(node string)) {
	ginkgo.GinkgoHelper()
	if !slices.Contains(ginkgo.CurrentSpecReport().Labels(), labels.StopsNode) {
		ginkgo.Fail(fmt.Sprintf("the spec stops one of %v but does not declare takes(Takes{StopsNode: true}) (label %s): the specs on the node's other paths would run beside it", candidates, labels.StopsNode))
	}
	if len(candidates) == 0 {
		ginkgo.Fail("no node to stop")
	}
	paths := s.In.base().Paths
	nodes := slices.Compact(slices.Sorted(slices.Values(candidates)))
	lockOf := func(node string) []string {
		names := make([]string, 0, len(paths))
		for _, p := range paths {
			names = append(names, nodeLock(gpu.DeviceDomain(p), node))
		}
		return slices.Compact(slices.Sorted(slices.Values(names)))
	}
	// A spec that stops a node it knows (the kubelet restart) reserves that node ahead: its holders
	// finish while the stopper ahead of it in the chain still runs, not after it has the stops lock. A spec that names
	// every node its workload may land on does not: that would idle the whole pool.
	locks := slices.Clone(s.stopsLocks)
	for _, node := range nodes {
		for _, name := range lockOf(node) {
			locks = append(locks, poollock.Lock{Name: name, Mode: poollock.Exclusive, Ahead: len(nodes) == 1})
		}
	}
	set, waited, err := poollock.HoldSet(ctx, poollock.Dir(s.Env.Factory.RunID), locks)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "taking the pool locks %v and %v on every path", s.stopsLocks, nodes)
	recordWait(waited)
	held := slices.Clone(nodes)
	prev := s.unlease
	s.unlease = func() {
		set.Release()
		if prev != nil {
			prev()
		}
	}
	keep = func(node string) {
		ginkgo.GinkgoHelper()
		if !slices.Contains(held, node) {
			ginkgo.Fail(fmt.Sprintf("the spec stops %s, which it does not hold (it holds %v)", node, held))
		}
		for _, n := range held {
			if n != node {
				set.Drop(lockOf(n)...)
			}
		}
		held = []string{node}
		leased(node, s.Path.Name(), 0)
	}
	if len(candidates) == 1 {
		leased(candidates[0], s.Path.Name(), 0)
	}
	env := s.Env
	ginkgo.DeferCleanup(func(ctx context.Context) {
		for _, node := range held {
			expectEveryPathBack(ctx, env, paths, node, "before the spec returns it to the other specs", back)
		}
	})
	return keep
}

// chainFirst is the priority of the specs that run one at a time (stops:node, holds:canary): under --procs
// Ginkgo hands them out before the others, so that chain, the longest the pool locks force (the bench's
// lock floor), starts at once instead of wherever a random order puts its last spec, which then ends the
// run alone. The other specs fill the processes around it.
var chainFirst = ginkgo.SpecPriority(1)

// pathHoldersLast is the priority of the holds:path specs that stop no node (the sharing checks): Ginkgo
// hands them out after every other spec. Each needs its path alone, which it cannot have while the node
// stoppers (each holds every path shared) or the path's node holders run; handed out in random order among
// the others, each would wait in its process for the whole chain. Last, they run back to back once the
// node holders are done, and the processes meanwhile run the specs that can go.
var pathHoldersLast = ginkgo.SpecPriority(-1)

// rehearsalFirst is the upgrade rehearsal's priority: the first of the chain. It holds the faults lock
// and a known-good node until it has compared the known-good pool, and takes them with the stops lock
// (faultsLock): first in the chain it takes them before any faults:device or holds:node spec has started,
// where later it would keep the chain waiting for those, or them waiting for the chain.
var rehearsalFirst = ginkgo.SpecPriority(2)

// noDevicesFirst is the priority of the devices:none specs, highest: they take seconds each, run
// beside each other, and hold the stops lock shared, so started after the chain they would each hold a
// process idle until the whole chain is done. They run in the run's first seconds, the chain after them.
var noDevicesFirst = ginkgo.SpecPriority(3)

// poolReadersFirst is the priority of the specs that put a pod on each node of their path (Takes'
// EachNode), which take every node of their path shared (pathHold): they need the whole path free of node holders at one
// moment, which under a stream of holds:node leases (each queued exclusive, first) comes only at the run's
// end, so started later each would wait minutes and end the run. They take seconds; they run in the run's
// first seconds, beside the devices:none specs, before the chain and the node holders start.
var poolReadersFirst = ginkgo.SpecPriority(2)

// failingDevices fails the spec unless it is labelled faults:device: a device fault under the upgrade
// rehearsal would read as the known-good pool changing (canaryHold).
func failingDevices() {
	ginkgo.GinkgoHelper()
	if !slices.Contains(ginkgo.CurrentSpecReport().Labels(), labels.FaultsDevice) {
		ginkgo.Fail(fmt.Sprintf("the spec fails a device but does not declare takes(Takes{FailsDevice: true}) (label %s): the upgrade rehearsal would run beside it", labels.FaultsDevice))
	}
}

// leased records a spec's lease of node on path and its wait for it.
func leased(node, path string, waited time.Duration) {
	ginkgo.AddReportEntry(poollock.LeaseEntry, node, ginkgo.ReportEntryVisibilityNever)
	ginkgo.AddReportEntry(poollock.LeasePathEntry, path, ginkgo.ReportEntryVisibilityNever)
	ginkgo.GinkgoWriter.Printf("leased %s on the %s path\n", node, path)
	recordWait(waited)
}

// The pool locks name each holder by its spec, and a waiting spec's log says, at each change, which
// holder or reservation keeps it waiting (the run's JSON report keeps every spec's log).
func init() {
	poollock.Who = func() string {
		r := ginkgo.CurrentSpecReport()
		text := r.LeafNodeText
		if n := len(r.ContainerHierarchyTexts); n > 0 {
			text = r.ContainerHierarchyTexts[n-1] + " " + text
		}
		if runes := []rune(text); len(runes) > 100 {
			text = string(runes[:99]) + "…"
		}
		return text
	}
	poollock.Trace = func(line string) { ginkgo.GinkgoWriter.Println("pool locks: waiting " + line) }
}

// recordWait records a wait for pool locks: the bench keeps it out of the spec's own cost.
func recordWait(waited time.Duration) {
	if waited > 0 {
		ginkgo.AddReportEntry(poollock.WaitEntry, waited.Seconds(), ginkgo.ReportEntryVisibilityNever)
	}
	if waited >= time.Second {
		ginkgo.GinkgoWriter.Printf("waited %s for pool locks another process's spec held\n", waited.Round(time.Second))
	}
}

// on narrows candidates to the spec's leased node (holds:node); without a lease it returns them as they
// are. A leased node that is not among them (it has too few devices for this step) fails the spec:
// the lease is taken from the nodes with a device on the path, so a step needing more must say so.
func (s *Spec[I]) on(candidates []string) []string {
	ginkgo.GinkgoHelper()
	out := s.usable(candidates)
	if len(out) == 0 {
		ginkgo.Fail(fmt.Sprintf("the spec leased %s on the %s path, which is not among the nodes this step can use %v", s.Node, s.Path.Name(), candidates))
	}
	return out
}

// usable is candidates narrowed to the spec's leased node, if it holds one: empty when that node is not
// among them.
func (s *Spec[I]) usable(candidates []string) []string {
	if s.Node == "" {
		return candidates
	}
	if slices.Contains(candidates, s.Node) {
		return []string{s.Node}
	}
	return nil
}

// describePath registers the container "<title> on the <path> path" for one discovered path, labelled
// with the path's label and decorators (scenario label, holds:path, …). Its BeforeEach reads the input
// again, resolves the live path registered under the same name, takes the spec's pool locks (holdPool)
// and creates the spec's namespace (nsPrefix); body registers the container's specs, reading the live
// state from s inside them.
func describePath[I scenarioInput](input func() I, regPath gpu.Path, title, nsPrefix string, decorators []any, body func(s *Spec[I])) {
	pathName := regPath.Name()
	if why := notOnPath(regPath, decorators); why != "" {
		input().base().notExercised(fmt.Sprintf("%s: %s", pathName, title), why)
		return
	}
	args := append([]any{ginkgo.Label(labels.ForPath(pathName))}, decorators...)
	s := &Spec[I]{}
	args = append(args, func() {
		ginkgo.BeforeEach(func(ctx context.Context) {
			s.In = input()
			s.Env = s.In.base().Env
			s.Path = pathByName(s.In.base().Paths, pathName)
			gomega.Expect(s.Path).NotTo(gomega.BeNil(), "path %s vanished between registration and run", pathName)
			s.Node, s.unlease, s.stopsLocks = "", nil, nil
			if specLabels := ginkgo.CurrentSpecReport().Labels(); slices.Contains(specLabels, labels.StopsNode) {
				// It takes them with its node's (stopping), before it creates anything.
				s.stopsLocks = poolHold(specLabels, pathName, s.In.base()).locks
			} else {
				s.Node = holdPool(ctx, s.Env, pathName, s.In.base())
			}
			// An on:node spec's lease (taken later, by lease) is released after the namespace's cleanup,
			// registered below, so it runs before this. An on:node spec that ran to its end without a
			// lease put its pods beside node holders: that is the spec's bug, and fails it.
			ginkgo.DeferCleanup(func() {
				if s.unlease != nil {
					s.unlease()
					s.unlease = nil
					return
				}
				report := ginkgo.CurrentSpecReport()
				if report.Failed() || report.State == types.SpecStateSkipped {
					return
				}
				switch l := report.Labels(); {
				case slices.Contains(l, labels.OnNode):
					ginkgo.Fail(fmt.Sprintf("the spec declares takes(Takes{Devices: FewOnOneNode}) (label %s) but never leased a node (Spec.lease) before it created pods, which then ran beside the holders of the path's nodes", labels.OnNode))
				case slices.Contains(l, labels.LeasesNodes):
					ginkgo.Fail(fmt.Sprintf("the spec declares takes(Takes{Devices: WholeNodes}) (label %s) but never leased its nodes (Spec.leaseNodes) before it created pods, which then ran beside the holders of the path's nodes", labels.LeasesNodes))
				}
			})
			s.NS = s.Env.NewNamespace(ctx, nsPrefix).Name
		})
		body(s)
	})
	ginkgo.Describe(fmt.Sprintf("%s on the %s path", title, pathName), args...)
}

// notOnPath is why the scenario named in decorators' labels registers no spec on path (its
// NotOnExtendedDRA on that path), "" when it does.
func notOnPath(path gpu.Path, decorators []any) string {
	if path.Name() != config.PathExtendedDRA {
		return ""
	}
	for _, d := range decorators {
		if l, ok := d.(ginkgo.Labels); ok {
			for _, name := range l {
				if scenario, ok := strings.CutPrefix(name, labels.ScenarioPrefix); ok && notOnExtendedDRA[scenario] != "" {
					return notOnExtendedDRA[scenario]
				}
			}
		}
	}
	return ""
}

// pathsFor are the paths a scenario that loops over the paths itself (sharing) uses: b's paths less extended-resource-dra where the scenario says it does not run there (recorded, with why).
func (b Base) pathsFor(scenario string) []gpu.Path {
	why := notOnExtendedDRA[scenario]
	if why == "" {
		return b.Paths
	}
	return slices.DeleteFunc(slices.Clone(b.Paths), func(p gpu.Path) bool {
		if p.Name() != config.PathExtendedDRA {
			return false
		}
		b.notExercised(p.Name()+": "+scenario, why)
		return true
	})
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
// claims are gone), as poolHold plans them. It returns the node leased for a spec labelled holds:node
// ("" for the others). In one process nothing ever waits; with several (--procs), a spec that holds one
// path, or one node of it, runs beside other specs instead of alone, as Serial would.
func holdPool(ctx context.Context, env *testenv.Env, path string, b Base) string {
	ginkgo.GinkgoHelper()
	plan := poolHold(ginkgo.CurrentSpecReport().Labels(), path, b)
	// One request: a holds:node spec holds its path only once it has its node too (while every node is
	// leased, a gang of the path is not kept off it by the wait).
	held, waited, err := poollock.Take(ctx, poollock.Dir(env.Factory.RunID), poollock.Request{Locks: plan.locks, Any: plan.lease, AnyMode: poollock.Exclusive})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "taking the pool locks %v and one of %v", plan.locks, plan.lease)
	ginkgo.DeferCleanup(held.Release)
	if len(plan.lease) == 0 {
		recordWait(waited)
		return ""
	}
	node := lockedNode(held.Chosen())
	leased(node, path, waited)
	return node
}

// nodeLockSep joins a path's lock name and a node's in the node's lock: path-<path>@<node>.
const nodeLockSep = "@"

// nodeLock names the lock of node on path.
func nodeLock(path, node string) string { return "path-" + path + nodeLockSep + node }

// nodeLocks names the locks of nodes on path, in their order.
func nodeLocks(path string, nodes []string) []string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = nodeLock(path, n)
	}
	return names
}

// lockedNode is the node a node lock's name names.
func lockedNode(lock string) string {
	_, node, _ := strings.Cut(lock, nodeLockSep)
	return node
}

// stopsLock is the lock of the specs that stop a node or its kubelet (stops:node, exclusive) and of
// those whose outcome reads every node's state without using a device (devices:none, shared): one node
// stops at a time, and never under a diagnosis of the whole pool.
const stopsLock = "node-stops"

// faultsLock is the lock of the specs that fail a device (faults:device, shared) and of the upgrade
// rehearsal (holds:canary, exclusive), which compares what every known-good node offers before and after.
// The rehearsal takes it with the stops lock at once (poollock.Take), so it never holds it while it waits
// for the node stoppers ahead of it (taken first, it would keep every faults:device spec waiting through
// them).
const faultsLock = "node-unhealthy-devices"

// canaryLock is the lock of the canary pool's rehearsals (holds:canary, exclusive, until the rollback):
// the driver upgrade drains and upgrades the canary and fills its nodes in its application checks, and the
// DRA driver's roll keeps pods with claims starting there. Where the canary is not in the GPU pool (the
// local cluster's gpuconform-worker5) no node lock keeps them apart, and the upgrade's "exclusivity (a
// filled node)" check on the canary would find devices held by the DRA roll's pods.
const canaryLock = "canary-pool"

// poolPlan is how a spec holds the pool locks: locks, each in its mode, then (holds:node) one of lease
// exclusive.
type poolPlan struct {
	locks []poollock.Lock
	lease []string
}

// poolHold plans the locks of a spec with specLabels on path. Every path has a lock (path-<path>) and
// one per node of the GPU pool (path-<path>@<node>):
//   - a spec takes its path's and every node's of the path shared: its pods may go to any of them;
//   - holds:node takes its path's shared and leases one node with a device on the path exclusive: its
//     pods stay there, so holders of different nodes run side by side, and no plain spec runs beside;
//   - on:node takes its path's shared, then (Spec.lease) one of the nodes its pods can use shared: it
//     runs beside plain specs, on:node specs and holders of the path's other nodes;
//   - devices:none takes its path's shared and the stops lock shared: its pods never get a device, so it
//     runs beside every node's holders, but not beside a node that stops (its diagnosis reads every node);
//   - leases:nodes takes its path's shared, then (Spec.leaseNodes) as many of the path's nodes as it
//     needs exclusive, all at once: its pods stay there (a gang's workers), so it runs beside holders
//     and stoppers of the other nodes;
//   - holds:path takes its path's exclusive (its pods go wherever Kueue puts them on the path);
//   - stops:node takes the stops lock exclusive and every path's shared (its own path exclusive with
//     holds:path), then,
//     once it knows the node (Spec.stopping), that node's lock on every path exclusive: the other
//     nodes' specs go on, the specs that need the whole pool wait;
//   - holds:nodes takes every path's exclusive (it measures a node);
//   - faults:device takes the faults lock shared as well, beside its other locks.
//
// The upgrade rehearsal (holds:canary) is planned by canaryHold.
func poolHold(specLabels []string, path string, b Base) poolPlan {
	plan := pathHold(specLabels, path, b)
	if slices.Contains(specLabels, labels.FaultsDevice) {
		plan.locks = append([]poollock.Lock{{Name: faultsLock, Mode: poollock.Shared}}, plan.locks...)
	}
	return plan
}

// pathHold is poolHold without the faults lock.
func pathHold(specLabels []string, path string, b Base) poolPlan {
	domain := path
	if p := pathByName(b.Paths, path); p != nil {
		domain = gpu.DeviceDomain(p)
	}
	pathLock := "path-" + domain
	has := func(l string) bool { return slices.Contains(specLabels, l) }
	every := func(mode poollock.Mode) []poollock.Lock {
		var out []poollock.Lock
		for _, p := range b.Paths {
			if l := (poollock.Lock{Name: "path-" + gpu.DeviceDomain(p), Mode: mode}); !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
		return out
	}
	switch {
	case has(labels.HoldsNodes):
		return poolPlan{locks: every(poollock.Exclusive)}
	case has(labels.StopsNode):
		locks := append([]poollock.Lock{{Name: stopsLock, Mode: poollock.Exclusive}}, every(poollock.Shared)...)
		if has(labels.HoldsPath) {
			locks = append(locks, poollock.Lock{Name: pathLock, Mode: poollock.Exclusive}) // the stronger mode wins
		}
		return poolPlan{locks: locks}
	case has(labels.HoldsPath):
		return poolPlan{locks: []poollock.Lock{{Name: pathLock, Mode: poollock.Exclusive}}}
	case has(labels.NoDevices):
		return poolPlan{locks: []poollock.Lock{{Name: stopsLock, Mode: poollock.Shared}, {Name: pathLock, Mode: poollock.Shared}}}
	case has(labels.OnNode), has(labels.LeasesNodes):
		// It leases one node shared (Spec.lease), or its nodes exclusive (Spec.leaseNodes), later.
		return poolPlan{locks: []poollock.Lock{{Name: pathLock, Mode: poollock.Shared}}}
	}
	// The nodes both kinds below name are the same: the GPU pool's with a device on the path, as discovery
	// saw them (every process of the run discovered the same).
	var locks []string
	if p := pathByName(b.Paths, path); p != nil {
		locks = nodeLocks(domain, b.eligible(p, 1))
	}
	if has(labels.HoldsNode) {
		if len(locks) == 0 { // no node has a device on the path (the spec will say so): hold the path
			return poolPlan{locks: []poollock.Lock{{Name: pathLock, Mode: poollock.Exclusive}}}
		}
		return poolPlan{locks: []poollock.Lock{{Name: pathLock, Mode: poollock.Shared}}, lease: locks}
	}
	return poolPlan{locks: poollock.Each(append([]string{pathLock}, locks...), poollock.Shared)}
}

// uniqueLocks keeps each lock name once, at its first place, in the strongest mode it was asked in.
func uniqueLocks(locks []poollock.Lock) []poollock.Lock {
	var out []poollock.Lock
	for _, l := range locks {
		i := slices.IndexFunc(out, func(o poollock.Lock) bool { return o.Name == l.Name })
		switch {
		case i < 0:
			out = append(out, l)
		case l.Mode == poollock.Exclusive:
			out[i].Mode = poollock.Exclusive
		}
	}
	return out
}

// canaryPlan is how the upgrade rehearsal holds the pool locks: locks, and the known-good nodes its pods
// there may use.
type canaryPlan struct {
	locks []poollock.Lock
	good  []string
	// early are the locks the rehearsal lets go once it has compared the known-good pool (letGo): the
	// faults and stops locks, the known-good nodes' and the paths it holds only for them. It keeps the
	// canary's: its application checks and rollback use the canary alone, so devices may fail and nodes
	// stop elsewhere beside them (a stopped known-good node restarts its GPU stack's pods: the rehearsal
	// compares those before it lets go, and only the versions after).
	early []string
}

// canaryHold plans the upgrade rehearsal's locks (holds:canary): the faults and stops locks exclusive
// (no device fails and no node stops while it compares the known-good pool before and after, and no
// devices:none spec diagnoses the pool while the canary is cordoned); on every path, each canary node that
// is in the GPU pool exclusive (the suite's other pods stay off the nodes it drains and upgrades); and on
// its first path, where its pods on the known-good pool go (need devices: a sentinel, the serving
// reserve's replicas after the drain, the reference load), the known-good nodes with the most devices
// there until they have need, each exclusive where it is in the GPU pool. A path it takes a node of, it
// holds shared (a holds:path spec places pods on any of its nodes).
//
// The known-good nodes are fixed ones, taken with the others at once, not leased as holds:node specs
// lease (the first to come free): the rehearsal's pods there need the most devices.
//
// The faults and stops locks, the known-good nodes' locks and the paths held for them alone are early
// (canaryPlan): the rehearsal needs them until it has compared the known-good pool, not through the
// canary's application checks and rollback.
func canaryHold(b Base, canary, good []string, need int64) canaryPlan {
	plan := canaryPlan{locks: []poollock.Lock{{Name: faultsLock, Mode: poollock.Exclusive}, {Name: stopsLock, Mode: poollock.Exclusive}, {Name: canaryLock, Mode: poollock.Exclusive}},
		early: []string{faultsLock, stopsLock}}
	for i, p := range b.Paths {
		pool := b.eligible(p, 1)
		var nodes []string
		for _, n := range canary {
			if slices.Contains(pool, n) {
				nodes = append(nodes, n)
			}
		}
		canaryHere := len(nodes) > 0
		if i == 0 {
			c := p.Capacity()
			byDevices := slices.DeleteFunc(slices.Clone(good), func(n string) bool { return c[n] == 0 })
			slices.SortStableFunc(byDevices, func(x, y string) int { return cmp.Compare(c[y], c[x]) })
			var have int64
			for _, n := range byDevices {
				if have >= need && len(plan.good) > 0 {
					break
				}
				plan.good = append(plan.good, n)
				have += c[n]
				if slices.Contains(pool, n) {
					nodes = append(nodes, n)
					plan.early = append(plan.early, nodeLock(gpu.DeviceDomain(p), n))
				}
			}
		}
		if len(nodes) == 0 {
			continue
		}
		plan.locks = append(plan.locks, poollock.Lock{Name: "path-" + gpu.DeviceDomain(p), Mode: poollock.Shared})
		if !canaryHere {
			plan.early = append(plan.early, "path-"+gpu.DeviceDomain(p))
		}
		for _, n := range nodes {
			plan.locks = append(plan.locks, poollock.Lock{Name: nodeLock(gpu.DeviceDomain(p), n), Mode: poollock.Exclusive})
		}
	}
	// A path that hands out another's devices (extended-resource-dra) names that path's locks again.
	plan.locks = uniqueLocks(plan.locks)
	var early []string
	for _, l := range plan.early {
		if !slices.Contains(early, l) {
			early = append(early, l)
		}
	}
	plan.early = early
	return plan
}

// holdCanary takes the upgrade rehearsal's pool locks (canaryHold) and releases them after its cleanup,
// once the canary is rolled back and uncordoned and its pods are gone. It returns the known-good nodes
// the rehearsal's pods may use, and letGo, which lets the plan's early locks go once the rehearsal's pods
// on those nodes are gone (before its cleanup; once however often it is called) and records how long it
// held them (poollock.LeaseHeldEntry: the bench counts that in the chain and on the known-good node).
func holdCanary(ctx context.Context, env *testenv.Env, b Base, canary, good []string, need int64) (forPods []string, letGo func()) {
	ginkgo.GinkgoHelper()
	plan := canaryHold(b, canary, good, need)
	held, waited, err := poollock.HoldSet(ctx, poollock.Dir(env.Factory.RunID), plan.locks)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "taking the pool locks %v", plan.locks)
	ginkgo.DeferCleanup(held.Release)
	heldAt := time.Now()
	counted := ""
	if len(plan.good) > 0 {
		if first := nodeLock(gpu.DeviceDomain(b.Paths[0]), plan.good[0]); slices.ContainsFunc(plan.locks, func(l poollock.Lock) bool { return l.Name == first }) {
			counted = first
		}
	}
	letGo = func() {
		if held.Holds(stopsLock) {
			ginkgo.AddReportEntry(poollock.LeaseHeldEntry, time.Since(heldAt).Seconds(), ginkgo.ReportEntryVisibilityNever)
		}
		held.Drop(plan.early...)
	}
	if counted == "" {
		recordWait(waited)
	} else {
		leased(plan.good[0], b.Paths[0].Name(), waited) // the bench counts the rehearsal on that node
	}
	if len(plan.good) == 0 {
		return good, letGo
	}
	return plan.good, letGo
}

// FaultNeeds is what a spec that fails a node or a device and resumes the work needs: the failure
// scenario's specs and the gang's failed-worker spec embed it.
type FaultNeeds struct {
	// Faults injects node and device faults; its providers are nil with the reason where the cluster
	// has none.
	Faults *faults.Injector
	// Disruptive is the user's opt-in to specs that change nodes.
	Disruptive bool
	// Checkpoints is storage that outlives a node (none: CheckpointsWhy); without it the resume half of
	// the checks is not exercised and the reschedule half still runs.
	Checkpoints    checkpoints.Storage
	CheckpointsWhy string
	// EvictAfter is the training pods' tolerationSeconds for the not-ready and unreachable taints.
	EvictAfter time.Duration
}

// faultNeedsOf reads the run's fault providers, opt-in, checkpoint storage and eviction toleration.
func faultNeedsOf(r *suite.Run) FaultNeeds {
	return FaultNeeds{Faults: r.Faults(), Disruptive: r.Config.Disruptive, Checkpoints: r.Checkpoints, CheckpointsWhy: r.CheckpointsWhy,
		EvictAfter: r.Config.Faults.EvictionToleration.Duration}
}
