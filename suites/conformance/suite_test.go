package conformance

import (
	"os"
	"testing"

	"golang.org/x/term"
)

// TestConformance is the suite's `go test` and `go tool ginkgo run` entry point; `gpuconform run` calls
// Run from the binary.
//
//	go tool ginkgo run ./suites/conformance -- --kubeconfig _output/kubeconfig
func TestConformance(t *testing.T) {
	if err := Run(t, Options{IsTerminal: term.IsTerminal(int(os.Stdout.Fd()))}); err != nil {
		t.Fatal(err)
	}
}
