package localcluster

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// While two steps run side by side, heartbeats name no log: the active one could be either's.
func TestHeartbeatsNameNoLogWhileTwoStepsRun(t *testing.T) {
	c := &Cluster{}
	c.progress.running = 1
	c.setActiveLog("/logs/go-build-kubernetes.log")
	if got := c.currentLog(); got != "/logs/go-build-kubernetes.log" {
		t.Errorf("one step: log %q", got)
	}
	c.progress.running = 2
	if got := c.currentLog(); got != "" {
		t.Errorf("two steps: log %q, want none", got)
	}
}

// A background rootfs that did not run, failed or was cancelled tells buildAll to build it in line; one
// that ran hands over its directory and image.
func TestBackgroundRootfsResult(t *testing.T) {
	var none *background
	if _, _, err := none.result(); !errors.Is(err, errNotBeside) {
		t.Errorf("no background step: %v, want errNotBeside", err)
	}
	none.cancel() // nil-safe

	_, stop := context.WithCancel(t.Context())
	built := &background{done: make(chan struct{}), stop: stop}
	built.dir, built.image = "/cache/rootfs/k", "gpuconform-rootfs:k"
	close(built.done)
	if dir, image, err := built.result(); err != nil || dir != "/cache/rootfs/k" || image != "gpuconform-rootfs:k" {
		t.Errorf("built: %s %s %v", dir, image, err)
	}
	built.cancel() // after it was taken: changes nothing
	if _, _, err := built.result(); err != nil {
		t.Errorf("cancel after completion turned a built rootfs into %v", err)
	}

	failed := &background{done: make(chan struct{}), stop: stop, err: errors.New("debootstrap: exit status 1")}
	close(failed.done)
	failed.cancel()
	if _, _, err := failed.result(); !errors.Is(err, errNotBeside) {
		t.Errorf("a failed background rootfs: %v, want errNotBeside (it is built again in line, where its failure is reported)", err)
	}
}

// A component build started in the background runs once however often it is asked for, records its
// binaries, and a build of another component runs beside it.
func TestStartBuildOnce(t *testing.T) {
	root, bin := t.TempDir(), t.TempDir()
	calls := filepath.Join(t.TempDir(), "calls")
	// The fake go records its arguments and writes the -o target.
	fakeGo := "#!/bin/sh\necho \"go $*\" >> " + calls + "\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then shift; case \"$1\" in */) touch \"$1out\";; *) touch \"$1\";; esac; fi; shift; done\n"
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := os.MkdirAll(filepath.Join(root, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "m", "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{opts: Options{RepoRoot: root, CacheDir: t.TempDir(), Log: io.Discard}, logDir: t.TempDir(), built: map[string]string{}}
	x := goComponent{Name: "x", Module: "m", Packages: []string{"example.com/m/cmd/x"}}
	y := goComponent{Name: "y", Module: "m", Packages: []string{"example.com/m/cmd/y"}}
	b := c.startBuild(t.Context(), x)
	by := c.startBuild(t.Context(), y)
	if again := c.startBuild(t.Context(), x); again != b {
		t.Error("a second start of the same component started another build")
	}
	if err := b.wait(); err != nil {
		t.Fatal(err)
	}
	if err := by.wait(); err != nil {
		t.Fatal(err)
	}
	c.stopBuilds() // done builds: returns at once
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "go build -trimpath") || !strings.HasPrefix(lines[1], "go build -trimpath") {
		t.Errorf("the builds ran as %q, want one go build per component", lines)
	}
	if _, err := os.Stat(c.binary("x", "out")); err != nil || b.dir == "" {
		t.Errorf("the build's output is not recorded: dir %q, binary: %v", b.dir, err)
	}
}
