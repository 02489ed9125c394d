// Command gpuconform is the suite's CLI: it brings up the local offline GPU cluster, runs the conformance
// suites against a cluster, renders the signoff report, and tells where a workload is waiting.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"gpuconform.io/gpuconform/internal/parallel"
)

const usage = `gpuconform: GPU-scheduling conformance for Kubernetes

Usage:
  gpuconform cluster up [--node-image IMG] [--gpu-workers N] [--canary-workers N] [--dra-only-workers N] [--devices N]
                                       bring up (or revive) the local offline kind cluster
  gpuconform cluster down              delete the local cluster (caches and images stay)
  gpuconform cluster logs DIR          collect node, kubelet, containerd and control-plane logs
  gpuconform cluster load ARCHIVE...   import image archives (make images) into every node
  gpuconform run [suite flags]         run the conformance suite (compiled in: no Go, no checkout) and
                                       write the signoff report; exit 0 GO, 1 NO-GO, 3 INCOMPLETE, 2 usage
  gpuconform run --in-cluster --image IMG [suite flags]
                                       run it as a Job on the cluster, stream its progress, copy the
                                       artifacts back and clean up
  gpuconform cleanup [suite flags]     restore and delete what dead runs left (a stopped node, the canary
                                       on another driver, cordons, queues, namespaces): no spec runs, and
                                       a live run's objects are left alone
  gpuconform version                   what this binary was built from
  gpuconform images [--bin D --out D --tag T]
                                       write the workload and runner images as OCI archives (make images)
  gpuconform report [ARTIFACTS_DIR]    render the signoff report (signoff.md, signoff.html) from a run's artifacts
  gpuconform report --history DIR…     verdict and key timings of several runs, and what changed between them
  gpuconform report --product-metadata FILE [DIR]
                                       record the AI Conformance metadata and write it into the run's PRODUCT.yaml
  gpuconform report --check-product FILE  check a PRODUCT.yaml against the AI Conformance program's rules (exit 1: not fit to submit)
  gpuconform bench [ARTIFACTS_DIR]     the suite's own cost per scenario: wall time against inherent
                                       waits, API requests, their rate and per spec; the ten steps that
                                       spent the most time not waiting on the cluster (bench.md)
  gpuconform diagnose KIND/NAME -n NS  where is this workload waiting, and why (read-only)

The maintainers' harnesses are in the source tree: make selfcheck, make hardening, make scale (cmd/gpuconform-dev).
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if parallel.IsWorker(os.Args[0]) { // one of the processes of `gpuconform run --procs=N` (internal/parallel)
		os.Exit(workerMain(os.Args[1:], os.Stderr))
	}
	os.Exit(dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "cluster":
		return clusterCommand(ctx, args[1:], stderr)
	case "diagnose":
		return diagnoseCommand(ctx, args[1:], stdout, stderr)
	case "run":
		return runCommand(ctx, args[1:], stdout, stderr)
	case "artifacts":
		return artifactsCommand(args[1:], stdout, stderr)
	case "images":
		return imagesCommand(ctx, args[1:], stdout, stderr)
	case "version":
		return versionCommand(stdout)
	case "report":
		return reportCommand(ctx, args[1:], stdout, stderr)
	case "cleanup":
		return cleanupCommand(ctx, args[1:], stdout, stderr)
	case "bench":
		return benchCommand(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "gpuconform: unknown command %q\n\n%s", args[0], usage)
	return 2
}
