package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"gpuconform.io/gpuconform/internal/workload/serve"
)

// runServe is the model-server stand-in whose own metrics the cluster's monitoring must collect.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", "--nonce N [--port P] [--interval D]", stderr)
	nonce := fs.String("nonce", "", "value of the "+serve.NonceLabel+" label on every series (required)")
	port := fs.Int("port", serve.Port, "port of /metrics and /v1/infer")
	interval := fs.Duration("interval", time.Second, "how often the server sends itself an inference request")
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	switch {
	case *nonce == "":
		return usageError(fs, stderr, "--nonce is required")
	case *port <= 0 || *port > 65535:
		return usageError(fs, stderr, fmt.Sprintf("--port %d is not a port number", *port))
	case *interval <= 0:
		return usageError(fs, stderr, fmt.Sprintf("--interval must be positive, got %s", *interval))
	}
	if err := serve.Run(ctx, serve.Options{Port: *port, Nonce: *nonce, Interval: *interval}, stdout); err != nil {
		fmt.Fprintf(stderr, "gpu-workload serve: %v\n", err)
		return exitFail
	}
	return exitOK
}
