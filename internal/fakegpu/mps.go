package fakegpu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// The fake MPS control daemon. NVIDIA's device plugin in MPS mode starts one nvidia-cuda-mps-control
// daemon per shared resource (k8s-device-plugin, cmd/mps-control-daemon/mps/daemon.go), sets the
// per-client limits as the daemon's defaults (set_default_active_thread_percentage 100/replicas,
// set_default_device_pinned_mem_limit <index> <memory/replicas>M for each GPU index) and gives each
// container the daemon's pipe directory (CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe, with the host's
// directory mounted there; internal/plugin/mps.go). A container reads those defaults back by running
// nvidia-cuda-mps-control, which the NVIDIA container toolkit injects with the compute capability.
//
// The fake agent runs no daemon: it keeps the defaults the daemon would hold in MPSDaemonFile inside the
// pipe directory it mounts, and the fake nvidia-cuda-mps-control (the fake nvidia-smi under that name)
// answers from that file. A pipe directory without the file is a pipe directory no daemon listens on.

// MPSDaemonFile is the fake daemon's state in its pipe directory (where the real daemon's control socket
// and nvidia-cuda-mps-control.pid live).
const MPSDaemonFile = "gpuconform-fake-mps-daemon.json"

// MPSDefaultPipeDirectory is the pipe directory MPS uses when CUDA_MPS_PIPE_DIRECTORY is unset.
const MPSDefaultPipeDirectory = "/tmp/nvidia-mps"

// EnvMPSPipeDirectory names the MPS pipe directory of a client or control command.
const EnvMPSPipeDirectory = "CUDA_MPS_PIPE_DIRECTORY"

// ContainerMPSControl is where the NVIDIA container toolkit mounts nvidia-cuda-mps-control.
const ContainerMPSControl = "/usr/bin/nvidia-cuda-mps-control"

// MPSDaemon is what the fake MPS control daemon holds: the defaults set on it, each absent when nothing
// set it (a real daemon then answers its built-in defaults: 100 percent of the threads, no memory limit).
type MPSDaemon struct {
	// Resource is the extended resource the daemon serves ("nvidia.com/gpu").
	Resource string `json:"resource"`
	// DefaultActiveThreadPercentage is what set_default_active_thread_percentage set; nil when unset.
	DefaultActiveThreadPercentage *int `json:"defaultActiveThreadPercentage,omitempty"`
	// DefaultPinnedDeviceMemLimitMiB is what set_default_device_pinned_mem_limit <index> <N>M set, by GPU
	// index (as NVIDIA's plugin names the device: its index on the node); a device absent is unset.
	DefaultPinnedDeviceMemLimitMiB map[string]int `json:"defaultPinnedDeviceMemLimitMiB,omitempty"`
}

// LoadMPSDaemon reads the fake daemon behind pipeDir.
func LoadMPSDaemon(pipeDir string) (MPSDaemon, error) {
	var d MPSDaemon
	raw, err := os.ReadFile(filepath.Join(pipeDir, MPSDaemonFile))
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return d, fmt.Errorf("%s: %w", filepath.Join(pipeDir, MPSDaemonFile), err)
	}
	return d, nil
}

// Marshal is the file's content.
func (d MPSDaemon) Marshal() ([]byte, error) { return json.MarshalIndent(d, "", "  ") }

// PinnedLimitMiB is the default pinned memory limit of the device with the given index, and whether one
// was set.
func (d MPSDaemon) PinnedLimitMiB(index int) (int, bool) {
	v, ok := d.DefaultPinnedDeviceMemLimitMiB[strconv.Itoa(index)]
	return v, ok
}
