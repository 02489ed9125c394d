package scenarios

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8swait "k8s.io/apimachinery/pkg/util/wait"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/faults"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/poollock"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/upgrade"
)

// DRAUpgradeInput is the input of DRAUpgradeSpec.
type DRAUpgradeInput struct {
	Base
	// Disruptive is the user's opt-in.
	Disruptive bool
	// Canary are the canary pool's nodes; the rehearsal rolls the DRA plugin on those that publish its
	// driver's devices.
	Canary []string
	// Upgrader rolls the DRA driver's kubelet plugin (nil: UpgraderWhy); To is the version it rolls to.
	Upgrader    upgrade.Provider
	UpgraderWhy string
	To          string
}

const draUpgradeName = "dra-upgrade"

// DRAUpgrade is the DRA driver's rolling-upgrade rehearsal on the canary pool (DRAUpgradeSpec).
var DRAUpgrade = Define(Scenario{Name: draUpgradeName, Title: "a rolling upgrade of the DRA driver's kubelet plugin on the canary pool keeps its devices allocatable and its pods starting",
	NotOnExtendedDRA: "it rolls the DRA driver's kubelet plugin, which the dra path rehearses; the extended-resource path is served by the same plugin",
	Measured:         true, Needs: suite.Needs{Disruptive: true, CanaryPool: true}},
	func(r *suite.Run) DRAUpgradeInput {
		u := r.DRAUpgrade
		return DRAUpgradeInput{Base: baseOf(r), Disruptive: r.Config.Disruptive, Canary: r.Caps.Pools.Canary.Nodes,
			Upgrader: u.Provider, UpgraderWhy: u.Why, To: u.To}
	},
	DRAUpgradeSpec)

// draProbeEvery is how often the rehearsal starts a pod with a claim on a canary node while the plugin
// rolls; draProbesInFlight how many may wait at once on one node (the holder keeps one device).
const (
	draProbeEvery     = time.Second
	draProbesInFlight = 2
	// draSettle keeps probing after the roll, so that claims prepared by the new plugin alone are seen too.
	draSettle = 5 * time.Second
)

// DRAUpgradeSpec registers the DRA driver's rolling-upgrade rehearsal: on the canary nodes that publish
// the DRA path's devices, a pod with a claim holds a device, the driver's ResourceSlices are watched, and
// pods with claims keep starting (one a second, at most two waiting per node) while the upgrade provider
// rolls the kubelet plugin to the target version. GO needs: every canary node runs a new plugin pod of
// the target version, Ready, and none of the old one; no probe pod met FailedPrepareDynamicResources and
// each ran; at least one was started during the roll; no slice was deleted or created and no node offered
// fewer devices at any moment; the holder still runs, unrestarted, with the same device seen from inside.
// A new plugin pod that cannot start (CrashLoopBackOff, an image it cannot get) ends the wait at once and
// names it. The rollback, always, must bring back a Ready plugin pod of the old version on each node with
// its devices published. The signoff states "DRA driver upgrade from X to Y on pool P: GO/NO-GO".
func DRAUpgradeSpec(input func() DRAUpgradeInput) {
	reg := input()
	what := "DRA driver rolling-upgrade rehearsal on the canary pool"
	dra, _ := pathByName(reg.Paths, config.PathDRA).(*gpu.DRA)
	// A node needs a device for its holder and one for the probes.
	var nodes, tooSmall []string
	if dra != nil {
		for _, n := range reg.Canary {
			switch d := len(dra.Devices[n]); {
			case d >= 2:
				nodes = append(nodes, n)
			case d == 1:
				tooSmall = append(tooSmall, n)
			}
		}
	}
	switch {
	case !reg.Disruptive:
		reg.notExercised(what, "it rolls the canary pool's DRA kubelet plugin; run with --disruptive to include it")
		return
	case len(reg.Canary) == 0:
		reg.notExercised(what, "no canary pool (pools.canary selects no node)")
		return
	case dra == nil:
		reg.notExercised(what, "no dra path: no DRA driver publishes GPUs on this cluster")
		return
	case len(nodes) == 0 && len(tooSmall) > 0:
		reg.notExercised(what, fmt.Sprintf("the canary nodes %v publish one device of DeviceClass %s each: the rehearsal needs two on a node (one held through the roll, one for the pods started during it)", tooSmall, dra.DeviceClass))
		return
	case len(nodes) == 0:
		reg.notExercised(what, fmt.Sprintf("no canary node %v publishes a device of DeviceClass %s", reg.Canary, dra.DeviceClass))
		return
	case reg.Upgrader == nil:
		reg.notExercised(what, reg.UpgraderWhy)
		return
	case reg.To == "":
		reg.notExercised(what, "no target version of the DRA kubelet plugin: give --dra-upgrade-to VERSION")
		return
	}
	if len(tooSmall) > 0 {
		reg.notExercised(what+" on "+strings.Join(tooSmall, ", "), "one device of DeviceClass "+dra.DeviceClass+" each: the rehearsal needs two on a node")
	}
	ginkgo.Describe("DRA driver rolling upgrade on the canary pool", labels.Of(labels.Scenario(draUpgradeName)), takes(Takes{Devices: CanaryPool}), func() {
		ginkgo.It(fmt.Sprintf("rolls the DRA kubelet plugin to %s and back while claimed pods start", reg.To), func(ctx context.Context) {
			ginkgo.By(fmt.Sprintf("rolling it on the canary nodes that publish the dra path's devices: %v", nodes))
			in := input()
			holdCanaryNodes(ctx, in.Env, in.Base, nodes)
			rollDRAPlugin(ctx, in, dra, nodes, in.Env.NewNamespace(ctx, "dra-upgrade").Name)
		})
	})
}

// holdCanaryNodes takes the DRA roll's locks (draCanaryLocks) until its cleanup is done.
func holdCanaryNodes(ctx context.Context, env *testenv.Env, b Base, nodes []string) {
	ginkgo.GinkgoHelper()
	locks := draCanaryLocks(b, nodes)
	held, waited, err := poollock.HoldSet(ctx, poollock.Dir(env.Factory.RunID), locks)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "taking the pool locks %v", locks)
	ginkgo.DeferCleanup(held.Release)
	recordWait(waited)
}

// draCanaryLocks are the canary pool's lock (the driver upgrade rehearsal does not run beside the roll)
// and the canary nodes exclusive on every path whose pool has them (and those paths shared): the suite's
// other pods stay off the nodes whose plugin rolls.
func draCanaryLocks(b Base, nodes []string) []poollock.Lock {
	locks := []poollock.Lock{{Name: canaryLock, Mode: poollock.Exclusive}}
	for _, p := range b.Paths {
		pool := b.eligible(p, 1)
		for _, n := range nodes {
			if slices.Contains(pool, n) {
				locks = append(locks, poollock.Lock{Name: "path-" + gpu.DeviceDomain(p), Mode: poollock.Shared},
					poollock.Lock{Name: nodeLock(gpu.DeviceDomain(p), n), Mode: poollock.Exclusive})
			}
		}
	}
	return uniqueLocks(locks)
}

// draHolder is a pod that holds a device through the roll, and what it saw and was given before.
type draHolder struct {
	name, node string
	restarts   int32
	seen       []string
	claims     map[string][]string // claim → allocated devices ("pool/device")
}

// rollDRAPlugin is the rehearsal's body.
func rollDRAPlugin(ctx context.Context, in DRAUpgradeInput, dra *gpu.DRA, nodes []string, ns string) {
	env := in.Env
	kube := env.Clients.Kube
	driver, _, _ := strings.Cut(dra.Driver, ",")

	before, err := upgrade.PluginPods(ctx, kube, nodes)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	for _, n := range nodes {
		gomega.Expect(before[n]).NotTo(gomega.BeEmpty(),
			"no kubelet plugin pod on %s (a DaemonSet's pod that mounts %s): the rehearsal cannot tell whether the DRA driver's plugin was rolled", n, upgrade.PluginRegistryDir)
	}
	ginkgo.AddReportEntry("kubelet plugins before the roll", strings.Join(upgrade.Versions(before), ", "))
	// The version before, as the plugin pods say it where one DaemonSet runs plugin pods on every canary
	// node; otherwise it is read from the DaemonSet whose pods the roll replaces.
	from := upgrade.DriverPluginVersion(before, nodes)
	gomega.Expect(from).NotTo(gomega.Equal(in.To), "the canary's DRA kubelet plugin already runs %s: nothing to roll (a run interrupted before its rollback? `gpuconform cleanup` rolls it back)", in.To)

	ginkgo.By("a pod with a claim holds a device on each canary node through the roll")
	holders := make([]draHolder, len(nodes))
	for i, n := range nodes {
		holders[i].name = createHeldPod(ctx, env, dra, ns, fmt.Sprintf("held-%d", i), n)
		holders[i].node = n
	}
	for i := range holders {
		h := awaitHeldPod(ctx, env, ns, holders[i].name)
		holders[i].seen = h.report.Devices
		holders[i].restarts, holders[i].claims = holderState(ctx, env, ns, holders[i].name)
	}

	watch, err := upgrade.WatchSlices(ctx, kube, driver, nodes)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	probes := startDRAProbes(ctx, env, dra, ns, nodes)

	ginkgo.By(fmt.Sprintf("rolling the DRA kubelet plugin to %s (%s)", in.To, in.Upgrader.Name()))
	start := time.Now()
	var findings []string
	rolledBack := false
	marked := ""
	// Each node is recorded as rolled (faults.DRAUpgradedMark) before anything changes, so that a run
	// interrupted mid-roll is found and rolled back by the next run's leftover cleanup.
	mark := func(ctx context.Context, on bool) {
		for _, n := range nodes {
			gomega.Expect(faults.Mark(ctx, kube, n, env.Factory.RunID, faults.DRAUpgradedMark+marked, on)).To(gomega.Succeed())
		}
	}
	// rollback brings the old version back, also after a failed roll, and says what went wrong ("" nothing).
	rollback := func(ctx context.Context) string {
		rolledBack = true
		ginkgo.By("rolling the DRA kubelet plugin back to " + from)
		began, err := upgrade.PluginPods(ctx, kube, nodes)
		if err != nil {
			return err.Error()
		}
		if err := in.Upgrader.Rollback(ctx, nodes, from); err != nil {
			return fmt.Sprintf("rolling the DRA kubelet plugin on %v back to %s: %v", nodes, from, err)
		}
		if why := waitRoll(ctx, env, began, nodes, from, upgrade.RollbackState); why != "" {
			return "the rollback to " + from + ": " + why
		}
		why := devicesBack(ctx, env, driver, nodes, watch.Initial())
		if why == "" && marked != "" {
			mark(ctx, false)
		}
		return why
	}
	ginkgo.DeferCleanup(func(ctx context.Context) {
		if from != "" && !rolledBack {
			if why := rollback(ctx); why != "" {
				ginkgo.Fail(why)
			}
		}
	})
	if from != "" {
		marked = from
		mark(ctx, true)
	}
	applyErr := in.Upgrader.Apply(ctx, nodes, in.To)
	var rolled time.Duration
	if applyErr != nil {
		findings = append(findings, fmt.Sprintf("the upgrade provider failed: %v", applyErr))
	}
	now, _ := upgrade.PluginPods(ctx, kube, nodes)
	if from == "" {
		from = fromVersion(before, now, in.To)
	}
	if from != "" && marked == "" {
		marked = from
		mark(ctx, true)
	}
	if applyErr == nil {
		if why := waitRoll(ctx, env, before, nodes, in.To, upgrade.RollState); why != "" {
			findings = append(findings, why)
		}
		rolled = time.Since(start)
		if from == "" {
			now, _ = upgrade.PluginPods(ctx, kube, nodes)
			from = fromVersion(before, now, in.To)
		}
	}
	rollEnd := time.Now()
	if applyErr == nil {
		time.Sleep(draSettle)
	}
	results := probes.stop()
	sliceFindings, events := watch.Stop()
	findings = append(findings, sliceFindings...)
	findings = append(findings, judgeProbes(results, start, rollEnd)...)
	ginkgo.AddReportEntry("roll", fmt.Sprintf("%s to %s on %v in %s (provider %s)", orWhat(from, "unknown version"), in.To, nodes, rolled.Round(time.Second), in.Upgrader.Name()))
	ginkgo.AddReportEntry("probe pods", summarizeProbes(results, start, rollEnd))
	ginkgo.AddReportEntry("ResourceSlice events on the canary during the roll", fmt.Sprintf("%d (none deleted or created is the expectation; findings: %d)", events, len(sliceFindings)))
	if applyErr == nil && len(findings) == 0 {
		ginkgo.By("the holders still run, unrestarted, with the devices they had")
		for _, h := range holders {
			findings = append(findings, holderKept(ctx, env, ns, h)...)
		}
	}

	if from != "" {
		if why := rollback(ctx); why != "" {
			findings = append(findings, why)
		}
	}
	verdict := fmt.Sprintf("DRA driver %s upgrade from %s to %s on pool %s", driver, orWhat(from, "unknown"), in.To, strings.Join(nodes, ","))
	if len(findings) > 0 {
		ginkgo.AddReportEntry(upgrade.VerdictEntry, verdict+": NO-GO ("+findings[0]+")")
		ginkgo.Fail("the DRA driver's rolling upgrade on the canary pool failed: " + strings.Join(findings, "; "))
	}
	ginkgo.AddReportEntry(upgrade.VerdictEntry, verdict+": GO")
}

func orWhat(s, what string) string {
	if s == "" {
		return what
	}
	return s
}

// fromVersion is the version the roll moved from: that of the pods from before of the DaemonSet whose new
// pods (of to, or of any version that appeared) replace them; "" when no DaemonSet's pods changed.
func fromVersion(before, now map[string][]upgrade.PluginPod, to string) string {
	for n, ps := range now {
		for _, p := range ps {
			if slices.ContainsFunc(before[n], func(b upgrade.PluginPod) bool { return b.UID == p.UID }) {
				continue
			}
			for _, b := range before[n] {
				if b.DaemonSet == p.DaemonSet && b.Namespace == p.Namespace && b.Version != to {
					return b.Version
				}
			}
		}
	}
	return ""
}

// waitRoll waits until state (upgrade.RollState, upgrade.RollbackState) finds the roll to version done on
// every node and returns "" then; else why not: a pod that cannot start, at once, or what was still
// awaited at the deadline (NodeReturn per node).
func waitRoll(ctx context.Context, env *testenv.Env, before map[string][]upgrade.PluginPod, nodes []string, version string,
	state func(before, now map[string][]upgrade.PluginPod, version string) (bool, string, string)) string {
	timeout := env.Timeouts.NodeReturn * time.Duration(len(nodes))
	var why string
	err := k8swait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		now, err := upgrade.PluginPods(ctx, env.Clients.Kube, nodes)
		if err != nil {
			why = err.Error()
			return false, nil //nolint:nilerr // a failed read is tried again until the deadline; why says it
		}
		done, terminal, progress := state(before, now, version)
		if terminal != "" {
			why = terminal
			return false, errTerminal
		}
		why = progress
		return done, nil
	})
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errTerminal):
		return why
	}
	return fmt.Sprintf("the roll to %s did not complete within %s: %s", version, timeout, why)
}

var errTerminal = errors.New("a pod cannot start")

// holderState reads a holder's restarts and its claims' allocated devices.
func holderState(ctx context.Context, env *testenv.Env, ns, name string) (int32, map[string][]string) {
	ginkgo.GinkgoHelper()
	pod, err := env.GetPod(ctx, ns, name)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	var restarts int32
	for _, cs := range pod.Status.ContainerStatuses {
		restarts += cs.RestartCount
	}
	claims := map[string][]string{}
	for _, c := range gpu.ClaimNames(pod) {
		claim, err := env.Clients.Kube.ResourceV1().ResourceClaims(ns).Get(ctx, c, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		var devs []string
		if a := claim.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				devs = append(devs, r.Pool+"/"+r.Device)
			}
		}
		slices.Sort(devs)
		claims[c] = devs
	}
	return restarts, claims
}

// holderKept says how a holder changed through the roll (nothing when it still runs, unrestarted, its
// claims allocated the same devices, and the probe run again inside it sees the devices it saw).
func holderKept(ctx context.Context, env *testenv.Env, ns string, h draHolder) []string {
	pod, err := env.GetPod(ctx, ns, h.name)
	if err != nil {
		return []string{fmt.Sprintf("holder %s: %v", h.name, err)}
	}
	if pod.Status.Phase != corev1.PodRunning {
		return []string{fmt.Sprintf("holder %s on %s is %s after the roll", h.name, h.node, pod.Status.Phase)}
	}
	restarts, claims := holderState(ctx, env, ns, h.name)
	var out []string
	if restarts != h.restarts {
		out = append(out, fmt.Sprintf("holder %s on %s restarted during the roll (%d → %d restarts)", h.name, h.node, h.restarts, restarts))
	}
	for c, devs := range h.claims {
		if !slices.Equal(devs, claims[c]) {
			out = append(out, fmt.Sprintf("holder %s's claim %s was allocated %v before the roll and %v after", h.name, c, devs, claims[c]))
		}
	}
	stdout, stderr, err := pods.Exec(ctx, env, ns, h.name, fixtures.WorkloadContainer, append([]string{fixtures.WorkloadBinary}, fixtures.ProbeArgs(len(h.seen))...))
	report, perr := gpu.ParseProbe(stdout)
	switch {
	case perr != nil:
		out = append(out, fmt.Sprintf("holder %s: the probe run in it after the roll gave no report (%v; exec error %v; stderr %s)", h.name, perr, err, strings.TrimSpace(stderr)))
	case !slices.Equal(report.Devices, h.seen):
		out = append(out, fmt.Sprintf("holder %s on %s saw %s before the roll and sees %s after (%s)", h.name, h.node, gpu.FormatDevices(h.seen), gpu.FormatDevices(report.Devices), report.Message))
	}
	return out
}

// devicesBack waits until each node offers at least the devices of driver it offered before, and says
// which does not at the deadline ("" all do).
func devicesBack(ctx context.Context, env *testenv.Env, driver string, nodes []string, want map[string]int) string {
	var why string
	err := k8swait.PollUntilContextTimeout(ctx, time.Second, env.Timeouts.NodeReturn, true, func(ctx context.Context) (bool, error) {
		list, err := env.Clients.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driver})
		if err != nil {
			why = err.Error()
			return false, nil //nolint:nilerr // a failed list is tried again until the deadline; why says it
		}
		have := map[string]int{}
		for _, s := range list.Items {
			if s.Spec.NodeName != nil {
				have[*s.Spec.NodeName] += len(s.Spec.Devices)
			}
		}
		for _, n := range nodes {
			if have[n] < want[n] {
				why = fmt.Sprintf("%s offers %d devices of %s in its ResourceSlices after the rollback, %d before the roll", n, have[n], driver, want[n])
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return why
	}
	return ""
}

// draProbe is one probe pod of the rehearsal: a pod with a claim started on a canary node during the roll.
type draProbe struct {
	name, node      string
	created, ended  time.Time
	phase, waiting  string
	failedToPrepare []string // the kubelet's FailedPrepareDynamicResources events on it
	err             string
}

// draProbes starts probe pods until stopped.
type draProbes struct {
	// halt ends the starting of probes; cancel, the probes under way.
	halt    chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	results []draProbe
}

// startDRAProbes starts, every draProbeEvery, a one-device probe pod with a claim on each canary node that
// has fewer than draProbesInFlight waiting, and records how each ended. The pods are made with the client
// (not env.Create, whose cleanup registration belongs to the spec's goroutine); the namespace's deletion
// removes what is left.
func startDRAProbes(ctx context.Context, env *testenv.Env, dra *gpu.DRA, ns string, nodes []string) *draProbes {
	ginkgo.GinkgoHelper()
	templates := make([]*corev1.Pod, len(nodes))
	for i, n := range nodes {
		w := env.Factory.GPUPod(fmt.Sprintf("probe-%d", i), ns).Path(dra).Devices(1).Args(fixtures.ProbeArgs(1)...).OnNodes(n)
		templates[i] = w.Obj()
		for _, pre := range w.Prerequisites() {
			env.Create(ctx, pre)
		}
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &draProbes{halt: make(chan struct{}), cancel: cancel}
	inFlight, most := make([]int, len(nodes)), make([]int, len(nodes))
	for i, n := range nodes {
		most[i] = min(draProbesInFlight, len(dra.Devices[n])-1) // the holder keeps one
	}
	count := 0
	p.wg.Go(func() {
		tick := time.NewTicker(draProbeEvery)
		defer tick.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-p.halt:
				return
			case <-tick.C:
			}
			for i, n := range nodes {
				p.mu.Lock()
				busy := inFlight[i] >= most[i]
				if !busy {
					inFlight[i]++
				}
				p.mu.Unlock()
				if busy {
					continue
				}
				count++
				pod := templates[i].DeepCopy()
				pod.Name = fmt.Sprintf("%s-%d", templates[i].Name, count)
				p.wg.Go(func() {
					r := runDRAProbe(pctx, env, pod, n)
					p.mu.Lock()
					inFlight[i]--
					p.results = append(p.results, r)
					p.mu.Unlock()
				})
			}
		}
	})
	return p
}

// stop ends the probing, waits for the probes under way to end, and returns every probe's outcome.
func (p *draProbes) stop() []draProbe {
	// No new probe; the probes under way finish on their own (each within draProbeRun).
	close(p.halt)
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(draProbeRun + time.Minute):
		p.cancel() // the probes still waiting end now
		<-done
	}
	p.cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	slices.SortFunc(p.results, func(a, b draProbe) int { return a.created.Compare(b.created) })
	return slices.Clone(p.results)
}

// draProbeRun bounds one probe pod: scheduled, prepared, run and ended.
const draProbeRun = 2 * time.Minute

// runDRAProbe creates one probe pod and waits until it ended (or draProbeRun passed), then reads the
// kubelet's events on it.
func runDRAProbe(ctx context.Context, env *testenv.Env, pod *corev1.Pod, node string) draProbe {
	kube := env.Clients.Kube
	r := draProbe{name: pod.Name, node: node, created: time.Now()}
	if _, err := kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		r.err = "creating it: " + err.Error()
		r.ended = time.Now()
		return r
	}
	wctx, cancel := context.WithTimeout(ctx, draProbeRun)
	defer cancel()
	_ = k8swait.PollUntilContextCancel(wctx, 500*time.Millisecond, false, func(ctx context.Context) (bool, error) {
		got, err := kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // a failed read is tried again until draProbeRun
		}
		r.phase = string(got.Status.Phase)
		r.waiting = ""
		for _, cs := range got.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				r.waiting = w.Reason
			}
		}
		return got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed, nil
	})
	r.ended = time.Now()
	// A fresh context: the events are read even when the probing was stopped.
	ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), env.Timeouts.API)
	defer ecancel()
	evs, err := kube.CoreV1().Events(pod.Namespace).List(ectx, metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": pod.Name, "reason": "FailedPrepareDynamicResources"}.String()})
	if err == nil {
		for _, e := range evs.Items {
			r.failedToPrepare = append(r.failedToPrepare, e.Message)
		}
	}
	_ = kube.CoreV1().Pods(pod.Namespace).Delete(ectx, pod.Name, metav1.DeleteOptions{})
	return r
}

// judgeProbes are the probes' findings: a prepare that failed, a probe that did not succeed, none started
// during the roll [start, end].
func judgeProbes(results []draProbe, start, end time.Time) []string {
	var out []string
	during := 0
	for _, r := range results {
		if !r.created.Before(start) && r.created.Before(end) {
			during++
		}
		switch {
		case len(r.failedToPrepare) > 0:
			out = append(out, fmt.Sprintf("probe pod %s on %s (created %s): FailedPrepareDynamicResources: %s", r.name, r.node, r.created.UTC().Format("15:04:05"), r.failedToPrepare[0]))
		case r.err != "":
			out = append(out, fmt.Sprintf("probe pod %s on %s: %s", r.name, r.node, r.err))
		case r.phase != string(corev1.PodSucceeded):
			out = append(out, fmt.Sprintf("probe pod %s on %s did not run to success within %s (phase %s %s)", r.name, r.node, draProbeRun, orWhat(r.phase, "unknown"), r.waiting))
		}
	}
	if during == 0 {
		out = append(out, fmt.Sprintf("no probe pod was started during the roll (%s): nothing measured whether pods with claims keep starting", end.Sub(start).Round(time.Second)))
	}
	return out
}

// summarizeProbes is the probe pods' line in the report.
func summarizeProbes(results []draProbe, start, end time.Time) string {
	during, ok := 0, 0
	var slowest time.Duration
	for _, r := range results {
		if !r.created.Before(start) && r.created.Before(end) {
			during++
		}
		if r.phase == string(corev1.PodSucceeded) && len(r.failedToPrepare) == 0 {
			ok++
		}
		slowest = max(slowest, r.ended.Sub(r.created))
	}
	return fmt.Sprintf("%d started (%d during the roll), %d ran to success without a failed prepare; slowest %s from creation to end", len(results), during, ok, slowest.Round(100*time.Millisecond))
}
