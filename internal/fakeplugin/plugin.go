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
	// versionFaults are the faults of the driver version this agent runs (VersionFaults); faultsValue is the
	// node's FaultsAnnotation as last applied.
	versionFaults []Fault
	faultsValue   string
	faults        faultSet      // in force now: configured plus the node annotation's
	changed       chan struct{} // closed (and replaced) on every health or fault change, waking ListAndWatch streams and the slice publisher
	lastGiven     []int         // physical indexes of the latest Allocate or Prepare (the double-allocate fault hands them out again)
	lastGivenMIG  []migDevice   // MIG devices of the latest MIG allocation (the same, for MIG resources)
	draReady      bool          // the DRA half is registered with the kubelet (or turned off)
	noPlugin      bool          // the node's DevicePluginDeployLabel says "false" (read at start): the device-plugin half stays off
	noPluginSeen  bool          // the label's value as WatchNode last saw it

	streams   int            // open ListAndWatch streams, of every resource
	streamsOf map[string]int // open ListAndWatch streams per resource; ReadyFile exists while each resource has one

	servers []*resourceServer // one device-plugin server per resource, the configured resource first

	labelsDrifted chan struct{} // WatchNode → SyncLabels: our labels on the node differ from the config
	nodeSynced    chan struct{} // closed once WatchNode has seen the node's initial state
	nodeSyncOnce  sync.Once
}

// New validates cfg and builds the plugin's device inventory. It starts nothing.
func New(cfg Config) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Everything keyed by the resource (the kubelet's resource, the socket, MPS's pipe directory) uses
	// the name the GPUs are advertised as.
	cfg.ResourceName = cfg.AdvertisedResource()
	p := &Plugin{
		cfg:       cfg,
		log:       cfg.logger().With("node", cfg.NodeName, "resource", cfg.ResourceName),
		table:     newModeTable(cfg.NodeName, cfg.ResourceName, cfg.Mode(), cfg.Devices, cfg.DRADevices, cfg.Replicas),
		unhealthy: map[int]bool{},
		streamsOf: map[string]int{},
		faults:    newFaultSet(cfg.Faults),
		draReady:  cfg.DRADevices == 0,
		changed:   make(chan struct{}),

		labelsDrifted: make(chan struct{}, 1),
		nodeSynced:    make(chan struct{}),
	}
	for _, res := range p.table.resources {
		p.servers = append(p.servers, &resourceServer{p: p, res: res, log: cfg.logger().With("node", cfg.NodeName, "resource", res.name)})
	}
	if len(cfg.Faults) > 0 {
		// Loud on purpose: a plugin with a fault must never be mistaken for a healthy one in the logs.
		p.log.Warn("FAULT INJECTION ACTIVE: this agent misbehaves on purpose", "faults", JoinFaults(cfg.Faults))
	}
	return p, nil
}

// DeviceIDs returns the IDs advertised to the kubelet on the configured resource (Devices×Replicas of
// them without MIG), in a stable order.
func (p *Plugin) DeviceIDs() []string { return slices.Clone(p.table.ids) }

// Resources returns the extended resources the device plugin serves, the configured one first (mig-mixed
// adds one per MIG profile on the node).
func (p *Plugin) Resources() []string {
	out := make([]string, len(p.table.resources))
	for i, r := range p.table.resources {
		out[i] = r.name
	}
	return out
}

// ResourceDeviceIDs returns the IDs advertised on resource (nil for a resource not served).
func (p *Plugin) ResourceDeviceIDs(resource string) []string {
	if res, ok := p.table.resource(resource); ok {
		return slices.Clone(res.ids)
	}
	return nil
}

// Server returns the device-plugin server of resource (nil for a resource not served): what the kubelet
// talks to on that resource's socket.
func (p *Plugin) Server(resource string) pluginapi.DevicePluginServer {
	for _, s := range p.servers {
		if s.res.name == resource {
			return s
		}
	}
	return nil
}

// PhysicalUUIDs returns the UUIDs of the physical fake GPUs, by index.
func (p *Plugin) PhysicalUUIDs() []string { return slices.Clone(p.table.uuids) }

// Devices is the current device list of the configured resource as ListAndWatch reports it.
func (p *Plugin) Devices() []*pluginapi.Device { return p.servers[0].devices() }

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
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faultsValue = value
	set := newFaultSet(p.cfg.Faults, extra, p.versionFaults)
	if maps.Equal(set, p.faults) {
		return
	}
	p.log.Warn(LogFaultsChanged, "faults", JoinFaults(set.list()), "was", JoinFaults(p.faults.list()))
	p.faults = set
	p.notifyLocked()
}

// setVersionFaults puts the faults of the driver version the agent runs in force, beside the configured and
// the annotated ones.
func (p *Plugin) setVersionFaults(fs []Fault) {
	p.mu.Lock()
	p.versionFaults = fs
	value := p.faultsValue
	p.mu.Unlock()
	p.SetFaultsFromAnnotation(value)
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

// ListAndWatch, GetPreferredAllocation and Allocate of the Plugin itself are those of the configured
// resource's server (servers.go), which is what the kubelet reaches on SocketName.

// ListAndWatch is the configured resource's ListAndWatch.
func (p *Plugin) ListAndWatch(e *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	return p.servers[0].ListAndWatch(e, stream)
}

// GetPreferredAllocation is the configured resource's GetPreferredAllocation.
func (p *Plugin) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return p.servers[0].GetPreferredAllocation(ctx, req)
}

// Allocate is the configured resource's Allocate.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return p.servers[0].Allocate(ctx, req)
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

// handOutMIG is handOut for MIG devices of resource res: wrong-ids gives other MIG devices of res,
// double-allocate the previous MIG allocation's first device again.
func (p *Plugin) handOutMIG(res *resourceDevices, migs []migDevice, asked []string) []migDevice {
	p.mu.Lock()
	defer p.mu.Unlock()
	handed := slices.Clone(migs)
	uuids := func(ms []migDevice) []string {
		out := make([]string, len(ms))
		for i, m := range ms {
			out[i] = m.uuid
		}
		return out
	}
	switch {
	case p.faults[FaultWrongIDs] && len(migs) > 0:
		handed = p.table.wrongMIGs(res, migs)
		p.log.Warn("FAULT INJECTION: handing out wrong devices", "fault", string(FaultWrongIDs), "op", "allocate "+res.name, "requested", asked, "handed_out", uuids(handed))
	case p.faults[FaultDoubleAllocate] && len(migs) > 0 && len(p.lastGivenMIG) > 0:
		handed[0] = p.lastGivenMIG[0]
		p.log.Warn("FAULT INJECTION: handing out a device that is already in use", "fault", string(FaultDoubleAllocate), "op", "allocate "+res.name, "requested", asked, "handed_out", uuids(handed))
	}
	if len(handed) > 0 {
		p.lastGivenMIG = slices.Clone(handed)
	}
	return handed
}

// PreStartContainer is never requested (PreStartRequired is false); it succeeds for completeness.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// String identifies the plugin in logs and errors.
func (p *Plugin) String() string {
	return fmt.Sprintf("fake-gpu-agent(%s on %s, %d×%d, sharing %s; DRA %s: %d)", strings.Join(p.Resources(), "+"), p.cfg.NodeName, p.cfg.Devices, p.cfg.Replicas, p.cfg.Mode(), p.cfg.DRADriverName, p.cfg.DRADevices)
}
