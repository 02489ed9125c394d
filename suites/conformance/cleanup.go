package conformance

import (
	"context"
	"fmt"
	"io"
	"time"

	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/suite"
)

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
