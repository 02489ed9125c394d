package conformance

import (
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"golang.org/x/term"

	"gpuconform.io/gpuconform/infra/localcluster"
)

// TestConformance is the suite's `go test` and `go tool ginkgo run` entry point (the Ginkgo CLI passes
// its flags only to packages whose tests import Ginkgo); `gpuconform run` calls Run from the binary.
//
//	go tool ginkgo run ./suites/conformance -- --kubeconfig _output/kubeconfig
func TestConformance(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	// `go test` and `ginkgo run` run the suite in its package directory: a relative path that does not
	// exist there is taken from the checkout's root, where make and the README's commands run.
	var more []string
	if wd, _ := os.Getwd(); wd != "" {
		if root, err := localcluster.FindRepoRoot(wd); err == nil && root != wd {
			more = append(more, root)
		}
	}
	if _, err := Run(t, Options{IsTerminal: term.IsTerminal(int(os.Stdout.Fd())), MoreBaseDirs: more}); err != nil {
		t.Fatal(err)
	}
}
