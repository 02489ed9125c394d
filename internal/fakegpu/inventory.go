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

// Device numbers of the NVIDIA driver. 195 is NVIDIA's registered character major; nvidiactl is its
// minor 255. nvidia-uvm gets a dynamic major on a real node; the fake uses a fixed one.
const (
	NvidiaMajor       = 195
	NvidiaCtlMinor    = 255
	NvidiaUVMMajor    = 235
	NvidiaUVMMinor    = 0
	NvidiaUVMToolsMin = 1
)

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
