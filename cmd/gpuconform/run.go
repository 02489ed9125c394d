package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"gpuconform.io/gpuconform/framework/cli"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/runner"
	"gpuconform.io/gpuconform/internal/parallel"
	"gpuconform.io/gpuconform/reports"
	"gpuconform.io/gpuconform/suites/conformance"
)

// suiteT receives Ginkgo's verdict on the specs.
type suiteT struct{ failed bool }

func (t *suiteT) Fail() { t.failed = true }

// runCommand runs the conformance suite compiled into this binary (no Go toolchain, no checkout): its
// flags (--kubeconfig, --context, --config, --disruptive, --ginkgo.*, …; see the README) are the suite's,
// and the exit code is the verdict's (0 GO, 1 NO-GO, 3 INCOMPLETE, 2 a usage error). With --in-cluster it
// runs the same binary as a Job on the cluster instead (incluster.go).
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if runner.Requested(args) {
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
	args, procs, err := parallel.ProcsFlag(args)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform run: %v\n", err)
		return 2
	}
	if why := parallel.UsageError(args); procs > 1 && why != "" {
		fmt.Fprintf(stderr, "gpuconform run: %s\n", why)
		return 2
	}
	fs := flag.CommandLine
	fs.Init("gpuconform run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help := slices.Contains(args, "-h") || slices.Contains(args, "--help") || slices.Contains(args, "-help")
	fs.Usage = func() {
		if !help {
			fmt.Fprintln(stderr, "gpuconform run --help lists the suite's flags")
			return
		}
		fmt.Fprintln(stderr, "usage: gpuconform run [--kubeconfig F] [--context C] [--config F] [--disruptive] [--procs N] [--in-cluster --image IMG] [--ginkgo.* flags] …")
		fmt.Fprintln(stderr, "  --procs N\n\trun the specs in N Ginkgo processes (a spec that holds its path or the nodes waits for the specs it would disturb; Serial ones run alone at the end); default 1")
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
	var arts string
	t := &suiteT{}
	if procs > 1 {
		// The processes parse the flags again; this process only needs where their artifacts go.
		arts, err = conformance.PrepareParallel()
		if err == nil {
			t.failed, err = parallel.Run(ctx, procs, args, stdout, stderr, cli.IsTerminal(stdout))
		}
	} else {
		gomega.RegisterFailHandler(ginkgo.Fail)
		arts, err = conformance.Run(t, conformance.Options{Stdout: stdout, IsTerminal: cli.IsTerminal(stdout)})
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform run: %v\n", err)
		if usage := new(config.UsageError); errors.As(err, &usage) || arts == "" {
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
		runner.Hold(ctx, arts, code, hold, stdout)
	}
	return code
}
