package fakeplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// The DRA half of the agent: a kubelet DRA plugin written with k8s.io/dynamic-resource-allocation's
// kubeletplugin helper (the library NVIDIA's DRA driver and the example driver use). It publishes the
// node's DRA GPUs in a ResourceSlice with the attributes NVIDIA's driver publishes, and prepares claims by
// handing the kubelet the same CDI devices the device-plugin half uses.

// LogPublishedSlice is logged each time the agent hands a new device list to the ResourceSlice controller.
const LogPublishedSlice = "published ResourceSlice devices"

// DRADeviceName is the ResourceSlice device name of the GPU with physical index i; NVIDIA's driver names
// GPUs "gpu-<index>".
func DRADeviceName(i int) string { return "gpu-" + strconv.Itoa(i) }

// draIndex parses a device name of ours back into the physical index.
func draIndex(name string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "gpu-"))
	return n, err == nil && strings.HasPrefix(name, "gpu-")
}

// draPlugin implements kubeletplugin.DRAPlugin on top of the agent's state.
type draPlugin struct{ p *Plugin }

// ServeDRA registers the DRA half with the kubelet, publishes the slice and republishes it on every
// health or fault change, until ctx ends. The kubeletplugin helper re-registers by itself after a kubelet
// restart (the kubelet finds the registration socket again in its plugin watcher directory).
func (p *Plugin) ServeDRA(ctx context.Context, client kubernetes.Interface) error {
	if p.cfg.DRADevices == 0 {
		return nil
	}
	name := p.cfg.DRADriverName
	// The helper listens in its data directory but does not create it.
	dataDir := filepath.Join(p.cfg.KubeletPluginsDir, name)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return fmt.Errorf("DRA plugin directory: %w", err)
	}
	// With the pod's UID the sockets are the pod's own, so that during a DaemonSet's surge the kubelet
	// holds both instances and moves to the new one once it registered (the old one's calls still
	// answered): the overlap NVIDIA's driver relies on for its rolling upgrade.
	helper, err := kubeletplugin.Start(ctx, draPlugin{p},
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(p.cfg.NodeName),
		kubeletplugin.DriverName(name),
		kubeletplugin.RegistrarDirectoryPath(p.cfg.KubeletRegistryDir),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.RegistrationService(!p.cfg.DRAUnregistered),
		kubeletplugin.RollingUpdate(types.UID(p.cfg.PodUID)),
	)
	if err != nil {
		return fmt.Errorf("start DRA kubelet plugin %s: %w", name, err)
	}
	defer helper.Stop()
	if p.cfg.DRAUnregistered {
		p.log.Warn("FAULT INJECTION: the DRA kubelet plugin does not register with the kubelet; its ResourceSlices are published all the same", "driver", name)
	}
	p.log.Info("DRA kubelet plugin started", "driver", name, "devices", p.cfg.DRADevices, "rolling_update_uid", p.cfg.PodUID)
	if p.hasFault(FaultDRASliceChurn) {
		p.wipeSlices(ctx, client, name)
	}
	var publisher *resourceslice.Controller
	defer func() {
		if publisher != nil {
			publisher.Stop()
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	ticks := 0
	// frozen: FaultDRANoRepublish stopped the publisher once the slice existed; nothing is published
	// until the fault is switched off.
	frozen := false
	for {
		if frozen && !p.hasFault(FaultDRANoRepublish) {
			frozen = false
			p.log.Info("fault switched off: publishing the ResourceSlice again", "fault", string(FaultDRANoRepublish))
		}
		p.mu.Lock()
		groups, changed := p.sliceDeviceGroupsLocked()
		p.mu.Unlock()
		published := p.draSlices(groups)
		res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
			p.cfg.NodeName: {Slices: published},
		}}
		var names, sets []string
		for _, sl := range published {
			for _, d := range sl.Devices {
				names = append(names, d.Name)
			}
			for _, cs := range sl.SharedCounters {
				sets = append(sets, cs.Name)
			}
		}
		switch {
		case frozen:
		case publisher == nil:
			var err error
			if publisher, err = p.startSliceController(ctx, client, &res); err != nil {
				p.log.Error("cannot publish ResourceSlice; retrying", "err", err)
			}
		default:
			publisher.Update(&res)
		}
		if publisher != nil {
			p.log.Info(LogPublishedSlice, "driver", name, "devices", names, "counter_sets", sets, "slices", len(published))
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				break wait
			case <-tick.C:
				// Readiness follows the kubelet's registration of the plugin (it can drop and come back);
				// unregistered on purpose, the plugin serves as far as it can tell.
				st := helper.RegistrationStatus()
				registered := p.cfg.DRAUnregistered || st != nil && st.PluginRegistered
				p.setDRAReady(registered)
				if frozen { // a change of faults closes changed: the loop's top unfreezes
					continue
				}
				if publisher != nil && p.hasFault(FaultDRANoRepublish) && p.sliceExists(ctx, client, name) {
					p.log.Warn("FAULT INJECTION: the ResourceSlice is published; the agent publishes nothing more, so a slice deleted from now on (the starting kubelet deletes its node's slices) stays gone", "fault", string(FaultDRANoRepublish), "driver", name)
					publisher.Stop()
					publisher, frozen = nil, true
					continue
				}
				// A starting kubelet deletes the node's ResourceSlices until its drivers register again; the
				// controller recreates them once its sync delay and its cache of created slices let it
				// (sliceMutationCacheTTL). Once registered, a missing slice is published again all the same
				// (unregistered on purpose, too: the kubelet wipes the slices of the registered plugin this
				// one replaced 30 s later).
				if ticks++; registered && ticks%10 == 0 && len(names)+len(sets) > 0 && !p.sliceExists(ctx, client, name) {
					p.log.Warn("own ResourceSlice is missing while registered; publishing it again", "driver", name)
					break wait
				}
			}
		}
	}
}

// Publishing times of the agent's ResourceSlice controller, shorter than the library's defaults.
//
// The library keeps each slice it created in a mutation cache for DefaultMutationCacheTTL (one minute),
// so that its next sync does not create it twice before its informer has seen it; a slice the starting
// kubelet deletes within that minute (the kubelet wipes its node's slices as it starts) stays in the
// cache, and the controller believes it exists until the minute is over: the agent's republishing of a
// missing slice changed nothing, and a kubelet restart shortly after the agent started (a node stopped
// and started, then its kubelet restarted) would leave the node without DRA devices until the minute is
// over. DefaultSyncDelay (30 s after a slice event) is the wait before a deletion is
// noticed at all. The agent runs one pool of one node, whose informer is up to date within a second.
const (
	sliceMutationCacheTTL = 5 * time.Second
	sliceSyncDelay        = 2 * time.Second
)

// startSliceController starts the ResourceSlice controller of k8s.io/dynamic-resource-allocation that
// publishes the node's pool, owned by the node as the kubeletplugin helper's PublishResources owns it, with
// the agent's publishing times.
func (p *Plugin) startSliceController(ctx context.Context, client kubernetes.Interface, res *resourceslice.DriverResources) (*resourceslice.Controller, error) {
	return resourceslice.StartController(ctx, resourceslice.Options{
		DriverName:       p.cfg.DRADriverName,
		KubeClient:       client,
		Owner:            &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: p.cfg.NodeName},
		Resources:        res,
		MutationCacheTTL: ptr.To(sliceMutationCacheTTL),
		SyncDelay:        ptr.To(sliceSyncDelay),
		ErrorHandler:     draPlugin{p}.HandleError,
	})
}

// XIDTaintKey is the device taint key the DRA half puts on an unhealthy GPU's devices: NVIDIA's DRA driver
// taints a device on a critical XID with "<driver>/xid", the XID as value, NoSchedule (its NVML health
// monitor; a non-critical XID gets effect None). The fake's health fault is XID 79, "GPU has fallen off the
// bus", which NVIDIA classifies as critical.
func XIDTaintKey(driver string) string { return driver + "/xid" }

// HealthFaultXID is the XID the fake reports for a GPU marked unhealthy.
const HealthFaultXID = "79"

// healthTaint is the taint on the devices of an unhealthy GPU: NoSchedule, or None under FaultDRAXIDIgnored
// (a driver told to treat the XID as non-critical, as NVIDIA's additionalXidsToIgnore does).
func (p *Plugin) healthTaintLocked() resourceapi.DeviceTaint {
	effect := resourceapi.DeviceTaintEffectNoSchedule
	if p.faults[FaultDRAXIDIgnored] {
		effect = resourceapi.DeviceTaintEffectNone
	}
	return resourceapi.DeviceTaint{Key: XIDTaintKey(p.cfg.DRADriverName), Value: HealthFaultXID, Effect: effect}
}

// sliceDeviceGroupsLocked lists the devices to publish, by GPU: every DRA GPU, an unhealthy one with its
// devices tainted (healthTaintLocked: the scheduler stops allocating them, and the slice says why; the name
// and UUID stay, and the taint goes when it recovers), in the MIG modes with its partitions
// (dra_partitions.go), in time-slicing and MPS shared by its memory capacity (dra_shared.go), plus the
// phantom under FaultPhantomSliceDevice.
// Each group holds one GPU and its partitions, so they can be kept in one ResourceSlice. The phantom is a
// whole GPU only, consuming no counters: it has no counter set, and a reference to a missing one would make
// the whole pool invalid instead of one device unpreparable.
func (p *Plugin) sliceDeviceGroupsLocked() ([][]resourceapi.Device, <-chan struct{}) {
	var groups [][]resourceapi.Device
	for i := p.table.dp; i < len(p.table.uuids); i++ {
		var group []resourceapi.Device
		switch {
		case p.draPartitionable():
			group = p.partitionableGPULocked(i)
		case p.draShared():
			group = []resourceapi.Device{p.sharedDevice(p.sliceDevice(i), p.faults[FaultDRACapacityOverstated])}
		default:
			group = []resourceapi.Device{p.sliceDevice(i)}
		}
		if p.unhealthy[i] && !p.faults[FaultIgnoreHealth] {
			// A GPU-wide XID affects the GPU and every partition of it (NVIDIA resolves a full-GPU event to
			// all of the GPU's devices).
			for k := range group {
				group[k].Taints = []resourceapi.DeviceTaint{p.healthTaintLocked()}
			}
		}
		groups = append(groups, group)
	}
	if p.faults[FaultPhantomSliceDevice] {
		groups = append(groups, []resourceapi.Device{p.sliceDevice(len(p.table.uuids))})
	}
	return groups, p.changed
}

// sliceDevice describes GPU i with the attribute names and types NVIDIA's DRA driver publishes for a
// full GPU (type, uuid, productName, brand, architecture, driverVersion, cudaDriverVersion, index, minor,
// pcieBusID; capacity memory), so CEL selectors written for real clusters select the fake ones.
func (p *Plugin) sliceDevice(i int) resourceapi.Device {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(s)} }
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":         str("gpu"),
		"uuid":         str(p.table.uuid(i)),
		"productName":  str(p.cfg.Product),
		"brand":        str("Nvidia"),
		"architecture": str(strings.ToUpper(p.cfg.Family[:1]) + p.cfg.Family[1:]),
		"index":        {IntValue: ptr.To(int64(i))},
		"minor":        {IntValue: ptr.To(int64(i))},
		"pcieBusID":    str(fmt.Sprintf("0000:%02x:00.0", 0x18+i)),
	}
	if v := semver(p.cfg.DriverVersion); v != "" {
		attrs["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	if v := semver(p.cfg.CUDAVersion); v != "" {
		attrs["cudaDriverVersion"] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	return resourceapi.Device{
		Name:       DRADeviceName(i),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: *resource.NewQuantity(int64(p.cfg.MemoryMiB)<<20, resource.BinarySI)},
		},
	}
}

// semver pads a driver version such as "550.54.15" or "12.4" to the three parts a DRA version attribute
// must have; "" when it is not numeric.
func semver(v string) string {
	parts := strings.Split(v, ".")
	if v == "" || len(parts) > 3 {
		return ""
	}
	for i, s := range parts {
		n, err := strconv.Atoi(s)
		if err != nil {
			return ""
		}
		parts[i] = strconv.Itoa(n) // semver forbids leading zeros
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	return strings.Join(parts, ".")
}

func (p *Plugin) setDRAReady(ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.draReady != ok {
		p.log.Info("DRA kubelet plugin registration changed", "registered", ok)
		p.draReady = ok
		p.updateReadyLocked()
	}
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: each of our devices in the claim's allocation
// becomes its CDI device. A device we do not have (a phantom, another node's) fails the claim, as a real
// driver fails a GPU it cannot find.
func (d draPlugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	p := d.p
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		out[claim.UID] = p.prepareClaim(claim)
	}
	return out, nil
}

func (p *Plugin) prepareClaim(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	ref := claim.Namespace + "/" + claim.Name
	if p.hasFault(FaultDRAPrepareFail) {
		p.log.Warn("FAULT INJECTION: failing NodePrepareResources", "fault", string(FaultDRAPrepareFail), "claim", ref)
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("fake GPU driver on %s: prepare of claim %s failed (fault injection %s)", p.cfg.NodeName, ref, FaultDRAPrepareFail)}
	}
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s is not allocated", ref)}
	}
	type ours struct {
		request, device string
		index           int                // the GPU: the device itself, or a partition's parent
		mig             *fakegpu.Placement // a partition: its placement on that GPU
		share           *types.UID         // a shared GPU: the allocation's share of it
	}
	var mine []ours
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != p.cfg.DRADriverName || r.Pool != p.cfg.NodeName {
			continue
		}
		if top, sub, ok := strings.Cut(r.Request, "/"); ok && p.hasFault(FaultDRANoSubrequests) {
			p.log.Warn("FAULT INJECTION: refusing a sub-request's device", "fault", string(FaultDRANoSubrequests), "claim", ref, "request", r.Request)
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("fake GPU driver on %s: claim %s has no request %q for device %s (its requests: %s; alternative %q ignored; fault injection %s)",
				p.cfg.NodeName, ref, r.Request, r.Device, top, sub, FaultDRANoSubrequests)}
		}
		if r.AdminAccess != nil && *r.AdminAccess && p.hasFault(FaultDRANoAdminAccess) {
			p.log.Warn("FAULT INJECTION: refusing an admin-access device", "fault", string(FaultDRANoAdminAccess), "claim", ref, "device", r.Device)
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("fake GPU driver on %s: device %s of claim %s is in use by another claim: refusing to hand it out twice (admin access not supported; fault injection %s)",
				p.cfg.NodeName, r.Device, ref, FaultDRANoAdminAccess)}
		}
		m := ours{request: r.Request, device: r.Device, share: r.ShareID}
		i, pl, isPartition := draPartition(r.Device)
		if isPartition {
			m.mig = &pl
		} else {
			i, _ = draIndex(r.Device)
		}
		if why := p.unpreparable(r.Device, i, isPartition); why != "" {
			p.log.Error("prepare refused: no such device", "claim", ref, "device", r.Device, "why", why)
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("fake GPU driver on %s: device %s of claim %s %s", p.cfg.NodeName, r.Device, ref, why)}
		}
		m.index = i
		mine = append(mine, m)
	}
	idx := make([]int, len(mine))
	for k, m := range mine {
		idx[k] = m.index
	}
	// The faults that change what is handed out (wrong-ids, double-allocate) pick other GPUs; a partition
	// then becomes the same placement on the GPU picked, so it is as wrong as a whole GPU would be.
	handed := p.handOut(idx, "prepare "+ref, idx)
	var res kubeletplugin.PrepareResult
	var given []string
	for k, m := range mine {
		var cdi []string
		switch {
		case m.mig != nil:
			// A MIG device is named by its UUID in the fake driver's CDI spec (as nvidia-ctk names devices
			// under its uuid naming strategy); one on a GPU past the inventory (a fault's phantom) names
			// none that exists, and the runtime fails the container.
			cdi = []string{CDIMIGDeviceName(fakegpu.MIGUUID(p.table.uuid(handed[k]), *m.mig))}
		case handed[k] < len(p.table.uuids):
			// A share of a shared GPU is the GPU itself, as a time-slicing replica is: the claims that share
			// it are told apart by the scheduler's accounting only.
			cdi = []string{CDIDeviceName(handed[k])}
		}
		if !p.cdiEnabled() {
			cdi = nil
		}
		given = append(given, cdi...)
		res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{m.request}, PoolName: p.cfg.NodeName, DeviceName: m.device, CDIDeviceIDs: cdi, ShareID: m.share})
	}
	p.log.Info("prepared claim", "claim", ref, "uid", claim.UID, "devices", idx, "cdi", given)
	return res
}

// unpreparable says why a device allocated on this node is not one the agent publishes ("" when it is):
// a phantom, a device-plugin GPU, another driver's name, or a partition outside the MIG modes. A real
// driver fails a device it cannot find the same way.
func (p *Plugin) unpreparable(name string, i int, partition bool) string {
	first, last := DRADeviceName(p.table.dp), DRADeviceName(len(p.table.uuids)-1)
	switch {
	case partition && !p.draPartitionable():
		return fmt.Sprintf("is a MIG partition, and this node publishes whole GPUs only (sharing mode %q)", p.cfg.Sharing)
	case i < p.table.dp || i >= len(p.table.uuids) || !partition && name != DRADeviceName(i):
		return fmt.Sprintf("does not exist on this node (it has %s..%s)", first, last)
	}
	return ""
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. The CDI spec is static, so there is nothing
// to undo per claim; the call is logged so a test can see the kubelet made it.
func (d draPlugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		d.p.log.Info("unprepared claim", "claim", c.String(), "uid", c.UID)
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError implements kubeletplugin.DRAPlugin and is the slice controller's error handler: background
// errors (slice publishing) are logged; the helper and the controller retry on their own.
func (d draPlugin) HandleError(_ context.Context, err error, msg string) {
	d.p.log.Error("DRA kubelet plugin: "+msg, "err", err)
}

// wipeSlices deletes this node's ResourceSlices of driver (FaultDRASliceChurn): what a driver release that
// does not adopt the slices its previous instance published does at start.
func (p *Plugin) wipeSlices(ctx context.Context, client kubernetes.Interface, driver string) {
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + p.cfg.NodeName + ",spec.driver=" + driver})
	var names []string
	if err == nil {
		for _, sl := range list.Items {
			names = append(names, sl.Name)
			err = errors.Join(err, client.ResourceV1().ResourceSlices().Delete(ctx, sl.Name, metav1.DeleteOptions{}))
		}
	}
	p.log.Warn("FAULT INJECTION: deleted this node's ResourceSlices at start; publishing them anew", "fault", string(FaultDRASliceChurn), "driver", driver, "slices", names, "err", err)
}

// sliceExists reports whether the API holds a ResourceSlice of driver for this node (true when it cannot
// tell: only a certain absence triggers a republish).
func (p *Plugin) sliceExists(ctx context.Context, client kubernetes.Interface, driver string) bool {
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + p.cfg.NodeName + ",spec.driver=" + driver})
	return err != nil || len(list.Items) > 0
}
