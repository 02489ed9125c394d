// Package conformance is the GPU scheduling conformance suite. It only wires things: flags → config,
// suite.Prepare (discovery, before the spec tree is built: capabilities decide registration), the
// scenarios of the registry, one-time checks before the specs, and the record and signoff after them.
//
//	go tool ginkgo run ./suites/conformance -- --kubeconfig _output/kubeconfig --context kind-gpuconform
package conformance

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/cli"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/poollock"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/runlease"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/reports"
	"gpuconform.io/gpuconform/scenarios"
)

// flags is the suite's flag table on the command line, beside Ginkgo's (as go test and ginkgo pass them).
var flags = config.RegisterFlags(flag.CommandLine)

// Options are what the caller of Run decides beyond the flags.
type Options struct {
	// Stdout receives one line per finished spec (reports.SpecLine); nil means os.Stdout.
	Stdout io.Writer
	// IsTerminal says whether Ginkgo's own output goes to a terminal: colour codes only there.
	IsTerminal bool
	// MoreBaseDirs are where relative paths (--config, --kubeconfig, …) are looked for after the current
	// directory (config.Resolve); a path found nowhere is taken from the last.
	MoreBaseDirs []string
}

// suiteDescription is the suite's name in Ginkgo's reports.
const suiteDescription = "GPU scheduling conformance"

// DefaultRunTimeout bounds a run whose --timeout is not given (Ginkgo's own default, one hour, is too
// short for a disruptive run on a real cluster).
const DefaultRunTimeout = 90 * time.Minute

// Run runs the suite with the flags already parsed into flag.CommandLine: the `go test` entry point
// (suite_test.go), `go tool ginkgo run` and `gpuconform run` all come here. It returns the run's
// artifacts directory ("" when the flags made no configuration: a usage error) and an error when the run
// cannot reach its specs, after writing a record that says why; spec failures are reported to t, as
// Ginkgo does. The caller has made ginkgo.Fail Gomega's fail handler.
func Run(t ginkgo.GinkgoTestingT, opts Options) (string, error) {
	cfg, err := configFromFlags(opts.MoreBaseDirs)
	if err != nil {
		return "", err
	}
	suiteCfg, reporterCfg := ginkgo.GinkgoConfiguration()
	if suiteCfg.ParallelProcess <= 1 {
		// A stale report must never be rendered as this run's; only the first process clears it.
		reports.RemoveRunArtifacts(cfg.ArtifactsDir)
	}
	signoff := reports.Signoff{Require: cfg.Signoff.Require, AllowIncomplete: cfg.Signoff.AllowIncomplete, Measured: scenarios.MeasuredLabels()}
	if cfg.Signoff.Baseline != "" {
		base, err := reports.ReadRecord(cfg.Signoff.Baseline)
		if err != nil {
			return "", fmt.Errorf("--baseline: %w", err)
		}
		signoff.Baseline = reports.BaselineFrom(base, cfg.Signoff.Baseline)
	}
	specOut := cmp.Or[io.Writer](opts.Stdout, os.Stdout)
	say := func(line string) {
		if ginkgo.GinkgoParallelProcess() == 1 { // every process prepares; one tells
			fmt.Fprintln(specOut, "[gpuconform] "+line)
		}
	}
	r, err := suite.Prepare(context.Background(), cfg, cmp.Or(os.Getenv("GPUCONFORM_RUN_ID"), run.NewID(time.Now())), say)
	facts := suite.ConfigFacts(cfg) // all a run that did not reach its specs knows
	if err == nil {
		facts = r.Facts()
	}
	conf, version, _ := conformance.ParseProfile(cfg.Profile) // validated with the flags
	if err == nil && !strings.HasPrefix(cfg.Profile, conformance.ProfileAIConformance+"-") {
		if v, ok := conformance.ForKubernetes(r.Caps.ServerVersion); ok {
			version = v // a profile without a version: the checklist of the cluster's own minor
		}
	}
	signoff.Profile = cmp.Or(cfg.Profile, conformance.ProfileSignoff)
	signoff.Conformance = reports.ConformanceClaims{Version: version, Claims: scenarios.Proofs(), Product: cfg.Product}
	switch {
	case conf:
		// The profile runs only the specs that prove a requirement of its checklist, and requires each MUST
		// one a scenario claims: one it cannot show (no Kueue, no metrics exporter) leaves the run INCOMPLETE.
		signoff.ProfileFilter = scenarios.ProfileFilter(version)
		suiteCfg.LabelFilter = combineFilters(suiteCfg.LabelFilter, signoff.ProfileFilter)
		if len(signoff.Require) == 0 {
			signoff.Require = scenarios.ConformanceRequiredLabels(version)
		}
	case len(signoff.Require) == 0:
		signoff.Require = scenarios.RequiredLabels(facts)
	}
	if cfg.Signoff.PreUpgrade {
		signoff.PreUpgrade = scenarios.Upgrade.Label()
	}
	if err != nil {
		if suiteCfg.ParallelProcess <= 1 { // the first process writes the run's record
			_ = reports.WriteSetupFailure(cfg.ArtifactsDir, setupRecord(r, signoff, reports.UserFilters(suiteCfg, signoff)), err)
		}
		return cfg.ArtifactsDir, err
	}
	holds := new(runlease.Holds)
	register(r, signoff, specOut, holds)

	reporterCfg.JSONReport = cmp.Or(reporterCfg.JSONReport, filepath.Join(cfg.ArtifactsDir, "gpuconform-report.json"))
	reporterCfg.JUnitReport = cmp.Or(reporterCfg.JUnitReport, filepath.Join(cfg.ArtifactsDir, "junit.gpuconform.xml"))
	// --timeout when given, else the later of Ginkgo's (which `ginkgo run` always passes) and the default.
	suiteCfg.Timeout = cmp.Or(cfg.RunTimeout.Duration, max(suiteCfg.Timeout, DefaultRunTimeout))
	// Output to a file or a pipe (make e2e, CI, the in-cluster runner) carries no colour codes, and the
	// per-spec lines say what ran, so a row of S for the filtered-out specs would only break them up.
	reporterCfg.NoColor = reporterCfg.NoColor || (!opts.IsTerminal && !cli.Given(flag.CommandLine, "ginkgo.no-color"))
	reporterCfg.SilenceSkips = reporterCfg.SilenceSkips || !cli.Given(flag.CommandLine, "ginkgo.silence-skips")
	_ = os.MkdirAll(cfg.ArtifactsDir, 0o755)
	if suiteCfg.ParallelProcess <= 1 {
		// What the run holds on the cluster for its lease, from the specs its filters select: Ginkgo's
		// preview walks the same tree without running a node (the report nodes see DryRun and return).
		*holds = r.PlanHolds(ginkgo.PreviewSpecs(suiteDescription, suiteCfg, reporterCfg).SpecReports)
	}
	ginkgo.RunSpecs(t, suiteDescription, suiteCfg, reporterCfg)
	return cfg.ArtifactsDir, nil
}

// configFromFlags is the run's configuration from the flags already parsed into flag.CommandLine, its
// relative paths resolved against the working directory and then moreBases; an error is a usage error.
func configFromFlags(moreBases []string) (config.Config, error) {
	wd, _ := os.Getwd()
	bases := append([]string{wd}, moreBases...)
	flags.Resolve = func(p string) string { return config.Resolve(p, bases) }
	cfg, err := flags.Config()
	if err != nil {
		return config.Config{}, err
	}
	return cfg.ResolvePaths(bases), nil
}

// PrepareParallel is what the parent of a parallel run (gpuconform run --procs) does before it starts the
// processes, which parse the same flags again: it checks that they make a configuration (a usage error
// otherwise, before anything is created), clears the artifacts a previous run left, and returns where this
// run's go.
func PrepareParallel() (string, error) {
	cfg, err := configFromFlags(nil)
	if err != nil {
		return "", err
	}
	reports.RemoveRunArtifacts(cfg.ArtifactsDir)
	return cfg.ArtifactsDir, nil
}

// shared is what the first parallel process hands to every process: the run's ID, discovery and, in
// team-namespace mode, what the namespace's quota and queue left of the paths (suite.Run.TeamDecision).
type shared struct {
	RunID        string
	Capabilities cluster.Capabilities
	TeamDecision string
}

// register registers the run's Ginkgo nodes: the one-time checks, the registry's scenarios, the per-spec
// progress line and API cost, the leak audit, and the record and signoff.
func register(r *suite.Run, signoff reports.Signoff, specOut io.Writer, holds *runlease.Holds) {
	var leaks *audit.Result
	if r.Env != nil {
		// A wait that goes on says how it stands every 30 s on the run's live output (framework/wait).
		r.Env.Wait.Say = func(line string) { fmt.Fprintln(specOut, "[gpuconform] "+line) }
	}
	ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
		say := func(line string) { fmt.Fprintln(specOut, "[gpuconform] "+line) }
		stopUnless(r.Preflight(ctx, scenarios.Uses()))
		stopUnless(r.HoldLease(ctx, *holds, say))
		stopUnless(r.ClearLeftovers(ctx))
		for _, s := range r.Skipped() {
			ginkgo.AddReportEntry("not exercised: "+s.What, s.Why)
		}
		// The run ID in the Ginkgo report ties it to this run's record (`gpuconform report` checks).
		ginkgo.AddReportEntry(reports.RunIDEntry, r.RunID)
		b, err := json.Marshal(shared{RunID: r.RunID, Capabilities: r.Caps, TeamDecision: r.TeamDecision()})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		return b
	}, func(b []byte) {
		var first shared
		gomega.Expect(json.Unmarshal(b, &first)).To(gomega.Succeed())
		// Every process built its spec tree from its own discovery: it must be the first process's.
		gomega.Expect(r.SameDiscovery(ginkgo.GinkgoParallelProcess(), first.Capabilities)).To(gomega.Succeed())
		gomega.Expect(r.SameTeamDecision(ginkgo.GinkgoParallelProcess(), first.TeamDecision)).To(gomega.Succeed())
		r.Start(first.RunID)
	})

	ginkgo.Describe("GPU scheduling", func() {
		// Every spec reports what it cost the API server (cleanup included: registered first, it runs last).
		ginkgo.BeforeEach(func() {
			before := r.Clients.Requests.Snapshot()
			ginkgo.DeferCleanup(func() {
				ginkgo.AddReportEntry(reports.APIRequestsEntry, r.Clients.Requests.Since(before), ginkgo.ReportEntryVisibilityNever)
			})
		})
		for _, s := range scenarios.Registry {
			s.Register(r)
		}
	})

	ginkgo.SynchronizedAfterSuite(func() {
		// The record counts the whole run's API requests: every process but the first, which writes the
		// record, leaves its count where the first reads it.
		if p := ginkgo.GinkgoParallelProcess(); p > 1 {
			if err := reports.WriteProcessRequests(r.Config.ArtifactsDir, p, r.Clients.Requests.Snapshot()); err != nil {
				ginkgo.GinkgoWriter.Printf("process %d could not hand its API request count to the first: %v\n", p, err)
			}
		}
	}, func(ctx context.Context) {
		_ = os.RemoveAll(poollock.Dir(r.RunID)) // every process is done with the pool locks
		res, err := r.LeakAudit(ctx)
		leaks = &res
		// Only now is what the run left a leftover for the next run: the leak audit has had its say.
		if lerr := r.ReleaseLease(ctx); lerr != nil {
			ginkgo.GinkgoWriter.Printf("releasing the run's lease (it expires by itself): %v\n", lerr)
		}
		if r.Config.KeepResources {
			ginkgo.GinkgoWriter.Printf("keep-resources: %d object(s) of this run were kept:\n%s\n", len(res.Ours), audit.Summary(res.Ours))
		}
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	})

	ginkgo.ReportAfterSuite("gpuconform record and signoff report", func(rep types.Report) {
		if dryRun() {
			return
		}
		rec := newRecord(r, signoff)
		rec.LeakAudit, rec.Results = leaks, reports.Results([]types.Report{rep})
		rec.APIRequests = r.Clients.Requests.Snapshot()
		if rep.SuiteConfig.ParallelTotal > 1 {
			if err := reports.AddProcessRequests(r.Config.ArtifactsDir, rec.APIRequests); err != nil {
				rec.Notes = append(rec.Notes, "the API request total counts only some processes: "+err.Error())
			}
		}
		if err := reports.WriteSignoff(r.Config.ArtifactsDir, []types.Report{rep}, rec); err != nil {
			ginkgo.GinkgoWriter.Printf("writing the record and signoff: %v\n", err)
		}
	})

	// One line per spec as it finishes, whatever Ginkgo's verbosity: a long run's progress in the log of
	// make e2e, CI and the in-cluster runner.
	ginkgo.ReportAfterEach(func(sp types.SpecReport) {
		if dryRun() {
			return
		}
		if res := reports.SpecResult(sp); res != "" && res != reports.ResultFiltered {
			fmt.Fprintln(specOut, reports.SpecLine(sp))
		}
	})
}

// setupRecord is the record of a run that stopped before its specs: what discovery had read by then (the
// server version, Kueue, the GPU nodes, the notes), the policy and the user's filters.
func setupRecord(r *suite.Run, signoff reports.Signoff, filters string) reports.Record {
	rec := reports.NewRecord(r.RunID, r.ContextName(), r.Server(), r.Caps, nil)
	rec.Signoff, rec.Notes, rec.Taints = signoff, r.RecordNotes(), r.Caps.Taints
	rec.Parameters = reports.Parameters{TimeoutProfile: r.Config.TimeoutProfile, TimeoutProfileWhy: r.ProfileWhy, Namespace: r.Config.Namespace,
		LocalQueue: r.ExistingLocalQueue(), GPUPool: r.Caps.Pools.GPU.Nodes, Filters: filters}
	for _, s := range r.Skipped() {
		rec.AddNotExercised(s.What, s.Why)
	}
	return rec
}

// stopUnless stops the run's setup on err: a refusal (another live run, leftovers) skips every spec and
// says why in a report entry, so the verdict is INCOMPLETE with the fix; anything else fails the setup.
func stopUnless(err error) {
	if err == nil {
		return
	}
	ginkgo.GinkgoHelper()
	if _, ok := run.Refused(err); ok {
		ginkgo.AddReportEntry(reports.RefusedEntry, err.Error())
		ginkgo.Skip(err.Error())
	}
	ginkgo.Fail(err.Error())
}

// dryRun reports whether Ginkgo only walks the tree (PreviewSpecs): the report nodes then write nothing.
func dryRun() bool {
	cfg, _ := ginkgo.GinkgoConfiguration()
	return cfg.DryRun
}

// newRecord is the run's compatibility record as discovery and the scenarios' registration left it.
func newRecord(r *suite.Run, signoff reports.Signoff) reports.Record {
	paths := make([]reports.PathDescriber, len(r.Paths))
	for i, p := range r.Paths {
		paths[i] = p
	}
	rec := reports.NewRecord(r.RunID, r.ContextName(), r.Server(), r.Caps, paths)
	rec.Signoff, rec.FeatureGates, rec.Notes, rec.Taints = signoff, r.FeatureGates, r.RecordNotes(), r.Caps.Taints
	rec.Parameters = reports.Parameters{TimeoutProfile: r.Config.TimeoutProfile, TimeoutProfileWhy: r.ProfileWhy, Namespace: r.Config.Namespace,
		LocalQueue: r.ExistingLocalQueue(), GPUPool: r.Caps.Pools.GPU.Nodes, Tolerations: r.Tolerations, Checkpoints: r.Checkpoints.String()}
	if r.Config.Disruptive {
		rec.Parameters.Faults = r.DescribeFaults()
	}
	rec.NodeMonitorGracePeriod = r.NodeMonitorGracePeriod
	rec.AcceleratorMetrics = r.Metrics.String()
	if !r.Metrics.Present() {
		rec.AcceleratorMetrics = "none: " + r.MetricsWhy
	}
	for _, s := range r.Skipped() {
		rec.AddNotExercised(s.What, s.Why)
	}
	return rec
}

// combineFilters narrows a user's label filter to the profile's: both must match.
func combineFilters(user, profile string) string {
	if user == "" {
		return profile
	}
	return "(" + user + ") && (" + profile + ")"
}

// Cleanup is `gpuconform cleanup`: with the flags already parsed into flag.CommandLine (the suite's), it
// restores and deletes what dead runs left on the cluster (a stopped node, a failed device, the canary on
// another driver, cordons, queues, namespaces, expired leases) through the providers a run would use,
// and leaves every object of a live run alone, naming the run. It runs no spec. The exit code is 0 when
// nothing dead is left, 1 when something could not be restored, 2 for a usage error.
func Cleanup(ctx context.Context, out io.Writer) int {
	cfg, err := configFromFlags(nil)
	if err != nil {
		fmt.Fprintf(out, "gpuconform cleanup: %v\n", err)
		return 2
	}
	r, err := suite.PrepareCleanup(ctx, cfg, run.NewID(time.Now()))
	if err != nil {
		fmt.Fprintf(out, "gpuconform cleanup: %v\n", err)
		return 1
	}
	found, err := r.CleanupLeftovers(ctx)
	for _, n := range r.RecordNotes() {
		fmt.Fprintln(out, n)
	}
	if err != nil {
		fmt.Fprintf(out, "gpuconform cleanup: %v\n", err)
		return 1
	}
	for _, l := range found.DeadLeases {
		fmt.Fprintf(out, "deleted the expired lease of %s\n", l)
	}
	if len(found.Dead) == 0 && len(found.DeadLeases) == 0 {
		fmt.Fprintln(out, "nothing of a dead gpuconform run is on the cluster")
	}
	return 0
}
