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
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/internal/workload/podresources"
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
	// Replicas is the sharing factor of time-slicing and MPS: each physical GPU is advertised Replicas
	// times. 1 = no sharing.
	Replicas int
	// RenameShared advertises a time-sliced or MPS resource as "<ResourceName>.shared", as NVIDIA's plugin
	// does with renameByDefault; GFD then labels the product without its -SHARED suffix. Only for the
	// time-slicing and mps modes.
	RenameShared bool
	// Sharing is the sharing mode (one of fakegpu.SharingModes; see Mode). Empty means none, or
	// time-slicing when Replicas is above 1: the local cluster passed --replicas alone before modes existed.
	Sharing string
	// PluginDir is the kubelet's device-plugins directory, holding kubelet.sock and our socket.
	PluginDir string
	// Faults are deliberate misbehaviours switched on from the start (faults.go); the node annotation
	// FaultsAnnotation adds more at run time. Empty in normal operation.
	Faults []Fault

	// DRADevices is the number of fake GPUs served on the DRA path, after the Devices served by the device
	// plugin (their minors follow the device plugin's). 0 turns the DRA half of the agent off.
	DRADevices int
	// DRADriverName is the DRA driver name the agent publishes its ResourceSlices under and prepares
	// claims for; NVIDIA's DRA driver calls itself gpu.nvidia.com, and so does the fake, so that CEL
	// selectors written for real clusters (device.attributes["gpu.nvidia.com"].productName) work on it.
	DRADriverName string
	// DRAUnregistered runs the DRA half without registering it with the kubelet: it serves its gRPC
	// socket and publishes its ResourceSlices through the API as always, and counts as ready without the
	// kubelet's registration. Plays a driver whose kubelet plugin does not register (a registrar directory
	// that is not the kubelet's, a broken registration sidecar): the scheduler allocates its devices and
	// the kubelet refuses every pod given one ("DRA driver … is not registered"). It is a start-up flag,
	// not a Fault switched at run time: a plugin that unregisters while running has its slices wiped by
	// the kubelet 30 s later, so the state would depend on when a spec looked (hardening row
	// dra-unregistered).
	DRAUnregistered bool
	// KubeletRegistryDir and KubeletPluginsDir are the kubelet's plugin registration directory and the
	// parent of the DRA plugin's own socket directory.
	KubeletRegistryDir string
	KubeletPluginsDir  string
	// StateDir holds the fake driver's device nodes, inventory and nvidia-smi on the node
	// (fakegpu.HostDir); CDIDir is where the runtime reads CDI specs. Empty StateDir or CDIDir turns the
	// device nodes and CDI off (unit tests of the gRPC behaviour).
	StateDir string
	CDIDir   string
	// NvidiaSMI is the fake nvidia-smi binary copied to StateDir for the CDI spec to mount.
	NvidiaSMI string
	// DeviceListStrategy is how Allocate hands GPUs to the runtime, like NVIDIA's device plugin's option of
	// the same name: StrategyCDI (CDI device names, which kubelets since 1.28 pass to the runtime) or
	// StrategyDeviceSpecs (device nodes and mounts in the AllocateResponse itself, for kubelets or runtimes
	// without CDI).
	DeviceListStrategy string

	// Product, MemoryMiB, DriverVersion, CUDAVersion and Family describe the fake GPUs in the node labels.
	Product       string
	MemoryMiB     int
	DriverVersion string
	CUDAVersion   string
	Family        string
	// PluginVersion is published as a node label so an upgrade rehearsal can see which revision of the
	// plugin serves a node.
	PluginVersion string
	// PodUID is the agent pod's UID (downward API). Set, the DRA half registers with the kubelet for a
	// rolling update (kubeletplugin.RollingUpdate): its sockets carry the UID, so a DaemonSet with maxSurge
	// runs the old and the new agent side by side on a node and the kubelet keeps calling the old one until
	// the new one has registered. Empty: the fixed socket names of a single instance.
	PodUID string

	// SocketPollInterval is how often the plugin checks that its socket still exists; the kubelet
	// deletes every socket in PluginDir when it restarts, and a vanished socket is our cue to re-register.
	SocketPollInterval time.Duration
	// RegisterInitialBackoff and RegisterMaxBackoff bound the retry delay while kubelet.sock is absent or
	// the kubelet refuses registration.
	RegisterInitialBackoff time.Duration
	RegisterMaxBackoff     time.Duration

	// ReadyFile, when set, exists exactly while the kubelet holds a ListAndWatch stream open on the plugin,
	// that is while the kubelet can admit pods asking for its devices. The DaemonSet's readiness probe
	// (an HTTP GET of ReadyPath on ReadyAddress, or `fake-device-plugin --check-ready FILE`) reads it, so a
	// plugin pod is Ready only when it serves.
	ReadyFile string
	// ReadyAddress, when set with ReadyFile, is the TCP listen address (":9401") where the agent answers
	// the readiness probe over HTTP on ReadyPath: 200 while ReadyFile exists, 503 otherwise.
	ReadyAddress string

	// MetricsAddress is where the agent serves its DCGM-exporter-compatible metrics (metrics.go) on
	// MetricsPath, a TCP listen address such as ":9400" (dcgm-exporter's port). Empty turns the endpoint off.
	MetricsAddress string
	// PodResourcesSocket is the kubelet's PodResources API socket, asked at each scrape which containers hold
	// which GPUs (the metrics' pod, namespace and container labels). Empty serves the metrics without them.
	PodResourcesSocket string

	// Logger receives every registration, health change and allocation; nil means slog.Default().
	Logger *slog.Logger
}

// Device list strategies (Config.DeviceListStrategy).
const (
	StrategyCDI         = "cdi"
	StrategyDeviceSpecs = "device-specs"
)

// DefaultConfig returns the defaults the command-line flags also use, so tests and the binary agree.
func DefaultConfig() Config {
	return Config{
		ResourceName:           "nvidia.com/gpu",
		Devices:                4,
		Replicas:               1,
		PluginDir:              pluginapi.DevicePluginPath,
		DRADriverName:          "gpu.nvidia.com",
		DeviceListStrategy:     StrategyCDI,
		KubeletRegistryDir:     "/var/lib/kubelet/plugins_registry",
		KubeletPluginsDir:      "/var/lib/kubelet/plugins",
		Product:                "NVIDIA H100 80GB HBM3",
		MemoryMiB:              81559,
		DriverVersion:          "550.54.15",
		CUDAVersion:            "12.4",
		Family:                 "hopper",
		PluginVersion:          "v1",
		SocketPollInterval:     time.Second,
		RegisterInitialBackoff: 500 * time.Millisecond,
		RegisterMaxBackoff:     10 * time.Second,
		MetricsAddress:         DefaultMetricsAddress,
		PodResourcesSocket:     podresources.DefaultSocket,
	}
}

// Validate reports the first setting the plugin cannot work with.
func (c Config) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("node name is empty: set NODE_NAME from the downward API or pass --node-name")
	case c.ResourceName == "" || !strings.Contains(c.ResourceName, "/"):
		return fmt.Errorf("resource name %q must be a domain-qualified extended resource such as nvidia.com/gpu", c.ResourceName)
	case c.Devices < 1:
		return fmt.Errorf("devices must be at least 1, got %d", c.Devices)
	case c.Replicas < 1:
		return fmt.Errorf("replicas must be at least 1, got %d", c.Replicas)
	case c.Sharing != "" && !slices.Contains(fakegpu.SharingModes, c.Sharing):
		return fmt.Errorf("sharing mode %q is not one of %s", c.Sharing, strings.Join(fakegpu.SharingModes, ", "))
	case (c.Mode() == fakegpu.SharingTimeSlicing || c.Mode() == fakegpu.SharingMPS) && c.Replicas < 2:
		return fmt.Errorf("sharing mode %s shares each GPU between replicas: set --replicas to 2 or more (got %d)", c.Mode(), c.Replicas)
	case c.Mode() != fakegpu.SharingTimeSlicing && c.Mode() != fakegpu.SharingMPS && c.Replicas != 1:
		return fmt.Errorf("sharing mode %s advertises no replicas: leave --replicas at 1 (got %d), or choose --sharing=%s or %s",
			c.Mode(), c.Replicas, fakegpu.SharingTimeSlicing, fakegpu.SharingMPS)
	case c.RenameShared && c.SharingStrategy() == "none":
		return fmt.Errorf("renaming the shared resource applies to the %s and %s modes only, not %s", fakegpu.SharingTimeSlicing, fakegpu.SharingMPS, c.Mode())
	case c.PluginDir == "":
		return errors.New("device plugin directory is empty")
	case c.DeviceListStrategy != StrategyCDI && c.DeviceListStrategy != StrategyDeviceSpecs:
		return fmt.Errorf("device list strategy %q: want %q or %q", c.DeviceListStrategy, StrategyCDI, StrategyDeviceSpecs)
	case c.DRADevices < 0:
		return fmt.Errorf("dra devices must not be negative, got %d", c.DRADevices)
	case c.DRADevices > 0 && c.DRADriverName == "":
		return errors.New("dra devices are set but the DRA driver name is empty")
	case c.SocketPollInterval <= 0 || c.RegisterInitialBackoff <= 0 || c.RegisterMaxBackoff < c.RegisterInitialBackoff:
		return errors.New("poll interval and backoffs must be positive, and the maximum backoff at least the initial one")
	}
	if _, err := ParseFaults(JoinFaults(c.Faults)); err != nil {
		return err
	}
	return nil
}

// Mode is the sharing mode in force: Sharing, or for an empty Sharing time-slicing when Replicas is above
// 1 and none otherwise.
func (c Config) Mode() string { return fakegpu.ModeOf(c.Sharing, c.Replicas) }

// SharingStrategy is the GFD name of the sharing mode (label nvidia.com/gpu.sharing-strategy):
// "time-slicing" or "mps" when replicas are advertised, "none" otherwise (MIG included: GFD reports MIG
// through nvidia.com/mig.strategy, and a MIG device is not shared).
func (c Config) SharingStrategy() string {
	switch m := c.Mode(); m {
	case fakegpu.SharingTimeSlicing, fakegpu.SharingMPS:
		return m
	}
	return "none"
}

// AdvertisedResource is the resource the whole GPUs (or their replicas) are advertised as: ResourceName,
// or "<ResourceName>.shared" when RenameShared renames a shared one.
func (c Config) AdvertisedResource() string {
	if c.RenameShared && c.SharingStrategy() != "none" && !strings.HasSuffix(c.ResourceName, fakegpu.SharedResourceSuffix) {
		return c.ResourceName + fakegpu.SharedResourceSuffix
	}
	return c.ResourceName
}

// SocketName is the file name of our gRPC socket in PluginDir for the configured resource. It is derived
// from the resource name so that two fake plugins for different resources can share a node.
func (c Config) SocketName() string { return c.socketFor(c.ResourceName) }

// socketFor is the socket of resource's device-plugin server: with PodUID, one of this pod's own, so that
// during a DaemonSet's surge the old and the new agent both serve and the kubelet (which keeps one
// endpoint per socket path and refuses a second registration on a path it is connected to) moves to the
// new one and falls back to the other when one goes.
func (c Config) socketFor(resource string) string {
	if c.PodUID == "" {
		return socketName(resource)
	}
	uid, _, _ := strings.Cut(c.PodUID, "-")
	return strings.TrimSuffix(socketName(resource), ".sock") + "-" + uid + ".sock"
}

// socketName is the socket of the device-plugin server of resource (mig-mixed serves one per resource).
func socketName(resource string) string {
	r := strings.NewReplacer("/", "-", ".", "-")
	return "gpuconform-" + r.Replace(resource) + ".sock"
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}
