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
	unhealthy map[int]bool // physical indexes reported Unhealthy
	// versionOverride is the node's DriverVersionAnnotation as last seen.
	versionOverride string
	faults          faultSet      // in force now: configured plus the node annotation's
	changed         chan struct{} // closed (and replaced) on every health or fault change, waking ListAndWatch streams and the slice publisher
	lastGiven       []int         // physical indexes of the latest Allocate or Prepare (the double-allocate fault hands them out again)
	draReady        bool          // the DRA half is registered with the kubelet (or turned off)

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
		table:     newDeviceTable(cfg.NodeName, cfg.Devices, cfg.DRADevices, cfg.Replicas),
		unhealthy: map[int]bool{},
		faults:    newFaultSet(cfg.Faults),
		draReady:  cfg.DRADevices == 0,
		changed:   make(chan struct{}),

		labelsDrifted: make(chan struct{}, 1),
		nodeSynced:    make(chan struct{}),
	}
	if len(cfg.Faults) > 0 {
		// Loud on purpose: a plugin with a fault must never be mistaken for a healthy one in the logs.
		p.log.Warn("FAULT INJECTION ACTIVE: this agent misbehaves on purpose", "faults", JoinFaults(cfg.Faults))
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
	devs := make([]*pluginapi.Device, 0, len(p.table.ids)+1)
	for _, id := range p.table.ids {
		h := pluginapi.Healthy
		if p.unhealthy[p.table.byID[id]] && !p.faults[FaultIgnoreHealth] {
			h = pluginapi.Unhealthy
		}
		devs = append(devs, &pluginapi.Device{ID: id, Health: h})
	}
	if p.faults[FaultOverAdvertise] {
		devs = append(devs, &pluginapi.Device{ID: p.table.phantomID(), Health: pluginapi.Healthy})
	}
	return devs, p.changed
}

// notifyLocked wakes everything that re-reads the device state (ListAndWatch streams, the slice publisher).
func (p *Plugin) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// LogFaultsChanged is logged (with faults=<the list now in force>) whenever the node annotation changes the
// faults in force; tests that switch a fault on wait for it before they create pods.
const LogFaultsChanged = "FAULT INJECTION: faults in force changed"

// Faults returns the faults in force now.
func (p *Plugin) Faults() []Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults.list()
}

// hasFault reports whether f is in force now.
func (p *Plugin) hasFault(f Fault) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults[f]
}

// SetFaultsFromAnnotation applies the value of FaultsAnnotation on top of the configured faults. Unknown
// names are logged and ignored (the annotation is free text on a shared object; a typo must not stop the
// agent).
func (p *Plugin) SetFaultsFromAnnotation(value string) {
	var extra []Fault
	for raw := range strings.SplitSeq(value, ",") {
		fs, err := ParseFaults(raw)
		if err != nil {
			p.log.Warn("ignoring unknown fault in node annotation", "annotation", FaultsAnnotation, "err", err)
			continue
		}
		extra = append(extra, fs...)
	}
	set := newFaultSet(p.cfg.Faults, extra)
	p.mu.Lock()
	defer p.mu.Unlock()
	if maps.Equal(set, p.faults) {
		return
	}
	p.log.Warn(LogFaultsChanged, "faults", JoinFaults(set.list()), "was", JoinFaults(p.faults.list()))
	p.faults = set
	p.notifyLocked()
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
	p.notifyLocked()
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

// Allocate gives each container what NVIDIA's stack would: the CDI devices of the physical GPUs behind the
// requested IDs (their device nodes, plus the control devices, nvidia-smi and the inventory the CDI spec
// adds), and NVIDIA_VISIBLE_DEVICES naming them, in request order and without duplicate replicas. Faults
// change what is handed out (faults.go).
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	phantom := p.table.phantomID()
	for _, cr := range req.GetContainerRequests() {
		ids := cr.GetDevicesIds()
		present := make([]string, 0, len(ids))
		gotPhantom := false
		for _, id := range ids {
			if id == phantom && p.hasFault(FaultOverAdvertise) {
				gotPhantom = true // advertised, but no GPU is behind it
				continue
			}
			present = append(present, id)
		}
		idx, err := p.table.physical(present)
		if err != nil {
			p.log.Error("allocate refused", "requested", ids, "err", err)
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		handed := p.handOut(idx, "allocate", ids)
		if gotPhantom {
			// Handed to the runtime as if it existed, as a broken plugin would (addDevices).
			handed = append(handed, len(p.table.uuids))
			p.log.Warn("FAULT INJECTION: handed out a GPU that does not exist", "fault", string(FaultOverAdvertise), "id", phantom)
		}
		visible := make([]string, 0, len(handed))
		for _, i := range handed {
			visible = append(visible, p.table.uuid(i))
		}
		env := map[string]string{
			EnvVisibleDevices: strings.Join(visible, ","),
			EnvResource:       p.cfg.ResourceName,
			EnvNode:           p.cfg.NodeName,
		}
		car := &pluginapi.ContainerAllocateResponse{Envs: env}
		if p.cdiEnabled() {
			p.addDevices(car, handed)
		}
		p.log.Info("allocated devices", "requested", ids, EnvVisibleDevices, env[EnvVisibleDevices])
		resp.ContainerResponses = append(resp.ContainerResponses, car)
	}
	return resp, nil
}

// handOut applies the faults that change which GPUs an allocation gets (wrong-ids, double-allocate) to the
// physical indexes asked for, remembers the result for double-allocate, and returns it.
func (p *Plugin) handOut(idx []int, what string, asked any) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	handed := slices.Clone(idx)
	switch {
	case p.faults[FaultWrongIDs] && len(idx) > 0:
		handed = p.table.wrongIndexes(idx)
		p.log.Warn("FAULT INJECTION: handing out wrong devices", "fault", string(FaultWrongIDs), "op", what, "requested", asked, "should_be", idx, "handed_out", handed)
	case p.faults[FaultDoubleAllocate] && len(idx) > 0 && len(p.lastGiven) > 0:
		handed[0] = p.lastGiven[0]
		p.log.Warn("FAULT INJECTION: handing out a device that is already in use", "fault", string(FaultDoubleAllocate), "op", what, "requested", asked, "should_be", idx, "handed_out", handed)
	}
	if len(handed) > 0 {
		p.lastGiven = slices.Clone(handed)
	}
	return handed
}

// PreStartContainer is never requested (PreStartRequired is false); it succeeds for completeness.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// String identifies the plugin in logs and errors.
func (p *Plugin) String() string {
	return fmt.Sprintf("fake-gpu-agent(%s on %s, %d×%d; DRA %s: %d)", p.cfg.ResourceName, p.cfg.NodeName, p.cfg.Devices, p.cfg.Replicas, p.cfg.DRADriverName, p.cfg.DRADevices)
}
