// Package config is the suite's configuration: one YAML file (--config) plus flags, flags winning.
// Everything that differs between the local kind cluster and a real cluster lives here, and nothing
// else in the suite may assume a value the user could configure.
package config

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"gpuconform.io/gpuconform/framework/timeouts"
)

// Allocation path names, as used in config, labels and reports.
const (
	// PathAuto selects every allocation path discovery finds.
	PathAuto = "auto"
	// PathDevicePlugin is the extended-resource path (nvidia.com/gpu limits).
	PathDevicePlugin = "device-plugin"
	// PathDRA is the Dynamic Resource Allocation path (DeviceClass, ResourceClaimTemplate).
	PathDRA = "dra"
)

// Queue modes.
const (
	// QueuesOwn creates a ResourceFlavor, ClusterQueue and LocalQueue per spec (the default).
	QueuesOwn = "own"
	// QueuesExisting submits to an existing LocalQueue, named in Queues.LocalQueue, in every spec namespace.
	QueuesExisting = "existing"
)

// Default pool selectors. They match the local kind cluster; on a real cluster they usually match
// nothing, and discovery then falls back to "the nodes that have the devices".
const (
	DefaultGPUPoolSelector       = "gpuconform.io/pool=gpu"
	DefaultCanaryPoolSelector    = "gpuconform.io/pool=canary"
	DefaultKnownGoodPoolSelector = "gpuconform.io/pool=known-good"
)

// Config is the whole configuration. Field names are the YAML keys.
type Config struct {
	// Kubeconfig is the kubeconfig file; empty means $KUBECONFIG or ~/.kube/config.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Context is the kubeconfig context; empty means the kubeconfig's current context.
	Context string `json:"context,omitempty"`
	// NamespacePrefix starts every namespace the suite creates.
	NamespacePrefix string `json:"namespacePrefix,omitempty"`
	// AllocationPaths is ["auto"] or an explicit subset of "device-plugin", "dra". An explicit path that
	// discovery does not find fails the run instead of being skipped.
	AllocationPaths []string `json:"allocationPaths,omitempty"`
	// DevicePlugin configures the device-plugin path.
	DevicePlugin DevicePluginConfig `json:"devicePlugin,omitempty"`
	// DRA configures the DRA path.
	DRA DRAConfig `json:"dra,omitempty"`
	// Pools selects the node pools by label selector.
	Pools PoolsConfig `json:"pools,omitempty"`
	// Queues says whether specs create their own Kueue queues or reuse one.
	Queues QueuesConfig `json:"queues,omitempty"`
	// Kueue locates the Kueue installation.
	Kueue KueueConfig `json:"kueue,omitempty"`
	// Disruptive opts in to specs that change nodes. Off by default.
	Disruptive bool `json:"disruptive,omitempty"`
	// Image is the workload image.
	Image string `json:"image,omitempty"`
	// TimeoutProfile is "auto" (default: local on a kind cluster, real otherwise), "local" or "real".
	TimeoutProfile string `json:"timeoutProfile,omitempty"`
	// RunTimeout bounds the whole run (the suite's timeout); zero means the later of Ginkgo's --timeout
	// and 90 minutes.
	RunTimeout metav1.Duration `json:"timeout,omitempty"`
	// Namespace, when set, is an existing namespace every spec runs in (team-namespace mode): the suite
	// creates no namespace and no cluster-scoped object, names and labels its objects per spec, and
	// cleans up by label. Kueue specs then need queues.localQueue in it.
	Namespace string `json:"namespace,omitempty"`
	// HelperNamespace is where the device-plugin path's podresources helper runs: it reads the kubelet's
	// pod-resources socket through a hostPath, as root, which Pod Security "restricted" refuses. Name a
	// namespace your policies exempt (empty: the spec's namespace; refused there, the identity check
	// falls back to a count and the verdict is INCOMPLETE).
	HelperNamespace string `json:"helperNamespace,omitempty"`
	// DedicationTaints are taint keys that reserve GPU nodes (e.g. nvidia.com/gpu); test pods tolerate them
	// wherever they appear in the GPU pool. Taints every GPU node carries are found without this list.
	DedicationTaints []string `json:"dedicationTaints,omitempty"`
	// AutoTolerateDedicationTaints lets test pods tolerate the dedication taints (default true). Off, the
	// pods carry only Tolerations, and a pool reserved by a taint shows as UntoleratedTaint.
	AutoTolerateDedicationTaints *bool `json:"autoTolerateDedicationTaints,omitempty"`
	// ArtifactsDir receives reports, dumps and logs; default $ARTIFACTS or _artifacts.
	ArtifactsDir string `json:"artifactsDir,omitempty"`
	// KeepResources leaves every created object in place for debugging (the leak audit then reports them
	// as kept instead of failing).
	KeepResources bool `json:"keepResources,omitempty"`
	// CleanupLeftovers deletes an earlier run's labelled objects at suite start instead of refusing to run.
	CleanupLeftovers bool `json:"cleanupLeftovers,omitempty"`
	// Tolerations are added to every test pod (real clusters taint GPU nodes).
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Signoff is the verdict policy: what must be exercised, and the baseline to compare with.
	Signoff SignoffConfig `json:"signoff,omitempty"`
	// Faults chooses how the failure scenario injects node and device faults (with Disruptive only).
	Faults FaultsConfig `json:"faults,omitempty"`
	// Checkpoints is storage that outlives a node, for the scenarios that resume a job elsewhere.
	Checkpoints CheckpointConfig `json:"checkpoints,omitempty"`
	// Upgrade configures the driver-upgrade rehearsal on the canary pool (with Disruptive only).
	Upgrade UpgradeConfig `json:"upgrade,omitempty"`
	// Preemption names what the preemption scenario uses on an existing installation (queues.mode
	// existing): the WorkloadPriorityClasses of the preemptible and of the urgent job.
	Preemption PreemptionConfig `json:"preemption,omitempty"`
}

// UpgradeConfig configures the upgrade rehearsal.
type UpgradeConfig struct {
	// To is the driver version to rehearse; on the project's local cluster the default is 560.35.03.
	To string `json:"to,omitempty"`
	// Command is the user's upgrade script: `SCRIPT upgrade|rollback VERSION NODE...`; without it only the
	// local cluster's provider exists.
	Command string `json:"command,omitempty"`
	// VersionLabel is the node label that reports the driver version (default NVIDIA GFD's
	// nvidia.com/cuda.driver-version.full).
	VersionLabel string `json:"versionLabel,omitempty"`
}

// PreemptionConfig names existing WorkloadPriorityClasses for the preemption scenario.
type PreemptionConfig struct {
	LowPriorityClass  string `json:"lowPriorityClass,omitempty"`
	HighPriorityClass string `json:"highPriorityClass,omitempty"`
}

// Fault providers (framework/faults).
const (
	FaultProviderAuto        = "auto"
	FaultProviderNone        = "none"
	FaultProviderLocal       = "local"
	FaultProviderCommand     = "command"
	FaultProviderKubeletStop = "kubelet-stop"
	FaultProviderTaintRule   = "device-taint-rule"
)

// FaultsConfig chooses the fault providers.
type FaultsConfig struct {
	// NodeProvider stops and starts GPU nodes: auto (local on the project's kind cluster, else command when
	// Command is set, else none), local, command, kubelet-stop or none.
	NodeProvider string `json:"nodeProvider,omitempty"`
	// DeviceProvider turns a device unhealthy: auto (local on the project's kind cluster, else command when
	// Command is set, else none), local, command or none. The DRA path uses DRADeviceProvider.
	DeviceProvider string `json:"deviceProvider,omitempty"`
	// DRADeviceProvider turns a DRA device unhealthy: auto (device-taint-rule where the API server serves
	// DeviceTaintRules, else as DeviceProvider), device-taint-rule, local, command or none.
	DRADeviceProvider string `json:"draDeviceProvider,omitempty"`
	// Command is the user's script for the command provider: `SCRIPT ACTION NODE [DEVICE]`.
	Command string `json:"command,omitempty"`
	// CommandDeviceEvicts says the command's device fault also evicts the pods using the device.
	CommandDeviceEvicts bool `json:"commandDeviceEvicts,omitempty"`
	// KubeletStopFor bounds each kubelet-stop outage (the helper thaws the kubelet after it).
	KubeletStopFor metav1.Duration `json:"kubeletStopFor,omitempty"`
	// EvictionToleration is the tolerationSeconds of the failure scenario's training pods for the
	// not-ready and unreachable taints: how long Kubernetes waits before evicting them from a lost node.
	EvictionToleration metav1.Duration `json:"evictionToleration,omitempty"`
}

// CheckpointConfig is storage that outlives a node. Without either field, a directory every GPU node
// mounts from shared storage is discovered from the nodes' gpuconform.io/shared-dir annotation (the local
// cluster sets it); with none, specs that need it say "not exercised".
type CheckpointConfig struct {
	// StorageClass provisions a ReadWriteMany volume per spec.
	StorageClass string `json:"storageClass,omitempty"`
	// HostPath is a directory every GPU node mounts from the same shared storage (NFS, a kind extraMount),
	// offered to specs as a static ReadWriteMany PersistentVolume.
	HostPath string `json:"hostPath,omitempty"`
}

// SignoffConfig is the verdict policy (reports.Decide applies it).
type SignoffConfig struct {
	// Require are labels that must each have a passed spec: path:<name> or scenario:<name>. Empty means the
	// suite's default (every implemented scenario); every discovered path is always required.
	Require []string `json:"require,omitempty"`
	// AllowIncomplete signs off GO although something required was not exercised (the reasons stay listed).
	AllowIncomplete bool `json:"allowIncomplete,omitempty"`
	// Baseline is the compatibility record (gpuconform-record.json) of an earlier run: what passed there and
	// fails or is missing now is NO-GO.
	Baseline string `json:"baseline,omitempty"`
}

// DevicePluginConfig configures the device-plugin path.
type DevicePluginConfig struct {
	// ResourceName is the extended resource; empty means discover it from node allocatable, preferring
	// nvidia.com/gpu.
	ResourceName string `json:"resourceName,omitempty"`
}

// DRAConfig configures the DRA path.
type DRAConfig struct {
	// DeviceClass is the DeviceClass to request; empty means a DeviceClass whose driver publishes
	// ResourceSlices.
	DeviceClass string `json:"deviceClass,omitempty"`
	// KueueResourceName is the resource Kueue accounts DRA devices as (Kueue's deviceClassMappings).
	KueueResourceName string `json:"kueueResourceName,omitempty"`
}

// PoolsConfig holds label selectors for the node pools.
type PoolsConfig struct {
	// GPU selects the nodes test workloads may land on.
	GPU string `json:"gpu,omitempty"`
	// Canary selects the nodes an upgrade rehearsal may change.
	Canary string `json:"canary,omitempty"`
	// KnownGood selects nodes on the last known-good stack, for comparison.
	KnownGood string `json:"knownGood,omitempty"`

	// explicit records which selectors the user set, so discovery only falls back for defaults.
	explicit map[string]bool
}

// Explicit reports whether the named pool ("gpu", "canary", "knownGood") was set by the user.
func (p PoolsConfig) Explicit(pool string) bool { return p.explicit[pool] }

// QueuesConfig says how specs reach Kueue.
type QueuesConfig struct {
	// Mode is "own" (default) or "existing".
	Mode string `json:"mode,omitempty"`
	// LocalQueue is the existing LocalQueue's name when Mode is "existing"; it must exist in every
	// namespace the suite submits to (e.g. created by a namespace template).
	LocalQueue string `json:"localQueue,omitempty"`
}

// KueueConfig locates Kueue.
type KueueConfig struct {
	// Namespace is where Kueue's controller and webhook run.
	Namespace string `json:"namespace,omitempty"`
}

// Default returns the configuration used when nothing is set.
func Default() Config {
	return Config{
		NamespacePrefix: "gpuconform",
		AllocationPaths: []string{PathAuto},
		DRA:             DRAConfig{KueueResourceName: "example.com/gpu"},
		Pools: PoolsConfig{
			GPU: DefaultGPUPoolSelector, Canary: DefaultCanaryPoolSelector, KnownGood: DefaultKnownGoodPoolSelector,
		},
		Queues:         QueuesConfig{Mode: QueuesOwn},
		Kueue:          KueueConfig{Namespace: "kueue-system"},
		Image:          "gpuconform.local/gpu-workload:dev",
		TimeoutProfile: timeouts.ProfileAuto,
		ArtifactsDir:   cmp.Or(os.Getenv("ARTIFACTS"), "_artifacts"),
		Faults: FaultsConfig{NodeProvider: FaultProviderAuto, DeviceProvider: FaultProviderAuto, DRADeviceProvider: FaultProviderAuto,
			KubeletStopFor: metav1.Duration{Duration: 2 * time.Minute}, EvictionToleration: metav1.Duration{Duration: 10 * time.Second}},
	}
}

// AutoTolerate reports whether test pods tolerate the discovered dedication taints.
func (c Config) AutoTolerate() bool {
	return c.AutoTolerateDedicationTaints == nil || *c.AutoTolerateDedicationTaints
}

// Timeouts returns the budgets of the configured profile ("auto" not yet resolved waits as real does).
func (c Config) Timeouts() timeouts.Timeouts {
	t, err := timeouts.ForProfile(c.TimeoutProfile)
	if err != nil {
		return timeouts.Local() // unreachable after Validate
	}
	return t
}

// WantsPath reports whether path is selected (explicitly or by "auto").
func (c Config) WantsPath(path string) bool {
	return slices.Contains(c.AllocationPaths, PathAuto) || slices.Contains(c.AllocationPaths, path)
}

// ExplicitPaths returns the paths named explicitly (empty for "auto").
func (c Config) ExplicitPaths() []string {
	if slices.Contains(c.AllocationPaths, PathAuto) {
		return nil
	}
	return c.AllocationPaths
}

// Validate returns every problem at once, each naming the key and the accepted values.
func (c Config) Validate() error {
	var errs []error
	if c.Namespace != "" && (len(c.Namespace) > 63 || !dnsLabel(c.Namespace)) {
		errs = append(errs, fmt.Errorf("namespace %q: not a namespace name (a DNS label of at most 63 characters)", c.Namespace))
	}
	for _, k := range c.DedicationTaints {
		if k == "" || strings.ContainsAny(k, "=: ") {
			errs = append(errs, fmt.Errorf("dedicationTaints: %q is not a taint key (give the key alone, e.g. nvidia.com/gpu)", k))
		}
	}
	if c.NamespacePrefix == "" || len(c.NamespacePrefix) > 40 || !dnsLabel(c.NamespacePrefix) {
		errs = append(errs, fmt.Errorf("namespacePrefix %q: must be a DNS label of at most 40 characters (lowercase letters, digits, '-')", c.NamespacePrefix))
	}
	if len(c.AllocationPaths) == 0 {
		errs = append(errs, errors.New("allocationPaths: empty; use [auto] or a subset of [device-plugin, dra]"))
	}
	for _, p := range c.AllocationPaths {
		switch p {
		case PathAuto:
			if len(c.AllocationPaths) > 1 {
				errs = append(errs, fmt.Errorf("allocationPaths %q: %q cannot be combined with explicit paths", c.AllocationPaths, PathAuto))
			}
		case PathDevicePlugin, PathDRA:
		default:
			errs = append(errs, fmt.Errorf("allocationPaths: unknown path %q; use auto, device-plugin or dra", p))
		}
	}
	for name, sel := range map[string]string{"pools.gpu": c.Pools.GPU, "pools.canary": c.Pools.Canary, "pools.knownGood": c.Pools.KnownGood} {
		if _, err := labels.Parse(sel); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: not a label selector: %v", name, sel, err))
		}
	}
	switch c.Queues.Mode {
	case QueuesOwn:
	case QueuesExisting:
		if c.Queues.LocalQueue == "" {
			errs = append(errs, errors.New("queues.mode is \"existing\" but queues.localQueue is empty; name the LocalQueue to submit to"))
		}
	default:
		errs = append(errs, fmt.Errorf("queues.mode %q: use %q or %q", c.Queues.Mode, QueuesOwn, QueuesExisting))
	}
	if c.DRA.KueueResourceName == "" {
		errs = append(errs, errors.New("dra.kueueResourceName: empty; set the resource name of Kueue's deviceClassMappings (default example.com/gpu)"))
	}
	if c.Image == "" {
		errs = append(errs, errors.New("image: empty; name the workload image"))
	}
	if _, err := timeouts.ForProfile(c.TimeoutProfile); err != nil {
		errs = append(errs, fmt.Errorf("timeoutProfile: %w", err))
	}
	for _, r := range c.Signoff.Require {
		kind, name, ok := strings.Cut(r, ":")
		if !ok || name == "" || (kind != "path" && kind != "scenario") {
			errs = append(errs, fmt.Errorf("signoff.require %q: want path:NAME or scenario:NAME", r))
		}
	}
	if c.ArtifactsDir == "" {
		errs = append(errs, errors.New("artifactsDir: empty"))
	}
	if c.Namespace != "" && c.Disruptive {
		errs = append(errs, fmt.Errorf("namespace %q with disruptive: disruptive specs change nodes, which team-namespace mode never does; drop one of them", c.Namespace))
	}
	check := func(key, v string, allowed ...string) {
		if !slices.Contains(allowed, v) {
			errs = append(errs, fmt.Errorf("%s %q: use one of %s", key, v, strings.Join(allowed, ", ")))
		}
	}
	check("faults.nodeProvider", c.Faults.NodeProvider, FaultProviderAuto, FaultProviderLocal, FaultProviderCommand, FaultProviderKubeletStop, FaultProviderNone)
	check("faults.deviceProvider", c.Faults.DeviceProvider, FaultProviderAuto, FaultProviderLocal, FaultProviderCommand, FaultProviderNone)
	check("faults.draDeviceProvider", c.Faults.DRADeviceProvider, FaultProviderAuto, FaultProviderTaintRule, FaultProviderLocal, FaultProviderCommand, FaultProviderNone)
	if c.Faults.Command == "" && (c.Faults.NodeProvider == FaultProviderCommand || c.Faults.DeviceProvider == FaultProviderCommand || c.Faults.DRADeviceProvider == FaultProviderCommand) {
		errs = append(errs, errors.New("faults: the command provider is chosen but faults.command (--fault-command) is empty; name the script"))
	}
	if c.Faults.KubeletStopFor.Duration < 30*time.Second {
		errs = append(errs, fmt.Errorf("faults.kubeletStopFor %s: at least 30s (the node must be seen NotReady)", c.Faults.KubeletStopFor.Duration))
	}
	if c.Faults.EvictionToleration.Duration < 0 {
		errs = append(errs, fmt.Errorf("faults.evictionToleration %s: negative", c.Faults.EvictionToleration.Duration))
	}
	if c.Checkpoints.StorageClass != "" && c.Checkpoints.HostPath != "" {
		errs = append(errs, errors.New("checkpoints: storageClass and hostPath are both set; pick one"))
	}
	if c.Checkpoints.HostPath != "" && !strings.HasPrefix(c.Checkpoints.HostPath, "/") {
		errs = append(errs, fmt.Errorf("checkpoints.hostPath %q: an absolute path on the nodes", c.Checkpoints.HostPath))
	}
	if (c.Preemption.LowPriorityClass == "") != (c.Preemption.HighPriorityClass == "") {
		errs = append(errs, errors.New("preemption: name both lowPriorityClass and highPriorityClass (--low-priority-class, --high-priority-class), or neither"))
	}
	if c.KeepResources && c.CleanupLeftovers {
		// Not contradictory strictly, but almost always a mistake worth saying out loud.
		errs = append(errs, errors.New("keepResources and cleanupLeftovers are both set: this run would keep what the next one must delete; pick one"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid gpuconform configuration:\n  - %w", joinIndented(errs))
	}
	return nil
}

func joinIndented(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "\n  - "))
}

func dnsLabel(s string) bool {
	for i, r := range s {
		ok := (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || (r == '-' && i > 0 && i < len(s)-1)
		if !ok {
			return false
		}
	}
	return true
}

// LoadFile reads a YAML config file over base. Unknown keys are an error, so a misspelt key is never
// silently ignored.
func LoadFile(path string, base Config) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return base, fmt.Errorf("reading config file: %w", err)
	}
	cfg := base
	cfg.Pools.explicit = nil
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return base, fmt.Errorf("config file %s: %w", path, err)
	}
	// Which pools did the file set? Decode again into a bare struct to see what was present.
	var present struct {
		Pools map[string]string `json:"pools"`
	}
	_ = yaml.Unmarshal(data, &present)
	cfg.Pools.explicit = map[string]bool{}
	for k, v := range base.Pools.explicit {
		cfg.Pools.explicit[k] = v
	}
	for k := range present.Pools {
		cfg.Pools.explicit[k] = true
	}
	return cfg, nil
}

// Flags binds the suite's flags to a FlagSet and builds the Config after parsing.
type Flags struct {
	// Resolve makes a relative --config path absolute; nil leaves it to the current directory.
	Resolve    func(string) string
	fs         *flag.FlagSet
	shared     []string
	configFile string
	set        []setting
}

type setting struct {
	name  string
	value string
}

type flagDef struct {
	name, usage string
	isBool      bool
	apply       func(c *Config, v string) error
}

var flagDefs = []flagDef{
	{name: "kubeconfig", usage: "kubeconfig file (default $KUBECONFIG or ~/.kube/config)", apply: func(c *Config, v string) error { c.Kubeconfig = v; return nil }},
	{name: "context", usage: "kubeconfig context (default: the current context)", apply: func(c *Config, v string) error { c.Context = v; return nil }},
	{name: "namespace-prefix", usage: "prefix of every namespace the suite creates", apply: func(c *Config, v string) error { c.NamespacePrefix = v; return nil }},
	{name: "allocation-paths", usage: "auto, or a comma-separated subset of device-plugin,dra", apply: func(c *Config, v string) error { c.AllocationPaths = splitList(v); return nil }},
	{name: "device-plugin-resource", usage: "extended resource of the device-plugin path (default: discovered, preferring nvidia.com/gpu)", apply: func(c *Config, v string) error { c.DevicePlugin.ResourceName = v; return nil }},
	{name: "dra-device-class", usage: "DeviceClass of the DRA path (default: one whose driver publishes ResourceSlices)", apply: func(c *Config, v string) error { c.DRA.DeviceClass = v; return nil }},
	{name: "dra-kueue-resource", usage: "resource name Kueue accounts DRA devices as", apply: func(c *Config, v string) error { c.DRA.KueueResourceName = v; return nil }},
	{name: "gpu-pool", usage: "label selector of the GPU pool", apply: func(c *Config, v string) error { c.Pools.GPU = v; c.Pools.markExplicit("gpu"); return nil }},
	{name: "canary-pool", usage: "label selector of the canary pool", apply: func(c *Config, v string) error { c.Pools.Canary = v; c.Pools.markExplicit("canary"); return nil }},
	{name: "known-good-pool", usage: "label selector of the known-good pool", apply: func(c *Config, v string) error { c.Pools.KnownGood = v; c.Pools.markExplicit("knownGood"); return nil }},
	{name: "queues", usage: "own (create queues per spec) or existing", apply: func(c *Config, v string) error { c.Queues.Mode = v; return nil }},
	{name: "local-queue", usage: "existing LocalQueue to submit to (implies --queues=existing)", apply: func(c *Config, v string) error {
		c.Queues.LocalQueue = v
		if v != "" {
			c.Queues.Mode = QueuesExisting
		}
		return nil
	}},
	{name: "kueue-namespace", usage: "namespace of the Kueue installation", apply: func(c *Config, v string) error { c.Kueue.Namespace = v; return nil }},
	{name: "disruptive", usage: "opt in to specs that change nodes", isBool: true, apply: boolSetter(func(c *Config, b bool) { c.Disruptive = b })},
	{name: "image", usage: "workload image (with --in-cluster: the runner image; name the workload image --workload-image)", apply: func(c *Config, v string) error { c.Image = v; return nil }},
	{name: "workload-image", usage: "workload image (the same as --image, and the only name for it with --in-cluster)", apply: func(c *Config, v string) error { c.Image = v; return nil }},
	{name: "namespace", usage: "run every spec in this existing namespace (team-namespace mode: no namespace or cluster-scoped object is created)", apply: func(c *Config, v string) error { c.Namespace = v; return nil }},
	{name: "helper-namespace", usage: "namespace where the hostPath podresources helper may run (one your admission policies exempt); default: the spec's namespace", apply: func(c *Config, v string) error { c.HelperNamespace = v; return nil }},
	{name: "dedication-taint", usage: "taint key that reserves GPU nodes; test pods tolerate it wherever it is in the GPU pool; repeatable", apply: func(c *Config, v string) error {
		c.DedicationTaints = append(c.DedicationTaints, v)
		return nil
	}},
	{name: "auto-tolerate", usage: "tolerate the GPU pool's dedication taints automatically (default true)", isBool: true, apply: boolSetter(func(c *Config, b bool) { c.AutoTolerateDedicationTaints = &b })},
	{name: "timeout-profile", usage: "auto (default: local on a kind cluster, real otherwise), local or real", apply: func(c *Config, v string) error { c.TimeoutProfile = v; return nil }},
	{name: "timeout", usage: "bound on the whole run, e.g. 2h (default: the later of Ginkgo's --timeout and 90m)", apply: func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q: want a positive duration such as 2h", v)
		}
		c.RunTimeout = metav1.Duration{Duration: d}
		return nil
	}},
	{name: "artifacts", usage: "artifacts directory (default $ARTIFACTS or _artifacts)", apply: func(c *Config, v string) error { c.ArtifactsDir = v; return nil }},
	{name: "keep-resources", usage: "keep every created object (debugging)", isBool: true, apply: boolSetter(func(c *Config, b bool) { c.KeepResources = b })},
	{name: "cleanup-leftovers", usage: "delete an earlier run's leftovers at start instead of refusing to run", isBool: true, apply: boolSetter(func(c *Config, b bool) { c.CleanupLeftovers = b })},
	{name: "require", usage: "comma-separated labels that must each have a passed spec (path:NAME, scenario:NAME); default: every implemented scenario", apply: func(c *Config, v string) error {
		c.Signoff.Require = splitList(v)
		return nil
	}},
	{name: "allow-incomplete", usage: "sign off GO although something required was not exercised", isBool: true, apply: boolSetter(func(c *Config, b bool) { c.Signoff.AllowIncomplete = b })},
	{name: "baseline", usage: "gpuconform-record.json of an earlier run: what passed there and fails or is missing now is NO-GO", apply: func(c *Config, v string) error { c.Signoff.Baseline = v; return nil }},
	{name: "fault-provider", usage: "how GPU nodes are stopped: auto, local, command, kubelet-stop or none", apply: func(c *Config, v string) error { c.Faults.NodeProvider = v; return nil }},
	{name: "device-fault-provider", usage: "how a device turns unhealthy on the device-plugin path: auto, local, command or none", apply: func(c *Config, v string) error { c.Faults.DeviceProvider = v; return nil }},
	{name: "dra-device-fault-provider", usage: "how a device turns unhealthy on the DRA path: auto, device-taint-rule, local, command or none", apply: func(c *Config, v string) error { c.Faults.DRADeviceProvider = v; return nil }},
	{name: "fault-command", usage: "script of the command fault provider, called as SCRIPT ACTION NODE [DEVICE] (implies --fault-provider=command and --device-fault-provider=command unless set)", apply: func(c *Config, v string) error { c.Faults.Command = v; return nil }},
	{name: "kubelet-stop-for", usage: "how long the kubelet-stop provider keeps a kubelet stopped (default 2m)", apply: durationSetter(func(c *Config, d time.Duration) { c.Faults.KubeletStopFor.Duration = d })},
	{name: "eviction-toleration", usage: "tolerationSeconds of the failure scenario's pods for the not-ready/unreachable taints (default 10s)", apply: durationSetter(func(c *Config, d time.Duration) { c.Faults.EvictionToleration.Duration = d })},
	{name: "checkpoint-storage-class", usage: "StorageClass of ReadWriteMany volumes for checkpoints that outlive a node", apply: func(c *Config, v string) error { c.Checkpoints.StorageClass = v; return nil }},
	{name: "checkpoint-host-path", usage: "directory every GPU node mounts from shared storage, for checkpoints that outlive a node", apply: func(c *Config, v string) error { c.Checkpoints.HostPath = v; return nil }},
	{name: "upgrade-to", usage: "driver version the upgrade rehearsal moves the canary pool to (local cluster default 560.35.03)", apply: func(c *Config, v string) error { c.Upgrade.To = v; return nil }},
	{name: "upgrade-command", usage: "upgrade script, called as SCRIPT upgrade|rollback VERSION NODE...", apply: func(c *Config, v string) error { c.Upgrade.Command = v; return nil }},
	{name: "driver-version-label", usage: "node label reporting the driver version (default nvidia.com/cuda.driver-version.full)", apply: func(c *Config, v string) error { c.Upgrade.VersionLabel = v; return nil }},
	{name: "low-priority-class", usage: "existing WorkloadPriorityClass of the preemptible training job (with --local-queue)", apply: func(c *Config, v string) error { c.Preemption.LowPriorityClass = v; return nil }},
	{name: "high-priority-class", usage: "existing WorkloadPriorityClass of the urgent job that preempts it (with --local-queue)", apply: func(c *Config, v string) error { c.Preemption.HighPriorityClass = v; return nil }},
	{name: "toleration", usage: "toleration for test pods, key[=value]:Effect or key:Effect (Exists); repeatable", apply: func(c *Config, v string) error {
		t, err := ParseToleration(v)
		if err != nil {
			return err
		}
		c.Tolerations = append(c.Tolerations, t)
		return nil
	}},
}

func (p *PoolsConfig) markExplicit(pool string) {
	if p.explicit == nil {
		p.explicit = map[string]bool{}
	}
	p.explicit[pool] = true
}

func boolSetter(set func(*Config, bool)) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("not a boolean: %q", v)
		}
		set(c, b)
		return nil
	}
}

func durationSetter(set func(*Config, time.Duration)) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("not a duration: %q", v)
		}
		set(c, d)
		return nil
	}
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Resolve makes p absolute against the first of bases where it exists, else the last (a file to create).
func Resolve(p string, bases []string) string {
	if p == "" || filepath.IsAbs(p) || len(bases) == 0 {
		return p
	}
	for _, b := range bases {
		if _, err := os.Stat(filepath.Join(b, p)); err == nil {
			return filepath.Join(b, p)
		}
	}
	return filepath.Join(bases[len(bases)-1], p)
}

// ResolvePaths makes the configuration's file paths absolute with Resolve: the kubeconfig, the artifacts
// directory, the baseline, and the fault and upgrade scripts when they name a directory (a bare name is
// looked up on PATH).
func (c Config) ResolvePaths(bases []string) Config {
	abs := func(p *string) { *p = Resolve(*p, bases) }
	abs(&c.Kubeconfig)
	abs(&c.ArtifactsDir)
	abs(&c.Signoff.Baseline)
	for _, script := range []*string{&c.Faults.Command, &c.Upgrade.Command} {
		if strings.Contains(*script, "/") {
			abs(script)
		}
	}
	return c
}

// ParseToleration parses "key[=value]:Effect"; without a value the operator is Exists.
func ParseToleration(s string) (corev1.Toleration, error) {
	kv, effect, ok := strings.Cut(s, ":")
	if !ok || kv == "" {
		return corev1.Toleration{}, fmt.Errorf("toleration %q: want key[=value]:Effect, e.g. nvidia.com/gpu:NoSchedule", s)
	}
	switch corev1.TaintEffect(effect) {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute, "":
	default:
		return corev1.Toleration{}, fmt.Errorf("toleration %q: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", s, effect)
	}
	t := corev1.Toleration{Effect: corev1.TaintEffect(effect)}
	if k, v, hasValue := strings.Cut(kv, "="); hasValue {
		t.Key, t.Value, t.Operator = k, v, corev1.TolerationOpEqual
	} else {
		t.Key, t.Operator = kv, corev1.TolerationOpExists
	}
	return t, nil
}

// RegisterFlags adds the suite's flags to fs. Call Config after fs is parsed. A flag another package
// already defined on fs (controller-runtime's config package defines --kubeconfig on the command line's
// FlagSet in its init, and e2e-framework's klient imports it) is shared: Config reads its value.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	if fs.Lookup("config") == nil {
		fs.StringVar(&f.configFile, "config", "", "YAML configuration file; flags override its values")
	} else {
		f.shared = append(f.shared, "config")
	}
	for _, d := range flagDefs {
		if fs.Lookup(d.name) != nil {
			f.shared = append(f.shared, d.name)
			continue
		}
		record := func(v string) error {
			f.set = append(f.set, setting{name: d.name, value: v})
			return nil
		}
		if d.isBool {
			fs.BoolFunc(d.name, d.usage, record)
		} else {
			fs.Func(d.name, d.usage, record)
		}
	}
	return f
}

// sharedSettings are the values given to the flags shared with another package.
func (f *Flags) sharedSettings() []setting {
	var out []setting
	if f.fs == nil {
		return nil
	}
	f.fs.Visit(func(fl *flag.Flag) {
		if slices.Contains(f.shared, fl.Name) {
			if fl.Name == "config" {
				f.configFile = fl.Value.String()
				return
			}
			out = append(out, setting{name: fl.Name, value: fl.Value.String()})
		}
	})
	return out
}

// Config returns the configuration: defaults, then the --config file, then the flags in the order
// given, then validation.
func (f *Flags) Config() (Config, error) {
	cfg := Default()
	set := append(f.sharedSettings(), f.set...)
	if f.configFile != "" {
		file := f.configFile
		if f.Resolve != nil {
			file = f.Resolve(file)
		}
		var err error
		if cfg, err = LoadFile(file, cfg); err != nil {
			return cfg, err
		}
	}
	for _, s := range set {
		for _, d := range flagDefs {
			if d.name == s.name {
				if err := d.apply(&cfg, s.value); err != nil {
					return cfg, fmt.Errorf("flag --%s: %w", s.name, err)
				}
			}
		}
	}
	return cfg, cfg.Validate()
}

// Parse is a convenience for tools and tests: a fresh FlagSet, args parsed, the Config built. An
// unknown flag is an error that lists the flags this suite accepts.
func Parse(args []string) (Config, error) {
	fs := flag.NewFlagSet("gpuconform", flag.ContinueOnError)
	fs.SetOutput(discard{})
	f := RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		var names []string
		fs.VisitAll(func(fl *flag.Flag) { names = append(names, "--"+fl.Name) })
		return Config{}, fmt.Errorf("%w (gpuconform flags: %s)", err, strings.Join(names, " "))
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q: gpuconform takes only flags", fs.Arg(0))
	}
	return f.Config()
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
