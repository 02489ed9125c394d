package fakeplugin

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// MPS (mode mps), the way NVIDIA's device plugin serves it. Its MPS control daemon (one per shared
// resource; k8s-device-plugin cmd/mps-control-daemon/mps/daemon.go) holds the per-client limits as its
// defaults: set_default_active_thread_percentage 100/replicas and, for each GPU index,
// set_default_device_pinned_mem_limit <index> <memory/replicas>M. The plugin sets no limit in the
// container: an allocation gets CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe with the daemon's pipe
// directory mounted there (internal/plugin/mps.go), and a client inherits the daemon's defaults. What a
// container can read of them is what nvidia-cuda-mps-control answers there.
//
// The fake runs no daemon: the agent keeps the defaults the daemon would hold in the pipe directory
// (fakegpu.MPSDaemonFile), mounts that directory where NVIDIA's plugin mounts its own, and installs the
// fake nvidia-cuda-mps-control (the fake nvidia-smi under that name), which answers from the file. Under
// FaultMPSNoLimits the daemon holds no defaults, as one the plugin started but never configured.

// EnvMPSPipeDirectory is the one MPS variable an allocation sets.
const EnvMPSPipeDirectory = fakegpu.EnvMPSPipeDirectory

// MPSContainerRoot is where NVIDIA's plugin mounts its MPS root in a container (mps.ContainerRoot).
const MPSContainerRoot = "/mps"

// mpsControlBin is the fake MPS control client's name in the agent's bin directory (and its argv[0]).
const mpsControlBin = "nvidia-cuda-mps-control"

// MPSPipeDirectory is the pipe directory of resource's MPS daemon as a container sees it: NVIDIA's
// "/mps/<resource>/pipe" ("/mps/nvidia.com/gpu/pipe").
func MPSPipeDirectory(resource string) string { return path.Join(MPSContainerRoot, resource, "pipe") }

// mpsHostPipeDirectory is that directory on the node, under the agent's state directory.
func (p *Plugin) mpsHostPipeDirectory(resource string) string {
	return filepath.Join(p.cfg.StateDir, "mps", resource, "pipe")
}

// mpsControlHostPath is the installed fake nvidia-cuda-mps-control.
func (p *Plugin) mpsControlHostPath() string {
	return filepath.Join(p.cfg.StateDir, "bin", mpsControlBin)
}

// MPSDaemon is what the node's MPS daemon holds now: NVIDIA's plugin's defaults (100/replicas percent of
// the threads, memory/replicas MiB of pinned memory for each device-plugin GPU by index), none under
// FaultMPSNoLimits.
func (p *Plugin) MPSDaemon() fakegpu.MPSDaemon {
	d := fakegpu.MPSDaemon{Resource: p.cfg.ResourceName}
	if p.hasFault(FaultMPSNoLimits) || p.cfg.Replicas < 1 {
		return d
	}
	pct := 100 / p.cfg.Replicas
	d.DefaultActiveThreadPercentage = &pct
	if p.cfg.MemoryMiB > 0 {
		d.DefaultPinnedDeviceMemLimitMiB = map[string]int{}
		for i := range p.table.dp {
			d.DefaultPinnedDeviceMemLimitMiB[strconv.Itoa(i)] = p.cfg.MemoryMiB / p.cfg.Replicas
		}
	}
	return d
}

// servesMPS reports whether the agent keeps an MPS daemon: mode mps with the fake driver installed.
func (p *Plugin) servesMPS() bool { return p.cfg.Mode() == fakegpu.SharingMPS && p.cdiEnabled() }

// installMPSControl installs the fake nvidia-cuda-mps-control beside nvidia-smi (the same multi-call
// binary), which the CDI spec mounts into GPU containers as the NVIDIA toolkit mounts the real one.
func (p *Plugin) installMPSControl() error {
	if p.cfg.NvidiaSMI == "" {
		return nil
	}
	if err := copyFile(p.cfg.NvidiaSMI, p.mpsControlHostPath(), 0o755); err != nil {
		return fmt.Errorf("install %s: %w", mpsControlBin, err)
	}
	return nil
}

// writeMPSDaemon writes the daemon's state into its pipe directory when it changed, and reports whether
// it wrote it.
func (p *Plugin) writeMPSDaemon() (bool, error) {
	if !p.servesMPS() {
		return false, nil
	}
	want, err := p.MPSDaemon().Marshal()
	if err != nil {
		return false, err
	}
	file := filepath.Join(p.mpsHostPipeDirectory(p.cfg.ResourceName), fakegpu.MPSDaemonFile)
	if have, err := os.ReadFile(file); err == nil && bytes.Equal(have, want) {
		return false, nil
	}
	return true, writeAtomic(file, want, 0o644)
}

// LogMPSDaemonWritten is logged (with defaults=<whether the daemon holds its limits>) each time
// KeepMPSDaemon rewrites the fake MPS daemon's state; tests that switch FaultMPSNoLimits wait for it.
const LogMPSDaemonWritten = "fake MPS daemon defaults written"

// KeepMPSDaemon rewrites the fake MPS daemon's state whenever it changes (FaultMPSNoLimits switched on or
// off), until ctx ends; InstallDriver must have run. Every container of the resource shares the daemon,
// so one already running sees the change too, as clients of a real daemon whose defaults were reset would
// (for their next server).
func (p *Plugin) KeepMPSDaemon(ctx context.Context) {
	if !p.servesMPS() {
		return
	}
	for {
		p.mu.Lock()
		changed := p.changed // taken before the state is built, so no change goes unseen
		p.mu.Unlock()
		wrote, err := p.writeMPSDaemon()
		if err != nil {
			p.log.Error("cannot write the fake MPS daemon's state; retrying", "err", err)
			if !sleep(ctx, time.Second) {
				return
			}
			continue
		}
		if wrote {
			level, limits := slog.LevelInfo, !p.hasFault(FaultMPSNoLimits)
			if !limits {
				level = slog.LevelWarn // FAULT INJECTION: the daemon answers its built-in defaults: no limits
			}
			p.log.Log(ctx, level, LogMPSDaemonWritten, "defaults", limits, "pipe_directory", p.mpsHostPipeDirectory(p.cfg.ResourceName))
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// addMPS gives an allocation of the MPS-shared resource what NVIDIA's plugin gives it: the pipe directory
// of the daemon in CUDA_MPS_PIPE_DIRECTORY and, with the fake driver installed, the daemon's directory
// mounted there (read-only: the fake daemon has no pipes for clients to write to).
func (p *Plugin) addMPS(car *pluginapi.ContainerAllocateResponse) {
	dir := MPSPipeDirectory(p.cfg.ResourceName)
	car.Envs[EnvMPSPipeDirectory] = dir
	if p.cdiEnabled() {
		car.Mounts = append(car.Mounts, &pluginapi.Mount{ContainerPath: dir, HostPath: p.mpsHostPipeDirectory(p.cfg.ResourceName), ReadOnly: true})
	}
	if p.hasFault(FaultMPSNoLimits) {
		p.log.Warn("FAULT INJECTION: MPS allocation whose daemon holds no default limits", "fault", string(FaultMPSNoLimits))
	}
}
