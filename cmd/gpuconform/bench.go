package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gpuconform.io/gpuconform/reports"
)

// BenchFile is the cost table `gpuconform bench` keeps in the artifacts directory.
const BenchFile = "bench.md"

// benchCommand measures the suite's own cost from a run's artifacts: per scenario, wall time against the
// inherent waits of its workloads (from the timelines) and the API requests it sent, per second and per
// spec; the whole suite's wall time and request rate; and the ten steps that spent the most time not
// waiting on the cluster. It prints the tables and keeps them as bench.md; the goals are printed, never
// asserted.
func benchCommand(_ context.Context, args []string, stdout, stderr io.Writer) int {
	dir, code, done := artifactsDirArg("bench", args, stdout, stderr)
	if done {
		return code
	}
	suites, rec, err := reports.ReadRun(dir)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform bench: %v (is %s the artifacts directory of a run?)\n", err, dir)
		return 1
	}
	table := "# The suite's own cost (run " + rec.RunID + ")\n\n" + reports.RenderBench(reports.ComputeBench(suites, rec))
	if err := os.WriteFile(filepath.Join(dir, BenchFile), []byte(table), 0o644); err != nil {
		fmt.Fprintf(stderr, "gpuconform bench: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, table)
	return 0
}

// artifactsDirArg reads the one optional argument of a command that reads a run's artifacts (bench,
// report): the directory, "_artifacts" without one. --help prints the usage (done, 0); a flag it does not
// know, or more than one argument, is a usage error (done, 2), rather than a directory named like a flag.
func artifactsDirArg(name string, args []string, stdout, stderr io.Writer) (dir string, code int, done bool) {
	usage := "usage: gpuconform " + name + " [ARTIFACTS_DIR]   (default _artifacts)"
	switch {
	case len(args) == 0:
		return "_artifacts", 0, false
	case slices.Contains([]string{"-h", "-help", "--help"}, args[0]):
		fmt.Fprintln(stdout, usage)
		return "", 0, true
	case strings.HasPrefix(args[0], "-"):
		fmt.Fprintf(stderr, "gpuconform %s: unknown flag %s\n%s\n", name, args[0], usage)
		return "", 2, true
	case len(args) > 1:
		fmt.Fprintln(stderr, usage)
		return "", 2, true
	}
	return args[0], 0, false
}
