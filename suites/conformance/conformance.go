// Package conformance is the GPU scheduling conformance suite. It only wires things: flags → config,
// suite.Prepare (discovery, before the spec tree is built: capabilities decide registration), the
// scenarios of the registry, one-time checks before the specs, and the record and signoff after them.
//
//	go tool ginkgo run ./suites/conformance -- --kubeconfig _output/kubeconfig --context kind-gpuconform
package conformance

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/onsi/ginkgo/v2"

	"gpuconform.io/gpuconform/framework/cli"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/runlease"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/reports"
	"gpuconform.io/gpuconform/scenarios"
)

// The suite's flag table goes on the command line, beside Ginkgo's (as go test and ginkgo pass them),
// before they are parsed.
func init() { config.CommandLine() }

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
	suiteCfg.LabelFilter = policy(&signoff, cfg, r, err == nil, facts, suiteCfg.LabelFilter)
	if err != nil {
		if suiteCfg.ParallelProcess <= 1 { // the first process writes the run's record
			_ = reports.WriteSetupFailure(cfg.ArtifactsDir, r.SetupRecord(signoff, reports.UserFilters(suiteCfg, signoff)), err)
		}
		return cfg.ArtifactsDir, err
	}
	holds := new(runlease.Holds)
	register(r, signoff, specOut, holds)

	reporterCfg.JSONReport = cmp.Or(reporterCfg.JSONReport, filepath.Join(cfg.ArtifactsDir, "gpuconform-report.json"))
	reporterCfg.JUnitReport = cmp.Or(reporterCfg.JUnitReport, filepath.Join(cfg.ArtifactsDir, reports.JUnitFile))
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
	flags := config.CommandLine()
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
