package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"gpuconform.io/gpuconform/suites/conformance"
)

// cleanupCommand restores and deletes what dead runs left, without running the suite: the suite's flags
// say which cluster and which providers (--kubeconfig, --context, --fault-command, --upgrade-command, …).
func cleanupCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.CommandLine
	fs.Init("gpuconform cleanup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpuconform cleanup: unexpected argument %q: it takes the suite's flags only\n", fs.Arg(0))
		return 2
	}
	return conformance.Cleanup(ctx, stdout)
}
