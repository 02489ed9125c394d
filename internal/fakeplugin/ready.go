package fakeplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
)

// The readiness marker (Config.ReadyFile) tells the kubelet's readiness probe whether the kubelet itself is
// connected to the plugin. A pod whose process runs is not enough: after a kubelet restart the kubelet keeps
// advertising the checkpointed devices while no plugin serves them, and pods admitted then fail with
// UnexpectedAdmissionError. Whoever waits for the GPU stack (make cluster, the suites) waits for Ready.
//
// The probe asks over HTTP (Config.ReadyAddress, ReadyPath), answered from the marker: an exec probe
// (CheckReady, `--check-ready`) starts a process in the container through the runtime at every period, and
// on the local cluster's two cores those of the GPU nodes' agents took about a sixth of the CPU.

// streamOpened records a new ListAndWatch stream of resource and creates the marker once every resource
// has one.
func (p *Plugin) streamOpened(resource string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.streams++
	p.streamsOf[resource]++
	p.updateReadyLocked()
}

// streamClosed forgets a stream and removes the marker when a resource has none left.
func (p *Plugin) streamClosed(resource string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.streams--
	p.streamsOf[resource]--
	p.updateReadyLocked()
}

// updateReadyLocked makes the marker follow both halves: ready while the kubelet holds a ListAndWatch
// stream on every resource served (mig-mixed serves several; none with the device-plugin half off) and,
// with DRA on, while the kubelet has registered the DRA plugin.
func (p *Plugin) updateReadyLocked() {
	streaming := true
	for _, res := range p.table.resources {
		streaming = streaming && (p.noPlugin || p.streamsOf[res.name] > 0)
	}
	p.setReadyLocked(streaming && p.draReady)
}

// clearReady removes a marker a previous process may have left in the pod's volume: a restarted container
// must not look ready before its kubelet has connected.
func (p *Plugin) clearReady() { p.mu.Lock(); p.setReadyLocked(false); p.mu.Unlock() }

func (p *Plugin) setReadyLocked(ready bool) {
	if p.cfg.ReadyFile == "" {
		return
	}
	var err error
	if ready {
		if err = os.MkdirAll(filepath.Dir(p.cfg.ReadyFile), 0o755); err == nil {
			err = os.WriteFile(p.cfg.ReadyFile, []byte("serving\n"), 0o644)
		}
	} else if err = os.Remove(p.cfg.ReadyFile); errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err != nil {
		p.log.Error("cannot update the readiness marker", "file", p.cfg.ReadyFile, "ready", ready, "err", err)
	}
}

// CheckReady is the readiness probe: nil when the marker exists, otherwise an error saying why not.
func CheckReady(file string) error {
	if _, err := os.Stat(file); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("not ready: the kubelet holds no ListAndWatch stream on this plugin (%s absent)", file)
		}
		return fmt.Errorf("not ready: %w", err)
	}
	return nil
}

// ReadyPath is where the readiness endpoint (Config.ReadyAddress) answers.
const ReadyPath = "/readyz"

// readyHandler answers 200 while the marker exists and 503 with CheckReady's reason otherwise.
func readyHandler(file string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := CheckReady(file); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ready")
	})
}

// ServeReady answers the readiness probe on ReadyPath on l until ctx ends (readyHandler). It returns an
// error only when the server stopped on its own.
func (p *Plugin) ServeReady(ctx context.Context, l net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle(ReadyPath, readyHandler(p.cfg.ReadyFile))
	p.log.Info("serving readiness", "address", l.Addr().String(), "path", ReadyPath, "file", p.cfg.ReadyFile)
	return p.serveHTTP(ctx, l, mux, "readiness endpoint")
}
