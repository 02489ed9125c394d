package fakeplugin

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
)

// nodeSyncGrace is how long Run holds back registration until the node's health annotation is known.
// Registering first would advertise every device Healthy for a moment after a plugin restart, and the
// kubelet could hand a device the suite had failed to a new pod. The wait is bounded because a plugin
// that cannot reach the API server should still serve its devices.
const nodeSyncGrace = 30 * time.Second

// Run is the whole plugin: it watches its Node for health, publishes its labels and serves the kubelet
// until ctx ends (SIGTERM in the binary). A nil client disables the two API-server features, which is
// only useful for local experiments.
func (p *Plugin) Run(ctx context.Context, client kubernetes.Interface) error {
	p.clearReady()
	defer p.clearReady()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Cancel first, then wait: the background loops end with ctx and are gone before Run returns, also when
	// Run returns early with an error while they run.
	defer func() {
		cancel()
		wg.Wait()
	}()
	if p.cfg.ReadyAddress != "" && p.cfg.ReadyFile != "" {
		// First: until the kubelet connects the probe is answered "not ready", with the reason.
		if err := serveOn(ctx, &wg, cancel, p.log, p.cfg.ReadyAddress, "readiness endpoint", p.ServeReady); err != nil {
			return err
		}
	}
	if client == nil {
		p.log.Warn("no Kubernetes client: node health annotation and labels are disabled")
	} else {
		wg.Go(func() { p.WatchNode(ctx, client) })
		select {
		case <-p.nodeSynced:
		case <-time.After(nodeSyncGrace):
			p.log.Warn("node state not known yet; registering with all devices healthy", "waited", nodeSyncGrace)
		case <-ctx.Done():
			return nil
		}
		// A driver version set for this node (an upgrade of its pool) replaces the configured one before
		// anything is published; labels are published only from here on.
		if v := p.driverVersionOverride(); v != "" && v != p.cfg.DriverVersion {
			p.log.Info("driver version of this node", "version", v, "configured", p.cfg.DriverVersion, "annotation", DriverVersionAnnotation)
			p.cfg.DriverVersion = v
		}
		// A driver version and a plugin version (the DRA driver's rolling upgrade changes the latter) can
		// each carry faults.
		fs := VersionFaults(p.cfg.DriverVersion)
		fs = append(fs, VersionFaults(p.cfg.PluginVersion)...)
		if len(fs) > 0 {
			p.log.Warn("FAULT INJECTION: this driver or plugin version carries faults", "driver_version", p.cfg.DriverVersion, "plugin_version", p.cfg.PluginVersion, "faults", JoinFaults(fs))
			p.setVersionFaults(fs)
		}
		wg.Go(func() { p.SyncLabels(ctx, client) })
		p.mu.Lock()
		p.noPlugin = p.noPluginSeen
		p.mu.Unlock()
		if p.noPlugin {
			p.log.Info("device plugin off on this node: only the DRA devices are served", "label", DevicePluginDeployLabel+"=false")
		}
	}
	if strings.HasSuffix(p.cfg.DriverVersion, BrokenVersionSuffix) {
		p.log.Warn("FAULT INJECTION: this driver version's plugin does not come up (no registration, no ResourceSlice)", "version", p.cfg.DriverVersion)
		<-ctx.Done()
		return nil
	}
	if p.cfg.DRADevices > 0 && p.hasFault(FaultDRAPluginNoStart) {
		return fmt.Errorf("FAULT INJECTION %s: DRA kubelet plugin %s version %s cannot start on %s", FaultDRAPluginNoStart, p.cfg.DRADriverName, p.cfg.PluginVersion, p.cfg.NodeName)
	}
	rebooted, ranBefore := p.bootState()
	if err := p.InstallDriver(); err != nil {
		return fmt.Errorf("install the fake driver (device nodes, nvidia-smi, CDI spec): %w", err)
	}
	if rebooted && ranBefore && p.hasFault(FaultStaleAfterReboot) {
		p.log.Warn("FAULT INJECTION: the node restarted and the agent found its state from before; it will not serve (no registration, no ResourceSlice)", "fault", string(FaultStaleAfterReboot))
		<-ctx.Done()
		return nil
	}
	p.markRan()
	if p.cfg.MetricsAddress != "" {
		// The exporter reports the driver's GPUs, so it starts with the driver.
		if err := serveOn(ctx, &wg, cancel, p.log, p.cfg.MetricsAddress, "metrics endpoint", p.ServeMetrics); err != nil {
			return err
		}
	}
	if client != nil && p.cfg.DRADevices > 0 {
		// The DRA half ends only with ctx; an error starting it ends the agent, so the pod restarts.
		draErr := make(chan error, 1)
		wg.Go(func() { draErr <- p.ServeDRA(ctx, client) })
		go func() {
			if err := <-draErr; err != nil {
				p.log.Error("DRA half failed; stopping the agent", "err", err)
				cancel()
			}
		}()
	}
	wg.Go(func() { p.RunLeak(ctx) })
	wg.Go(func() { p.KeepInventory(ctx) })
	wg.Go(func() { p.KeepCDISpec(ctx) })
	wg.Go(func() { p.KeepMPSDaemon(ctx) })
	if p.noPlugin {
		if p.cfg.DRADevices == 0 {
			return fmt.Errorf("%s=false leaves nothing to serve: the agent runs without DRA devices (--dra-devices=0)", DevicePluginDeployLabel)
		}
		p.mu.Lock()
		p.updateReadyLocked()
		p.mu.Unlock()
		<-ctx.Done()
		return nil
	}
	return p.ServeKubelet(ctx)
}

// bootState tells whether the node restarted since the agent last ran on it (the fake driver's state
// directory lives on the node's /run, which a restart empties) and whether it ran on this node before (a
// marker beside the kubelet's plugin directories, which a restart keeps). Read before InstallDriver.
func (p *Plugin) bootState() (rebooted, ranBefore bool) {
	if p.cfg.StateDir == "" || p.cfg.KubeletPluginsDir == "" {
		return false, false
	}
	_, err := os.Stat(filepath.Join(p.cfg.StateDir, "dev"))
	rebooted = os.IsNotExist(err)
	_, err = os.Stat(p.ranMarker())
	return rebooted, err == nil
}

func (p *Plugin) ranMarker() string {
	return filepath.Join(p.cfg.KubeletPluginsDir, "gpuconform-fake-gpu.ran")
}

// markRan records that the agent served on this node.
func (p *Plugin) markRan() {
	if p.cfg.KubeletPluginsDir != "" {
		_ = os.WriteFile(p.ranMarker(), []byte(time.Now().UTC().Format(time.RFC3339)), 0o644)
	}
}

// serveOn listens on the TCP address addr and serves what on it in the background (wg) until ctx ends. A
// port it cannot have is an error, and a server that stops on its own cancels the agent: the pod restarts
// instead of running without an endpoint the kubelet or the suite reads.
func serveOn(ctx context.Context, wg *sync.WaitGroup, cancel context.CancelFunc, log *slog.Logger, addr, what string, serve func(context.Context, net.Listener) error) error {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	wg.Go(func() {
		if err := serve(ctx, l); err != nil {
			log.Error(what+" failed; stopping the agent", "err", err)
			cancel()
		}
	})
	return nil
}
