package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"golang.org/x/term"

	"gpuconform.io/gpuconform/framework/timeline"
	"gpuconform.io/gpuconform/reports"
	"gpuconform.io/gpuconform/suites/conformance"
)

// wantsInCluster reports whether args ask for the in-cluster runner (--in-cluster, or =true).
func wantsInCluster(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		return strings.HasPrefix(a, "-") && name == "in-cluster" && (!hasValue || value == "true")
	})
}

// suiteT receives Ginkgo's verdict on the specs.
type suiteT struct{ failed bool }

func (t *suiteT) Fail() { t.failed = true }

// runCommand runs the conformance suite compiled into this binary (no Go toolchain, no checkout): its
// flags (--kubeconfig, --context, --config, --disruptive, --ginkgo.*, …; see the README) are the suite's,
// and the exit code is the verdict's (0 GO, 1 NO-GO, 3 INCOMPLETE, 2 a usage error). With --in-cluster it
// runs the same binary as a Job on the cluster instead (incluster.go).
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if wantsInCluster(args) {
		return inClusterCommand(ctx, args, stdout, stderr)
	}
	// --hold-artifacts is the runner pod's: after the run, wait that long for the runner to copy them.
	var hold time.Duration
	args = slices.DeleteFunc(slices.Clone(args), func(a string) bool {
		v, ok := strings.CutPrefix(a, "--hold-artifacts=")
		if ok {
			hold, _ = time.ParseDuration(v)
		}
		return ok
	})
	fs := flag.CommandLine
	fs.Init("gpuconform run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help := slices.Contains(args, "-h") || slices.Contains(args, "--help") || slices.Contains(args, "-help")
	fs.Usage = func() {
		if !help {
			fmt.Fprintln(stderr, "gpuconform run --help lists the suite's flags")
			return
		}
		fmt.Fprintln(stderr, "usage: gpuconform run [--kubeconfig F] [--context C] [--config F] [--disruptive] [--in-cluster --image IMG] [--ginkgo.* flags] …")
		fmt.Fprintln(stderr, "the suite's flags:")
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.HasPrefix(f.Name, "ginkgo.") {
				fmt.Fprintf(stderr, "  --%s\n\t%s\n", f.Name, f.Usage)
			}
		})
		fmt.Fprintln(stderr, "and Ginkgo's, prefixed --ginkgo. (e.g. --ginkgo.label-filter, --ginkgo.focus, --ginkgo.v)")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpuconform run: unexpected argument %q: the suite takes only flags\n", fs.Arg(0))
		return 2
	}
	t := &suiteT{}
	gomega.RegisterFailHandler(ginkgo.Fail)
	arts, err := conformance.Run(t, conformance.Options{Stdout: stdout, IsTerminal: isTerminal(stdout)})
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform run: %v\n", err)
		if arts == "" {
			return 2 // the flags did not make a configuration
		}
	}
	// The exit code is the verdict's, decided from this run's artifacts; a run that stopped before its
	// specs wrote a record saying why, so it is NO-GO too.
	code := reportCommand(ctx, []string{arts}, io.Discard, stderr)
	if t.failed && code == reports.ExitGo {
		code = reports.ExitNoGo
	}
	if hold > 0 {
		holdArtifacts(arts, code, hold, stdout)
	}
	return code
}

// isTerminal reports whether w is a terminal (colour codes only there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// suiteProcess runs `gpuconform run ARGS` in a child process of this binary (Ginkgo runs one suite per
// process), its output to log.
func suiteProcess(ctx context.Context, log io.Writer, args ...string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, self, append([]string{"run"}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	return cmd.Run()
}

// reportCommand re-renders the signoff report from a run's artifacts, offline.
func reportCommand(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "--history" {
		if len(args) < 2 {
			fmt.Fprintln(stderr, "usage: gpuconform report --history ARTIFACTS_DIR...")
			return 2
		}
		runs, err := reports.History(args[1:])
		if err != nil {
			fmt.Fprintf(stderr, "gpuconform report --history: %v\n", err)
			return 1
		}
		fmt.Fprint(stdout, reports.RenderHistory(runs))
		return 0
	}
	dir := "_artifacts"
	if len(args) > 1 {
		fmt.Fprintln(stderr, "usage: gpuconform report [ARTIFACTS_DIR]")
		return 2
	}
	if len(args) == 1 {
		dir = args[0]
	}
	rec, err := reports.ReadRecord(filepath.Join(dir, reports.RecordFile))
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform report: %v (is %s the artifacts directory of a run?)\n", err, dir)
		return reports.ExitNoGo
	}
	suites, err := reports.ReadGinkgoJSON(filepath.Join(dir, "gpuconform-report.json"))
	switch {
	case err != nil && rec.SetupFailure == "":
		fmt.Fprintf(stderr, "gpuconform report: %v (is %s the artifacts directory of a run?)\n", err, dir)
		return reports.ExitNoGo
	case err != nil:
		suites = nil // the run stopped before its specs: the record alone says why
	case reports.ReportRunID(suites) != "" && reports.ReportRunID(suites) != rec.RunID:
		fmt.Fprintf(stderr, "gpuconform report: %s holds the Ginkgo report of run %s but the record of run %s; refusing to mix runs\n",
			dir, reports.ReportRunID(suites), rec.RunID)
		return reports.ExitNoGo
	}
	if rec.Timelines, err = timeline.ReadAll(dir); err != nil {
		fmt.Fprintf(stderr, "gpuconform report: reading the timelines: %v\n", err)
	}
	md := reports.RenderMarkdown(suites, rec)
	if err := os.WriteFile(filepath.Join(dir, "signoff.md"), []byte(md), 0o644); err != nil {
		fmt.Fprintf(stderr, "gpuconform report: %v\n", err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(dir, reports.HTMLFile), []byte(reports.RenderHTML(suites, rec)), 0o644); err != nil {
		fmt.Fprintf(stderr, "gpuconform report: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, md)
	// One closing line in the form CI runners recognise.
	passed, failed, skipped := reports.Count(suites)
	v := reports.Decide(suites, rec)
	fmt.Fprintf(stderr, "signoff report: %s (and %s)\n", filepath.Join(dir, "signoff.md"), filepath.Join(dir, reports.HTMLFile))
	fmt.Fprintf(stderr, "verdict: %s (exit code %d)\n", v.Outcome, v.ExitCode())
	fmt.Fprintf(stderr, "signoff: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	return v.ExitCode()
}
