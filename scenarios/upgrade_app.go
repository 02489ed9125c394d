package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/upgrade"
	"gpuconform.io/gpuconform/internal/textcut"
)

// rehearsalLog is what the rehearsal has done so far: the step in force, which a NO-GO verdict names, and
// the rows of the application check it ran on the upgraded canary pool.
type rehearsalLog struct {
	step   string
	checks []upgrade.AppCheck
	// standIn, set by a check's body, says what the check did instead of the real thing (a device test
	// without libcuda); its row then reads passed as a stand-in, never plainly passed.
	standIn string
}

// at starts a step of the rehearsal.
func (l *rehearsalLog) at(step string) {
	l.step = step
	ginkgo.By(step)
}

// check runs one application check on the upgraded canary and records its row. The row reads FAILED
// until body returns: a failed expectation leaves body early, and the verdict names the row.
func (l *rehearsalLog) check(name, path, node string, body func()) {
	l.checks = append(l.checks, upgrade.AppCheck{Check: name, Path: path, Node: node, Result: upgrade.AppCheckFailed})
	i := len(l.checks) - 1
	prev := l.step
	l.at(fmt.Sprintf("application check %q on the %s path on the upgraded canary (%s)", name, path, node))
	l.standIn = ""
	body()
	l.checks[i].Result = passedResult(l.standIn)
	l.step = prev
}

// passedResult is a passed check's row: passed, or passed as a stand-in with what it did instead (one
// line: a row is a line of the table's text).
func passedResult(standIn string) string {
	if standIn != "" {
		return upgrade.AppCheckStandIn + ": " + textcut.Line(standIn, 300)
	}
	return upgrade.AppCheckPassed
}

// notApplicable records a check the canary pool does not offer the shape for, and why.
func (l *rehearsalLog) notApplicable(name, path, why string) {
	l.checks = append(l.checks, upgrade.AppCheck{Check: name, Path: path, Result: upgrade.AppCheckNotApplicable + ": " + why})
}

// failedCheck is the first application check that failed, "" when none did.
func (l *rehearsalLog) failedCheck() string {
	for _, c := range l.checks {
		if c.Result == upgrade.AppCheckFailed {
			return fmt.Sprintf("application check %q on the %s path (%s)", c.Check, c.Path, c.Node)
		}
	}
	return ""
}

// canaryApplicationCheck runs, on the upgraded canary pool, the same checks the suite runs on the GPU
// pool (the rehearsal reports log's rows, also when a check failed): per path, a first pod once the new
// plugin serves, the device identity of a running pod against the kubelet or the claim, exclusivity on a
// filled node, isolation of the containers without devices, the vendor's device test, a multi-worker job
// where the pool can hold one, and the sharing checks where the pool shares GPUs; then a checkpointing
// job must resume. Each check runs in its own namespace, whose pods are gone before the next check
// starts, so that each finds the canary's devices free.
//
// The paths' checks run at once, one goroutine per device domain: paths with devices of their own run
// beside each other (as the pool locks assume, framework/poollock), and a path that hands out another's
// devices (extended-resource-dra, the DRA driver's) runs after that path, in the same goroutine: the
// exclusivity check fills a node, which two paths on one set of devices cannot do at once. The rehearsal
// holds the canary's nodes on every path (holdCanary). A failed check ends the other paths' checks too
// (their context is cancelled) and the rehearsal with them; the rows are the paths' in order, each
// path's as it ran them.
func canaryApplicationCheck(ctx context.Context, in UpgradeInput, log *rehearsalLog, resumePath gpu.Path) {
	env := in.Env
	log.at("application checks on the upgraded canary, every path's at once")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logs := make([]*rehearsalLog, len(in.Paths))
	var mu sync.Mutex
	first := -1 // the path whose check failed (or skipped) first; the others' were stopped by it
	var wg sync.WaitGroup
	for i := range in.Paths {
		logs[i] = &rehearsalLog{}
	}
	for _, group := range byDeviceDomain(in.Paths) {
		wg.Go(func() {
			i := group[0] // the path whose checks run now
			// Ginkgo's Fail and Skip record the outcome, then panic to leave the check: GinkgoRecover (deferred
			// first, so it runs last) takes the panic; the function before it notes which path ended first
			// and stops the other paths' checks.
			defer ginkgo.GinkgoRecover()
			defer func() {
				if r := recover(); r != nil {
					mu.Lock()
					if first < 0 {
						first = i
					}
					mu.Unlock()
					cancel()
					panic(r)
				}
			}()
			for _, i = range group {
				canaryPathChecks(ctx, in, logs[i], in.Paths[i])
			}
		})
	}
	wg.Wait()
	log.checks = append(log.checks, mergePathChecks(logs, first)...)
	if first >= 0 {
		// Ginkgo keeps the first outcome (the check's failure or skip); this only ends the rehearsal here.
		ginkgo.Fail("an application check on the upgraded canary failed: " + log.failedCheck())
	}
	log.check("training resume", resumePath.Name(), strings.Join(in.Canary, ","), func() {
		ns := env.NewNamespace(ctx, "upgrade-train").Name
		canaryResume(ctx, in, ns, resumePath, in.Canary)
		deleteAllPods(ctx, env, ns)
	})
}

// byDeviceDomain groups the indices of paths by the devices they hand out (gpu.DeviceDomain), each group in
// the paths' order and the groups in the order of their first path.
func byDeviceDomain(paths []gpu.Path) [][]int {
	var groups [][]int
	at := map[string]int{}
	for i, p := range paths {
		d := gpu.DeviceDomain(p)
		if g, ok := at[d]; ok {
			groups[g] = append(groups[g], i)
			continue
		}
		at[d] = len(groups)
		groups = append(groups, []int{i})
	}
	return groups
}

// mergePathChecks lists the paths' rows in the paths' order. When the checks of path first failed (first
// ≥ 0), another path's row that reads FAILED was stopped by it, and reads interrupted: the verdict must
// name the check that failed, not one whose context ended.
func mergePathChecks(logs []*rehearsalLog, first int) []upgrade.AppCheck {
	var out []upgrade.AppCheck
	for i, l := range logs {
		for _, c := range l.checks {
			if first >= 0 && i != first && c.Result == upgrade.AppCheckFailed {
				c.Result = upgrade.AppCheckInterrupted
			}
			out = append(out, c)
		}
	}
	return out
}

// canaryPathChecks runs canaryApplicationCheck's checks of path p, recording them in log.
func canaryPathChecks(ctx context.Context, in UpgradeInput, log *rehearsalLog, p gpu.Path) {
	env := in.Env
	name := p.Name()
	// The canary nodes with a device on the path; the rows name the first.
	nodes := slices.DeleteFunc(slices.Clone(in.Canary), func(n string) bool { return p.Capacity()[n] == 0 })
	if len(nodes) == 0 {
		log.notApplicable("every check", name, "no canary node offers a device on this path")
		return
	}
	node := nodes[0]
	run := func(check string, body func(ns string)) {
		log.check(check, name, node, func() {
			ns := env.NewNamespace(ctx, "upgrade-check").Name
			body(ns)
			deleteAllPods(ctx, env, ns)
		})
	}
	// The kubelet keeps advertising a restarted plugin's devices for a while; a pod admitted before the
	// new plugin registered is rejected, recorded and retried (runOnceDevicesBack).
	run("devices back", func(ns string) {
		held := runOnceDevicesBack(ctx, env, p, ns, node, "canary-"+name, "after the upgrade to "+in.To)
		ginkgo.AddReportEntry("canary allocation ("+name+")", fmt.Sprintf("%s on %s got a device", held, node))
	})
	// The allocation scenario's checks, by name.
	for _, c := range deviceChecks {
		run(c.name, func(ns string) {
			log.standIn = c.run(ctx, checkOn{env: env, path: p, ns: ns, nodes: nodes, devices: 1, deviceTest: in.DeviceTest})
		})
	}
	switch placement, why := canaryGangPlacement(in, p); {
	case why != "":
		log.notApplicable("multi-worker job", name, why)
	default:
		run("multi-worker job ("+string(placement)+")", func(ns string) {
			gangFits(ctx, env, p, ns, in.ExistingLocalQueue, placement, in.Canary)
		})
	}
	modes, exclusive := sharingModesOn(in.SharingModes, name, in.Canary)
	if len(modes) == 0 {
		why := "the canary pool shares no GPU on this path"
		if len(exclusive) > 0 {
			why += " (" + strings.Join(exclusive, "; ") + ")"
		}
		log.notApplicable("sharing", name, why)
	}
	for _, m := range modes {
		run("sharing ("+m.Mode+")", func(ns string) {
			canarySharing(ctx, &Spec[UpgradeInput]{In: in, Env: env, Path: p, NS: ns}, m)
		})
	}
}

// canarySharing runs the sharing scenario's check of mode m on the canary node that has it.
func canarySharing(ctx context.Context, s *Spec[UpgradeInput], m cluster.NodeSharingMode) {
	switch m.Mode {
	case cluster.ModeTimeSlicing, cluster.ModeMPS:
		sharedNodeFilled(ctx, s, m)
	case cluster.ModeMIGSingle, cluster.ModeMIGMixed:
		migNodeFilled(ctx, s, m)
	case cluster.ModePartitionable:
		fillParentWithPartitions(ctx, s, m)
	case cluster.ModeConsumable:
		fillSharedGPU(ctx, s, m)
	default:
		ginkgo.Fail(fmt.Sprintf("no sharing check for mode %q", m.Mode))
	}
}

// canaryGangPlacement is where a two-worker job goes on the canary pool: across two nodes where the pool
// has two with a device, else both on one node with two; "" and why when the pool cannot hold one or the
// path does not queue through Kueue.
func canaryGangPlacement(in UpgradeInput, p gpu.Path) (fixtures.Placement, string) {
	if !in.queued(in.KueuePresent, p.Name()) {
		return "", "the path does not submit through Kueue here (no usable Kueue or its queue does not cover " + string(p.QuotaResource()) + ")"
	}
	with, most := 0, int64(0)
	for _, n := range in.Canary {
		if c := p.Capacity()[n]; c > 0 {
			with++
			most = max(most, c)
		}
	}
	switch {
	case with >= 2:
		return fixtures.AcrossNodes, ""
	case most >= 2:
		return fixtures.OneNode, ""
	}
	return "", fmt.Sprintf("the canary pool has one node with %d device(s) on this path: a two-worker job does not fit", most)
}

// deleteAllPods deletes every pod of the namespace and waits until they are gone (one list and watch),
// so the devices they held are free for the next check.
func deleteAllPods(ctx context.Context, env *testenv.Env, ns string) {
	ginkgo.GinkgoHelper()
	gomega.Expect(env.Clients.Kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})).To(gomega.Succeed())
	env.WaitPodsGone(ctx, ns, "")
}
