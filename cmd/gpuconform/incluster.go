package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/runner"
	"gpuconform.io/gpuconform/reports"
)

// inClusterCommand is `gpuconform run --in-cluster` (framework/runner): the suite as a Job on the
// cluster, its artifacts copied back and rendered here as after a local run, everything it created
// deleted. A cleanup that leaves something behind fails the run (the cluster is dirtier than before).
func inClusterCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := runner.ParseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform run --in-cluster: %v\n", err)
		return 2
	}
	c, err := cluster.Connect(ctx, cluster.ConnectOptions{Kubeconfig: opts.Kubeconfig, Context: opts.Context, Timeout: 30 * time.Second})
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform run --in-cluster: %v\n", err)
		return 2
	}
	r := runner.New(c, opts, run.NewID(time.Now()), stdout)
	code, closing := runInCluster(ctx, r, opts.Artifacts, stderr)
	// Even after an interrupt: a fresh context.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	if err := r.Cleanup(cctx); err != nil {
		fmt.Fprintf(stderr, "gpuconform run --in-cluster: cleanup: %v\n", err)
		if code == reports.ExitGo {
			code = reports.ExitNoGo
		}
	}
	// The closing lines come last, after the cleanup's.
	if _, err := os.Stat(filepath.Join(opts.Artifacts, reports.RecordFile)); err == nil {
		fmt.Fprint(stderr, closing)
	}
	return code
}

// runInCluster runs the Job and returns the verdict's exit code and the report's closing lines.
func runInCluster(ctx context.Context, r *runner.Runner, artifacts string, stderr io.Writer) (int, string) {
	// The pod's artifacts are unpacked over the directory: an earlier run's report must not stay in it.
	reports.RemoveRunArtifacts(artifacts)
	code, err := r.Run(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform run --in-cluster: %v\n", err)
		if _, ok := errors.AsType[*runner.StartError](err); ok {
			return 2, ""
		}
		return reports.ExitNoGo, ""
	}
	// The artifacts must be this run's, and their verdict the pod's.
	rec, err := reports.ReadRecord(filepath.Join(artifacts, reports.RecordFile))
	if err != nil || rec.RunID != r.ID() {
		fmt.Fprintf(stderr, "gpuconform run --in-cluster: the artifacts copied into %s are not run %s's (%v)\n", artifacts, r.ID(), err)
		return reports.ExitNoGo, ""
	}
	var closing bytes.Buffer
	if rc := reportCommand(ctx, []string{artifacts}, io.Discard, &closing); rc != code {
		fmt.Fprintf(stderr, "gpuconform run --in-cluster: the pod exited %d, its artifacts say %d\n", code, rc)
		code = max(code, rc)
	}
	return code, closing.String()
}

// artifactsCommand is the pod's side of the copy: `gpuconform artifacts pack DIR` writes DIR as a tar to
// stdout; `gpuconform artifacts release DIR` tells the waiting run it may exit.
func artifactsCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || (args[0] != "pack" && args[0] != "release") {
		fmt.Fprintln(stderr, "usage: gpuconform artifacts pack|release DIR")
		return 2
	}
	var err error
	if args[0] == "pack" {
		err = runner.Pack(args[1], stdout)
	} else {
		err = runner.Release(args[1])
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform artifacts %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
