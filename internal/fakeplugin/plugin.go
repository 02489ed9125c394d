package fakeplugin

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Environment variables Allocate sets in every container that gets devices.
const (
	// EnvVisibleDevices is what NVIDIA's container toolkit reads to expose GPUs; the workload image's
	// probe compares it with what the pod requested.
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvResource tells the workload which plugin resource it was served from, so a report can tell a
	// device-plugin allocation from a DRA one.
	EnvResource = "GPUCONFORM_DEVICE_PLUGIN_RESOURCE"
	// EnvNode names the node whose plugin made the allocation, to cross-check the pod's placement.
	EnvNode = "GPUCONFORM_NODE"
)

// Plugin is the fake device plugin: the v1beta1 DevicePluginServer, its device inventory and health,
// and (in kubelet.go and node.go) the loops that keep it registered and in sync with its Node.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	cfg   Config
	log   *slog.Logger
	table *deviceTable

	mu        sync.Mutex
	unhealthy map[int]bool  // physical indexes reported Unhealthy
	changed   chan struct{} // closed (and replaced) on every health change, waking ListAndWatch streams

	streams int // open ListAndWatch streams; ReadyFile exists while it is above zero

	labelsDrifted chan struct{} // WatchNode → SyncLabels: our labels on the node differ from the config
	nodeSynced    chan struct{} // closed once WatchNode has seen the node's initial state
	nodeSyncOnce  sync.Once
}

// New validates cfg and builds the plugin's device inventory. It starts nothing.
func New(cfg Config) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Plugin{
		cfg:       cfg,
		log:       cfg.logger().With("node", cfg.NodeName, "resource", cfg.ResourceName),
		table:     newDeviceTable(cfg.NodeName, cfg.Devices, cfg.Replicas),
		unhealthy: map[int]bool{},
		changed:   make(chan struct{}),

		labelsDrifted: make(chan struct{}, 1),
		nodeSynced:    make(chan struct{}),
	}
	if cfg.Fault != FaultNone {
		// Loud on purpose: a plugin with a fault must never be mistaken for a healthy one in the logs.
		p.log.Warn("FAULT INJECTION ACTIVE: this plugin misbehaves on purpose", "fault", string(cfg.Fault))
	}
	return p, nil
}

// DeviceIDs returns the IDs advertised to the kubelet (Devices×Replicas of them), in a stable order.
func (p *Plugin) DeviceIDs() []string { return slices.Clone(p.table.ids) }

// PhysicalUUIDs returns the UUIDs of the physical fake GPUs, by index.
func (p *Plugin) PhysicalUUIDs() []string { return slices.Clone(p.table.uuids) }

// Devices is the current device list as ListAndWatch reports it.
func (p *Plugin) Devices() []*pluginapi.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	devs, _ := p.snapshotLocked()
	return devs
}

func (p *Plugin) snapshotLocked() ([]*pluginapi.Device, <-chan struct{}) {
	devs := make([]*pluginapi.Device, 0, len(p.table.ids))
	for _, id := range p.table.ids {
		h := pluginapi.Healthy
		if p.unhealthy[p.table.byID[id]] {
			h = pluginapi.Unhealthy
		}
		devs = append(devs, &pluginapi.Device{ID: id, Health: h})
	}
	return devs, p.changed
}

// SetUnhealthyFromAnnotation applies the value of UnhealthyDevicesAnnotation ("" = all healthy). Open
// ListAndWatch streams get a new list only when the set of unhealthy GPUs really changed, so a node
// update that touches something else does not churn the kubelet.
func (p *Plugin) SetUnhealthyFromAnnotation(value string) {
	set, unknown := p.table.parseUnhealthy(value)
	if len(unknown) > 0 {
		p.log.Warn("ignoring unknown entries in unhealthy-devices annotation",
			"annotation", UnhealthyDevicesAnnotation, "unknown", unknown, "value", value)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if maps.Equal(set, p.unhealthy) {
		return
	}
	for i := range p.table.uuids {
		if set[i] != p.unhealthy[i] {
			state := pluginapi.Healthy
			if set[i] {
				state = pluginapi.Unhealthy
			}
			p.log.Info("device health changed", "index", i, "uuid", p.table.uuids[i], "health", state)
		}
	}
	p.unhealthy = set
	close(p.changed)
	p.changed = make(chan struct{})
}

// GetDevicePluginOptions tells the kubelet we offer preferred allocations and need no PreStart hook.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options(), nil
}

func (p *Plugin) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// ListAndWatch sends the full device list at once and again after every health change, until the
// kubelet hangs up or the server stops.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	ctx := stream.Context()
	p.streamOpened()
	defer p.streamClosed()
	for {
		p.mu.Lock()
		devs, changed := p.snapshotLocked()
		p.mu.Unlock()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		p.log.Info(LogSentDeviceList, "devices", len(devs), "unhealthy", countUnhealthy(devs))
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

func countUnhealthy(devs []*pluginapi.Device) int {
	n := 0
	for _, d := range devs {
		if d.Health != pluginapi.Healthy {
			n++
		}
	}
	return n
}

// GetPreferredAllocation answers deterministically; see deviceTable.preferred for the policy.
func (p *Plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		ids := p.table.preferred(cr.GetAvailableDeviceIDs(), cr.GetMustIncludeDeviceIDs(), int(cr.GetAllocationSize()))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate gives each container the environment NVIDIA's stack would: the physical GPUs behind the
// requested IDs, in request order and without duplicate replicas. Under the wrong-ids fault it hands
// out other GPUs instead.
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		idx, err := p.table.physical(cr.GetDevicesIds())
		if err != nil {
			p.log.Error("allocate refused", "requested", cr.GetDevicesIds(), "err", err)
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		visible := make([]string, 0, len(idx))
		for _, i := range idx {
			visible = append(visible, p.table.uuids[i])
		}
		if p.cfg.Fault == FaultWrongIDs {
			correct := visible
			visible = p.table.wrongDevices(idx)
			p.log.Warn("FAULT INJECTION: allocating wrong devices", "fault", string(p.cfg.Fault),
				"requested", cr.GetDevicesIds(), "should_be", correct, "handed_out", visible)
		}
		env := map[string]string{
			EnvVisibleDevices: strings.Join(visible, ","),
			EnvResource:       p.cfg.ResourceName,
			EnvNode:           p.cfg.NodeName,
		}
		p.log.Info("allocated devices", "requested", cr.GetDevicesIds(), EnvVisibleDevices, env[EnvVisibleDevices])
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: env})
	}
	return resp, nil
}

// PreStartContainer is never requested (PreStartRequired is false); it succeeds for completeness.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// String identifies the plugin in logs and errors.
func (p *Plugin) String() string {
	return fmt.Sprintf("fake-device-plugin(%s on %s, %d×%d)", p.cfg.ResourceName, p.cfg.NodeName, p.cfg.Devices, p.cfg.Replicas)
}
