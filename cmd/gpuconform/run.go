package main

import (
	"context"
	"fmt"
	"io"
)

// runCommand and reportCommand are wired to the suite and the report renderer.
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "gpuconform run: not wired yet")
	return 1
}

func reportCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "gpuconform report: not wired yet")
	return 1
}
