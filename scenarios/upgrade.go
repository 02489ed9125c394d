package scenarios

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	gtypes "github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/checkpoints"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/faults"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/upgrade"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/internal/workload/train"
)

// UpgradeInput is the input of UpgradeSpec.
type UpgradeInput struct {
	Base
	// Disruptive is the user's opt-in.
	Disruptive bool
	// Canary are the nodes the rehearsal upgrades; KnownGood the GPU nodes it must leave untouched.
	Canary, KnownGood []string
	// GoodForPods are the known-good nodes the rehearsal's own pods there (sentinel, serving reserve,
	// reference load) may use: those it holds (holdCanary), or KnownGood when none is in the GPU pool.
	GoodForPods []string
	// Upgrader changes the driver (nil: UpgraderWhy).
	Upgrader    upgrade.Provider
	UpgraderWhy string
	// To is the target driver version; VersionLabel the node label that reports it.
	To, VersionLabel string
	// Checkpoints is storage for the short resume job on the canary pool (none: a restart is checked).
	Checkpoints checkpoints.Storage
	// KueuePresent and ExistingLocalQueue: the multi-worker job of the application check queues through Kueue.
	KueuePresent       bool
	ExistingLocalQueue string
	// SharingModes are the nodes' sharing modes (the application check runs the canary's).
	SharingModes []cluster.NodeSharingMode
	// Load is the representative load compared on the canary and the known-good pool.
	Load UpgradeLoad
	// ServingReplicas and ServingMin size the serving reserve kept through the drain (0 replicas: none).
	ServingReplicas, ServingMin int
	// KeepUpgraded leaves a canary that passed on the new version.
	KeepUpgraded bool
}

const upgradeName = "upgrade"

// Upgrade is the driver-upgrade rehearsal on the canary pool (UpgradeSpec).
var Upgrade = Define(Scenario{Name: upgradeName, Title: "an upgrade rehearsed on the canary pool leaves it working and the known-good pool untouched",
	Required: true, Measured: true, Needs: suite.Needs{Disruptive: true, CanaryPool: true}},
	func(r *suite.Run) UpgradeInput {
		u := r.Upgrade
		replicas, minAvailable := r.Config.Upgrade.ServingReplicas()
		return UpgradeInput{Base: baseOf(r), Disruptive: r.Config.Disruptive, Canary: r.Caps.Pools.Canary.Nodes, KnownGood: r.KnownGood(),
			Upgrader: u.Provider, UpgraderWhy: u.Why, To: u.To, VersionLabel: u.VersionLabel, Checkpoints: r.Checkpoints,
			KueuePresent: r.KueueUsable, ExistingLocalQueue: r.ExistingLocalQueue(), SharingModes: r.Caps.SharingModes,
			Load: loadOf(r), ServingReplicas: replicas, ServingMin: minAvailable, KeepUpgraded: r.Config.Upgrade.KeepUpgraded}
	},
	UpgradeSpec)

// UpgradeSpec registers the driver-upgrade rehearsal: the canary pool is cordoned and drained, upgraded
// to the target version alone, must come back reporting it and advertising its devices, and must then run
// GPU pods on every path and a checkpoint/resume job; the known-good pool must be untouched (its driver
// versions and devices, its GPU stack's pods, a sentinel GPU pod holding the same devices through the
// drain, the upgrade and the representative load; the versions again after the canary's checks); then
// the canary is rolled back and checked again. The signoff states "upgrade from X to Y on pool P: GO/NO-GO".
func UpgradeSpec(input func() UpgradeInput) {
	reg := input()
	what := "driver-upgrade rehearsal on the canary pool"
	switch {
	case !reg.Disruptive:
		reg.notExercised(what, "it cordons, drains and upgrades the canary pool; run with --disruptive to include it")
		return
	case len(reg.Canary) == 0:
		reg.notExercised(what, "no canary pool (pools.canary selects no node)")
		return
	case len(reg.KnownGood) == 0:
		reg.notExercised(what, "the canary pool is the only GPU pool: a rehearsal needs a known-good pool to leave untouched")
		return
	case reg.Upgrader == nil:
		reg.notExercised(what, reg.UpgraderWhy)
		return
	case reg.To == "":
		reg.notExercised(what, "no target driver version: give --upgrade-to VERSION")
		return
	case len(reg.Paths) == 0:
		reg.notExercised(what, "no allocation path")
		return
	}
	// holds:canary: the rehearsal holds the canary's nodes, the known-good nodes its pods need, and keeps
	// nodes from stopping and devices from failing (holdCanary); the other specs run beside it.
	ginkgo.Describe("Driver upgrade rehearsal on the canary pool", labels.Of(labels.Scenario(upgradeName)), takes(Takes{Devices: CanaryPool}), func() {
		ginkgo.It(fmt.Sprintf("upgrades the canary pool %v to driver %s and back", reg.Canary, reg.To),
			rehearsalFirst, func(ctx context.Context) {
				ginkgo.By("alone: it comes back with its devices and runs GPU work, the known-good pool is untouched, and the rollback restores it")
				in := input()
				// On the known-good pool: the sentinel, the serving reserve's replicas once drained, the load's reference copy.
				var letGo func()
				in.GoodForPods, letGo = holdCanary(ctx, in.Env, in.Base, in.Canary, in.KnownGood, int64(2+in.ServingReplicas))
				rehearse(ctx, in, in.Env.NewNamespace(ctx, "upgrade").Name, letGo)
			})
	})
}

// nodeState is what the rehearsal compares before and after on one node.
type nodeState struct {
	Version string
	Devices map[string]int64 // path → devices offered
}

// stackPod is a DaemonSet pod (the GPU stack: driver, plugin, DRA driver) on a known-good node.
type stackPod struct {
	Name, Node string
	UID        types.UID
	Restarts   int32
}

func snapshot(ctx context.Context, env *testenv.Env, in UpgradeInput, nodes []string) map[string]nodeState {
	ginkgo.GinkgoHelper()
	out := map[string]nodeState{}
	for _, n := range nodes {
		node, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		st := nodeState{Version: node.Labels[in.VersionLabel], Devices: map[string]int64{}}
		for _, p := range in.Paths {
			c, err := gpu.LiveCapacity(ctx, env.Clients.Kube, p, n)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			st.Devices[p.Name()] = c
		}
		out[n] = st
	}
	return out
}

// stackPods lists the DaemonSet pods on nodes, in every namespace.
func stackPods(ctx context.Context, env *testenv.Env, nodes []string) map[types.UID]stackPod {
	ginkgo.GinkgoHelper()
	out := map[types.UID]stackPod{}
	for _, n := range nodes {
		list, err := env.Clients.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		for _, p := range list.Items {
			if c := metav1.GetControllerOf(&p); c == nil || c.Kind != "DaemonSet" {
				continue
			}
			var restarts int32
			for _, cs := range p.Status.ContainerStatuses {
				restarts += cs.RestartCount
			}
			out[p.UID] = stackPod{Name: p.Namespace + "/" + p.Name, Node: n, UID: p.UID, Restarts: restarts}
		}
	}
	return out
}

// cordon marks nodes unschedulable, recorded under the run (the leftover check finds a forgotten one).
func cordon(ctx context.Context, env *testenv.Env, runID string, nodes []string, on bool) {
	ginkgo.GinkgoHelper()
	for _, n := range nodes {
		var run any
		if on {
			run = runID
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{"gpuconform.io/run": run}}, "spec": map[string]any{"unschedulable": on}})
		_, err := env.Clients.Kube.CoreV1().Nodes().Patch(ctx, n, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "cordon %s=%t", n, on)
	}
}

// drainGPUWork evicts every pod on nodes that uses GPUs (not DaemonSet pods) through the Eviction API,
// which honours PodDisruptionBudgets, and waits until they are gone. An eviction a budget refuses is
// retried, and the time the drain waited for it goes to the serving reserve's record; a budget that can
// never allow one (it wants every pod it selects healthy) ends the drain at once, diagnosed: the suite does
// not force a drain past a budget.
func drainGPUWork(ctx context.Context, env *testenv.Env, in UpgradeInput, nodes []string, reserve *servingReserve) []string {
	ginkgo.GinkgoHelper()
	var evicted []string
	refusedSince := map[string]time.Time{}
	refusals := map[string]int{}
	gpuPod := func(p corev1.Pod) bool {
		if c := metav1.GetControllerOf(&p); c != nil && c.Kind == "DaemonSet" {
			return false
		}
		if len(p.Spec.ResourceClaims) > 0 {
			return true
		}
		for _, c := range p.Spec.Containers {
			for r := range c.Resources.Limits {
				for _, path := range in.Paths {
					if r == path.QuotaResource() {
						return true
					}
				}
			}
		}
		return false
	}
	env.Wait.For(ctx, fmt.Sprintf("the GPU workloads of %v to be drained", nodes), wait.Target{}, env.Timeouts.Cleanup, func(g gomega.Gomega) {
		left := 0
		var blocked []string
		for _, n := range nodes {
			list, err := env.Clients.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			for _, p := range list.Items {
				if !gpuPod(p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
					continue
				}
				left++
				if p.DeletionTimestamp != nil {
					continue
				}
				key := p.Namespace + "/" + p.Name
				err := env.Clients.Kube.CoreV1().Pods(p.Namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
				switch {
				case err == nil:
					if !slices.Contains(evicted, key) {
						evicted = append(evicted, key)
					}
					if t, ok := refusedSince[key]; ok {
						reserve.refused(time.Since(t), refusals[key])
						delete(refusedSince, key)
					}
				case apierrors.IsTooManyRequests(err):
					if _, ok := refusedSince[key]; !ok {
						refusedSince[key] = time.Now()
					}
					refusals[key]++
					if why := budgetNeverAllows(ctx, env, &p); why != "" {
						gomega.StopTrying(fmt.Sprintf("draining %v: the eviction of %s is refused and %s: the drain cannot go on without breaking that budget, and the suite does not force it",
							nodes, key, why)).Now()
					}
					blocked = append(blocked, fmt.Sprintf("%s (%v)", key, err))
				default:
					g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "evicting %s: %v", key, err)
				}
			}
		}
		g.Expect(left).To(gomega.BeZero(), "%d GPU pod(s) still on %v; evictions refused by a PodDisruptionBudget: %s", left, nodes, listOrNone(blocked))
	})
	return evicted
}

// budgetNeverAllows names the PodDisruptionBudget of pod that can never allow an eviction, "" when none
// of its budgets is such: one that wants at least as many healthy pods as it selects (minAvailable equal
// to the replicas, or maxUnavailable 0).
func budgetNeverAllows(ctx context.Context, env *testenv.Env, pod *corev1.Pod) string {
	list, err := env.Clients.Kube.PolicyV1().PodDisruptionBudgets(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, b := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(k8slabels.Set(pod.Labels)) {
			continue
		}
		st := b.Status
		if st.ObservedGeneration == b.Generation && st.DisruptionsAllowed == 0 && st.ExpectedPods > 0 && st.DesiredHealthy >= st.ExpectedPods {
			return fmt.Sprintf("PodDisruptionBudget %s/%s wants %d healthy of the %d pods it selects, so it never allows an eviction", b.Namespace, b.Name, st.DesiredHealthy, st.ExpectedPods)
		}
	}
	return ""
}

// expectUpgraded waits until every node reports version in the label and offers the devices it did before.
func expectUpgraded(ctx context.Context, env *testenv.Env, in UpgradeInput, nodes []string, version string, before map[string]nodeState, why string) {
	ginkgo.GinkgoHelper()
	for _, n := range nodes {
		env.Wait.For(ctx, fmt.Sprintf("%s to report driver %s (%s)", n, version, in.VersionLabel), wait.Target{Kind: "Node", Name: n}, env.Timeouts.StackReady, func(g gomega.Gomega) {
			node, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(node.Labels[in.VersionLabel]).To(gomega.Equal(version), "%s of %s", in.VersionLabel, n)
		})
		for _, p := range in.Paths {
			expectLiveCapacity(ctx, env, p, n, before[n].Devices[p.Name()], why, env.Timeouts.StackReady)
		}
	}
}

// rehearse runs the rehearsal in namespace ns. Its pods on the known-good pool (the sentinel, the
// serving reserve once drained, the load's reference copy) are done once the known-good pool is
// compared after the load; it then deletes them and calls letGo, so that the other specs may use the
// known-good nodes, fail devices and stop nodes while it checks the canary and rolls it back. The
// known-good pool's driver versions are compared again at the end.
func rehearse(ctx context.Context, in UpgradeInput, ns string, letGo func()) {
	env := in.Env
	ownPods := env.SpecSelector() // ns's pods and claims are the rehearsal's (a selector where the namespace is shared)
	canary, good := in.Canary, in.KnownGood
	pool := strings.Join(canary, ",")
	log := &rehearsalLog{}
	// The baseline is the pools as discovery found them: a path still registering again after an earlier
	// spec's restart would read as the known-good pool changing, and weaken what the canary must offer back.
	for _, n := range append(slices.Clone(canary), good...) {
		expectEveryPathBack(ctx, env, in.Paths, n, "as the run found it, before the rehearsal", env.Timeouts.StackReady)
	}
	before := snapshot(ctx, env, in, append(slices.Clone(canary), good...))
	from := before[canary[0]].Version
	verdict := fmt.Sprintf("upgrade from %s to %s on pool %s", from, in.To, pool)
	kept := false
	ginkgo.DeferCleanup(func() {
		if len(log.checks) > 0 {
			ginkgo.AddReportEntry(upgrade.AppCheckEntry, upgrade.FormatAppChecks(log.checks))
		}
		switch {
		case ginkgo.CurrentSpecReport().State.Is(gtypes.SpecStateInterrupted):
			// A signal or the run's own timeout: nothing was found broken (the verdict lists what the
			// cleanup restored).
			ginkgo.AddReportEntry(upgrade.VerdictEntry, verdict+": INTERRUPTED while "+log.step+" (not a finding)")
		case ginkgo.CurrentSpecReport().Failed():
			ginkgo.AddReportEntry(upgrade.VerdictEntry, verdict+": NO-GO (failed: "+cmp.Or(log.failedCheck(), log.step)+")")
		case kept:
			ginkgo.AddReportEntry(upgrade.VerdictEntry, verdict+": GO (the canary pool stays on "+in.To+", --keep-upgraded)")
		default:
			ginkgo.AddReportEntry(upgrade.VerdictEntry, verdict+": GO")
		}
	})
	ginkgo.AddReportEntry("record before", describeStates(before))
	goodStack := stackPods(ctx, env, good)

	log.at("starting a sentinel GPU pod on the known-good pool")
	sentinelPath := in.Paths[0]
	sentinelNode := firstWith(sentinelPath, in.GoodForPods)
	gomega.Expect(sentinelNode).NotTo(gomega.BeEmpty(), "no known-good node of %v has a device on the %s path", in.GoodForPods, sentinelPath.Name())
	sentinel := startHeldPod(ctx, env, sentinelPath, ns, "sentinel", sentinelNode)
	sp, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, sentinel.name, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())

	log.at(fmt.Sprintf("a GPU workload and the serving reserve on the canary pool, to be drained (%s)", canary[0]))
	startHeldPod(ctx, env, sentinelPath, ns, "canary-load", firstWith(sentinelPath, canary))
	reserve := startServingReserve(ctx, in, ns, sentinelPath, in.ServingReplicas, in.ServingMin)

	log.at(fmt.Sprintf("cordoning and draining the canary pool %s", pool))
	cordonAt := time.Now()
	cordon(ctx, env, env.Factory.RunID, canary, true)
	cordoned := testenv.DeferRestore(fmt.Sprintf("canary %s uncordoned", strings.Join(canary, ", ")), func(ctx context.Context) error {
		cordon(ctx, env, env.Factory.RunID, canary, false)
		return nil
	})
	evicted := drainGPUWork(ctx, env, in, canary, reserve)
	ginkgo.AddReportEntry("cordon → drained", fmt.Sprintf("%s (evicted %s)", since(cordonAt), strings.Join(evicted, ", ")))

	log.at(fmt.Sprintf("upgrading the canary pool to %s through %s", in.To, in.Upgrader.Name()))
	appliedAt := time.Now()
	for _, n := range canary {
		gomega.Expect(faults.Mark(ctx, env.Clients.Kube, n, env.Factory.RunID, "upgraded-from="+from, true)).To(gomega.Succeed())
	}
	unmark := func(ctx context.Context) error {
		for _, n := range canary {
			if err := faults.Mark(ctx, env.Clients.Kube, n, env.Factory.RunID, "upgraded-from="+from, false); err != nil {
				return err
			}
		}
		return nil
	}
	// Leave the cluster as it was found, also after a broken upgrade.
	upgraded := testenv.DeferRestore(fmt.Sprintf("canary %s rolled back to driver %s", strings.Join(canary, ", "), from), func(ctx context.Context) error {
		if err := in.Upgrader.Rollback(ctx, canary, from); err != nil {
			return err
		}
		expectUpgraded(ctx, env, in, canary, from, before, "after the rollback")
		return unmark(ctx)
	})
	gomega.Expect(in.Upgrader.Apply(ctx, canary, in.To)).To(gomega.Succeed())
	expectUpgraded(ctx, env, in, canary, in.To, before, "after the upgrade to "+in.To)
	ginkgo.AddReportEntry("upgrade applied → devices advertised", since(appliedAt))
	for _, p := range in.Paths {
		if dra, ok := p.(*gpu.DRA); ok {
			expectSliceDriverVersion(ctx, env, dra, canary, in.To)
		}
	}

	gomega.Expect(cordoned.Now(ctx)).To(gomega.Succeed())
	ginkgo.AddReportEntry("cordon → canary back in service", since(cordonAt))
	if reserve != nil {
		log.at("checking the serving reserve kept through the drain")
		reserve.stop()
	}

	log.at("representative load on the upgraded canary against the known-good pool")
	representativeLoad(ctx, in, sentinelPath)

	log.at("comparing the known-good pool with before")
	after := snapshot(ctx, env, in, append(slices.Clone(canary), good...))
	ginkgo.AddReportEntry("record after", describeStates(after))
	for _, n := range good {
		gomega.Expect(after[n]).To(gomega.Equal(before[n]), "known-good node %s changed during the rehearsal", n)
	}
	for _, n := range canary {
		gomega.Expect(after[n].Version).To(gomega.Equal(in.To), "canary node %s", n)
	}
	ginkgo.AddReportEntry("record diff", diffStates(before, after))
	gomega.Expect(stackPods(ctx, env, good)).To(gomega.Equal(goodStack), "the GPU stack's pods on the known-good pool were replaced or restarted")
	now, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, sentinel.name, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "the sentinel pod %s is gone", sentinel.name)
	gomega.Expect(now.UID).To(gomega.Equal(sp.UID))
	gomega.Expect(now.Status.Phase).To(gomega.Equal(corev1.PodRunning), "sentinel %s", sentinel.name)
	for _, cs := range now.Status.ContainerStatuses {
		gomega.Expect(cs.RestartCount).To(gomega.BeZero(), "the sentinel's container %s restarted", cs.Name)
	}
	given, err := sentinelPath.Given(ctx, givenInput(env, now, nil))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	if !given.CountOnly {
		gomega.Expect(gpu.SameDevices(given.Normalize(sentinel.report.Devices), given.Devices)).To(gomega.BeTrue(),
			"the sentinel saw %s at start; %s now says %s", gpu.FormatDevices(sentinel.report.Devices), given.Source, gpu.FormatDevices(given.Devices))
	}

	log.at("letting the known-good pool go: the sentinel and the serving reserve are deleted, and the other specs may use its nodes, fail devices and stop nodes while the canary is checked")
	if reserve != nil {
		// Foreground: its ReplicaSet goes before the Deployment, so no replica comes back behind the delete below.
		gomega.Expect(env.Clients.Kube.AppsV1().Deployments(ns).Delete(ctx, reserve.name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})).To(gomega.Succeed())
	}
	gomega.Expect(env.Clients.Kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: ownPods})).To(gomega.Succeed())
	env.WaitDevicesFree(ctx, ns, ownPods)
	letGo()

	canaryApplicationCheck(ctx, in, log, sentinelPath)

	// Not the stack pods again: a node stopped beside the canary's checks restarts its pods.
	log.at("comparing the known-good pool's driver versions with before, again after the canary's checks")
	for _, n := range good {
		node, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(node.Labels[in.VersionLabel]).To(gomega.Equal(before[n].Version), "known-good node %s changed its driver version (%s) during the rehearsal", n, in.VersionLabel)
	}

	if in.KeepUpgraded {
		log.at("keeping the canary pool on " + in.To + " (--keep-upgraded)")
		gomega.Expect(unmark(ctx)).To(gomega.Succeed())
		upgraded.Done()
		kept = true
		ginkgo.AddReportEntry("kept upgraded", fmt.Sprintf("the canary pool %s stays on driver %s (--keep-upgraded); its rollback to %s is the provider's, %s", pool, in.To, from, in.Upgrader.Name()))
		return
	}
	log.at("rolling the canary pool back to " + from)
	rbAt := time.Now()
	gomega.Expect(upgraded.Now(ctx)).To(gomega.Succeed())
	ginkgo.AddReportEntry("rollback → devices advertised", since(rbAt))
	node := firstWith(sentinelPath, canary)
	held := runOnceDevicesBack(ctx, env, sentinelPath, ns, node, "rolled-back", "after the rollback to "+from)
	ginkgo.AddReportEntry("after the rollback", fmt.Sprintf("%s on %s got a device", held, node))
}

// canaryResumedStepTime paces the canary's resumed job: nothing reads its replacement while it runs.
const canaryResumedStepTime = 100 * time.Millisecond

// canaryResume runs a short checkpointing job on the canary pool, fails its pod after a checkpoint and
// requires the replacement to resume from it (or, without storage that outlives a pod, to restart).
func canaryResume(ctx context.Context, in UpgradeInput, ns string, path gpu.Path, canary []string) {
	ginkgo.GinkgoHelper()
	env := in.Env
	created := false
	resume := ensureCheckpointStorage(ctx, env, ns, in.Checkpoints, &created)
	t := training{Name: "canary-train", Steps: 20, Every: trainEvery, StepTime: preemptStepTime, ResumedStepTime: canaryResumedStepTime, Storage: in.Checkpoints, Nodes: canary}
	w, workID := t.build(env, ns, path)
	obj := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	job := env.Create(ctx, obj).(*batchv1.Job)
	pod := pods.ExpectJobPodStarted(ctx, env, job)
	last := expectCheckpoint(ctx, env, ns, pod.Name, trainEvery)
	gomega.Expect(env.Clients.Kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})).To(gomega.Succeed())
	repl := expectReplacement(ctx, env, job, pod.Name)
	pods.ExpectJobComplete(ctx, env, job)
	sum := trainSummary(ctx, env, ns, repl.Name)
	ginkgo.AddReportEntry("canary checkpoint/resume", fmt.Sprintf("resumed=%t from step %d (%s), digest ok=%t", sum.Resumed, sum.ResumedFrom, sum.ResumedReason, sum.StateDigest == train.Digest(workID, t.Steps)))
	if resume {
		gomega.Expect(sum.Resumed).To(gomega.BeTrue(), "the canary job did not resume from its checkpoint: %+v", sum)
		gomega.Expect(sum.ResumedFrom).To(gomega.BeNumerically(">=", last))
	}
	gomega.Expect(sum.StateDigest).To(gomega.Equal(train.Digest(workID, t.Steps)))
}

// expectSliceDriverVersion checks the DRA driver's slices on the nodes publish the target version in the
// driverVersion attribute (NVIDIA's DRA driver publishes it; a driver that does not is noted).
func expectSliceDriverVersion(ctx context.Context, env *testenv.Env, dra *gpu.DRA, nodes []string, version string) {
	ginkgo.GinkgoHelper()
	want := semverOf(version)
	if want == "" {
		ginkgo.AddReportEntry("DRA driverVersion", fmt.Sprintf("%q is not a numeric version; the slices' driverVersion attribute is not compared", version))
		return
	}
	for _, n := range nodes {
		env.Wait.For(ctx, fmt.Sprintf("the DRA slices of %s to publish driverVersion %s", n, want), wait.Target{Kind: "Node", Name: n}, env.Timeouts.StackReady, func(g gomega.Gomega) {
			list, err := env.Clients.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			seen := 0
			for _, s := range list.Items {
				if !slices.Contains(strings.Split(dra.Driver, ","), s.Spec.Driver) {
					continue
				}
				for _, d := range s.Spec.Devices {
					if a, ok := d.Attributes["driverVersion"]; ok && a.VersionValue != nil {
						seen++
						g.Expect(*a.VersionValue).To(gomega.Equal(want), "device %s of %s", d.Name, n)
					}
				}
			}
			if seen == 0 {
				ginkgo.AddReportEntry("DRA driverVersion", fmt.Sprintf("the DRA driver publishes no driverVersion attribute on %s; only the node label is checked", n))
			}
		})
	}
}

func firstWith(p gpu.Path, nodes []string) string {
	for _, n := range nodes {
		if p.Capacity()[n] > 0 {
			return n
		}
	}
	return ""
}

func describeStates(m map[string]nodeState) string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(m)) {
		st := m[n]
		var devs []string
		for _, p := range slices.Sorted(maps.Keys(st.Devices)) {
			devs = append(devs, fmt.Sprintf("%s=%d", p, st.Devices[p]))
		}
		out = append(out, fmt.Sprintf("%s: driver %s, %s", n, st.Version, strings.Join(devs, " ")))
	}
	return strings.Join(out, "; ")
}

func diffStates(before, after map[string]nodeState) string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(before)) {
		b, a := before[n], after[n]
		if b.Version != a.Version {
			out = append(out, fmt.Sprintf("%s: driver %s → %s", n, b.Version, a.Version))
		}
		for p, c := range b.Devices {
			if a.Devices[p] != c {
				out = append(out, fmt.Sprintf("%s: %s devices %d → %d", n, p, c, a.Devices[p]))
			}
		}
	}
	if len(out) == 0 {
		return "no change"
	}
	return strings.Join(out, "; ")
}
