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

// runAsk is the client of model servers behind a gateway: it tallies which server answered each request.
func runAsk(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ask", "--url URL [--requests N] [--header 'Name: value'] [--ready-within D]", stderr)
	url := fs.String("url", "", "where to send the inference requests (required)")
	requests := fs.Int("requests", 100, "requests per set")
	header := fs.String("header", "", "header sent with every request of a second set, 'Name: value'")
	ready := fs.Duration("ready-within", time.Minute, "how long to wait for the first answer of each set")
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	switch {
	case *url == "":
		return usageError(fs, stderr, "--url is required")
	case *requests <= 0:
		return usageError(fs, stderr, fmt.Sprintf("--requests must be positive, got %d", *requests))
	case *ready <= 0:
		return usageError(fs, stderr, fmt.Sprintf("--ready-within must be positive, got %s", *ready))
	}
	if err := serve.Ask(ctx, serve.AskOptions{URL: *url, Requests: *requests, Header: *header, ReadyWithin: *ready}, stdout); err != nil {
		fmt.Fprintf(stderr, "gpu-workload ask: %v\n", err)
		return exitFail
	}
	return exitOK
}
