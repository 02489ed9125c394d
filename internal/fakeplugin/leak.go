package fakeplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// The leak-all fault (FaultLeakAll) needs to reach containers that never asked the agent for anything: no
// device plugin or DRA call is made for a container without a GPU request. On a real node that leak is
// the NVIDIA runtime configured as the default runtime with an image that says NVIDIA_VISIBLE_DEVICES=all:
// the runtime itself injects every GPU into every such container. The fake plays it at the same layer,
// inside the container runtime: while the fault is on, the agent connects to containerd as an NRI plugin
// (the Node Resource Interface containerd 2 enables by default) and adds every GPU's device node, the
// control devices, nvidia-smi and the inventory to each container created on its node.

// NRISocket is containerd's default NRI socket.
const NRISocket = "/var/run/nri/nri.sock"

// leakExemptNamespaces are left alone even under the fault, so the cluster's own components (and the agent)
// keep working while it is on; every workload namespace is affected.
var leakExemptNamespaces = []string{"kube-system", "gpuconform-system", "kueue-system"}

// leakPlugin is the NRI plugin of the leak-all fault.
type leakPlugin struct{ p *Plugin }

// CreateContainer implements NRI's CreateContainerInterface.
func (l leakPlugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if slices.Contains(leakExemptNamespaces, pod.GetNamespace()) {
		return nil, nil, nil
	}
	adj := l.p.leakAdjustment()
	l.p.log.Warn("FAULT INJECTION: injecting every GPU into a container that did not ask for them", "fault", string(FaultLeakAll),
		"pod", pod.GetNamespace()+"/"+pod.GetName(), "container", ctr.GetName())
	return adj, nil, nil
}

// leakAdjustment is what the NVIDIA runtime would add for NVIDIA_VISIBLE_DEVICES=all.
func (p *Plugin) leakAdjustment() *api.ContainerAdjustment {
	adj := &api.ContainerAdjustment{}
	add := func(name string, major, minor int64) {
		adj.AddDevice(&api.LinuxDevice{Path: "/dev/" + name, Type: "c", Major: major, Minor: minor, FileMode: api.FileMode(os.FileMode(0o666))})
	}
	add("nvidiactl", fakegpu.NvidiaMajor, fakegpu.NvidiaCtlMinor)
	add("nvidia-uvm", fakegpu.NvidiaUVMMajor, fakegpu.NvidiaUVMMinor)
	add("nvidia-uvm-tools", fakegpu.NvidiaUVMMajor, fakegpu.NvidiaUVMToolsMin)
	var all []string
	for i, u := range p.table.uuids {
		add("nvidia"+strconv.Itoa(i), fakegpu.NvidiaMajor, int64(i))
		all = append(all, u)
	}
	ro := []string{"bind", "ro", "nosuid", "nodev"}
	adj.AddMount(&api.Mount{Source: filepath.Join(p.cfg.StateDir, "inventory.json"), Destination: fakegpu.ContainerInventoryFile, Type: "bind", Options: ro})
	if p.injectsNvidiaSMI() {
		adj.AddMount(&api.Mount{Source: filepath.Join(p.cfg.StateDir, "bin", "nvidia-smi"), Destination: fakegpu.ContainerNvidiaSMI, Type: "bind", Options: ro})
	}
	adj.AddEnv(EnvVisibleDevices, "all")
	adj.AddEnv("GPUCONFORM_LEAKED_DEVICES", strings.Join(all, ","))
	return adj
}

// RunLeak keeps the NRI plugin connected exactly while FaultLeakAll is in force, until ctx ends.
func (p *Plugin) RunLeak(ctx context.Context) {
	if !p.cdiEnabled() {
		return
	}
	for {
		p.mu.Lock()
		on, changed := p.faults[FaultLeakAll], p.changed
		p.mu.Unlock()
		if on {
			p.connectLeak(ctx, changed)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// connectLeak runs the NRI plugin until ctx ends or the fault state changes (changed is closed).
func (p *Plugin) connectLeak(ctx context.Context, changed <-chan struct{}) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-changed:
			cancel()
		case <-sctx.Done():
		}
	}()
	for sctx.Err() == nil {
		s, err := stub.New(leakPlugin{p}, stub.WithPluginName("gpuconform-leak-all"), stub.WithPluginIdx("90"),
			stub.WithSocketPath(NRISocket), stub.WithOnClose(cancel))
		if err == nil {
			p.log.Warn("FAULT INJECTION: connected to the container runtime's NRI socket; every new container gets every GPU", "fault", string(FaultLeakAll), "socket", NRISocket)
			err = s.Run(sctx)
			s.Stop()
		}
		if sctx.Err() != nil {
			break
		}
		p.log.Error("NRI plugin for the leak-all fault stopped; retrying", "err", fmt.Sprint(err))
		if !sleep(sctx, 2*time.Second) {
			break
		}
	}
	p.log.Info("NRI plugin for the leak-all fault disconnected")
}
