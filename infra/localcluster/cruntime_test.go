package localcluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The workload binary links purego, so its image carries the loader and the C libraries libcuda needs;
// a static binary needs nothing.
func TestCRuntimeFiles(t *testing.T) {
	dir := t.TempDir()
	build := func(pkg string) string {
		out := filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
		return out
	}
	files, err := CRuntimeFiles(build("../../cmd/gpu-workload"))
	if err != nil {
		t.Fatal(err)
	}
	var loader, libc bool
	for inImage, host := range files {
		if "/"+inImage != host {
			t.Errorf("%s copied from %s: the loader looks for it where this machine has it", inImage, host)
		}
		switch filepath.Base(host) {
		case "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1":
			loader = true
		case "libc.so.6":
			libc = true
		}
	}
	if !loader || !libc || len(files) != 1+len(cLibraries) {
		t.Errorf("files %v: want the loader and %v", files, cLibraries)
	}
	if files, err := CRuntimeFiles(build("../../cmd/nvidia-smi")); err != nil || len(files) != 0 {
		t.Errorf("a static binary needs no C runtime: %v %v", files, err)
	}
}
