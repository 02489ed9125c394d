package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/infra/localcluster"
	"gpuconform.io/gpuconform/reports"
)

// hardeningRow is one production set-up put on the local cluster, and the verdict a run must give under
// it: a healthy cluster that is merely hardened must still be GO (no false NO-GO), and a pool the suite
// is told not to tolerate must be NO-GO for the right reason, found without waiting out the timeouts.
type hardeningRow struct {
	Name string
	// Want is the verdict the run must give: "GO" or "NO-GO".
	Want string
	// Apply sets the variation up and returns the run's extra flags, its kubeconfig ("" for the admin
	// one) and the undo.
	Apply func(ctx context.Context, h hardeningEnv) (args []string, kubeconfig string, undo localcluster.Undo, err error)
	// Failures, when set, must hold for every failed spec's failure message (the reason and that the
	// wait ended on a final diagnosis) or, when the run stopped before its specs, for its setup failure;
	// a run that failed nowhere does not show them, so it fails the row (see judgeHardening).
	Failures []string
	// Signoff, when set, must appear in the row's signoff.md: what the report must say of the variation
	// (that the run waited for a restarting plugin, say), beyond its verdict.
	Signoff []string
	// Drive, when set, replaces Apply and the one run: the row starts its runs (and signals) itself,
	// counts their specs into res and returns the verdict to compare with Want and what fell short
	// (hardening_runs.go).
	Drive func(ctx context.Context, h hardeningEnv, kubeconfig string, res *hardeningResult) (verdict string, bad []string)
}

type hardeningEnv struct {
	clients *cluster.Clients
	root    string
	dir     string
	bin     shipped
}

func hardeningTable() []hardeningRow {
	//nolint:unparam // its signature is hardeningRow.Apply's; this row adds no flags, the untolerated-taint row adds its own
	taint := func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
		undo, err := localcluster.ApplyDedicationTaint(ctx, h.clients.Kube)
		return nil, "", undo, err
	}
	return []hardeningRow{
		{Name: "dedication-taint", Want: "GO", Apply: taint},
		// The kubelet cross-check's helper needs a hostPath as root: it runs in the GPU stack's namespace,
		// which the policy exempts as a real cluster exempts its GPU operator's (without
		// --helper-namespace the check falls back to a count and the verdict is INCOMPLETE).
		{Name: "restricted-admission", Want: "GO", Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
			undo, err := localcluster.ApplyRestrictedAdmission(ctx, h.clients.Kube)
			return []string{"--helper-namespace=" + localcluster.SystemNamespace}, "", undo, err
		}},
		{Name: "team-namespace", Want: "GO", Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
			team, undo, err := localcluster.ApplyTeamNamespace(ctx, h.clients.REST, h.clients.Kube, h.clients.Kueue, h.root, h.dir)
			return []string{"--namespace=" + team.Namespace, "--local-queue=" + team.LocalQueue}, team.Kubeconfig, undo, err
		}},
		// A multi-tenant team namespace: besides the LocalQueue, a ResourceQuota on pods and CPU and memory
		// requests and limits, and a LimitRange (min, max, defaults, limit = request). Every pod the suite
		// makes there, helpers included, must declare requests = limits within the bounds.
		{Name: "team-quota", Want: "GO", Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
			team, undo, err := localcluster.ApplyTeamQuota(ctx, h.clients.REST, h.clients.Kube, h.clients.Kueue, h.root, h.dir)
			return []string{"--namespace=" + team.Namespace, "--local-queue=" + team.LocalQueue}, team.Kubeconfig, undo, err
		}},
		// A team namespace whose quota cannot hold one of the suite's pods (limits.cpu half of one pod's):
		// the team preflight refuses to start before any spec, naming the quota and its figures (a setup
		// failure, whose message Failures must match).
		{Name: "team-quota-too-small", Want: "INCOMPLETE", Failures: []string{"refusing to start", "limits.cpu"},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				team, undo, err := localcluster.ApplyTeamQuotaTooSmall(ctx, h.clients.REST, h.clients.Kube, h.clients.Kueue, h.root, h.dir)
				return []string{"--namespace=" + team.Namespace, "--local-queue=" + team.LocalQueue}, team.Kubeconfig, undo, err
			}},
		// A team whose ClusterQueue covers CPU, memory and nvidia.com/gpu but not the DRA path's Kueue
		// resource: the DRA path's queued specs are not exercised, with the reason in signoff.md, and the
		// run is GO (the path's other specs run).
		{Name: "team-queue-without-dra", Want: "GO", Signoff: []string{"does not cover"},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				team, undo, err := localcluster.ApplyTeamQueueWithoutDRA(ctx, h.clients.REST, h.clients.Kube, h.clients.Kueue, h.root, h.dir)
				return []string{"--namespace=" + team.Namespace, "--local-queue=" + team.LocalQueue}, team.Kubeconfig, undo, err
			}},
		// The same quota and LimitRange in own-namespace mode: put into every namespace the suite creates (it
		// carries the run label) while the run lasts, as a platform's namespace-provisioning policy would.
		{Name: "own-quota", Want: "GO", Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
			undo, err := localcluster.ProvisionComputePolicy(ctx, h.clients.Kube)
			return nil, "", undo, err
		}},
		// The device plugin restarting as the run starts (a node agent's rollout or crash): discovery must
		// wait for it to re-register instead of calling the path broken, and the record must say so.
		{Name: "plugin-restart", Want: "GO", Signoff: []string{"re-registered"},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				undo, err := localcluster.ApplyPluginRestart(ctx, h.clients.Kube)
				return nil, "", undo, err
			}},
		// A platform team's queue without preemption: the preemption scenario (on the team's queue, with the
		// team's priority classes) must be NO-GO and name the ClusterQueue's policy.
		{Name: "queue-without-preemption", Want: "NO-GO", Failures: []string{"preemption.withinClusterQueue is Never"},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				undo, err := localcluster.ApplyQueueWithoutPreemption(ctx, h.clients.Kube, h.clients.Kueue)
				return []string{"--namespace=" + localcluster.NoPreemptNamespace, "--local-queue=" + localcluster.NoPreemptLocalQueue,
					"--low-priority-class=" + localcluster.NoPreemptLow, "--high-priority-class=" + localcluster.NoPreemptHigh,
					"--ginkgo.label-filter=scenario:preemption"}, "", undo, err
			}},
		// A driver upgrade whose plugin never comes up on the canary pool: the rehearsal must be NO-GO naming
		// the canary node and what it no longer offers, and its rollback must restore the pool.
		{Name: "broken-upgrade", Want: "NO-GO", Failures: []string{"after the upgrade to 560.35.03-broken", localcluster.DefaultOptions("").CanaryNodes()[0]},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				none := func(context.Context) error { return nil } // the rehearsal rolls back itself
				return []string{"--disruptive", "--upgrade-to=560.35.03-broken", "--ginkgo.label-filter=scenario:upgrade"}, "", none, nil
			}},
		// An upgrade whose driver hands containers other GPUs than it allocates: every count check on the
		// canary passes (a pod gets one device), the application check's identity comparison must not.
		{Name: "broken-upgrade-wrong-device", Want: "NO-GO", Failures: []string{"container saw", "allocated"}, Signoff: []string{`NO-GO (failed: application check "device identity"`},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				none := func(context.Context) error { return nil } // the rehearsal rolls back itself
				return []string{"--disruptive", "--upgrade-to=560.35.03-wrong-ids", "--ginkgo.label-filter=scenario:upgrade"}, "", none, nil
			}},
		// A serving reserve whose PodDisruptionBudget wants every replica: the drain must stop at once,
		// diagnosed, instead of forcing the eviction or waiting out its timeout.
		{Name: "upgrade-pdb-unsatisfiable", Want: "NO-GO", Failures: []string{"never allows an eviction", "does not force it"},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				none := func(context.Context) error { return nil }
				return []string{"--disruptive", "--upgrade-serving-replicas=2", "--upgrade-serving-min-available=2", "--ginkgo.label-filter=scenario:upgrade"}, "", none, nil
			}},
		// A pre-upgrade signoff without --disruptive has no rehearsal: INCOMPLETE, saying why.
		{Name: "pre-upgrade-without-rehearsal", Want: "INCOMPLETE", Signoff: []string{"pre-upgrade signoff without an upgrade rehearsal that passed: it cordons, drains and upgrades the canary pool; run with --disruptive"},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				none := func(context.Context) error { return nil }
				return []string{"--pre-upgrade", "--ginkgo.label-filter=scenario:metrics"}, "", none, nil
			}},
		// The DRA path broken in the two ways that are settled: discovery finds a DeviceClass that selects
		// none of the published GPUs (a selector on a productName never published) and registers a failing
		// spec at once; an agent that publishes its GPUs without registering its kubelet plugin gets its
		// DRA specs' pods bound, and the kubelet's "is not registered" ends each wait as final.
		// Both run the DRA path alone (--allocation-paths=dra): the device-plugin path is untouched and
		// proven by the other rows, and an explicit path is where the stack wait must not wait out a
		// settled break.
		{Name: "deviceclass-selects-nothing", Want: "NO-GO", Failures: []string{"selects 0 of"},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				undo, err := localcluster.ApplyDeviceClassSelectsNothing(ctx, h.clients.Kube)
				return []string{"--allocation-paths=dra"}, "", undo, err
			}},
		{Name: "dra-unregistered", Want: "NO-GO", Failures: []string{"is not registered"},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				undo, err := localcluster.ApplyDRAUnregistered(ctx, h.clients.Kube)
				return []string{"--allocation-paths=dra"}, "", undo, err
			}},
		{Name: "untolerated-taint", Want: "NO-GO", Failures: []string{"UntoleratedTaint", "is final"},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				_, kc, undo, err := taint(ctx, h)
				return []string{"--auto-tolerate=false"}, kc, undo, err
			}},
		// Two teams' runs on one cluster (hardening_runs.go): neither fails for the other, and what is
		// interrupted is INCOMPLETE with the cluster as it was. The allocation rows are filtered runs, so
		// INCOMPLETE (for the filter) is what a healthy run gives.
		{Name: "two-runs", Want: "INCOMPLETE", Drive: twoRuns},
		{Name: "cleanup-beside-live-run", Want: "INCOMPLETE", Drive: cleanupBesideLiveRun},
		{Name: "sigint-rehearsal", Want: "INCOMPLETE", Drive: interruptRehearsal(syscall.SIGINT)},
		{Name: "sigkill-rehearsal", Want: "INCOMPLETE", Drive: interruptRehearsal(syscall.SIGKILL)},
		// The workload image missing on one GPU node (never pulled there, no registry): every spec whose pod
		// lands there fails naming the pull within its first back-offs; none reads a replaced pod as not
		// found, and the specs placed elsewhere pass.
		{Name: "image-missing-on-one-node", Want: "NO-GO", Failures: []string{"ImagePullFailed"},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				_, undo, err := localcluster.ApplyImageMissingOnNode(ctx, h.clients.Kube)
				return nil, "", undo, err
			}},
		// Kueue's controller scaled to zero: its webhook answers nothing, so the run must stop in setup
		// (no specs) within seconds, not after the StackReady budget, naming the Deployment and why.
		{Name: "kueue-down", Want: "NO-GO", Failures: []string{localcluster.KueueManager, "replicas 0 (scaled to zero)"},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				undo, err := localcluster.ApplyKueueDown(ctx, h.clients.Kube)
				return nil, "", undo, err
			}},
		// The GPU agent's DaemonSet given a nodeSelector no node matches (a label migration the nodes did
		// not follow): the nodes keep their capacity without allocatable, the DRA slices go, and the run
		// must stop in setup at once, naming the DaemonSet, why it runs nowhere and the fix.
		{Name: "gpu-agent-scheduled-nowhere", Want: "NO-GO", Failures: []string{agentScheduledNowhere},
			Apply: func(ctx context.Context, h hardeningEnv) ([]string, string, localcluster.Undo, error) {
				undo, err := localcluster.ApplyAgentScheduledNowhere(ctx, h.clients.Kube)
				return nil, "", undo, err
			}},
	}
}

// agentScheduledNowhere is what the gpu-agent-scheduled-nowhere row's setup failure must say.
const agentScheduledNowhere = "DaemonSet " + localcluster.SystemNamespace + "/" + localcluster.PluginDaemonSet + " is scheduled on no node"

// hardeningResult is one row's outcome.
type hardeningResult struct {
	Row     hardeningRow
	Verdict string
	OK      bool
	Passed  int
	Failed  int
	// Slowest is the longest failed spec, to show that failures ended early.
	Slowest time.Duration
	Wall    time.Duration
	Note    string
}

// hardeningCommand runs the conformance suite (non-disruptive specs) on the local cluster under each
// hardening variation and requires the verdict the row names; every variation is undone after its run.
func hardeningCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	h, ok := parseHarness("hardening", "variants", "variation", "comma-separated subset of variations (default: all): "+strings.Join(hardeningRows().names(), ", "), args, stderr)
	if !ok {
		return 2
	}
	rows, err := hardeningRows().selected(splitNonEmpty(h.only), "variation")
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform hardening: %v\n", err)
		return 2
	}
	clients, err := cluster.Connect(ctx, cluster.ConnectOptions{Kubeconfig: h.kubeconfig, Timeout: 30 * time.Second})
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform hardening: %v\n", err)
		return 2
	}
	return runRows(rows, func(row hardeningRow) hardeningResult {
		dir := filepath.Join(h.artifacts, row.Name)
		fmt.Fprintf(stderr, "hardening: %s, expecting %s\n", row.Name, row.Want)
		res := runHardeningRow(ctx, hardeningEnv{clients: clients, root: h.root, dir: dir, bin: shipped(h.binary)}, h.kubeconfig, row, stderr)
		fmt.Fprintf(stderr, "hardening: %s → %s (%d passed, %d failed, %s; log %s.log)\n", row.Name, res.Verdict, res.Passed, res.Failed, res.Wall.Round(time.Second), dir)
		return res
	}, func(rs []hardeningResult) { printHardening(stdout, rs) }, func(r hardeningResult) bool { return r.OK })
}

// hardeningRows is hardeningTable as a harness table, its rows named by variation.
func hardeningRows() table[hardeningRow, hardeningResult] {
	return table[hardeningRow, hardeningResult]{rows: hardeningTable(), name: func(r hardeningRow) string { return r.Name }}
}

// runHardeningRow sets the row's variation up, runs the suite under it and undoes it; a failed undo fails
// the row (the result is named so that the deferred undo can say so).
func runHardeningRow(ctx context.Context, h hardeningEnv, adminKubeconfig string, row hardeningRow, stderr io.Writer) (res hardeningResult) {
	res = hardeningResult{Row: row, Verdict: "-"}
	_ = os.RemoveAll(h.dir)
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		res.Note = err.Error()
		return res
	}
	if row.Drive != nil {
		start := time.Now()
		verdict, bad := row.Drive(ctx, h, adminKubeconfig, &res)
		res.Verdict, res.Wall = verdict, time.Since(start)
		res.OK = verdict == row.Want && len(bad) == 0
		switch {
		case len(bad) > 0:
			res.Note = strings.Join(bad, "; ")
		case verdict != row.Want:
			res.Note = fmt.Sprintf("want %s (see %s)", row.Want, h.dir)
		}
		return res
	}
	extra, kubeconfig, undo, err := row.Apply(ctx, h)
	if err != nil {
		res.Note = "setting the variation up: " + err.Error()
		return res
	}
	defer func() {
		// A fresh context: the variation must come off even when ctx was cancelled.
		cctx, cancel := context.WithTimeout(context.Background(), undoBudget)
		defer cancel()
		if err := undo(cctx); err != nil {
			fmt.Fprintf(stderr, "hardening: undoing %s: %v\n", row.Name, err)
			res.OK, res.Note = false, "undo failed: "+err.Error()
		}
	}()
	if kubeconfig == "" {
		kubeconfig = adminKubeconfig
	}
	start := time.Now()
	if log, err := os.Create(h.dir + ".log"); err == nil {
		defer log.Close()
		_ = h.bin.run(ctx, log, append([]string{"--timeout=40m", "--kubeconfig=" + kubeconfig, "--artifacts=" + h.dir, "--ginkgo.no-color"}, extra...)...)
	}
	res.Wall = time.Since(start)
	// The verdict is the signoff's, decided from the run's record and report by `gpuconform report`.
	res.Verdict = h.bin.verdict(ctx, h.dir)
	// A run that stopped before its specs (suite.Prepare failed) writes no Ginkgo report; its record
	// says why (reports.WriteSetupFailure).
	setupFailure := ""
	if rec, err := reports.ReadRecord(filepath.Join(h.dir, reports.RecordFile)); err == nil {
		setupFailure = rec.SetupFailure
	}
	suites, err := reports.ReadGinkgoJSON(filepath.Join(h.dir, "gpuconform-report.json"))
	if err != nil && setupFailure == "" {
		res.Note = fmt.Sprintf("no Ginkgo report: %v", err)
		return res
	}
	bad := append(judgeHardening(&res, suites, setupFailure), signoffLacks(filepath.Join(h.dir, "signoff.md"), row.Signoff)...)
	res.OK = res.Verdict == row.Want && len(bad) == 0
	switch {
	case len(bad) > 0:
		res.Note = strings.Join(bad, "; ")
	case res.Verdict != row.Want:
		res.Note = fmt.Sprintf("want %s (see %s/signoff.md)", row.Want, h.dir)
	case setupFailure != "":
		res.Note = "stopped in setup: " + lineWith(setupFailure, row.Failures)
	}
	return res
}

// undoBudget bounds undoing a variation: the longest undo, kueue-down's, waits up to three minutes for
// Kueue's webhook to answer again.
const undoBudget = 5 * time.Minute

// judgeHardening counts the run's specs into res and returns what falls short of the row's Failures:
// every failed spec's message must hold each of them; when the run stopped in setup (a failed
// BeforeSuite or SynchronizedBeforeSuite, or setupFailure: the record's, written when suite.Prepare
// failed and no spec ran), one of the setup failures must hold them all (with parallel processes the
// others only say that process 1 failed). A row with Failures whose run failed nowhere shows none of its
// reason, so a NO-GO for another cause never passes it.
func judgeHardening(res *hardeningResult, suites []types.Report, setupFailure string) []string {
	res.Passed, res.Failed, _ = reports.Count(suites)
	var bad, setup []string
	specs := 0
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			if !sp.State.Is(types.SpecStateFailureStates) {
				continue
			}
			switch sp.LeafNodeType {
			case types.NodeTypeIt:
				specs++
				res.Slowest = max(res.Slowest, sp.RunTime)
				for _, w := range lacking(sp.Failure.Message, res.Row.Failures) {
					bad = append(bad, fmt.Sprintf("%q lacks %q", sp.LeafNodeText, w))
				}
			case types.NodeTypeBeforeSuite, types.NodeTypeSynchronizedBeforeSuite:
				setup = append(setup, sp.Failure.Message)
			}
		}
	}
	if setupFailure != "" {
		setup = append(setup, setupFailure)
	}
	if len(res.Row.Failures) == 0 {
		return bad
	}
	switch {
	case len(setup) > 0 && !slices.ContainsFunc(setup, func(m string) bool { return len(lacking(m, res.Row.Failures)) == 0 }):
		bad = append(bad, fmt.Sprintf("the setup failure lacks %q: %s", lacking(setup[0], res.Row.Failures), firstLine(setup[0])))
	case len(setup) == 0 && specs == 0:
		bad = append(bad, fmt.Sprintf("no spec failed and setup did not fail: nothing shows %q", res.Row.Failures))
	}
	return bad
}

// signoffLacks returns, for each of words that the signoff report at path does not contain, why.
func signoffLacks(path string, words []string) []string {
	if len(words) == 0 {
		return nil
	}
	md, err := os.ReadFile(path)
	if err != nil {
		return []string{fmt.Sprintf("no signoff report: %v", err)}
	}
	var bad []string
	for _, w := range words {
		if !strings.Contains(string(md), w) {
			bad = append(bad, fmt.Sprintf("%s lacks %q", filepath.Base(path), w))
		}
	}
	return bad
}

// lacking are the words msg does not contain.
func lacking(msg string, words []string) []string {
	return slices.DeleteFunc(slices.Clone(words), func(w string) bool { return strings.Contains(msg, w) })
}

// lineWith is, cut to a table cell, the first line of msg that holds words[0], from a few words before
// it (the first line that says something when none does or no words are given).
func lineWith(msg string, words []string) string {
	if len(words) > 0 {
		for line := range strings.SplitSeq(msg, "\n") {
			i := strings.Index(line, words[0])
			if i < 0 {
				continue
			}
			// Start at a space about 30 bytes before the word (a rune boundary), so the cell shows it.
			if from := strings.LastIndex(line[:max(0, i-30)], " ") + 1; from > 0 {
				line = "…" + line[from:]
			}
			return cell(strings.TrimSpace(line))
		}
	}
	return firstLine(msg)
}

func printHardening(w io.Writer, results []hardeningResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIATION\tWANT\tVERDICT\tSPECS PASSED/FAILED\tSLOWEST FAILURE\tWALL\tNOTE")
	ok := 0
	for _, r := range results {
		if r.OK {
			ok++
		}
		slowest := "-"
		if r.Failed > 0 {
			slowest = r.Slowest.Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", r.Row.Name, r.Row.Want, r.Verdict, r.Passed, r.Failed, slowest, r.Wall.Round(time.Second), r.Note)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "hardening: %d passed, %d failed\n", ok, len(results)-ok)
}

func splitNonEmpty(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}
