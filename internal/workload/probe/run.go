package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"gpuconform.io/gpuconform/internal/workload/termlog"
)

// Run gathers the report, checks it against e, prints it as one JSON line on stdout and copies it to
// the termination-message file at termLogPath when that file exists. It returns the report; the
// caller turns report.OK into the exit code. The line is printed whatever the outcome, because a
// failing probe is exactly when the suite needs the evidence.
func Run(ctx context.Context, opts Options, e Expectation, stdout io.Writer, termLogPath string) (Report, error) {
	r := Gather(ctx, opts)
	Check(&r, e)

	line, err := json.Marshal(r)
	if err != nil {
		return r, fmt.Errorf("encoding probe report: %w", err)
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return r, fmt.Errorf("writing probe report: %w", err)
	}
	if _, err := termlog.Write(termLogPath, line, compactJSON(r)); err != nil {
		// The termination message is a convenience copy; stdout already has the report.
		return r, fmt.Errorf("writing termination message: %w", err)
	}
	return r, nil
}

// compactJSON is the report without its raw sources, used when the full report exceeds the
// termination-message limit (a node with many MIG instances can get there). The verdict, the device
// list and the message are what the suite reads from a termination message.
func compactJSON(r Report) []byte {
	r.Sources = Sources{}
	r.Truncated = true
	b, _ := json.Marshal(r) // cannot fail: the full report with the same types already marshalled
	return b
}
