// Package fakegpu is the contract between the fake GPU node agent (internal/fakeplugin) and what runs in
// the containers it gives GPUs to: the node's inventory of fake GPUs, where the agent keeps it and its
// device nodes on the node, and where the CDI spec puts them in a container.
//
// A real NVIDIA node has character devices (/dev/nvidiaN, major 195, minor = the GPU's minor number, plus
// the control devices /dev/nvidiactl and /dev/nvidia-uvm*) and a driver that nvidia-smi asks about the GPUs
// whose device nodes the container can open. The fake mirrors that: the agent creates real character
// devices with NVIDIA's numbers on the node (opening them fails with ENXIO, as no driver answers, but they
// exist, have the right numbers and are injected by the runtime exactly like real ones), and the fake
// nvidia-smi (cmd/nvidia-smi) lists the GPUs whose device nodes it finds, by minor number, reading their
// identity from the inventory file the CDI spec mounts beside it.
package fakegpu

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// DevicePluginDeployLabel is the NVIDIA GPU Operator's node label that decides whether its device plugin
// runs on a node: "false" keeps it off (a node whose GPUs a DRA driver alone serves). The fake agent reads
// it when it starts and then serves no device-plugin resource there, only its DRA devices; a change takes
// effect when the agent restarts, as the operator's DaemonSet leaves or comes back on a relabelled node.
const DevicePluginDeployLabel = "nvidia.com/gpu.deploy.device-plugin"

// Device numbers of the NVIDIA driver. 195 is NVIDIA's registered character major; nvidiactl is its
// minor 255. nvidia-uvm gets a dynamic major on a real node; the fake uses a fixed one.
const (
	NvidiaMajor       = 195
	NvidiaCtlMinor    = 255
	NvidiaUVMMajor    = 235
	NvidiaUVMMinor    = 0
	NvidiaUVMToolsMin = 1
)

// MIG capability devices. A real driver gives each MIG device's GPU instance (and each of its compute
// instances) a capability device, /dev/nvidia-caps/nvidia-cap<K>, whose minors /proc/driver/nvidia-caps/
// mig-minors lays out as 1 (config) and 2 (monitor), then per GPU g and GPU instance i the instance's
// access minor followed by its 8 compute instances' ones (9 minors per instance, 15 instances per GPU).
// The runtime injects the cap devices of the MIG devices a container was given, and that is how NVML in
// the container knows which MIG devices it may use. The fake gives a MIG device one cap device, its GPU
// instance's access minor, with the placement's index (fakegpu.PlacementIndex, plus one: the driver's
// instance IDs start at 1) as its instance ID.
//
// The capability major is dynamic on a real node (/proc/devices names it nvidia-caps); the fake uses a
// fixed one, beside its fixed nvidia-uvm major, and the fake nvidia-smi recognises cap devices by it.
const (
	NvidiaCapsMajor = 236
	// NvidiaCapsDir is the directory of the cap devices below /dev.
	NvidiaCapsDir = "nvidia-caps"

	capsFirstGPUMinor   = 3  // mig-minors: 1 config, 2 monitor, then GPU 0's first instance
	capsPerInstance     = 9  // an instance's access minor and its 8 compute instances'
	capsInstancesPerGPU = 15 // GPU instances a GPU's block of minors has room for
)

// MIGCapMinor is the cap device minor of the MIG device at placement p of the GPU with minor gpuMinor.
func MIGCapMinor(gpuMinor int, p Placement) int {
	gi := PlacementIndex(p) + 1
	return capsFirstGPUMinor + gpuMinor*capsInstancesPerGPU*capsPerInstance + gi*capsPerInstance
}

// CapDeviceNode is the path of cap device minor below dev ("/dev" in a container).
func CapDeviceNode(dev string, capMinor int) string {
	return filepath.Join(dev, NvidiaCapsDir, fmt.Sprintf("nvidia-cap%d", capMinor))
}

// HostDir is where the agent keeps the fake driver on the node (its --state-dir in the shipped manifest): a
// tmpfs under /run, so like a real driver's device nodes the fake ones are made again at every boot.
const HostDir = "/run/gpuconform-fake-gpu"

// Paths inside a container given a GPU. The NVIDIA container toolkit mounts the driver's nvidia-smi at
// /usr/bin/nvidia-smi; the inventory is the fake's stand-in for the driver's own knowledge of its GPUs.
const (
	ContainerNvidiaSMI     = "/usr/bin/nvidia-smi"
	ContainerInventoryFile = "/run/nvidia-fake/inventory.json"
	// EnvInventory overrides ContainerInventoryFile for the fake nvidia-smi (tests).
	EnvInventory = "GPUCONFORM_FAKE_GPU_INVENTORY"
)

// Allocation paths a GPU of the inventory is served on. A GPU is served by exactly one of them: the
// kubelet's device manager and the DRA scheduler do not know of each other's allocations, so a GPU
// offered on both would be handed out twice (NVIDIA's DRA driver documents the same rule: a GPU is
// managed either by the device plugin or by the DRA driver).
const (
	PathDevicePlugin = "device-plugin"
	PathDRA          = "dra"
)

// Inventory is one node's fake GPUs.
type Inventory struct {
	Node          string `json:"node"`
	DriverVersion string `json:"driverVersion"`
	CUDAVersion   string `json:"cudaVersion"`
	GPUs          []GPU  `json:"gpus"`
}

// GPU is one fake GPU. Minor is its device minor (/dev/nvidia<Minor>) and its node-wide index.
type GPU struct {
	Minor     int    `json:"minor"`
	UUID      string `json:"uuid"`
	Product   string `json:"product"`
	MemoryMiB int    `json:"memoryMiB"`
	PCIBusID  string `json:"pciBusID"`
	// Path is the allocation path that serves this GPU (PathDevicePlugin or PathDRA).
	Path string `json:"path"`
	// Clocks is how the driver runs the GPU (its clocks, performance state, power and clock event
	// reasons), which nvidia-smi reports; nil reads as FullClocks, a healthy GPU.
	Clocks *Clocks `json:"clocks,omitempty"`
	// MIG are the GPU's MIG devices in the MIG sharing modes, by placement: for a device-plugin GPU the
	// devices of its layout (fakegpu.LayoutFor), for a DRA GPU every partition it could be prepared as
	// (PartitionPlacements; they overlap, the scheduler's shared counters keep allocations apart). Empty
	// for a whole GPU.
	MIG []MIGDevice `json:"mig,omitempty"`
}

// MIGDevice is one MIG device of a GPU: the identity nvidia-smi lists and the cap device through which
// a container is given it.
type MIGDevice struct {
	UUID      string `json:"uuid"`
	Profile   string `json:"profile"`
	Start     int    `json:"start"`
	MemoryMiB int    `json:"memoryMiB"`
	// CapMinor is the minor of its cap device, /dev/nvidia-caps/nvidia-cap<CapMinor> (MIGCapMinor).
	CapMinor int `json:"capMinor"`
	// Path is the allocation path that serves it, its GPU's.
	Path string `json:"path"`
}

// NewMIGDevice describes the MIG device at placement p of the GPU with the given UUID and minor, served
// on path.
func NewMIGDevice(parentUUID string, parentMinor int, p Placement, path string) MIGDevice {
	prof, _ := ProfileByName(p.Profile)
	return MIGDevice{
		UUID: MIGUUID(parentUUID, p), Profile: p.Profile, Start: p.Start, MemoryMiB: prof.MemoryMiB,
		CapMinor: MIGCapMinor(parentMinor, p), Path: path,
	}
}

// Placement is where the MIG device sits on its GPU.
func (m MIGDevice) Placement() Placement { return Placement{Profile: m.Profile, Start: m.Start} }

// MIGByUUID returns the MIG device with the given UUID and its GPU.
func (inv Inventory) MIGByUUID(uuid string) (GPU, MIGDevice, bool) {
	for _, g := range inv.GPUs {
		for _, m := range g.MIG {
			if m.UUID == uuid {
				return g, m, true
			}
		}
	}
	return GPU{}, MIGDevice{}, false
}

// MIGByCapMinor returns the MIG device whose cap device has minor capMinor, and its GPU.
func (inv Inventory) MIGByCapMinor(capMinor int) (GPU, MIGDevice, bool) {
	for _, g := range inv.GPUs {
		for _, m := range g.MIG {
			if m.CapMinor == capMinor {
				return g, m, true
			}
		}
	}
	return GPU{}, MIGDevice{}, false
}

// DeviceNode is the path of GPU minor's device node, below dev ("/dev" in a container, HostDevDir on the node).
func DeviceNode(dev string, minor int) string {
	return filepath.Join(dev, fmt.Sprintf("nvidia%d", minor))
}

// ByMinor returns the GPU with the given minor number.
func (inv Inventory) ByMinor(minor int) (GPU, bool) {
	for _, g := range inv.GPUs {
		if g.Minor == minor {
			return g, true
		}
	}
	return GPU{}, false
}

// OnPath returns the GPUs served on path, by minor.
func (inv Inventory) OnPath(path string) []GPU {
	var out []GPU
	for _, g := range inv.GPUs {
		if g.Path == path {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b GPU) int { return cmp.Compare(a.Minor, b.Minor) })
	return out
}

// Load reads an inventory file.
func Load(file string) (Inventory, error) {
	var inv Inventory
	raw, err := os.ReadFile(file)
	if err != nil {
		return inv, err
	}
	if err := json.Unmarshal(raw, &inv); err != nil {
		return inv, fmt.Errorf("%s: %w", file, err)
	}
	return inv, nil
}

// Save writes the inventory atomically (a reader never sees half a file).
func (inv Inventory) Save(file string) error {
	raw, err := json.MarshalIndent(inv, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, append(raw, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}
