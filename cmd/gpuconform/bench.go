package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

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
	dir := "_artifacts"
	switch len(args) {
	case 0:
	case 1:
		dir = args[0]
	default:
		fmt.Fprintln(stderr, "usage: gpuconform bench [ARTIFACTS_DIR]")
		return 2
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
