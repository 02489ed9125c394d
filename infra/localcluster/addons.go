package localcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	"sigs.k8s.io/yaml"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

//go:embed manifests/*.yaml
var manifests embed.FS

// DRADriverName is the name the fake GPU agent's DRA half publishes its devices under (also its
// DeviceClass): NVIDIA's DRA driver's, so that claims and CEL selectors written for real clusters work.
const DRADriverName = "gpu.nvidia.com"

// MIGDeviceClass is the DeviceClass of the agent's DRA partitions (type "mig"), installed in the MIG sharing
// modes next to the class of whole GPUs (DRADriverName, type "gpu"); NVIDIA's DRA driver installs both.
const MIGDeviceClass = "mig.nvidia.com"

// GPUResource is the extended resource the fake GPU agent's device plugin advertises.
const GPUResource = "nvidia.com/gpu"

// DevicePluginOffLabel is the GPU Operator's node label the agent honours: "false" keeps its device plugin
// off on the node (fakeplugin.DevicePluginDeployLabel). The DRA-only workers carry it from creation.
const DevicePluginOffLabel = fakegpu.DevicePluginDeployLabel

// ExampleDRADriverName is the driver (and DeviceClass) of the community dra-example-driver, the other
// choice for the DRA half (Options.DRADriver = DRADriverExample).
const ExampleDRADriverName = "gpu.example.com"

// FakeNvidiaSMIInImage is where the tools image carries the fake nvidia-smi for the agent to install.
const FakeNvidiaSMIInImage = "/opt/gpuconform/nvidia-smi"

// Choices of Options.DRADriver.
const (
	DRADriverFake    = "fake"
	DRADriverExample = "example"
)

// KueueDRAResource is the logical resource Kueue counts DRA devices of the local DeviceClass as, in
// ClusterQueue quotas (Kueue's deviceClassMappings).
const KueueDRAResource = "example.com/gpu"

// kubectl runs the cluster's own kubectl build against the cluster.
func (c *Cluster) kubectl(ctx context.Context, what string, args ...string) error {
	return c.run(ctx, what, c.binary("kubernetes", "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
}

// kubectlOut runs kubectl and returns its output.
func (c *Cluster) kubectlOut(ctx context.Context, args ...string) (string, error) {
	return output(ctx, c.binary("kubernetes", "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
}

// applyManifest applies rendered YAML server-side (Kueue's CRDs are too large for client-side apply).
func (c *Cluster) applyManifest(ctx context.Context, what string, doc []byte) error {
	f, err := os.CreateTemp("", "gpuconform-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(doc); err != nil {
		return err
	}
	f.Close()
	return c.kubectl(ctx, "apply "+what, "apply", "--server-side", "--force-conflicts", "--field-manager=gpuconform", "-f", f.Name())
}

// render executes one of the embedded manifest templates.
func render(name string, data any) ([]byte, error) {
	raw, err := manifests.ReadFile("manifests/" + name)
	if err != nil {
		return nil, err
	}
	t, err := template.New(name).Option("missingkey=error").Parse(string(raw))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// GPUStackOptions are the settings of the fake GPU stack on the local cluster. The upgrade rehearsal changes
// PluginVersion/DriverVersion on the canary pool; fault injection changes Fault.
type GPUStackOptions struct {
	Image        string
	Devices      int
	ResourceName string
	Replicas     int
	// Sharing is the agent's sharing mode (Options.SharingMode), never "".
	Sharing string
	// RenameShared: the agent advertises its replicas as ResourceName+".shared" (Options.RenameShared).
	RenameShared  bool
	DriverVersion string
	// UpgradeTo is the driver version the stack can be upgraded to (the rehearsal's target here).
	UpgradeTo     string
	PluginVersion string
	// PluginUpgradeTo is the plugin version the canary pool's agent can be rolled to (the DRA driver's
	// rolling-upgrade rehearsal's target here).
	PluginUpgradeTo string
	Fault           string
	// DriverName is the DRA driver (and DeviceClass) of the stack's DRA half; DRADevices the GPUs the
	// agent serves on it (0 when ExampleDRADriver puts the dra-example-driver there instead).
	DriverName       string
	DRADevices       int
	ExampleDRADriver bool
	// DRAImage is the dra-example-driver's content-keyed image (loadExampleDRADriver), when ExampleDRADriver.
	DRAImage string
	// ExtendedResource, when set, is the extended resource the agent's DeviceClass maps its GPUs to
	// (spec.extendedResourceName): pods asking for it on the DRA-only workers get the DRA driver's GPUs.
	ExtendedResource string
}

// loadTools builds the project's tools image and loads it into every node (it changes with the code, so it
// is not preloaded into the node image). It returns the content-keyed reference the manifests use.
func (c *Cluster) loadTools(ctx context.Context) (string, error) {
	build := c.startBuild(ctx, compTools) // started beside the node image's steps where one was built
	if err := build.wait(); err != nil {
		return "", err
	}
	dir := build.dir
	spec := imageSpec{Ref: ImageWorkload, Dirs: []string{"tmp"}, Files: map[string]string{}}
	for _, b := range []string{"fake-device-plugin", "gpu-workload", "gpuconform-net"} {
		spec.Files["usr/local/bin/"+b] = filepath.Join(dir, b)
	}
	// The workload binary opens libcuda through the C library's loader: the image carries the C runtime.
	crt, err := CRuntimeFiles(filepath.Join(dir, "gpu-workload"))
	if err != nil {
		return "", err
	}
	maps.Copy(spec.Files, crt)
	// Not on PATH: the workload image is also the test image, and a container must find an nvidia-smi only
	// where the fake driver's CDI spec mounted one (as on a real node). The agent installs it from here.
	spec.Files[strings.TrimPrefix(FakeNvidiaSMIInImage, "/")] = filepath.Join(dir, "nvidia-smi")
	return c.loadKeyed(ctx, spec, toolsImageRepo)
}

// loadExampleDRADriver builds the dra-example-driver (its module and image, each cached by content) and
// loads the image into every node that lacks it. It returns the content-keyed reference its manifest uses,
// so that a rebuilt driver rolls its DaemonSet. Only a bring-up with --dra-driver=example calls it.
func (c *Cluster) loadExampleDRADriver(ctx context.Context) (string, error) {
	if _, err := c.buildGo(ctx, compDRA); err != nil {
		return "", err
	}
	return c.loadKeyed(ctx, c.exampleDRAImage(), exampleDRAImageRepo)
}

// loadKueue waits for Kueue's build (started beside the node image's steps by Up, since the manager is not
// preloaded), builds its image and loads it into every node that lacks it. It returns the content-keyed
// reference the manifests use, so that a rebuilt manager rolls its Deployment.
func (c *Cluster) loadKueue(ctx context.Context, build *background) (string, error) {
	if err := build.wait(); err != nil {
		return "", err
	}
	return c.loadKeyed(ctx, c.kueueImage(), kueueImageRepo)
}

// loadKeyed builds the image of spec (unless cached), tags it repo:<content key>, removes the repository's
// superseded tags, and loads it into every node whose containerd does not hold that reference yet. It
// returns the keyed reference.
func (c *Cluster) loadKeyed(ctx context.Context, spec imageSpec, repo string) (string, error) {
	if err := c.buildImage(ctx, spec); err != nil {
		return "", err
	}
	key, _ := spec.key()
	ref := repo + ":" + key
	if err := c.run(ctx, "docker tag "+path.Base(repo), "docker", "tag", spec.Ref, ref); err != nil {
		return "", err
	}
	c.pruneImages(ctx, repo, ref)
	ns, err := c.nodes()
	if err != nil {
		return "", err
	}
	// Every node at once: on a running cluster this step is only the nodes' answers that they have it.
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range ns {
		g.Go(func() error {
			have, _ := output(gctx, "docker", "exec", n.String(), "ctr", "-n", "k8s.io", "images", "ls", "-q", "name=="+ref)
			if strings.TrimSpace(have) == ref {
				return nil
			}
			return c.loadImage(gctx, n, spec.Ref, ref)
		})
	}
	if err := g.Wait(); err != nil {
		return "", err
	}
	return ref, nil
}

// loadImage streams local images into one node's containerd with kind's own loader.
func (c *Cluster) loadImage(ctx context.Context, node nodes.Node, refs ...string) error {
	save := exec.CommandContext(ctx, "docker", append([]string{"save"}, refs...)...)
	pipe, err := save.StdoutPipe()
	if err != nil {
		return err
	}
	if err := save.Start(); err != nil {
		return err
	}
	loadErr := nodeutils.LoadImageArchive(node, pipe)
	if err := save.Wait(); err != nil {
		return fmt.Errorf("docker save %v: %w", refs, err)
	}
	if loadErr != nil {
		return fmt.Errorf("load %v into %s: %w", refs, node, loadErr)
	}
	return nil
}

// renderExampleDRADriver renders the dra-example-driver's manifest for the stack, naming the content-keyed
// image loadExampleDRADriver loaded.
func renderExampleDRADriver(s GPUStackOptions) ([]byte, error) {
	if s.DRAImage == "" {
		return nil, errors.New("the dra-example-driver's image was not loaded (loadExampleDRADriver) before the GPU stack")
	}
	return render("dra-driver.yaml", map[string]any{"Image": s.DRAImage, "DriverName": s.DriverName, "Devices": s.Devices})
}

// installGPUStack applies the fake device plugin and the DRA driver and waits until every GPU/canary node
// advertises the resource and publishes its ResourceSlice.
func (c *Cluster) installGPUStack(ctx context.Context, s GPUStackOptions) error {
	dp, err := render("fake-device-plugin.yaml", s)
	if err != nil {
		return err
	}
	var dra []byte
	if s.ExampleDRADriver {
		if dra, err = renderExampleDRADriver(s); err != nil {
			return err
		}
	}
	daemonSets, podsPerNode, podNames := []string{PluginDaemonSet, CanaryPluginDaemonSet}, 1, "fake-device-plugin"
	if s.ExampleDRADriver {
		daemonSets, podsPerNode, podNames = append(daemonSets, "dra-example-driver-kubeletplugin"), 2, "fake-device-plugin,dra-example-driver"
	}
	// The DaemonSets and DeviceClasses as the last bring-up left them, with the same manifests: nothing to
	// re-apply (a fault the selfcheck switched on lives in node annotations, not here).
	applied := fingerprint(string(dp), string(dra), fmt.Sprintf("%+v", s))
	stack := func() string {
		return c.objectsFingerprint(ctx, applied, "-n", SystemNamespace, "daemonsets,deviceclasses")
	}
	return c.unlessUnchanged("gpu-stack", "DaemonSets and DeviceClasses", stack,
		func() error { return c.applyGPUStack(ctx, s, dp, dra, daemonSets) },
		func(bool) error { return c.waitGPUStack(ctx, s, podsPerNode, podNames) })
}

// applyGPUStack applies the agent's and the DRA driver's manifests, removes what the mode does not use,
// and waits for the DaemonSets to roll out.
func (c *Cluster) applyGPUStack(ctx context.Context, s GPUStackOptions, dp, dra []byte, daemonSets []string) error {
	if s.ExampleDRADriver {
		if err := c.applyManifest(ctx, "dra driver", dra); err != nil {
			return err
		}
		// The agent serves no DRA devices now; its DeviceClass would select a driver that publishes nothing.
		if err := c.kubectl(ctx, "remove the agent's DeviceClass", "delete", "--ignore-not-found", "deviceclass/"+DRADriverName); err != nil {
			return err
		}
	} else if err := c.removeExampleDRADriver(ctx); err != nil {
		return err
	}
	// The manifest holds the MIG class only when the agent publishes partitions; applying it never
	// deletes, so a cluster brought up again in another mode loses the class here.
	if !s.partitionable() {
		if err := c.kubectl(ctx, "remove the MIG DeviceClass", "delete", "--ignore-not-found", "deviceclass/"+MIGDeviceClass); err != nil {
			return err
		}
	}
	if err := c.applyManifest(ctx, "fake GPU agent", dp); err != nil {
		return err
	}
	for _, ds := range daemonSets {
		if err := c.kubectl(ctx, "rollout "+ds, "-n", SystemNamespace, "rollout", "status", "ds/"+ds, "--timeout=180s"); err != nil {
			return err
		}
	}
	return nil
}

// waitGPUStack waits until every pool node advertises the stack's devices on both paths, served by plugin
// pods that are Ready since their node last started.
func (c *Cluster) waitGPUStack(ctx context.Context, s GPUStackOptions, podsPerNode int, podNames string) error {
	want := s.allocatable()
	wantDRA := s.draDevicesPerNode()
	started := c.nodeStartTimes(ctx)
	return poll(ctx, 120*time.Second, func() (bool, string) {
		// Both plugins' pods must be Ready (their probes say the kubelet is served), and Ready since their
		// node last started: a status written before the node container stopped is stale.
		out, err := c.kubectlOut(ctx, "get", "pods", "-n", SystemNamespace, "-l", "app.kubernetes.io/name in ("+podNames+")", "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.spec.nodeName}={.status.conditions[?(@.type=="Ready")].status}={.status.containerStatuses[0].state.running.startedAt}{"\n"}{end}`)
		if err != nil {
			return false, err.Error()
		}
		if why := stalePluginPods(out, started); why != "" {
			return false, why
		}
		pool, err := c.kubectlOut(ctx, "get", "nodes", "-l", PoolLabel, "-o", "name")
		if err != nil {
			return false, err.Error()
		}
		if got, want := len(strings.Fields(out)), podsPerNode*len(strings.Fields(pool)); got != want {
			return false, fmt.Sprintf("%d GPU stack pods (%s) on %d pool nodes, want %d", got, podNames, len(strings.Fields(pool)), want)
		}
		nodes, err := c.kubectlOut(ctx, "get", "nodes", "-l", PoolLabel, "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		if why := allocatableMismatch([]byte(nodes), want); why != "" {
			return false, why
		}
		published, err := c.kubectlOut(ctx, "get", "resourceslices", "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		return sliceMismatch([]byte(published), s.DriverName, strings.Fields(pool), wantDRA)
	})
}

// CanaryPluginDaemonSet is the fake GPU agent's DaemonSet on the canary pool (PluginDaemonSet runs it on
// the GPU pool). The canary's is its own, as a per-pool Helm release of a DRA driver is, so that a
// rehearsal can roll it on the canary alone, and it rolls with a surge (maxSurge 1, maxUnavailable 0):
// the new agent runs beside the old one until it is Ready, which is how NVIDIA's DRA driver rolls its
// kubelet plugin without a gap.
const CanaryPluginDaemonSet = "fake-device-plugin-canary"

// AgentDaemonSet is one DaemonSet of the fake GPU agent (manifests/fake-device-plugin.yaml).
type AgentDaemonSet struct {
	Name string
	// Agent is the pods' gpuconform.io/agent label and part of the selector; "" for PluginDaemonSet, whose
	// selector (immutable) predates the canary's DaemonSet.
	Agent string
	// Pools are the gpuconform.io/pool values it runs on, as a YAML flow list's items.
	Pools string
	// Surge rolls it with maxSurge 1 and maxUnavailable 0 (else maxUnavailable 1).
	Surge bool
}

// Agents are the agent's DaemonSets: the GPU pool's and the canary pool's.
func (GPUStackOptions) Agents() []AgentDaemonSet {
	return []AgentDaemonSet{
		{Name: PluginDaemonSet, Pools: `"gpu"`},
		{Name: CanaryPluginDaemonSet, Agent: "canary", Pools: `"canary"`, Surge: true},
	}
}

// partitionable reports whether the agent publishes MIG partitions on the DRA path (a MIG mode, and the
// agent serving DRA GPUs).
func (s GPUStackOptions) partitionable() bool { return s.DRADevices > 0 && fakegpu.IsMIG(s.Sharing) }

// allocatable is what every pool node must advertise once the agent serves, per extended resource: the
// GPUs times the replicas; in mig-single every GPU's MIG devices on nvidia.com/gpu; in mig-mixed the whole
// GPUs on nvidia.com/gpu and each profile's MIG devices on its own resource (fakegpu's layouts). A MIG
// resource of another mode must be down to 0.
func (s GPUStackOptions) allocatable() map[string]int {
	want := map[string]int{}
	switch s.Sharing {
	case fakegpu.SharingMIGSingle, fakegpu.SharingMIGMixed:
		for i := range s.Devices {
			layout := fakegpu.LayoutFor(s.Sharing, i)
			switch {
			case len(layout) == 0:
				want[s.ResourceName]++
			case s.Sharing == fakegpu.SharingMIGSingle:
				want[s.ResourceName] += len(layout)
			default:
				for _, pl := range layout {
					want[fakegpu.MIGResource(pl.Profile)]++
				}
			}
		}
	default:
		// The other name of the whole GPUs must be down to 0: the kubelet keeps a resource whose plugin
		// stopped serving it in capacity, with nothing allocatable.
		served, other := s.ResourceName, s.ResourceName+fakegpu.SharedResourceSuffix
		if s.RenameShared {
			served, other = other, served
		}
		want[served], want[other] = s.Devices*max(s.Replicas, 1), 0
	}
	return want
}

// draDevicesPerNode is how many devices the agent's DRA half publishes per node: its GPUs, and in the MIG
// modes each with one partition per placement of every profile smaller than the GPU. 0 when another driver
// (the dra-example-driver) serves DRA: then only a slice per node is required.
func (s GPUStackOptions) draDevicesPerNode() int {
	if s.ExampleDRADriver || s.DRADevices == 0 {
		return 0
	}
	if !s.partitionable() {
		return s.DRADevices
	}
	perGPU := 1
	for _, prof := range fakegpu.H100Profiles {
		if prof.Slices < fakegpu.MIGSlices {
			perGPU += len(prof.Starts)
		}
	}
	return s.DRADevices * perGPU
}

// allocatableMismatch reads `kubectl get nodes -o json` and says which node does not advertise want (and
// which still advertises a MIG resource want does not list); "" when all do.
//
// A node labelled DevicePluginOffLabel=false runs no device plugin (its GPUs are the DRA driver's alone):
// there every resource of want must be absent or 0.
func allocatableMismatch(raw []byte, want map[string]int) string {
	var list struct {
		Items []struct {
			Metadata struct {
				Name   string
				Labels map[string]string
			}
			Status struct{ Allocatable map[string]string }
		}
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "cannot read the nodes: " + err.Error()
	}
	for _, n := range list.Items {
		if n.Metadata.Labels[DevicePluginOffLabel] == "false" {
			for _, r := range slices.Sorted(maps.Keys(want)) {
				if v := n.Status.Allocatable[r]; v != "" && v != "0" {
					return fmt.Sprintf("node %s (%s=false: no device plugin) still allocates %s = %s", n.Metadata.Name, DevicePluginOffLabel, r, v)
				}
			}
			continue
		}
		for _, r := range slices.Sorted(maps.Keys(want)) {
			if got, _ := strconv.Atoi(n.Status.Allocatable[r]); got != want[r] {
				return fmt.Sprintf("node %s allocatable %s = %q, want %d", n.Metadata.Name, r, n.Status.Allocatable[r], want[r])
			}
		}
		for r, v := range n.Status.Allocatable {
			if _, expected := want[r]; !expected && fakegpu.ProfileOfResource(r) != "" && v != "0" {
				return fmt.Sprintf("node %s still allocates %s = %s, which this sharing mode does not serve", n.Metadata.Name, r, v)
			}
		}
	}
	return ""
}

// sliceMismatch reads `kubectl get resourceslices -o json` and says which pool node does not publish the
// devices of driver it should: want devices (across its slices), or when want is 0 any. Counter-set-only
// slices (the MIG modes) count for nothing.
func sliceMismatch(raw []byte, driver string, pool []string, want int) (bool, string) {
	var list struct {
		Items []struct {
			Spec struct {
				Driver   string
				NodeName string
				Devices  []struct{ Name string }
			}
		}
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return false, "cannot read the ResourceSlices: " + err.Error()
	}
	have := map[string]int{}
	for _, sl := range list.Items {
		if sl.Spec.Driver == driver {
			have[sl.Spec.NodeName] += len(sl.Spec.Devices)
		}
	}
	for _, node := range pool {
		node = strings.TrimPrefix(node, "node/")
		switch got := have[node]; {
		case got == 0:
			return false, fmt.Sprintf("no ResourceSlice of %s publishes devices on %s", driver, node)
		case want > 0 && got != want:
			return false, fmt.Sprintf("ResourceSlices of %s publish %d devices on %s, want %d", driver, got, node, want)
		}
	}
	return true, ""
}

// stalePluginPods reads "pod=node=ready=startedAt" lines and says which pod is not Ready or runs a
// container that started before its node did; "" when every pod is Ready and current.
func stalePluginPods(lines string, nodeStarted map[string]time.Time) string {
	for l := range strings.FieldsSeq(lines) {
		parts := strings.SplitN(l, "=", 4)
		if len(parts) != 4 {
			return "unexpected pod line " + l
		}
		pod, node, ready, startedAt := parts[0], parts[1], parts[2], parts[3]
		if ready != "True" {
			return fmt.Sprintf("pod %s on %s is not Ready", pod, node)
		}
		t, err := time.Parse(time.RFC3339, startedAt)
		if err != nil {
			return fmt.Sprintf("pod %s on %s has no running container", pod, node)
		}
		if since, ok := nodeStarted[node]; ok && t.Before(since.Truncate(time.Second)) {
			return fmt.Sprintf("pod %s on %s: status predates the node's start (%s)", pod, node, since.Format(time.RFC3339))
		}
	}
	return ""
}

// removeExampleDRADriver deletes the dra-example-driver's DaemonSet and DeviceClass when a cluster brought up
// with it is brought up again with the fake agent's DRA half: two drivers must not serve one pool's GPUs.
func (c *Cluster) removeExampleDRADriver(ctx context.Context) error {
	return c.kubectl(ctx, "remove dra-example-driver", "delete", "--ignore-not-found", "--wait=true",
		"-n", SystemNamespace, "daemonset/dra-example-driver-kubeletplugin", "deviceclass/"+ExampleDRADriverName)
}

// poll retries check every two seconds until it succeeds or the timeout passes; the error carries the
// last reason.
func poll(ctx context.Context, timeout time.Duration, check func() (bool, string)) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(context.Context) (bool, error) {
		ok, why := check()
		last = why
		return ok, nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("not ready after %s: %s", timeout, last)
	}
	return err
}

// kueueConfig is the Configuration the local Kueue runs with: Kueue's defaults, Jobs as the only
// integration the suites use, DRA support so ClusterQueues can put quotas on DRA devices, and
// waitForPodsReady as a training cluster enables it for gangs: a Workload whose pods are not all ready
// within the timeout (a gang that only partly fits) is evicted and requeued, so it never holds devices
// half-started. The timings shorten only local waits (Kueue's defaults: 5m, and a 60s requeue base; 30s
// is still several times the slowest pod start measured here, images being preloaded): the recovery
// timeout stays above the failure scenario's node loss (NotReady, then the taint's eviction), so that a
// replacement a node failure needs is not also a Kueue requeue. The gang scenario reads them back
// from this ConfigMap (framework/cluster discoverKueue) and the record lists them.
const kueueConfig = `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: :8081
metrics:
  bindAddress: :8443
webhook:
  port: 9443
leaderElection:
  leaderElect: true
  resourceName: c1f6bfd2.kueue.x-k8s.io
controller:
  groupKindConcurrency:
    Job.batch: 5
    Pod: 5
    Workload.kueue.x-k8s.io: 5
    LocalQueue.kueue.x-k8s.io: 1
    ClusterQueue.kueue.x-k8s.io: 1
    ResourceFlavor.kueue.x-k8s.io: 1
clientConnection:
  qps: 50
  burst: 100
integrations:
  frameworks:
  - batch/job
waitForPodsReady:
  timeout: 30s
  recoveryTimeout: 3m
  blockAdmission: false
  requeuingStrategy:
    timestamp: Eviction
    backoffBaseSeconds: 5
    backoffMaxSeconds: 60
featureGates:
  DynamicResourceAllocation: true
resources:
  deviceClassMappings:
  - name: ` + KueueDRAResource + `
    deviceClassNames:
    - ` + DRADriverName + `
    - ` + ExampleDRADriverName + `
`

// kueueOverlay is a kustomization over the manifests inside Kueue's module (config/default): it only
// points the image at the locally built one, forbids pulls, and merges the configuration above.
const kueueOverlay = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../default
images:
# config/components/manager/kustomization.yaml already maps "controller" to this name: override the result
# with the content-keyed image loadKueue loaded into the nodes.
- name: us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue
  newName: ` + kueueImageNamePlaceholder + `
  newTag: ` + kueueImageTagPlaceholder + `
patches:
# manager.yaml says imagePullPolicy: Always; offline the loaded image must be used as is.
- patch: |-
    - op: replace
      path: /spec/template/spec/containers/0/imagePullPolicy
      value: Never
  target:
    kind: Deployment
    name: kueue-controller-manager
# Kueue runs on the control plane, as a platform team keeps it off the GPU pool: the failure scenario
# stops GPU workers, and Kueue's webhooks fail closed while its only replica is on a stopped node.
- patch: |-
    - op: add
      path: /spec/template/spec/nodeSelector
      value: {node-role.kubernetes.io/control-plane: ""}
    - op: add
      path: /spec/template/spec/tolerations
      value: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
  target:
    kind: Deployment
    name: kueue-controller-manager
# Kueue reads its Configuration once, at start, and the ConfigMap keeps its name: the configuration's
# digest on the pod template rolls the Deployment when a revived cluster gets a changed configuration.
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: kueue-controller-manager, namespace: kueue-system}
    spec:
      template:
        metadata:
          annotations: {gpuconform.io/kueue-config: "` + kueueConfigDigestPlaceholder + `"}
configMapGenerator:
# the same merge Kueue's own e2e overlays (test/e2e/config/*) use.
- name: kueue-manager-config
  namespace: kueue-system
  behavior: merge
  files:
  - controller_manager_config.yaml
`

// The placeholders of the overlay: kueueConfig's digest, the name and tag of the manager's image.
const (
	kueueConfigDigestPlaceholder = "KUEUE_CONFIG_DIGEST"
	kueueImageNamePlaceholder    = "KUEUE_IMAGE_NAME"
	kueueImageTagPlaceholder     = "KUEUE_IMAGE_TAG"
)

// renderedKueueOverlay is the overlay with the configuration's digest and the manager's image filled in.
func renderedKueueOverlay(image string) string {
	sum := sha256.Sum256([]byte(kueueConfig))
	name, tag, _ := strings.Cut(image, ":")
	return strings.NewReplacer(kueueConfigDigestPlaceholder, hex.EncodeToString(sum[:8]),
		kueueImageNamePlaceholder, name, kueueImageTagPlaceholder, tag).Replace(kueueOverlay)
}

// renderKueue renders Kueue's manifests from its module with the overlay, its manager running image, cached
// by content.
func (c *Cluster) renderKueue(ctx context.Context, image string) ([]byte, error) {
	src, err := c.moduleDir(ctx, compKueue, "sigs.k8s.io/kueue")
	if err != nil {
		return nil, err
	}
	k := NewKey("kueue-manifests").Value("overlay", renderedKueueOverlay(image)).Value("config", kueueConfig).Value("exclude", SystemNamespace)
	if err := k.Dir("config", filepath.Join(src, "config"), nil); err != nil {
		return nil, err
	}
	dir, _, err := c.cachedDir("kueue-manifests", k.Sum(), func(out string) error {
		work, err := os.MkdirTemp("", "gpuconform-kueue-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		if err := c.run(ctx, "copy kueue config", "cp", "-r", filepath.Join(src, "config"), work); err != nil {
			return err
		}
		_ = c.run(ctx, "chmod kueue config", "chmod", "-R", "u+w", work)
		ov := filepath.Join(work, "config", "gpuconform")
		if err := writeFile(filepath.Join(ov, "kustomization.yaml"), []byte(renderedKueueOverlay(image)), 0o644); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(ov, "controller_manager_config.yaml"), []byte(kueueConfig), 0o644); err != nil {
			return err
		}
		rendered, err := output(ctx, c.binary("kubernetes", "kubectl"), "kustomize", ov)
		if err != nil {
			return err
		}
		doc, err := ExcludeNamespaceFromWebhooks([]byte(rendered), SystemNamespace)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(out, "kueue.yaml"), doc, 0o644)
	})
	if err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(dir, "kueue.yaml"))
}

// ExcludeNamespaceFromWebhooks adds ns to the namespaces that Kueue's webhooks already leave alone
// (kube-system, kueue-system). Kueue's webhooks fail closed, so without this the fake GPU stack's pods
// could not be recreated while Kueue is down (after a node restart, say), and Kueue in turn waits for
// nothing from them: the dependency would only ever go one way.
func ExcludeNamespaceFromWebhooks(multiDoc []byte, ns string) ([]byte, error) {
	var out [][]byte
	for raw := range bytes.SplitSeq(multiDoc, []byte("\n---\n")) {
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal(raw, &obj); err != nil {
			return nil, err
		}
		kind, _ := obj["kind"].(string)
		if kind == "MutatingWebhookConfiguration" || kind == "ValidatingWebhookConfiguration" {
			hooks, _ := obj["webhooks"].([]any)
			for _, h := range hooks {
				hook, _ := h.(map[string]any)
				sel, _ := hook["namespaceSelector"].(map[string]any)
				exprs, _ := sel["matchExpressions"].([]any)
				for _, e := range exprs {
					expr, _ := e.(map[string]any)
					if expr["key"] == "kubernetes.io/metadata.name" && expr["operator"] == "NotIn" {
						expr["values"] = append(expr["values"].([]any), ns)
					}
				}
			}
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return bytes.Join(out, []byte("---\n")), nil
}

// installKueue applies Kueue, its manager running image (loadKueue's reference), and returns only when its
// webhooks answer: a server-side dry run of a queued Job passes through Kueue's mutating and validating
// webhooks.
func (c *Cluster) installKueue(ctx context.Context, image string) error {
	doc, err := c.renderKueue(ctx, image)
	if err != nil {
		return err
	}
	// Kueue's workloads, configuration, webhooks and the local Topology as the last bring-up left them,
	// from the same manifests: nothing to re-apply. The webhook probe runs either way.
	kueue := func() string {
		return c.objectsFingerprint(ctx, string(doc), "-n", "kueue-system",
			"deployments,configmaps,services,mutatingwebhookconfigurations,validatingwebhookconfigurations,topologies.kueue.x-k8s.io")
	}
	return c.unlessUnchanged("kueue", "Kueue's Deployment, configuration, webhooks and Topology", kueue,
		func() error {
			if err := c.applyManifest(ctx, "kueue", doc); err != nil {
				return err
			}
			nctx, stop := context.WithCancel(ctx)
			nudged := make(chan struct{})
			go func() { defer close(nudged); c.nudgeKueueCertMount(nctx) }()
			defer func() { stop(); <-nudged }()
			return c.kubectl(ctx, "rollout kueue", "-n", "kueue-system", "rollout", "status", "deploy/kueue-controller-manager", "--timeout=300s")
		},
		func(fresh bool) error {
			if err := c.probeKueueWebhook(ctx); err != nil {
				return err
			}
			if fresh {
				return nil
			}
			// After the webhook answers: it validates the Topology.
			return c.installTopology(ctx)
		})
}

// kueueManagerSelector selects the pods of Kueue's controller manager (its Deployment's selector).
const kueueManagerSelector = "control-plane=controller-manager"

// restartKueueStartedBlind deletes the pods of Kueue's manager that started before the pod network
// answered (networkAt) and are not Ready. On a revive every container starts again at once, and Kueue's
// start-up reaches the API server through its Service IP before kube-proxy has programmed it: it waits out
// a 30 s dial timeout, stops serving, and the kubelet restarts it only once its liveness probe has failed,
// about a minute after the node came back. A new pod starts
// on the network that now works, and the webhook probe below waits for it. Nothing is deleted when the
// manager is Ready, or when its pods started after the network answered.
func (c *Cluster) restartKueueStartedBlind(ctx context.Context, networkAt time.Time) {
	out, err := c.kubectlOut(ctx, "-n", KueueNamespace, "get", "pods", "-l", kueueManagerSelector, "-o", kueuePodsJSONPath)
	if err != nil {
		return // no Kueue yet (a new cluster), or no answer: installKueue says what is wrong
	}
	for _, pod := range startedBlind(out, networkAt) {
		c.logf("  Kueue's manager %s started before the pod network answered and is not Ready: deleting it so that a new pod starts on the working network", pod)
		if err := c.kubectl(ctx, "restart kueue", "-n", KueueNamespace, "delete", "pod", pod, "--wait=false"); err != nil {
			c.logf("  could not delete %s (%v): waiting for the kubelet to restart it", pod, err)
		}
	}
}

// kueuePodsJSONPath lists a pod per line: name, Ready status, the start of its running container and the
// reason its container waits.
const kueuePodsJSONPath = `jsonpath={range .items[*]}{.metadata.name}{"|"}{.status.conditions[?(@.type=="Ready")].status}{"|"}{.status.containerStatuses[0].state.running.startedAt}{"|"}{.status.containerStatuses[0].state.waiting.reason}{"\n"}{end}`

// startedBlind picks from a kueuePodsJSONPath listing the pods that are not Ready and whose container
// either runs since before networkAt or waits in CrashLoopBackOff (a start that failed, perhaps for the
// same reason, whose back-off would hold the next one).
func startedBlind(listing string, networkAt time.Time) []string {
	var out []string
	for line := range strings.SplitSeq(strings.TrimSpace(listing), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 4 || f[0] == "" || f[1] == "True" {
			continue
		}
		started, err := time.Parse(time.RFC3339, f[2])
		if (err == nil && started.Before(networkAt)) || f[3] == "CrashLoopBackOff" {
			out = append(out, f[0])
		}
	}
	return out
}

// probeKueueWebhook returns once a server-side dry run of a queued Job comes back suspended: Kueue's
// mutating webhook really ran.
func (c *Cluster) probeKueueWebhook(ctx context.Context) error {
	probe := `apiVersion: batch/v1
kind: Job
metadata:
  name: gpuconform-webhook-probe
  namespace: default
  labels:
    kueue.x-k8s.io/queue-name: gpuconform-webhook-probe
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: ` + ImageWorkload + `
        command: ["/usr/local/bin/gpu-workload", "probe"]
`
	f, err := os.CreateTemp("", "gpuconform-probe-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, _ = f.WriteString(probe)
	f.Close()
	return poll(ctx, 180*time.Second, func() (bool, string) {
		out, err := c.kubectlOut(ctx, "create", "--dry-run=server", "-o", "jsonpath={.spec.suspend}", "-f", f.Name())
		if err != nil {
			return false, "Kueue's webhook does not answer yet: " + err.Error()
		}
		// Kueue's mutating webhook suspends a queued Job: proof that it really ran.
		if out != "true" {
			return false, "a queued Job was not suspended by Kueue's webhook (spec.suspend=" + out + ")"
		}
		return true, ""
	})
}

// RackLabel is the local cluster's fake rack: a GPU node's pool (gpu, canary) stands for the rack it is in,
// so Kueue's topology has a level above the hostname as a training cluster's has (block, rack, host).
const RackLabel = "gpuconform.io/rack"

// TopologyName is the Kueue Topology of the local cluster: rack, then hostname.
const TopologyName = "gpuconform-local"

// installTopology labels every pool node with its rack and creates the Kueue Topology over rack and
// hostname, so topology-aware scheduling (TAS, on by default since Kueue 0.14) can be exercised: a
// ResourceFlavor that names it places a gang within one domain.
func (c *Cluster) installTopology(ctx context.Context) error {
	out, err := c.kubectlOut(ctx, "get", "nodes", "-l", PoolLabel, "-o", `jsonpath={range .items[*]}{.metadata.name}={.metadata.labels.gpuconform\.io/pool}={.metadata.labels.gpuconform\.io/rack}{"\n"}{end}`)
	if err != nil {
		return err
	}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(line, "=", 3)
		if len(f) != 3 || f[0] == "" || f[2] == "rack-"+f[1] {
			continue
		}
		if err := c.kubectl(ctx, "label rack", "label", "node", f[0], "--overwrite", RackLabel+"=rack-"+f[1]); err != nil {
			return err
		}
	}
	topology := `apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata:
  name: ` + TopologyName + `
spec:
  levels:
  - nodeLabel: ` + RackLabel + `
  - nodeLabel: kubernetes.io/hostname
`
	return c.applyManifest(ctx, "kueue topology", []byte(topology))
}
