package fakeplugin

import (
	"context"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// One device-plugin server per extended resource. The kubelet's device manager takes one resource per
// registration and socket, so NVIDIA's plugin under the mixed MIG strategy runs one server (socket,
// registration, ListAndWatch, Allocate) per resource: nvidia.com/gpu for the whole GPUs and
// nvidia.com/mig-<profile> per profile. The fake does the same; in every other mode it serves the one
// configured resource, exactly as it did before modes existed.

// resourceServer is the DevicePluginServer of one resource, on its own socket.
type resourceServer struct {
	pluginapi.UnimplementedDevicePluginServer

	p   *Plugin
	res *resourceDevices
	log *slog.Logger
}

// devices is the resource's device list as ListAndWatch reports it now.
func (s *resourceServer) devices() []*pluginapi.Device {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	devs, _ := s.snapshotLocked()
	return devs
}

// snapshotLocked is the resource's device list with health and the faults that change what is
// advertised, and the channel closed at the next change.
func (s *resourceServer) snapshotLocked() ([]*pluginapi.Device, <-chan struct{}) {
	p, t := s.p, s.p.table
	health := func(i int) string {
		if p.unhealthy[i] && !p.faults[FaultIgnoreHealth] {
			return pluginapi.Unhealthy
		}
		return pluginapi.Healthy
	}
	devs := make([]*pluginapi.Device, 0, len(s.res.ids)+len(t.uuids)+1)
	for _, id := range s.res.ids {
		i, _ := t.parentOf(id)
		devs = append(devs, &pluginapi.Device{ID: id, Health: health(i)})
	}
	primary := s.res == t.resources[0]
	if primary && p.faults[FaultExtraReplica] && t.replicas > 1 {
		// One replica more per GPU than the labels (nvidia.com/gpu.replicas) say.
		for i := range t.dp {
			devs = append(devs, &pluginapi.Device{ID: ReplicaID(t.uuids[i], t.replicas), Health: health(i)})
		}
	}
	if primary && p.faults[FaultMIGWithParent] && t.mode == fakegpu.SharingMIGMixed {
		// The split GPUs themselves too, beside their MIG devices on the other resources.
		for _, i := range t.splitGPUs() {
			devs = append(devs, &pluginapi.Device{ID: t.uuids[i], Health: health(i)})
		}
	}
	if p.faults[FaultOverAdvertise] {
		devs = append(devs, &pluginapi.Device{ID: t.phantomFor(s.res), Health: pluginapi.Healthy})
	}
	return devs, p.changed
}

// GetDevicePluginOptions tells the kubelet we offer preferred allocations and need no PreStart hook.
func (s *resourceServer) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return s.p.options(), nil
}

// ListAndWatch sends the full device list at once and again after every health or fault change, until
// the kubelet hangs up or the server stops.
func (s *resourceServer) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	ctx := stream.Context()
	s.p.streamOpened(s.res.name)
	defer s.p.streamClosed(s.res.name)
	for {
		s.p.mu.Lock()
		devs, changed := s.snapshotLocked()
		s.p.mu.Unlock()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		s.log.Info(LogSentDeviceList, "devices", len(devs), "unhealthy", countUnhealthy(devs))
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
func (s *resourceServer) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		ids := s.p.table.preferred(cr.GetAvailableDeviceIDs(), cr.GetMustIncludeDeviceIDs(), int(cr.GetAllocationSize()))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// PreStartContainer is never requested (PreStartRequired is false); it succeeds for completeness.
func (s *resourceServer) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// Allocate gives each container what NVIDIA's stack would: the CDI devices of the GPUs or MIG devices
// behind the requested IDs (their device nodes, plus the control devices, nvidia-smi and the inventory the
// CDI spec adds), and NVIDIA_VISIBLE_DEVICES naming them (GPU UUIDs, or MIG UUIDs for MIG devices), in
// request order and without duplicate replicas; in mode mps also the pipe directory of the node's MPS
// control daemon (mps.go). Faults change what is handed out (faults.go).
func (s *resourceServer) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		var car *pluginapi.ContainerAllocateResponse
		var err error
		if s.res.mig {
			car, err = s.allocateMIG(cr.GetDevicesIds())
		} else {
			car, err = s.allocateWhole(cr.GetDevicesIds())
		}
		if err != nil {
			s.log.Error("allocate refused", "requested", cr.GetDevicesIds(), "err", err)
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		s.log.Info("allocated devices", "requested", cr.GetDevicesIds(), EnvVisibleDevices, car.Envs[EnvVisibleDevices])
		resp.ContainerResponses = append(resp.ContainerResponses, car)
	}
	return resp, nil
}

// withoutPhantom splits the over-advertise fault's phantom ID (advertised, but no device is behind it) off
// the IDs a container asked for: the IDs that exist, whether the phantom was among them, and its ID.
func (s *resourceServer) withoutPhantom(ids []string) (present []string, gotPhantom bool, phantom string) {
	phantom = s.p.table.phantomFor(s.res)
	present = make([]string, 0, len(ids))
	for _, id := range ids {
		if id == phantom && s.p.hasFault(FaultOverAdvertise) {
			gotPhantom = true
			continue
		}
		present = append(present, id)
	}
	return present, gotPhantom, phantom
}

// allocateWhole answers one container asking for whole GPUs or replicas of them.
func (s *resourceServer) allocateWhole(ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	p := s.p
	present, gotPhantom, phantom := s.withoutPhantom(ids)
	idx, err := p.table.physical(present)
	if err != nil {
		return nil, err
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
	car := &pluginapi.ContainerAllocateResponse{Envs: s.env(visible)}
	if p.cfg.Mode() == fakegpu.SharingMPS {
		p.addMPS(car)
	}
	if p.cdiEnabled() {
		p.addDevices(car, handed)
	}
	return car, nil
}

// allocateMIG answers one container asking for MIG devices.
func (s *resourceServer) allocateMIG(ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	p := s.p
	present, gotPhantom, phantom := s.withoutPhantom(ids)
	migs, err := p.table.migsOf(s.res, present)
	if err != nil {
		return nil, err
	}
	handed := p.handOutMIG(s.res, migs, ids)
	if gotPhantom {
		handed = append(handed, p.table.phantomMIG(len(p.table.uuids), p.table.firstPlacement(s.res)))
		p.log.Warn("FAULT INJECTION: handed out a MIG device that does not exist", "fault", string(FaultOverAdvertise), "id", phantom)
	}
	visible := make([]string, len(handed))
	for i, m := range handed {
		visible[i] = m.uuid
	}
	car := &pluginapi.ContainerAllocateResponse{Envs: s.env(visible)}
	if p.cdiEnabled() {
		p.addMIGDevices(car, handed)
	}
	return car, nil
}

// env is the environment every allocation sets: the visible devices, the resource and the node.
func (s *resourceServer) env(visible []string) map[string]string {
	return map[string]string{
		EnvVisibleDevices: strings.Join(visible, ","),
		EnvResource:       s.res.name,
		EnvNode:           s.p.cfg.NodeName,
	}
}
