// Package conformance is the GPU scheduling conformance suite. This file only wires things: flags →
// config, discovery before the spec tree is built (capabilities decide registration), one-time
// readiness and leftover checks, scenario registration, and reporting.
//
//	go tool ginkgo run ./suites/conformance -- --kubeconfig _output/kubeconfig --context kind-gpuconform
package conformance

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/checkpoints"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/faults"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/timeline"
	"gpuconform.io/gpuconform/framework/timeouts"
	"gpuconform.io/gpuconform/framework/upgrade"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/infra/localcluster"
	"gpuconform.io/gpuconform/reports"
	"gpuconform.io/gpuconform/scenarios"
)

var (
	flags   = config.RegisterFlags(flag.CommandLine)
	cfg     config.Config
	clients *cluster.Clients
	caps    cluster.Capabilities
	paths   []gpu.Path
	env     *testenv.Env
	record  reports.Record
	leaks   *audit.Result
	// specOut receives one line per finished spec.
	specOut io.Writer
	// tolerations are every test pod's: the configured ones and the GPU pool's dedication taints.
	tolerations []corev1.Toleration
	// profileWhy says how the timeout profile was chosen when it was "auto".
	profileWhy string
	// kueueOK: specs may submit through Kueue (see kueueUsable).
	kueueOK bool
)

// ArtifactsDir is the run's artifacts directory, absolute ("" before Run has read the flags).
func ArtifactsDir() string { return cfg.ArtifactsDir }

// Options are what the caller of Run decides beyond the flags.
type Options struct {
	// Stdout receives one line per finished spec (see specLine); nil means os.Stdout.
	Stdout io.Writer
	// IsTerminal says whether Ginkgo's own output goes to a terminal: colour codes only there.
	IsTerminal bool
}

// Run runs the suite with the flags already parsed into flag.CommandLine: the `go test` entry point
// (suite_test.go), `go tool ginkgo run` and the gpuconform binary (`gpuconform run`) all come here. It
// returns an error when the run cannot reach its specs (bad flags, no cluster, no stack), after writing a
// record that says why; spec failures are reported to t, as Ginkgo does. The caller has made ginkgo.Fail
// Gomega's fail handler.
func Run(t ginkgo.GinkgoTestingT, opts Options) error {
	specOut = opts.Stdout
	if specOut == nil {
		specOut = os.Stdout
	}
	var err error
	bases := baseDirs()
	flags.Resolve = func(p string) string { return config.Resolve(p, bases) }
	if cfg, err = flags.Config(); err != nil {
		cfg = config.Config{} // no run started: ArtifactsDir says so
		return err
	}
	cfg = cfg.ResolvePaths(bases)
	suiteCfg, reporterCfg := ginkgo.GinkgoConfiguration()
	if suiteCfg.ParallelProcess <= 1 {
		// This run's artifacts replace an earlier run's: a stale report must never be rendered as this
		// one's. Only the first process clears them: the others start beside it.
		reports.RemoveRunArtifacts(cfg.ArtifactsDir)
	}
	signoff, err := signoffPolicy()
	if err != nil {
		cfg = config.Config{}
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeouts().StackReady+time.Minute)
	defer cancel()
	if clients, err = cluster.Connect(ctx, cluster.ConnectOptions{Kubeconfig: cfg.Kubeconfig, Context: cfg.Context, Timeout: cfg.Timeouts().API}); err != nil {
		return setupFailed(signoff, "", "", err)
	}
	// Discovery happens before RunSpecs because it decides which specs exist. Every parallel process
	// discovers to build its tree; the first process's discovery is the run's (SynchronizedBeforeSuite),
	// and a process that saw another cluster stops (sameDiscovery).
	if caps, err = waitForStack(ctx); err != nil {
		return setupFailed(signoff, clients.Context, clients.Server, err)
	}
	record.Signoff = signoff
	adoptCapabilities(caps)
	gates, notes := cluster.ReadFeatureGates(ctx, clients.Kube, caps.GateNode)
	record.FeatureGates, record.Notes = gates, append(record.Notes, notes...)

	if reporterCfg.JSONReport == "" {
		reporterCfg.JSONReport = filepath.Join(cfg.ArtifactsDir, "gpuconform-report.json")
	}
	if reporterCfg.JUnitReport == "" {
		reporterCfg.JUnitReport = filepath.Join(cfg.ArtifactsDir, "junit.gpuconform.xml")
	}
	suiteCfg.Timeout = suiteTimeout(suiteCfg.Timeout)
	if !opts.IsTerminal && !flagGiven("ginkgo.no-color") {
		// Output that lands in a file or a pipe (make e2e, CI, the in-cluster runner) carries no colour codes.
		reporterCfg.NoColor = true
	}
	if !flagGiven("ginkgo.silence-skips") {
		// The per-spec lines say what ran; a row of S for the filtered-out specs breaks them up.
		reporterCfg.SilenceSkips = true
	}
	_ = os.MkdirAll(cfg.ArtifactsDir, 0o755)
	ginkgo.RunSpecs(t, "GPU scheduling conformance", suiteCfg, reporterCfg)
	return nil
}

// adoptCapabilities makes c the run's discovery: the timeout profile, the tolerations, the paths, the
// record and the decisions that follow from them.
func adoptCapabilities(c cluster.Capabilities) {
	caps = c
	if cfg.TimeoutProfile == timeouts.ProfileAuto || profileWhy != "" {
		cfg.TimeoutProfile = timeouts.ProfileReal
		if caps.KindCluster {
			cfg.TimeoutProfile = timeouts.ProfileLocal
		}
		profileWhy = "auto: " + map[bool]string{true: "every node's providerID is kind://", false: "not a kind cluster"}[caps.KindCluster]
	}
	// Test pods tolerate what the user listed and the GPU pool's dedication taints.
	tolerations = append(slices.Clone(cfg.Tolerations), caps.Taints.Tolerations()...)
	paths = gpu.Paths(caps, cfg)
	describers := make([]reports.PathDescriber, len(paths))
	for i, p := range paths {
		describers[i] = p
	}
	prev := record
	record = reports.NewRecord(runID, clients.Context, clients.Server, caps, describers)
	record.Signoff, record.FeatureGates, record.Notes, record.NotExercised = prev.Signoff, prev.FeatureGates, prev.Notes, prev.NotExercised
	record.Taints = caps.Taints
	record.Parameters = reports.Parameters{TimeoutProfile: cfg.TimeoutProfile, TimeoutProfileWhy: profileWhy, Namespace: cfg.Namespace,
		LocalQueue: existingLocalQueue(), GPUPool: caps.Pools.GPU.Nodes, Tolerations: tolerations}
	if !adopted {
		// The first time only: these add to NotExercised and the signoff's requirements.
		decideKueue()
		if len(cfg.Signoff.Require) == 0 && kueueOK && (existingLocalQueue() == "" || cfg.Preemption.LowPriorityClass != "") {
			// Preemption is Kueue's: a signoff requires it where the suite can exercise it (its own queues,
			// or the user's queue with the priority classes named).
			record.Signoff.Require = append(record.Signoff.Require, reports.KueueRequire...)
		}
		if len(cfg.Signoff.Require) == 0 && cfg.Disruptive && len(caps.Pools.Canary.Nodes) > 0 {
			// With a canary pool, a disruptive run is the upgrade's go/no-go too.
			record.Signoff.Require = append(record.Signoff.Require, reports.UpgradeRequire...)
		}
		checkpointStorage.Storage, checkpointStorage.why = checkpoints.Discover(cfg.Checkpoints, poolNodes())
		if cfg.Namespace != "" && checkpointStorage.HostPath != "" {
			checkpointStorage.Storage, checkpointStorage.why = checkpoints.Storage{}, "no storage that outlives a pod in team-namespace mode: the shared directory "+
				checkpointStorage.HostPath+" would need a PersistentVolume, a cluster-scoped object; give --checkpoint-storage-class (ReadWriteMany)"
		}
	}
	adopted = true
	record.Parameters.Checkpoints = checkpointStorage.String()
	if cfg.Disruptive {
		record.Parameters.Faults = describeFaults(injector())
	}
}

// adopted is set once adoptCapabilities has made its one-time decisions.
var adopted bool

// DefaultRunTimeout bounds a run whose --timeout is not given (Ginkgo's own default, one hour, is too
// short for a disruptive run on a real cluster).
const DefaultRunTimeout = 90 * time.Minute

// suiteTimeout is the suite's timeout: --timeout when given, else the later of Ginkgo's (its --timeout,
// which `ginkgo run` always passes down) and DefaultRunTimeout.
func suiteTimeout(ginkgoTimeout time.Duration) time.Duration {
	if cfg.RunTimeout.Duration > 0 {
		return cfg.RunTimeout.Duration
	}
	return max(ginkgoTimeout, DefaultRunTimeout)
}

// flagGiven reports whether the named flag was set on the command line.
func flagGiven(name string) bool {
	given := false
	flag.CommandLine.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// baseDirs are what relative paths (--config, --kubeconfig, --artifacts, …) are relative to, in order:
// the current directory, and under `go test` and `ginkgo run`, which run the suite in its package
// directory, the checkout's root (where make and the README's commands run). A path that exists under
// the first is taken from there; one that exists nowhere (an artifacts directory to create) from the
// last.
func baseDirs() []string {
	wd, _ := os.Getwd()
	dirs := []string{wd}
	if testing.Testing() {
		if root, err := localcluster.FindRepoRoot(wd); err == nil && root != wd {
			dirs = append(dirs, root)
		}
	}
	return dirs
}

// waitForStack polls discovery until the requested paths have devices and Kueue's webhook answers.
func waitForStack(ctx context.Context) (cluster.Capabilities, error) {
	deadline := time.Now().Add(cfg.Timeouts().StackReady)
	for {
		c, err := cluster.CheckStackReady(ctx, clients.Kube, cfg)
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return c, err
		case <-time.After(5 * time.Second):
		}
	}
}

// runID names this run in every artifact and on every object it creates. With parallel processes every
// process must agree: the first process's ID is the one SynchronizedBeforeSuite hands to all of them.
var runID = cmpOr(os.Getenv("GPUCONFORM_RUN_ID"), run.NewID(time.Now()))

// signoffPolicy is the verdict policy of this run, from the configuration; the baseline record is read now
// and condensed into the record, so the report can be re-rendered without it.
func signoffPolicy() (reports.Signoff, error) {
	p := reports.Signoff{Require: cfg.Signoff.Require, AllowIncomplete: cfg.Signoff.AllowIncomplete}
	if len(p.Require) == 0 {
		p.Require = slices.Clone(reports.DefaultRequire)
		if cfg.Disruptive {
			// The user opted in to the specs that change nodes: a run that could not exercise them (no
			// fault provider, a one-node pool) is not a signoff of them.
			p.Require = append(p.Require, reports.DisruptiveRequire...)
		}
	}
	if cfg.Signoff.Baseline != "" {
		base, err := reports.ReadRecord(cfg.Signoff.Baseline)
		if err != nil {
			return p, fmt.Errorf("--baseline: %w", err)
		}
		p.Baseline = reports.BaselineFrom(base, cfg.Signoff.Baseline)
	}
	return p, nil
}

// setupFailed ends a run that cannot reach its specs, after writing a record and a signoff that say why:
// an earlier run's report must not stand in for this one.
func setupFailed(signoff reports.Signoff, contextName, server string, cause error) error {
	if ginkgo.GinkgoParallelProcess() > 1 {
		return cause // the first process writes the run's record
	}
	rec := reports.Record{RunID: runID, GeneratedAt: time.Now().UTC(), Context: contextName, Server: server, Signoff: signoff, SetupFailure: cause.Error()}
	if _, err := rec.Write(cfg.ArtifactsDir); err == nil {
		_ = os.WriteFile(filepath.Join(cfg.ArtifactsDir, "signoff.md"), []byte(reports.RenderMarkdown(nil, rec)), 0o644)
	}
	return cause
}

var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	perms := cluster.PreflightNeeds(cluster.Needs{OwnQueues: kueueUsable() && cfg.Queues.Mode == config.QueuesOwn, Kueue: kueueUsable(), DRA: caps.DRA != nil,
		Namespace: cfg.Namespace, HelperNamespace: cfg.HelperNamespace, Checkpoints: !checkpointStorage.None(), SharedDir: checkpointStorage.HostPath != "",
		Disruptive: cfg.Disruptive})
	gomega.Expect(cluster.Preflight(ctx, clients.Kube, perms)).To(gomega.Succeed())

	if cfg.Namespace != "" {
		// Team-namespace mode: the namespace must exist; the suite may not be able to read it (a Role
		// cannot grant reads of Namespace objects), so only "not found" stops the run.
		_, err := clients.Kube.CoreV1().Namespaces().Get(ctx, cfg.Namespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			ginkgo.Fail(fmt.Sprintf("--namespace %s: the namespace does not exist; team-namespace mode runs in an existing namespace (create it, or ask the cluster's administrators to)", cfg.Namespace))
		}
	}
	leftovers := audit.For(clients, caps.Kueue.Present).RunIn(ctx, runID, cfg.Namespace, cfg.HelperNamespace)
	if len(leftovers.Others) > 0 {
		if !cfg.CleanupLeftovers {
			ginkgo.Fail("the cluster holds objects of earlier gpuconform runs; refusing to start (re-run with --cleanup-leftovers to delete them first):\n" + audit.Summary(leftovers.Others))
		}
		// A fault an interrupted run left (a stopped node, an unhealthy device) is undone with this run's
		// providers before its marks are cleared.
		for _, f := range leftovers.Others {
			if f.Kind == "NodeFault" {
				gomega.Expect(injector().Restore(ctx, f.Name)).To(gomega.Succeed(), "undoing the faults run %s left on node %s", f.Run, f.Name)
			}
		}
		gomega.Expect(audit.For(clients, caps.Kueue.Present).Delete(ctx, leftovers.Others)).To(gomega.Succeed())
	}
	for _, n := range record.NotExercised {
		ginkgo.AddReportEntry("not exercised: "+n.What, n.Why)
	}
	// The run ID in the Ginkgo report ties it to this run's record (`gpuconform report` checks).
	ginkgo.AddReportEntry(reports.RunIDEntry, runID)
	b, err := json.Marshal(sharedSetup{RunID: runID, Capabilities: caps})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return b
}, func(b []byte) {
	var shared sharedSetup
	gomega.Expect(json.Unmarshal(b, &shared)).To(gomega.Succeed())
	if ginkgo.GinkgoParallelProcess() > 1 {
		// The first process's discovery is the run's; this process built its spec tree from its own, so
		// the two must agree or the processes would run different trees.
		gomega.Expect(sameDiscovery(caps, shared.Capabilities)).To(gomega.Succeed())
		adoptCapabilities(shared.Capabilities)
	}
	runID = shared.RunID
	factory := fixtures.NewFactory(runID)
	factory.Image = cfg.Image
	factory.Tolerations = tolerations
	t := cfg.Timeouts()
	env = &testenv.Env{
		Clients: clients, KueuePresent: caps.Kueue.Present, Factory: factory, Timeouts: t,
		Wait: wait.Waiter{Poll: t.Poll, Explain: testenv.DiagnoseExplainer(clients, caps.Kueue.Present),
			Judge: testenv.DiagnoseJudge(clients, caps.Kueue.Present)},
		NamespacePrefix: cfg.NamespacePrefix, ArtifactsDir: cfg.ArtifactsDir, KeepResources: cfg.KeepResources,
		Namespace: cfg.Namespace, HelperNamespace: cfg.HelperNamespace,
	}
	// Waits wake on the spec's informers instead of polling on a clock.
	env.Wait.Wake = env.Changed
	record.RunID = runID
})

// sharedSetup is what the first parallel process hands to every process: the run's ID and discovery.
type sharedSetup struct {
	RunID        string
	Capabilities cluster.Capabilities
}

// sameDiscovery reports a difference between this process's discovery and the run's that would change
// the spec tree.
func sameDiscovery(mine, run cluster.Capabilities) error {
	a, _ := json.Marshal(mine)
	b, _ := json.Marshal(run)
	if string(a) == string(b) {
		return nil
	}
	return fmt.Errorf("parallel process %d discovered another cluster state than process 1 (the cluster changed while the processes started: a node, a device or a pool differs); rerun, or run without -p\nprocess 1: %s\nthis process: %s",
		ginkgo.GinkgoParallelProcess(), b, a)
}

var _ = ginkgo.SynchronizedAfterSuite(func() {}, func(ctx context.Context) {
	if env == nil {
		return
	}
	// The leak audit fails the run if anything of this run is left once cleanup has had its time.
	var res audit.Result
	check := func(g gomega.Gomega) {
		res = audit.For(clients, caps.Kueue.Present).RunIn(ctx, env.Factory.RunID, cfg.Namespace, cfg.HelperNamespace)
		g.Expect(res.Ours).To(gomega.BeEmpty())
	}
	defer func() { leaks = &res }()
	if cfg.KeepResources {
		res = audit.For(clients, caps.Kueue.Present).RunIn(ctx, env.Factory.RunID, cfg.Namespace, cfg.HelperNamespace)
		ginkgo.GinkgoWriter.Printf("keep-resources: %d object(s) of this run were kept:\n%s\n", len(res.Ours), audit.Summary(res.Ours))
		return
	}
	gomega.Eventually(ctx, check).WithTimeout(env.Timeouts.Cleanup).WithPolling(2*time.Second).Should(gomega.Succeed(),
		func() string {
			return "leak audit: objects labelled with this run are still on the cluster:\n" + audit.Summary(res.Ours)
		})
})

var _ = ginkgo.ReportAfterSuite("gpuconform record and signoff report", func(r types.Report) {
	record.LeakAudit = leaks
	record.Results = reports.Results([]types.Report{r})
	if clients != nil {
		record.APIRequests = clients.Requests.Snapshot()
	}
	dir := cfg.ArtifactsDir
	if _, err := record.Write(dir); err != nil {
		ginkgo.GinkgoWriter.Printf("writing the compatibility record: %v\n", err)
	}
	tls, err := timeline.ReadAll(dir)
	if err != nil {
		ginkgo.GinkgoWriter.Printf("reading the timelines: %v\n", err)
	}
	record.Timelines = tls
	md := reports.RenderMarkdown([]types.Report{r}, record)
	if err := os.WriteFile(filepath.Join(dir, "signoff.md"), []byte(md), 0o644); err != nil {
		ginkgo.GinkgoWriter.Printf("writing the signoff report: %v\n", err)
	}
	if err := os.WriteFile(filepath.Join(dir, reports.HTMLFile), []byte(reports.RenderHTML([]types.Report{r}, record)), 0o644); err != nil {
		ginkgo.GinkgoWriter.Printf("writing the HTML signoff: %v\n", err)
	}
})

// One line per spec as it finishes, whatever Ginkgo's verbosity: the progress of a long run, in the log
// of make e2e, CI and the in-cluster runner.
var _ = ginkgo.ReportAfterEach(func(r types.SpecReport) {
	if r.LeafNodeType != types.NodeTypeIt || (r.State == types.SpecStateSkipped && r.Failure.Message == "") {
		return // not a spec, or one the filters left out
	}
	fmt.Fprintln(specOut, specLine(r))
})

// specLine is a finished spec's line: "[gpuconform] PASSED (1m6s) <full text>", and the failure's first
// line for a failed spec.
func specLine(r types.SpecReport) string {
	state := strings.ToUpper(r.State.String())
	line := fmt.Sprintf("[gpuconform] %s (%s) %s", state, r.RunTime.Round(time.Second), r.FullText())
	if r.State.Is(types.SpecStateFailureStates) {
		msg, _, _ := strings.Cut(r.Failure.Message, "\n")
		line += ": " + msg
	}
	return line
}

var _ = ginkgo.Describe("GPU scheduling", func() {
	// Every spec reports what it cost the API server (cleanup included: registered first, it runs last).
	ginkgo.BeforeEach(func() {
		before := clients.Requests.Snapshot()
		ginkgo.DeferCleanup(func() {
			ginkgo.AddReportEntry(reports.APIRequestsEntry, clients.Requests.Since(before), ginkgo.ReportEntryVisibilityNever)
		})
	})
	scenarios.BrokenPathSpec(caps.Broken)
	scenarios.AllocationSpec(func() scenarios.AllocationInput {
		return scenarios.AllocationInput{Base: base(), KueuePresent: kueueUsable(), ExistingLocalQueue: existingLocalQueue()}
	})
	scenarios.IsolationSpec(func() scenarios.IsolationInput { return scenarios.IsolationInput{Base: base()} })
	scenarios.FailureSpec(func() scenarios.FailureInput {
		return scenarios.FailureInput{Base: base(), Faults: injector(), Disruptive: cfg.Disruptive, KueuePresent: kueueUsable(), ExistingLocalQueue: existingLocalQueue(),
			Checkpoints: checkpointStorage.Storage, CheckpointsWhy: checkpointStorage.why, EvictAfter: cfg.Faults.EvictionToleration.Duration}
	})
	scenarios.PreemptionSpec(func() scenarios.PreemptionInput {
		return scenarios.PreemptionInput{Base: base(), KueuePresent: kueueUsable(), ExistingLocalQueue: existingLocalQueue(),
			LowPriorityClass: cfg.Preemption.LowPriorityClass, HighPriorityClass: cfg.Preemption.HighPriorityClass,
			Checkpoints: checkpointStorage.Storage, CheckpointsWhy: checkpointStorage.why}
	})
	scenarios.UpgradeSpec(func() scenarios.UpgradeInput {
		u, why := upgrader()
		run := runID
		if env != nil {
			run = env.Factory.RunID
		}
		return scenarios.UpgradeInput{Base: base(), Disruptive: cfg.Disruptive, Canary: caps.Pools.Canary.Nodes, KnownGood: knownGood(),
			Upgrader: u, UpgraderWhy: why, To: upgradeTarget(), VersionLabel: cmpOr(cfg.Upgrade.VersionLabel, upgrade.DriverVersionLabel),
			Checkpoints: checkpointStorage.Storage, RunID: run}
	})
	scenarios.ShortageSpec(func() scenarios.ShortageInput {
		return scenarios.ShortageInput{Base: base(), KueuePresent: kueueUsable(), ExistingLocalQueue: existingLocalQueue(), Nodes: discoveredNodes(), Tolerations: tolerations}
	})
})

// base is what every scenario's input carries.
func base() scenarios.Base {
	return scenarios.Base{Env: env, Paths: paths, GPUPool: caps.Pools.GPU.Nodes, NotExercised: notExercised}
}

// injector is the run's fault layer, chosen once from the configuration and the cluster.
var injector = sync.OnceValue(func() *faults.Injector {
	run := runID
	if env != nil {
		run = env.Factory.RunID
	}
	return faults.New(faults.Options{Kube: clients.Kube, RunID: run, Pool: poolNodes(), Config: cfg.Faults, HelperNamespace: cfg.HelperNamespace,
		Image: cfg.Image, ServesDeviceTaintRules: faults.ServesDeviceTaintRules(clients.Kube)})
})

// checkpointStorage is storage that outlives a node, discovered once.
var checkpointStorage struct {
	checkpoints.Storage
	why string
}

// kueueUsable reports whether specs may submit through Kueue: it is installed, and in team-namespace mode
// the user named a LocalQueue (the suite may not create cluster-scoped queues there). Decided once, by
// decideKueue, after discovery.
func kueueUsable() bool { return kueueOK }

// decideKueue sets kueueUsable's answer and records why Kueue specs do not run in a team namespace
// without a LocalQueue.
func decideKueue() {
	kueueOK = caps.Kueue.Present
	if kueueOK && cfg.Namespace != "" && existingLocalQueue() == "" {
		kueueOK = false
		notExercised("specs submitted through Kueue", fmt.Sprintf("team-namespace mode (--namespace %s) without --local-queue: the suite may not create ClusterQueues there; name the namespace's LocalQueue", cfg.Namespace))
	}
}

// existingLocalQueue is the user's LocalQueue when the suite submits to one, else "" (own queues).
func existingLocalQueue() string {
	if cfg.Queues.Mode == config.QueuesExisting {
		return cfg.Queues.LocalQueue
	}
	return ""
}

// discoveredNodes lists the nodes once, while the spec tree is built: the shortage scenario sizes its
// requests from their allocatable and relies only on taints they already carry.
var discoveredNodes = sync.OnceValue(func() []corev1.Node {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeouts().API)
	defer cancel()
	list, err := clients.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		notExercised("node-sized shortage checks", fmt.Sprintf("listing nodes failed: %v", err))
		return nil
	}
	return list.Items
})

// poolNodes are the discovered nodes of the GPU pool.
func poolNodes() []corev1.Node {
	var out []corev1.Node
	for _, n := range discoveredNodes() {
		if slices.Contains(caps.Pools.GPU.Nodes, n.Name) {
			out = append(out, n)
		}
	}
	return out
}

// notExercised records a check the scenarios did not register, in the record and the Ginkgo report.
func notExercised(what, why string) {
	record.AddNotExercised(what, why)
}

func kueueOrNil() kueueclient.Interface {
	if caps.Kueue.Present {
		return clients.Kueue
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// describeFaults says which provider injects which fault, and why one is missing.
func describeFaults(inj *faults.Injector) string {
	part := func(what string, name func() string, ok bool, why string) string {
		if ok {
			return what + ": " + name()
		}
		return what + ": none (" + why + ")"
	}
	return strings.Join([]string{
		part("nodes", func() string { return inj.Nodes.Name() }, inj.Nodes != nil, inj.NodesWhy),
		part("devices (device plugin)", func() string { return inj.Devices.Name() }, inj.Devices != nil, inj.DevicesWhy),
		part("devices (DRA)", func() string { return inj.DRADevices.Name() }, inj.DRADevices != nil, inj.DRADevicesWhy),
		part("evicting device fault (DRA)", func() string { return inj.DRAEvict.Name() }, inj.DRAEvict != nil, inj.DRAEvictWhy),
	}, "; ")
}

// knownGood are the GPU nodes the upgrade rehearsal must leave untouched: the known-good pool without the
// canary nodes.
func knownGood() []string {
	return slices.DeleteFunc(slices.Clone(caps.Pools.KnownGood.Nodes), func(n string) bool { return slices.Contains(caps.Pools.Canary.Nodes, n) })
}

// localUpgradeTarget is the driver version the rehearsal moves the local cluster's canary pool to when
// --upgrade-to is not given (the fake stack starts at 550.54.15).
const localUpgradeTarget = "560.35.03"

// upgrader is the upgrade provider: the user's command, else the local cluster's, else none and why.
func upgrader() (upgrade.Provider, string) {
	if cfg.Upgrade.Command != "" {
		return &upgrade.Command{Path: cfg.Upgrade.Command, RunID: runID}, ""
	}
	var lbls []map[string]string
	for _, n := range discoveredNodes() {
		if slices.Contains(caps.Pools.Canary.Nodes, n.Name) {
			lbls = append(lbls, n.Labels)
		}
	}
	if upgrade.LocalServes(lbls) {
		return &upgrade.Local{Kube: clients.Kube, Namespace: localcluster.SystemNamespace}, ""
	}
	return nil, "no upgrade provider for this cluster: give --upgrade-command SCRIPT (called as SCRIPT upgrade|rollback VERSION NODE...)"
}

// upgradeTarget is the rehearsal's target driver version.
func upgradeTarget() string {
	if cfg.Upgrade.To != "" {
		return cfg.Upgrade.To
	}
	if u, _ := upgrader(); u != nil {
		if _, local := u.(*upgrade.Local); local {
			return localUpgradeTarget
		}
	}
	return ""
}
