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

// A component build started in the background runs once however often it is asked for, and an Idle one
// runs its go command under nice 19; the priority is not part of the component's key (the binaries are the
// same).
func TestStartBuildOnceAndIdleUnderNice(t *testing.T) {
	root, bin := t.TempDir(), t.TempDir()
	calls := filepath.Join(t.TempDir(), "calls")
	// The fake go records its arguments and writes the -o target; the fake nice records its own and runs the rest.
	fakeGo := "#!/bin/sh\necho \"go $*\" >> " + calls + "\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then shift; case \"$1\" in */) touch \"$1out\";; *) touch \"$1\";; esac; fi; shift; done\n"
	fakeNice := "#!/bin/sh\necho \"nice $1 $2\" >> " + calls + "\nshift 2\nexec \"$@\"\n"
	for name, body := range map[string]string{"go": fakeGo, "nice": fakeNice} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := os.MkdirAll(filepath.Join(root, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "m", "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{opts: Options{RepoRoot: root, CacheDir: t.TempDir(), Log: io.Discard}, logDir: t.TempDir(), built: map[string]string{}}
	plain := goComponent{Name: "x", Module: "m", Packages: []string{"example.com/m/cmd/x"}}
	idle := plain
	idle.Idle = true
	kPlain, err := c.componentKey(t.Context(), plain)
	if err != nil {
		t.Fatal(err)
	}
	if kIdle, _ := c.componentKey(t.Context(), idle); kIdle != kPlain {
		t.Errorf("Idle changes the key: %s vs %s", kIdle, kPlain)
	}
	b := c.startBuild(t.Context(), idle)
	if again := c.startBuild(t.Context(), plain); again != b {
		t.Error("a second start of the same component started another build")
	}
	if err := b.wait(); err != nil {
		t.Fatal(err)
	}
	c.stopBuilds() // done builds: returns at once
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	if len(lines) != 2 || lines[0] != "nice -n 19" || !strings.HasPrefix(lines[1], "go build -trimpath") {
		t.Errorf("the idle build ran as %q, want nice -n 19, then one go build", lines)
	}
	if c.binary("x", "out") == "" || b.dir == "" {
		t.Errorf("the build's output is not recorded: dir %q", b.dir)
	}

	// Not idle: the go command runs directly.
	if err := os.Remove(calls); err != nil {
		t.Fatal(err)
	}
	other := goComponent{Name: "y", Module: "m", Packages: []string{"example.com/m/cmd/y"}}
	if err := c.startBuild(t.Context(), other).wait(); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(calls)
	if lines := strings.Split(strings.TrimSpace(string(got)), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "go build") {
		t.Errorf("a build that is not idle ran as %q", lines)
	}
}
