package conformance

import (
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"golang.org/x/term"
)

// TestConformance is the suite's `go test` and `go tool ginkgo run` entry point (the Ginkgo CLI passes
// its flags only to packages whose tests import Ginkgo); `gpuconform run` calls Run from the binary.
//
//	go tool ginkgo run ./suites/conformance -- --kubeconfig _output/kubeconfig
func TestConformance(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	if err := Run(t, Options{IsTerminal: term.IsTerminal(int(os.Stdout.Fd()))}); err != nil {
		t.Fatal(err)
	}
}
