// Package fakeplugin is a kubelet device plugin (API v1beta1) that advertises fake NVIDIA GPUs.
//
// It exists so that the local kind cluster exercises the same device-plugin allocation path as a real
// NVIDIA stack: the kubelet sees an extended resource (nvidia.com/gpu by default), containers receive
// NVIDIA_VISIBLE_DEVICES with exactly the IDs they were allocated, nodes carry GPU Feature
// Discovery–shaped labels, and the conformance suite can fail a device (node annotation) or break the
// plugin on purpose (fault injection) to prove that it notices.
//
// Everything that talks to a kubelet or the API server is reachable through small methods on Plugin, so
// unit tests run it against a socket in a temporary directory and a fake clientset.
package fakeplugin

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Fault names a deliberate misbehaviour of the plugin. Faults exist to prove that the conformance suite
// catches a broken device plugin; they are never on by default.
type Fault string

const (
	// FaultNone is normal, correct behaviour.
	FaultNone Fault = ""
	// FaultWrongIDs makes Allocate hand a container device IDs other than the ones the kubelet asked for,
	// which is the failure the suite's "a container sees exactly its devices" check must detect.
	FaultWrongIDs Fault = "wrong-ids"
)

// UnhealthyDevicesAnnotation is the node annotation that marks devices unhealthy at run time: a
// comma-separated list of device indexes ("0,2") or device IDs. The fault injector of the conformance
// suite writes it; removing it (or an entry) makes the devices healthy again.
const UnhealthyDevicesAnnotation = "gpuconform.io/unhealthy-devices"

// LogSentDeviceList is the message the plugin logs each time it sends its device list to the kubelet over
// ListAndWatch: its first appearance after a kubelet restart says the kubelet has connected to the new
// endpoint, and tests that restart kubelets wait for it.
const LogSentDeviceList = "sent device list to kubelet"

// Config is everything the plugin needs to know; cmd/fake-device-plugin fills it from flags.
type Config struct {
	// NodeName is the node the plugin runs on. It seeds the device IDs and names the Node object whose
	// annotation and labels the plugin owns.
	NodeName string
	// ResourceName is the extended resource advertised to the kubelet, e.g. nvidia.com/gpu.
	ResourceName string
	// Devices is the number of physical (fake) GPUs.
	Devices int
	// Replicas is the time-slicing factor: each physical GPU is advertised Replicas times. 1 = no sharing.
	Replicas int
	// PluginDir is the kubelet's device-plugins directory, holding kubelet.sock and our socket.
	PluginDir string
	// Fault injects a deliberate misbehaviour; FaultNone in normal operation.
	Fault Fault

	// Product, MemoryMiB, DriverVersion, CUDAVersion and Family describe the fake GPUs in the node labels.
	Product       string
	MemoryMiB     int
	DriverVersion string
	CUDAVersion   string
	Family        string
	// PluginVersion is published as a node label so an upgrade rehearsal can see which revision of the
	// plugin serves a node.
	PluginVersion string

	// SocketPollInterval is how often the plugin checks that its socket still exists; the kubelet
	// deletes every socket in PluginDir when it restarts, and a vanished socket is our cue to re-register.
	SocketPollInterval time.Duration
	// RegisterInitialBackoff and RegisterMaxBackoff bound the retry delay while kubelet.sock is absent or
	// the kubelet refuses registration.
	RegisterInitialBackoff time.Duration
	RegisterMaxBackoff     time.Duration

	// ReadyFile, when set, exists exactly while the kubelet holds a ListAndWatch stream open on the plugin,
	// that is while the kubelet can admit pods asking for its devices. The DaemonSet's readiness probe
	// (`fake-device-plugin --check-ready FILE`) reads it, so a plugin pod is Ready only when it serves.
	ReadyFile string

	// Logger receives every registration, health change and allocation; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults the command-line flags also use, so tests and the binary agree.
func DefaultConfig() Config {
	return Config{
		ResourceName:           "nvidia.com/gpu",
		Devices:                4,
		Replicas:               1,
		PluginDir:              pluginapi.DevicePluginPath,
		Product:                "NVIDIA-H100-80GB-HBM3",
		MemoryMiB:              81559,
		DriverVersion:          "550.54.15",
		CUDAVersion:            "12.4",
		Family:                 "hopper",
		PluginVersion:          "v1",
		SocketPollInterval:     time.Second,
		RegisterInitialBackoff: 500 * time.Millisecond,
		RegisterMaxBackoff:     10 * time.Second,
	}
}

// Validate reports the first setting the plugin cannot work with.
func (c Config) Validate() error {
	switch {
	case c.NodeName == "":
		return fmt.Errorf("node name is empty: set NODE_NAME from the downward API or pass --node-name")
	case c.ResourceName == "" || !strings.Contains(c.ResourceName, "/"):
		return fmt.Errorf("resource name %q must be a domain-qualified extended resource such as nvidia.com/gpu", c.ResourceName)
	case c.Devices < 1:
		return fmt.Errorf("devices must be at least 1, got %d", c.Devices)
	case c.Replicas < 1:
		return fmt.Errorf("replicas must be at least 1, got %d", c.Replicas)
	case c.PluginDir == "":
		return fmt.Errorf("device plugin directory is empty")
	case c.Fault != FaultNone && c.Fault != FaultWrongIDs:
		return fmt.Errorf("unknown fault %q (known: %q)", c.Fault, FaultWrongIDs)
	case c.SocketPollInterval <= 0 || c.RegisterInitialBackoff <= 0 || c.RegisterMaxBackoff < c.RegisterInitialBackoff:
		return fmt.Errorf("poll interval and backoffs must be positive, and the maximum backoff at least the initial one")
	}
	return nil
}

// SharingStrategy is the GFD name of the sharing mode: "time-slicing" when replicas are advertised.
func (c Config) SharingStrategy() string {
	if c.Replicas > 1 {
		return "time-slicing"
	}
	return "none"
}

// SocketName is the file name of our gRPC socket in PluginDir. It is derived from the resource name so
// that two fake plugins for different resources can share a node.
func (c Config) SocketName() string {
	r := strings.NewReplacer("/", "-", ".", "-")
	return "gpuconform-" + r.Replace(c.ResourceName) + ".sock"
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}
