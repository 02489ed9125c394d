package fakeplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// The fake driver: what the NVIDIA kernel driver and container toolkit put on a real GPU node, made by the
// agent at start (and again after every node restart, since it lives under /run): a character device per
// GPU and the control devices, the inventory the fake nvidia-smi reads, that nvidia-smi, and one CDI spec
// through which the runtime injects exactly the allocated GPUs into exactly the containers that asked.
// Both allocation paths name the same CDI devices, so a GPU looks the same to a container whichever path
// gave it.

// CDIKind is the CDI vendor/class of the fake GPUs: NVIDIA's own (nvidia-ctk generates nvidia.com/gpu
// specs), so tooling that knows NVIDIA's CDI names recognises the fake's.
const CDIKind = "nvidia.com/gpu"

// CDISpecFile is the file name of the agent's CDI spec in the CDI directory.
const CDISpecFile = "gpuconform-fake-gpu.json"

// cdiVersion is the CDI spec version written: 0.5.0 added hostPath on device nodes, which the fake needs
// (its device nodes live outside the node's /dev); 0.6.0 is what containerd 2.x and NVIDIA's toolkit use.
const cdiVersion = "0.6.0"

// CDIDeviceName is the fully qualified CDI name of the GPU with physical index (minor) i, as an
// AllocateResponse or a DRA prepare result carries it: NVIDIA's index naming ("nvidia.com/gpu=3").
func CDIDeviceName(i int) string { return CDIKind + "=" + strconv.Itoa(i) }

// CDIMIGDeviceName is the fully qualified CDI name of the MIG device with the given UUID ("MIG-…"), as an
// AllocateResponse or a DRA prepare result carries it: NVIDIA's UUID naming of MIG devices
// ("nvidia.com/gpu=MIG-…"; nvidia-ctk's uuid device-name strategy). The CDI spec has one per MIG device
// of the inventory: the device-plugin GPUs' layouts and, in the MIG modes, every partition of a DRA GPU.
func CDIMIGDeviceName(uuid string) string { return CDIKind + "=" + uuid }

func (p *Plugin) cdiEnabled() bool { return p.cfg.StateDir != "" && p.cfg.CDIDir != "" }

// Inventory is the node's fake GPUs as the fake driver describes them to nvidia-smi. Under
// FaultDriverMismatch its driver version is not the one the node advertises; under FaultSlowGPU every GPU
// is held at low clocks (fakegpu.SlowedClocks), which nvidia-smi's clock and performance queries show.
func (p *Plugin) Inventory() fakegpu.Inventory {
	inv := fakegpu.Inventory{Node: p.cfg.NodeName, DriverVersion: p.cfg.DriverVersion, CUDAVersion: p.cfg.CUDAVersion}
	if p.hasFault(FaultDriverMismatch) {
		inv.DriverVersion = MismatchedDriverVersion(p.cfg.DriverVersion)
	}
	clocks := fakegpu.FullClocks()
	if p.hasFault(FaultSlowGPU) {
		clocks = fakegpu.SlowedClocks(SlowGPUFactor)
	}
	for i, u := range p.table.uuids {
		path := fakegpu.PathDevicePlugin
		layout := fakegpu.LayoutFor(p.table.mode, i)
		if i >= p.table.dp {
			path, layout = fakegpu.PathDRA, nil
			if fakegpu.IsMIG(p.table.mode) {
				layout = fakegpu.PartitionPlacements()
			}
		}
		g := fakegpu.GPU{
			Minor: i, UUID: u, Product: p.cfg.Product, MemoryMiB: p.cfg.MemoryMiB,
			// Bus IDs as nvidia-smi prints them; distinct per GPU, stable per index.
			PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+i), Path: path, Clocks: new(clocks),
		}
		for _, pl := range layout {
			g.MIG = append(g.MIG, fakegpu.NewMIGDevice(u, i, pl, path))
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv
}

// InstallDriver lays out the fake driver in StateDir and writes the CDI spec into CDIDir. It is idempotent:
// the agent calls it at every start, and what a previous start made is replaced.
func (p *Plugin) InstallDriver() error {
	if !p.cdiEnabled() {
		return nil
	}
	dev := filepath.Join(p.cfg.StateDir, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	nodes := map[string][2]uint32{
		"nvidiactl":        {fakegpu.NvidiaMajor, fakegpu.NvidiaCtlMinor},
		"nvidia-uvm":       {fakegpu.NvidiaUVMMajor, fakegpu.NvidiaUVMMinor},
		"nvidia-uvm-tools": {fakegpu.NvidiaUVMMajor, fakegpu.NvidiaUVMToolsMin},
	}
	for i := range p.table.uuids {
		nodes["nvidia"+strconv.Itoa(i)] = [2]uint32{fakegpu.NvidiaMajor, uint32(i)}
	}
	inv := p.Inventory()
	for _, g := range inv.GPUs {
		for _, m := range g.MIG {
			rel, _ := filepath.Rel(dev, fakegpu.CapDeviceNode(dev, m.CapMinor))
			nodes[rel] = [2]uint32{fakegpu.NvidiaCapsMajor, uint32(m.CapMinor)}
		}
	}
	if err := os.MkdirAll(filepath.Join(dev, fakegpu.NvidiaCapsDir), 0o755); err != nil {
		return err
	}
	for name, mm := range nodes {
		if err := mknodChar(filepath.Join(dev, name), mm[0], mm[1]); err != nil {
			return err
		}
	}
	if err := inv.Save(p.inventoryFile()); err != nil {
		return fmt.Errorf("write inventory: %w", err)
	}
	if p.cfg.NvidiaSMI != "" {
		if err := copyFile(p.cfg.NvidiaSMI, filepath.Join(p.cfg.StateDir, "bin", "nvidia-smi"), 0o755); err != nil {
			return fmt.Errorf("install nvidia-smi: %w", err)
		}
	}
	if err := p.installMPSControl(); err != nil {
		return err
	}
	if _, err := p.writeMPSDaemon(); err != nil {
		return fmt.Errorf("write the MPS daemon's defaults: %w", err)
	}
	raw, err := json.MarshalIndent(p.CDISpec(), "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(p.cfg.CDIDir, CDISpecFile), raw, 0o644); err != nil {
		return fmt.Errorf("write CDI spec: %w", err)
	}
	p.log.Info("installed fake driver", "state_dir", p.cfg.StateDir, "cdi_spec", filepath.Join(p.cfg.CDIDir, CDISpecFile), "gpus", len(p.table.uuids))
	return nil
}

// inventoryFile is where the fake driver keeps its inventory on the node.
func (p *Plugin) inventoryFile() string { return filepath.Join(p.cfg.StateDir, "inventory.json") }

// LogInventoryWritten is logged (with driver_version=<what nvidia-smi now reports>) each time KeepInventory
// rewrites the inventory; tests that switch FaultDriverMismatch wait for it before they create pods.
const LogInventoryWritten = "fake driver inventory written"

// KeepInventory rewrites the inventory file whenever what it should say changes (FaultDriverMismatch or
// FaultSlowGPU switched on or off), until ctx ends; InstallDriver must have run. A container created afterwards mounts
// the new file; one already running keeps the file it got, as a container keeps the driver it started with.
func (p *Plugin) KeepInventory(ctx context.Context) {
	if !p.cdiEnabled() {
		return
	}
	for {
		p.mu.Lock()
		changed := p.changed // taken before the inventory is read, so no change goes unseen
		p.mu.Unlock()
		want := p.Inventory()
		if have, err := fakegpu.Load(p.inventoryFile()); err != nil || !reflect.DeepEqual(have, want) {
			if err := want.Save(p.inventoryFile()); err != nil {
				p.log.Error("cannot write the fake driver inventory; retrying", "err", err)
				if !sleep(ctx, time.Second) {
					return
				}
				continue
			}
			level := slog.LevelInfo
			if want.DriverVersion != p.cfg.DriverVersion || p.hasFault(FaultSlowGPU) {
				level = slog.LevelWarn // FAULT INJECTION: nvidia-smi now contradicts the node's labels, or shows slow GPUs
			}
			p.log.Log(ctx, level, LogInventoryWritten, "driver_version", want.DriverVersion, "advertised", p.cfg.DriverVersion,
				"slow_gpu", p.hasFault(FaultSlowGPU))
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// CDISpec is the agent's CDI spec: one device per GPU (its device node) and one per MIG device (its GPU's
// device node and its cap device, as NVIDIA's generated specs give a MIG device), and the edits every GPU
// container gets once it has any of them (control devices, nvidia-smi, nvidia-cuda-mps-control, the
// inventory), the way NVIDIA's
// generated specs put the driver's shared files in the spec-wide edits. Under FaultMissingNvidiaSMI the
// edits leave nvidia-smi out. Like a whole GPU's, a MIG
// device's CDI device sets no environment: NVIDIA_VISIBLE_DEVICES comes from the allocation (Allocate's
// envs), and a variable in each device would be overwritten by the next device of the same container.
func (p *Plugin) CDISpec() cdispec.Spec {
	dev := filepath.Join(p.cfg.StateDir, "dev")
	mode := os.FileMode(0o666)
	node := func(name string, major, minor int64) *cdispec.DeviceNode {
		return &cdispec.DeviceNode{Path: "/dev/" + name, HostPath: filepath.Join(dev, name), Type: "c", Major: major, Minor: minor, FileMode: &mode}
	}
	spec := cdispec.Spec{
		Version: cdiVersion,
		Kind:    CDIKind,
		ContainerEdits: cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{
				node("nvidiactl", fakegpu.NvidiaMajor, fakegpu.NvidiaCtlMinor),
				node("nvidia-uvm", fakegpu.NvidiaUVMMajor, fakegpu.NvidiaUVMMinor),
				node("nvidia-uvm-tools", fakegpu.NvidiaUVMMajor, fakegpu.NvidiaUVMToolsMin),
			},
			Mounts: []*cdispec.Mount{
				{HostPath: filepath.Join(p.cfg.StateDir, "inventory.json"), ContainerPath: fakegpu.ContainerInventoryFile, Options: []string{"ro", "nosuid", "nodev", "bind"}},
			},
		},
	}
	if p.injectsNvidiaSMI() {
		spec.ContainerEdits.Mounts = append(spec.ContainerEdits.Mounts, &cdispec.Mount{
			HostPath: filepath.Join(p.cfg.StateDir, "bin", "nvidia-smi"), ContainerPath: fakegpu.ContainerNvidiaSMI, Options: []string{"ro", "nosuid", "nodev", "bind"}})
	}
	if p.cfg.NvidiaSMI != "" {
		// The toolkit mounts nvidia-cuda-mps-control with the compute capability, whatever it does with
		// nvidia-smi (a utility tool): the missing-nvidia-smi fault leaves it in (mps.go).
		spec.ContainerEdits.Mounts = append(spec.ContainerEdits.Mounts, &cdispec.Mount{
			HostPath: p.mpsControlHostPath(), ContainerPath: fakegpu.ContainerMPSControl, Options: []string{"ro", "nosuid", "nodev", "bind"}})
	}
	for i := range p.table.uuids {
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name:           strconv.Itoa(i),
			ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{node("nvidia"+strconv.Itoa(i), fakegpu.NvidiaMajor, int64(i))}},
		})
	}
	for _, g := range p.Inventory().GPUs {
		for _, m := range g.MIG {
			capName, _ := filepath.Rel("/dev", fakegpu.CapDeviceNode("/dev", m.CapMinor))
			spec.Devices = append(spec.Devices, cdispec.Device{
				Name: m.UUID,
				ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{
					node("nvidia"+strconv.Itoa(g.Minor), fakegpu.NvidiaMajor, int64(g.Minor)),
					node(capName, fakegpu.NvidiaCapsMajor, int64(m.CapMinor)),
				}},
			})
		}
	}
	return spec
}

// injectsNvidiaSMI reports whether GPU containers get the fake nvidia-smi: it is installed, and
// FaultMissingNvidiaSMI is not in force.
func (p *Plugin) injectsNvidiaSMI() bool {
	return p.cfg.NvidiaSMI != "" && !p.hasFault(FaultMissingNvidiaSMI)
}

// LogCDISpecWritten is logged (with nvidia_smi=<whether the spec injects it>) each time KeepCDISpec
// rewrites the CDI spec; tests that switch FaultMissingNvidiaSMI wait for it before they create pods.
const LogCDISpecWritten = "fake driver CDI spec written"

// KeepCDISpec rewrites the CDI spec file whenever what it should say changes (FaultMissingNvidiaSMI
// switched on or off), until ctx ends; InstallDriver must have run. The runtime reads the CDI directory
// again before it injects devices, so a container created afterwards gets the new edits; one already
// running keeps what it got. Both allocation paths name the spec's devices, so both follow.
func (p *Plugin) KeepCDISpec(ctx context.Context) {
	if !p.cdiEnabled() {
		return
	}
	file := filepath.Join(p.cfg.CDIDir, CDISpecFile)
	for {
		p.mu.Lock()
		changed := p.changed // taken before the spec is built, so no change goes unseen
		p.mu.Unlock()
		spec := p.CDISpec()
		want, err := json.MarshalIndent(spec, "", "  ")
		if err != nil {
			p.log.Error("cannot encode the fake driver's CDI spec", "err", err)
			return
		}
		if have, err := os.ReadFile(file); err != nil || !bytes.Equal(have, want) {
			if err := writeAtomic(file, want, 0o644); err != nil {
				p.log.Error("cannot write the fake driver's CDI spec; retrying", "err", err)
				if !sleep(ctx, time.Second) {
					return
				}
				continue
			}
			smi := p.injectsNvidiaSMI()
			level := slog.LevelInfo
			if !smi && p.cfg.NvidiaSMI != "" {
				level = slog.LevelWarn // FAULT INJECTION: GPU containers no longer get nvidia-smi
			}
			p.log.Log(ctx, level, LogCDISpecWritten, "nvidia_smi", smi, "file", file)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// addDevices puts the GPUs with physical indexes handed into a container's AllocateResponse, the way the
// configured device list strategy says. An index past the inventory (a phantom of the over-advertise or
// wrong-ids faults) is handed over all the same, as a broken plugin would: the runtime then fails to
// create the container (an unresolvable CDI device, a device node that does not exist), which is what
// the NVIDIA toolkit does for a GPU that is not there ("unknown device").
func (p *Plugin) addDevices(car *pluginapi.ContainerAllocateResponse, handed []int) {
	if len(handed) == 0 {
		return
	}
	if p.cfg.DeviceListStrategy == StrategyCDI {
		for _, i := range handed {
			car.CdiDevices = append(car.CdiDevices, &pluginapi.CDIDevice{Name: CDIDeviceName(i)})
		}
		return
	}
	// The same edits as the CDI spec, spelt out: the GPUs' device nodes, the control devices, the files.
	spec := p.CDISpec()
	nodes := slices.Clone(spec.ContainerEdits.DeviceNodes)
	for _, i := range handed {
		path := fakegpu.DeviceNode("/dev", i)
		nodes = append(nodes, &cdispec.DeviceNode{Path: path, HostPath: fakegpu.DeviceNode(filepath.Join(p.cfg.StateDir, "dev"), i)})
	}
	for _, n := range nodes {
		car.Devices = append(car.Devices, &pluginapi.DeviceSpec{ContainerPath: n.Path, HostPath: n.HostPath, Permissions: "rw"})
	}
	for _, m := range spec.ContainerEdits.Mounts {
		car.Mounts = append(car.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: true})
	}
}

// addMIGDevices is addDevices for MIG devices: their CDI devices, or their GPUs' device nodes and their
// cap devices with the spec-wide edits. A phantom MIG device (faults) is handed over all the same; its
// CDI device, GPU node and cap device do not exist, so the runtime refuses the container.
func (p *Plugin) addMIGDevices(car *pluginapi.ContainerAllocateResponse, handed []migDevice) {
	if len(handed) == 0 {
		return
	}
	if p.cfg.DeviceListStrategy == StrategyCDI {
		for _, m := range handed {
			car.CdiDevices = append(car.CdiDevices, &pluginapi.CDIDevice{Name: CDIMIGDeviceName(m.uuid)})
		}
		return
	}
	spec := p.CDISpec()
	hostDev := filepath.Join(p.cfg.StateDir, "dev")
	nodes := slices.Clone(spec.ContainerEdits.DeviceNodes)
	var parents []int
	for _, m := range handed {
		if !slices.Contains(parents, m.parent) {
			parents = append(parents, m.parent)
			nodes = append(nodes, &cdispec.DeviceNode{Path: fakegpu.DeviceNode("/dev", m.parent), HostPath: fakegpu.DeviceNode(hostDev, m.parent)})
		}
		capMinor := fakegpu.MIGCapMinor(m.parent, m.placement)
		nodes = append(nodes, &cdispec.DeviceNode{Path: fakegpu.CapDeviceNode("/dev", capMinor), HostPath: fakegpu.CapDeviceNode(hostDev, capMinor)})
	}
	for _, n := range nodes {
		car.Devices = append(car.Devices, &pluginapi.DeviceSpec{ContainerPath: n.Path, HostPath: n.HostPath, Permissions: "rw"})
	}
	for _, m := range spec.ContainerEdits.Mounts {
		car.Mounts = append(car.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: true})
	}
}

// mknodChar makes path a character device major:minor, replacing whatever is there with other numbers.
func mknodChar(path string, major, minor uint32) error {
	want := unix.Mkdev(major, minor)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && uint64(st.Rdev) == want { //nolint:unconvert // Rdev is not a uint64 on every platform
			return unix.Chmod(path, 0o666)
		}
		if err := os.Remove(path); err != nil {
			return err
		}
	}
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(want)); err != nil {
		return fmt.Errorf("mknod %s c %d %d: %w (the agent needs CAP_MKNOD: run it privileged)", path, major, minor, err)
	}
	return unix.Chmod(path, 0o666) // mknod honours the umask
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	raw, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	return writeAtomic(dst, raw, mode)
}

// writeAtomic writes through a temporary file and a rename, so a runtime reading the CDI directory or a
// container starting nvidia-smi never sees half a file.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	return nil
}
