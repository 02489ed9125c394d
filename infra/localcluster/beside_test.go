package localcluster

import (
	"context"
	"errors"
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
