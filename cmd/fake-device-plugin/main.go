// Command fake-device-plugin is the fake GPU node agent of the local test cluster: one inventory of fake
// NVIDIA GPUs per node, served on both allocation paths (a kubelet device plugin for nvidia.com/gpu and a
// DRA kubelet plugin for gpu.nvidia.com), with device nodes, a CDI spec and a fake nvidia-smi so that
// containers see their GPUs the way they would on a real node. All behaviour lives in internal/fakeplugin;
// this file only turns flags and the environment into its Config and wires signals and the Kubernetes
// client.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/internal/fakeplugin"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(log); err != nil {
		log.Error("fake-device-plugin failed", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	cfg := fakeplugin.DefaultConfig()
	cfg.Logger = log
	var fault, kubeconfig string
	flag.StringVar(&cfg.PluginDir, "device-plugin-dir", cfg.PluginDir, "kubelet device-plugins directory holding kubelet.sock")
	flag.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "node this plugin runs on (default $NODE_NAME, from the downward API)")
	flag.StringVar(&cfg.ResourceName, "resource-name", cfg.ResourceName, "extended resource name to advertise")
	flag.IntVar(&cfg.Devices, "devices", cfg.Devices, "number of physical fake GPUs")
	flag.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "replicas per GPU under --sharing=time-slicing or mps (1 = no sharing; above 1 without --sharing means time-slicing)")
	flag.BoolVar(&cfg.RenameShared, "rename-shared", false, "advertise a time-sliced or MPS resource as <resource-name>.shared, like NVIDIA's renameByDefault (GFD's product label then has no -SHARED)")
	flag.StringVar(&cfg.Sharing, "sharing", "", "sharing mode: "+strings.Join(fakegpu.SharingModes, ", ")+" (default none, or time-slicing when --replicas is above 1)")
	flag.StringVar(&fault, "fault", "", "faults to inject from the start, comma-separated (see internal/fakeplugin/faults.go; the node annotation "+fakeplugin.FaultsAnnotation+" adds more at run time): "+allFaults())
	flag.IntVar(&cfg.DRADevices, "dra-devices", cfg.DRADevices, "number of fake GPUs served on the DRA path, after the device plugin's (0 = DRA off)")
	flag.StringVar(&cfg.DRADriverName, "dra-driver-name", cfg.DRADriverName, "DRA driver name (ResourceSlices, claims, the kubelet plugin's registration)")
	flag.BoolVar(&cfg.DRAUnregistered, "dra-unregistered", false, "fault injection: publish the DRA devices but never register the DRA plugin with the kubelet (start-up only; see Config.DRAUnregistered)")
	flag.StringVar(&cfg.KubeletRegistryDir, "kubelet-registry-dir", cfg.KubeletRegistryDir, "kubelet plugin registration directory (DRA)")
	flag.StringVar(&cfg.KubeletPluginsDir, "kubelet-plugins-dir", cfg.KubeletPluginsDir, "parent of the DRA plugin's socket directory")
	flag.StringVar(&cfg.StateDir, "state-dir", "", "directory for the fake driver's device nodes, inventory and nvidia-smi on the node (empty = no device nodes, no CDI)")
	flag.StringVar(&cfg.CDIDir, "cdi-dir", "", "CDI spec directory the container runtime reads (empty = no CDI)")
	flag.StringVar(&cfg.NvidiaSMI, "nvidia-smi", "", "the fake nvidia-smi binary to install for the CDI spec to mount")
	flag.StringVar(&cfg.DeviceListStrategy, "device-list-strategy", cfg.DeviceListStrategy, "how the device plugin hands GPUs to the runtime: cdi (CDI device names) or device-specs (device nodes and mounts in the Allocate response)")
	flag.StringVar(&cfg.Product, "product", cfg.Product, "GPU product name for the nvidia.com/gpu.product label")
	flag.IntVar(&cfg.MemoryMiB, "memory-mib", cfg.MemoryMiB, "GPU memory in MiB for the nvidia.com/gpu.memory label")
	flag.StringVar(&cfg.DriverVersion, "driver-version", cfg.DriverVersion, "driver version for the nvidia.com/cuda.driver-version.* labels")
	flag.StringVar(&cfg.CUDAVersion, "cuda-version", cfg.CUDAVersion, "CUDA version for the nvidia.com/cuda.runtime-version.* labels")
	flag.StringVar(&cfg.Family, "family", cfg.Family, "GPU architecture family for the nvidia.com/gpu.family label")
	flag.StringVar(&cfg.PluginVersion, "version", cfg.PluginVersion, "plugin version published as gpuconform.io/fake-device-plugin-version")
	flag.DurationVar(&cfg.SocketPollInterval, "socket-poll-interval", cfg.SocketPollInterval, "how often to check that our socket survived (kubelet restarts delete it)")
	flag.StringVar(&cfg.ReadyFile, "ready-file", "", "file that exists while the kubelet is connected (for the readiness probe)")
	flag.StringVar(&cfg.ReadyAddress, "ready-address", "", "listen address where GET "+fakeplugin.ReadyPath+" answers the readiness probe from --ready-file (empty = off)")
	flag.StringVar(&cfg.MetricsAddress, "metrics-address", cfg.MetricsAddress, "listen address of the DCGM-exporter-compatible "+fakeplugin.MetricsPath+" endpoint (empty = off)")
	flag.StringVar(&cfg.PodResourcesSocket, "pod-resources-socket", cfg.PodResourcesSocket, "the kubelet's PodResources API socket, asked at each scrape which pods hold which GPUs (empty = samples without pod labels)")
	checkReady := flag.String("check-ready", "", "readiness probe: exit 0 if this ready file exists, 1 otherwise, and do nothing else")
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for running outside a pod (default: in-cluster config)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", flag.Args())
	}
	if *checkReady != "" {
		if err := fakeplugin.CheckReady(*checkReady); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return nil
	}
	// The pod's UID, from the DaemonSet's downward API: the DRA half's rolling-update registration.
	cfg.PodUID = os.Getenv("POD_UID")
	faults, err := fakeplugin.ParseFaults(fault)
	if err != nil {
		return fmt.Errorf("--fault: %w", err)
	}
	cfg.Faults = faults

	plugin, err := fakeplugin.New(cfg)
	if err != nil {
		return err
	}
	client, err := newClient(kubeconfig)
	if err != nil {
		return err
	}
	// SIGTERM is how the kubelet stops the DaemonSet pod during a rollout; stopping cleanly removes our
	// socket so the kubelet marks the resource unavailable at once instead of waiting for a dead endpoint.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log.Info("starting fake GPU agent", "agent", plugin.String(), "sharing", cfg.Mode(), "resources", plugin.Resources(), "faults", fault, "version", cfg.PluginVersion)
	return plugin.Run(ctx, client)
}

func newClient(kubeconfig string) (kubernetes.Interface, error) {
	var (
		rc  *rest.Config
		err error
	)
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	rc.UserAgent = "gpuconform-fake-device-plugin"
	// Right after its node restarts, the pod network and the Service rules are not back yet and the first
	// connection to the API server's Service IP hangs instead of failing: with the default 30 s dial timeout
	// the plugin waited out its whole node-sync grace before registering. A short dial timeout makes the
	// informer retry as soon as the network heals. (Not rest.Config.Timeout: that would cut watches.)
	rc.Dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return kubernetes.NewForConfig(rc)
}

func allFaults() string {
	var names []string
	for _, f := range fakeplugin.AllFaults() {
		names = append(names, string(f))
	}
	return strings.Join(names, ", ")
}
