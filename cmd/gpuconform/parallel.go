package main

import (
	"fmt"
	"io"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"gpuconform.io/gpuconform/internal/parallel"
	"gpuconform.io/gpuconform/suites/conformance"
)

// workerMain is one process of `gpuconform run --procs=N` (internal/parallel): the suite with the flags
// Ginkgo's CLI and the user gave, and nothing of `gpuconform run`'s own (no verdict, no in-cluster
// runner). It returns 0 when its specs passed and 1 otherwise, the exit codes the CLI reads.
func workerMain(args []string, stderr io.Writer) int {
	specOut, done, err := parallel.StartWorker(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform worker: %v\n", err)
		return 1
	}
	defer done()
	t := &suiteT{}
	gomega.RegisterFailHandler(ginkgo.Fail)
	if _, err := conformance.Run(t, conformance.Options{Stdout: specOut}); err != nil {
		fmt.Fprintf(stderr, "gpuconform worker: %v\n", err)
		return 1
	}
	if t.failed {
		return 1
	}
	return 0
}
