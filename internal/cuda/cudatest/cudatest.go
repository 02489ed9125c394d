// Package cudatest builds a test double of libcuda.so.1 (csrc/libcuda_double.c: the driver calls the suite
// makes, implemented on the CPU, the suite's kernels run by name) for unit tests. It never enters an image
// or a cluster, and nothing it computes is evidence.
package cudatest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	_ "embed"
)

//go:embed csrc/libcuda_double.c
var source []byte

// Build compiles the double with the machine's C compiler into a temporary directory and returns the
// library's path; the test is skipped, saying why, where no C compiler is installed.
func Build(t testing.TB) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc to build the libcuda test double: %v", err)
	}
	dir := t.TempDir()
	src, lib := filepath.Join(dir, "libcuda_double.c"), filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("building the libcuda test double: %v\n%s", err, out)
	}
	return lib
}
