package config

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Flags binds the suite's flags to a FlagSet and builds the Config after parsing.
type Flags struct {
	// Resolve makes a relative file name absolute: the --config file's, and the configuration's files
	// (see ResolvePaths) before Validate looks for the scripts. Nil leaves them to the current directory.
	Resolve    func(string) string
	fs         *flag.FlagSet
	shared     []string
	configFile string
	set        []setting
}

// setting is one suite flag as given on the command line.
type setting struct {
	name  string
	value string
}

// flagDef is one row of the flag table: a flag and what its value sets in the Config.
type flagDef struct {
	name, usage string
	isBool      bool
	apply       func(c *Config, v string) error
}

// flagTable is the suite's flags (--config aside), in the order --help lists them.
func flagTable() []flagDef {
	return []flagDef{
		{name: "kubeconfig", usage: "kubeconfig file (default $KUBECONFIG or ~/.kube/config)", apply: func(c *Config, v string) error { c.Kubeconfig = v; return nil }},
		{name: "context", usage: "kubeconfig context (default: the current context)", apply: func(c *Config, v string) error { c.Context = v; return nil }},
		{name: "namespace-prefix", usage: "prefix of every namespace the suite creates", apply: func(c *Config, v string) error { c.NamespacePrefix = v; return nil }},
		{name: "allocation-paths", usage: "auto, or a comma-separated subset of device-plugin,dra,extended-resource-dra", apply: func(c *Config, v string) error { c.AllocationPaths = splitList(v); return nil }},
		{name: "device-plugin-resource", usage: "extended resource of the device-plugin path (default: discovered, preferring nvidia.com/gpu)", apply: func(c *Config, v string) error { c.DevicePlugin.ResourceName = v; return nil }},
		{name: "dra-device-class", usage: "DeviceClass of the DRA path (default: one whose driver publishes ResourceSlices)", apply: func(c *Config, v string) error { c.DRA.DeviceClass = v; return nil }},
		{name: "dra-kueue-resource", usage: "resource name Kueue accounts DRA devices as", apply: func(c *Config, v string) error { c.DRA.KueueResourceName = v; return nil }},
		{name: "gpu-pool", usage: "label selector of the GPU pool", apply: func(c *Config, v string) error { c.Pools.GPU = v; c.Pools.markExplicit("gpu"); return nil }},
		{name: "canary-pool", usage: "label selector of the canary pool", apply: func(c *Config, v string) error { c.Pools.Canary = v; c.Pools.markExplicit("canary"); return nil }},
		{name: "known-good-pool", usage: "label selector of the known-good pool", apply: func(c *Config, v string) error { c.Pools.KnownGood = v; c.Pools.markExplicit("knownGood"); return nil }},
		{name: "autoscaling-pool", usage: "label selector of a node group the cluster autoscaler grows for a pending GPU pod and shrinks once idle (the cluster autoscaling scenario; default: none, and that scenario does not run)", apply: func(c *Config, v string) error { c.Pools.Autoscaling = v; return nil }},
		{name: "autoscaling-toleration", usage: "toleration for the cluster autoscaling scenario's pod only, key[=value]:Effect or key:Effect (Exists), for the autoscaled pool's taints; repeatable", apply: func(c *Config, v string) error {
			t, err := ParseToleration(v)
			if err != nil {
				return err
			}
			c.Pools.AutoscalingTolerations = append(c.Pools.AutoscalingTolerations, t)
			return nil
		}},
		{name: "gateway-class", usage: "GatewayClass of the inference gateway scenario's Gateway (default: the one GatewayClass a controller accepted)", apply: func(c *Config, v string) error { c.Gateway.Class = v; return nil }},
		{name: "queues", usage: "own (create queues per spec) or existing", apply: func(c *Config, v string) error { c.Queues.Mode = v; return nil }},
		{name: "local-queue", usage: "existing LocalQueue to submit to, NS/NAME (implies --namespace NS) or NAME with --namespace; implies --queues=existing", apply: func(c *Config, v string) error {
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
		{name: "cleanup-leftovers", usage: "delete what dead runs left (runs whose lease expired) at start instead of refusing to run; a live run's objects are never touched", isBool: true, apply: boolSetter(func(c *Config, b bool) { c.CleanupLeftovers = b })},
		{name: "wait-for-other-runs", usage: "how long to wait for live gpuconform runs on the cluster that hold the paths, nodes or canary this run needs (default 30m); past it the run is INCOMPLETE naming them", apply: func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return fmt.Errorf("%q: want a duration such as 20m (0s: do not wait)", v)
			}
			c.WaitForOtherRuns = &metav1.Duration{Duration: d}
			return nil
		}},
		{name: "run-lease-namespace", usage: "namespace of the Lease through which runs on one cluster see each other (default: --namespace in team mode, else default)", apply: func(c *Config, v string) error { c.RunLeaseNamespace = v; return nil }},
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
		{name: "upgrade-command", usage: "upgrade script, called as SCRIPT upgrade|rollback VERSION NODE... (examples: fixtures/upgrade)", apply: func(c *Config, v string) error { c.Upgrade.Command = v; return nil }},
		{name: "dra-upgrade-to", usage: "version the DRA driver's rolling-upgrade rehearsal moves the canary pool's DRA kubelet plugin to (local cluster default v2)", apply: func(c *Config, v string) error { c.DRAUpgrade.To = v; return nil }},
		{name: "dra-upgrade-command", usage: "script that rolls the DRA driver's kubelet plugin, called as SCRIPT upgrade|rollback VERSION NODE... (example: fixtures/upgrade/local-fake-dra.sh)", apply: func(c *Config, v string) error { c.DRAUpgrade.Command = v; return nil }},
		{name: "keep-upgraded", usage: "leave the canary pool on the new driver when the upgrade rehearsal passes (default: roll it back)", isBool: true, apply: boolSetter(func(c *Config, b bool) { c.Upgrade.KeepUpgraded = b })},
		{name: "upgrade-load-image", usage: "image of the rehearsal's representative load, compared on the upgraded canary and the known-good pool (default: the workload image's training loop); it prints JSON lines with a numeric \"step\"", apply: func(c *Config, v string) error { c.Upgrade.Load.Image = v; return nil }},
		{name: "upgrade-load-command", usage: "command of the representative load, split on spaces (default: the image's entrypoint; the training loop for the workload image)", apply: func(c *Config, v string) error { c.Upgrade.Load.Command = strings.Fields(v); return nil }},
		{name: "upgrade-load-duration", usage: "how long the representative load runs on each pool (default 30s local, 2m real)", apply: durationSetter(func(c *Config, d time.Duration) { c.Upgrade.Load.Duration.Duration = d })},
		{name: "upgrade-load-min-ratio", usage: "lowest canary/known-good progress-rate ratio of the representative load that passes (default 0.8)", apply: func(c *Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("not a number: %q", v)
			}
			c.Upgrade.Load.MinRatio = f
			return nil
		}},
		{name: "upgrade-serving-replicas", usage: "replicas (one device each) of the serving Deployment the drain of the canary pool must keep serving (default 2; 0: none)", apply: intPtrSetter(func(c *Config, n *int) { c.Upgrade.Serving.Replicas = n })},
		{name: "upgrade-serving-min-available", usage: "minAvailable of the serving Deployment's PodDisruptionBudget (default replicas-1)", apply: intPtrSetter(func(c *Config, n *int) { c.Upgrade.Serving.MinAvailable = n })},
		{name: "pre-upgrade", usage: "this run is a pre-upgrade signoff: without a passed upgrade rehearsal (--disruptive, a canary pool, a provider) it is INCOMPLETE", isBool: true, apply: boolSetter(func(c *Config, b bool) { c.Signoff.PreUpgrade = b })},
		{name: "driver-version-label", usage: "node label reporting the driver version (default nvidia.com/cuda.driver-version.full)", apply: func(c *Config, v string) error { c.Upgrade.VersionLabel = v; return nil }},
		{name: "low-priority-class", usage: "existing WorkloadPriorityClass of the preemptible training job (with --local-queue)", apply: func(c *Config, v string) error { c.Preemption.LowPriorityClass = v; return nil }},
		{name: "high-priority-class", usage: "existing WorkloadPriorityClass of the urgent job that preempts it (with --local-queue)", apply: func(c *Config, v string) error { c.Preemption.HighPriorityClass = v; return nil }},
		{name: "noisy-neighbour-image", usage: "workload image that drives the GPU, for the noisy-neighbours scenario's latency measurement (its role in $" + NoisyNeighbourRoleEnv + "); default: the workload image's gpu-workload noisy", apply: func(c *Config, v string) error { c.NoisyNeighbour.Image = v; return nil }},
		{name: "noisy-neighbour-max-p99", usage: "highest p99 latency of the noisy-neighbour probe beside a neighbour that passes (default 100ms)", apply: durationSetter(func(c *Config, d time.Duration) { c.NoisyNeighbour.MaxP99.Duration = d })},
		{name: "noisy-neighbour-command", usage: "command of the noisy-neighbour image, split on spaces (default: the image's entrypoint)", apply: func(c *Config, v string) error { c.NoisyNeighbour.Command = strings.Fields(v); return nil }},
		{name: "device-test-image", usage: "image of the GPU vendor's device test the allocation scenario runs with one device per path, e.g. nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0; it passes by exiting 0 (default: the workload image's gpu-workload device-test)", apply: func(c *Config, v string) error { c.DeviceTest.Image = v; return nil }},
		{name: "device-test-command", usage: "command of the device test image, split on white space (default: the image's entrypoint); needs --device-test-image", apply: func(c *Config, v string) error { c.DeviceTest.Command = strings.Fields(v); return nil }},
		{name: "profile", usage: "signoff (default: every scenario), or ai-conformance[-1.NN]: only the specs that prove a Kubernetes AI Conformance requirement, with evidence pages and PRODUCT.yaml (the checklist filled in)", apply: func(c *Config, v string) error { c.Profile = v; return nil }},
		{name: "product-metadata", usage: "YAML file of the AI Conformance submission's metadata in the program's keys (platformName, platformVersion, vendorName, websiteUrl, repoUrl, documentationUrl, productLogoUrl, description, contactEmailAddress, k8sConformanceUrl), written into PRODUCT.yaml", apply: func(c *Config, v string) error {
			m, err := LoadProductMetadata(v)
			c.Product = m
			return err
		}},
		{name: "monitoring", usage: "the monitoring system asked whether it collects a workload's metrics: auto (the accelerator metrics' Prometheus, else a Service labelled as a Prometheus server), none, service:NAMESPACE/NAME[:PORT] or prometheus:URL", apply: func(c *Config, v string) error { c.Monitoring = v; return nil }},
		{name: "hpa-metric", usage: "pods metric of the custom metrics API an HPA scales the pod autoscaling scenario's GPU Deployment on (default " + DefaultHPAMetric + ": the rate of the workload's request counter under prometheus-adapter's X_total → X_per_second rule)", apply: func(c *Config, v string) error { c.HPAMetric = v; return nil }},
		{name: "accelerator-metrics", usage: "where per-device metrics are read: auto (a Service labelled as the DCGM exporter), none, service:NAMESPACE/NAME[:PORT] or prometheus:URL", apply: func(c *Config, v string) error { c.AcceleratorMetrics = v; return nil }},
		{name: "pod-cpu", usage: "CPU every container the suite runs requests and is limited to, a quantity (default 100m)", apply: func(c *Config, v string) error { c.PodResources.CPU = v; return nil }},
		{name: "pod-memory", usage: "memory every container the suite runs requests and is limited to, a quantity (default 128Mi)", apply: func(c *Config, v string) error { c.PodResources.Memory = v; return nil }},
		{name: "toleration", usage: "toleration for test pods, key[=value]:Effect or key:Effect (Exists); repeatable", apply: func(c *Config, v string) error {
			t, err := ParseToleration(v)
			if err != nil {
				return err
			}
			c.Tolerations = append(c.Tolerations, t)
			return nil
		}},
	}
}

// boolSetter parses a boolean flag's value for set.
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

// durationSetter parses a duration flag's value for set.
func intPtrSetter(set func(*Config, *int)) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("not an integer: %q", v)
		}
		set(c, &n)
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

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(v string) []string {
	var out []string
	for p := range strings.SplitSeq(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
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
	for _, d := range flagTable() {
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
// given, then what they imply (see Config's LocalQueue), then validation. Every error is a *UsageError.
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
			return cfg, usageError(err)
		}
	}
	defs := map[string]flagDef{}
	for _, d := range flagTable() {
		defs[d.name] = d
	}
	for _, s := range set {
		if d, ok := defs[s.name]; ok {
			if err := d.apply(&cfg, s.value); err != nil {
				return cfg, usageError(fmt.Errorf("flag --%s: %w", s.name, err))
			}
		}
	}
	cfg = cfg.withImplied()
	if f.Resolve != nil {
		cfg = cfg.resolveFiles(f.Resolve)
	}
	return cfg, cfg.Validate()
}

// Parse is a convenience for tools and tests: a fresh FlagSet, args parsed, the Config built. Every error
// is a *UsageError; an unknown flag's lists the flags this suite accepts.
func Parse(args []string) (Config, error) {
	fs := flag.NewFlagSet("gpuconform", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		var names []string
		fs.VisitAll(func(fl *flag.Flag) { names = append(names, "--"+fl.Name) })
		return Config{}, usageError(fmt.Errorf("%w (gpuconform flags: %s)", err, strings.Join(names, " ")))
	}
	if fs.NArg() > 0 {
		return Config{}, usageError(fmt.Errorf("unexpected argument %q: gpuconform takes only flags", fs.Arg(0)))
	}
	return f.Config()
}

// CommandLine is the suite's flag table on flag.CommandLine, registered once: the suite registers it
// before the command line is parsed (`go test`, `ginkgo run`, the binary's processes), and reads it after.
var CommandLine = sync.OnceValue(func() *Flags { return RegisterFlags(flag.CommandLine) })
