package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestValidationErrorsAreSpecific(t *testing.T) {
	cases := map[string]struct {
		args []string
		want []string
	}{
		"unknown path":        {[]string{"--allocation-paths", "mig"}, []string{`unknown path "mig"`}},
		"auto mixed":          {[]string{"--allocation-paths", "auto,dra"}, []string{"cannot be combined"}},
		"bad selector":        {[]string{"--gpu-pool", "a=b=c"}, []string{"pools.gpu", "not a label selector"}},
		"existing without lq": {[]string{"--queues", "existing"}, []string{"queues.localQueue is empty"}},
		"bad profile":         {[]string{"--timeout-profile", "fast"}, []string{`unknown timeout profile "fast"`}},
		"bad prefix":          {[]string{"--namespace-prefix", "Bad_Prefix"}, []string{"namespacePrefix"}},
		"two errors at once":  {[]string{"--queues", "x", "--image", ""}, []string{"queues.mode", "image: empty"}},
		"bad toleration":      {[]string{"--toleration", "nocolon"}, []string{"want key[=value]:Effect"}},
		"bad bool":            {[]string{"--disruptive=maybe"}, []string{"disruptive"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.args)
			if err == nil {
				t.Fatal("expected an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// executable writes an executable script named name in a temporary directory and returns its path.
func executable(t *testing.T, name string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return file
}

// Every rule of the table has a configuration it refuses and one it accepts. The accepted one passes the
// whole table, and the refused one's Validate error is a *UsageError carrying the rule's message.
func TestRules(t *testing.T) {
	script := executable(t, "faults.sh")
	notExecutable := filepath.Join(t.TempDir(), "upgrade.sh")
	if err := os.WriteFile(notExecutable, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	existingQueue := func(c *Config) {
		c.Queues = QueuesConfig{Mode: QueuesExisting, LocalQueue: "gpus"}
		c.Namespace = "team-a"
	}
	type edit func(*Config)
	cases := map[string]struct{ fail, pass edit }{
		"namespace":       {func(c *Config) { c.Namespace = "Team_A" }, func(c *Config) { c.Namespace = "team-a" }},
		"helperNamespace": {func(c *Config) { c.HelperNamespace = "gpu helpers" }, func(c *Config) { c.HelperNamespace = "gpu-helpers" }},
		"keep-upgraded-needs-disruptive": {func(c *Config) { c.Upgrade.KeepUpgraded = true },
			func(c *Config) { c.Upgrade.KeepUpgraded, c.Disruptive = true, true }},
		"upgrade-load-min-ratio": {func(c *Config) { c.Upgrade.Load.MinRatio = 80 }, func(c *Config) { c.Upgrade.Load.MinRatio = 0.8 }},
		"upgrade-load-duration":  {func(c *Config) { c.Upgrade.Load.Duration.Duration = time.Second }, func(c *Config) { c.Upgrade.Load.Duration.Duration = time.Minute }},
		"upgrade-serving": {func(c *Config) { c.Upgrade.Serving.Replicas, c.Upgrade.Serving.MinAvailable = ptr.To(1), ptr.To(2) },
			func(c *Config) { c.Upgrade.Serving.Replicas, c.Upgrade.Serving.MinAvailable = ptr.To(2), ptr.To(2) }},
		"namespace-prefix": {func(c *Config) { c.NamespacePrefix = strings.Repeat("a", 41) },
			func(c *Config) { c.NamespacePrefix = strings.Repeat("a", 40) }},
		"dedication-taints": {func(c *Config) { c.DedicationTaints = []string{"nvidia.com/gpu=present:NoSchedule"} },
			func(c *Config) { c.DedicationTaints = []string{"nvidia.com/gpu", "dedicated"} }},
		"allocation-paths-empty": {func(c *Config) { c.AllocationPaths = nil }, func(c *Config) { c.AllocationPaths = []string{PathDRA} }},
		"allocation-paths-auto-alone": {func(c *Config) { c.AllocationPaths = []string{PathAuto, PathDRA} },
			func(c *Config) { c.AllocationPaths = []string{PathDevicePlugin, PathDRA} }},
		"allocation-paths-known":          {func(c *Config) { c.AllocationPaths = []string{"mig"} }, func(c *Config) { c.AllocationPaths = []string{PathDevicePlugin} }},
		"pools.gpu":                       {func(c *Config) { c.Pools.GPU = "a=b=c" }, func(c *Config) { c.Pools.GPU = "team=ml" }},
		"pools.canary":                    {func(c *Config) { c.Pools.Canary = "a=b=c" }, func(c *Config) { c.Pools.Canary = "pool in (canary)" }},
		"pools.knownGood":                 {func(c *Config) { c.Pools.KnownGood = "a=b=c" }, func(c *Config) { c.Pools.KnownGood = "" }},
		"pools.autoscaling":               {func(c *Config) { c.Pools.Autoscaling = "a=b=c" }, func(c *Config) { c.Pools.Autoscaling = "karpenter.sh/nodepool=gpu" }},
		"autoscaling-pool-not-everything": {func(c *Config) { c.Pools.Autoscaling = "  " }, func(c *Config) { c.Pools.Autoscaling = "" }},
		"autoscaling-tolerations-need-pool": {func(c *Config) {
			c.Pools.AutoscalingTolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}, func(c *Config) {
			c.Pools.Autoscaling = "karpenter.sh/nodepool=gpu"
			c.Pools.AutoscalingTolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}},
		"queues-mode":                      {func(c *Config) { c.Queues.Mode = "shared" }, existingQueue},
		"existing-queues-need-local-queue": {func(c *Config) { existingQueue(c); c.Queues.LocalQueue = "" }, existingQueue},
		"local-queue-needs-existing-mode":  {func(c *Config) { existingQueue(c); c.Queues.Mode = QueuesOwn }, existingQueue},
		"local-queue-name": {func(c *Config) { existingQueue(c); c.Queues.LocalQueue = "team-a/GPUs" },
			func(c *Config) { existingQueue(c); c.Queues.LocalQueue, c.Namespace = "team-a/gpus", "" }},
		"local-queue-namespace-agrees": {func(c *Config) { existingQueue(c); c.Queues.LocalQueue = "team-b/gpus" },
			func(c *Config) { existingQueue(c); c.Queues.LocalQueue = "team-a/gpus" }},
		"local-queue-needs-namespace": {func(c *Config) { existingQueue(c); c.Namespace = "" }, existingQueue},
		"noisy-neighbour-command-needs-image": {func(c *Config) { c.NoisyNeighbour.Command = []string{"/bench"} },
			func(c *Config) {
				c.NoisyNeighbour = NoisyNeighbourConfig{Image: "example.com/bench:1", Command: []string{"/bench"}}
			}},
		"priority-classes-paired": {func(c *Config) { existingQueue(c); c.Preemption.LowPriorityClass = "low" },
			func(c *Config) {
				existingQueue(c)
				c.Preemption = PreemptionConfig{LowPriorityClass: "low", HighPriorityClass: "high"}
			}},
		"priority-classes-differ": {func(c *Config) {
			existingQueue(c)
			c.Preemption = PreemptionConfig{LowPriorityClass: "p", HighPriorityClass: "p"}
		},
			func(c *Config) {
				existingQueue(c)
				c.Preemption = PreemptionConfig{LowPriorityClass: "low", HighPriorityClass: "high"}
			}},
		"priority-classes-need-local-queue": {func(c *Config) { c.Preemption = PreemptionConfig{LowPriorityClass: "low", HighPriorityClass: "high"} },
			func(c *Config) {
				existingQueue(c)
				c.Preemption = PreemptionConfig{LowPriorityClass: "low", HighPriorityClass: "high"}
			}},
		"device-test-command-needs-image": {func(c *Config) { c.DeviceTest.Command = []string{"/cuda-samples/vectorAdd"} },
			func(c *Config) {
				c.DeviceTest = DeviceTestConfig{Image: "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", Command: []string{"/cuda-samples/vectorAdd"}}
			}},
		"device-test-workload-image-needs-command": {func(c *Config) { c.DeviceTest.Image = c.Image },
			func(c *Config) {
				c.DeviceTest = DeviceTestConfig{Image: c.Image, Command: []string{"/usr/local/bin/gpu-workload", "device-test", "--nvidia-smi-timeout", "1m"}}
			}},
		"device-test-image": {func(c *Config) {
			c.DeviceTest.Image = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0 ./vectorAdd"
		},
			func(c *Config) { c.DeviceTest.Image = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0" }},
		"device-test-command-arguments": {func(c *Config) {
			c.DeviceTest = DeviceTestConfig{Image: "example.com/cuda-test:1", Command: []string{"/run-test", ""}}
		},
			func(c *Config) {
				c.DeviceTest = DeviceTestConfig{Image: "example.com/cuda-test:1", Command: []string{"/run-test", "--verbose"}}
			}},
		"dra-kueue-resource":  {func(c *Config) { c.DRA.KueueResourceName = "" }, func(c *Config) { c.DRA.KueueResourceName = "nvidia.com/gpu" }},
		"image":               {func(c *Config) { c.Image = "" }, func(c *Config) { c.Image = "registry.example/gpu-workload:1" }},
		"podResources.cpu":    {func(c *Config) { c.PodResources.CPU = "lots" }, func(c *Config) { c.PodResources.CPU = "250m" }},
		"podResources.memory": {func(c *Config) { c.PodResources.Memory = "0" }, func(c *Config) { c.PodResources.Memory = "1Gi" }},
		"timeout-profile":     {func(c *Config) { c.TimeoutProfile = "fast" }, func(c *Config) { c.TimeoutProfile = "local" }},
		"run-timeout":         {func(c *Config) { c.RunTimeout.Duration = -time.Minute }, func(c *Config) { c.RunTimeout.Duration = 2 * time.Hour }},
		"signoff-require": {func(c *Config) { c.Signoff.Require = []string{"path:dra", "dra"} },
			func(c *Config) {
				c.Signoff.Require = []string{"path:dra", "scenario:preemption", "conformance:gang_scheduling"}
			}},
		"artifacts-dir": {func(c *Config) { c.ArtifactsDir = "" }, func(c *Config) { c.ArtifactsDir = "/tmp/artifacts" }},
		"profile":       {func(c *Config) { c.Profile = "ai-conformance-1.20" }, func(c *Config) { c.Profile = "ai-conformance-1.36" }},
		"accelerator-metrics": {func(c *Config) { c.AcceleratorMetrics = "service:gpu-operator" },
			func(c *Config) { c.AcceleratorMetrics = "service:gpu-operator/nvidia-dcgm-exporter:9400" }},
		"monitoring": {func(c *Config) { c.Monitoring = "prometheus:monitoring:9090" },
			func(c *Config) { c.Monitoring = "service:monitoring/prometheus:9090" }},
		"hpa-metric": {func(c *Config) { c.HPAMetric = "pods/DCGM_FI_DEV_GPU_UTIL" },
			func(c *Config) { c.HPAMetric = "DCGM_FI_DEV_GPU_UTIL" }},
		"namespace-not-disruptive": {func(c *Config) { c.Namespace, c.Disruptive = "team-a", true },
			func(c *Config) { c.Disruptive = true }},
		"faults.nodeProvider":      {func(c *Config) { c.Faults.NodeProvider = "ssh" }, func(c *Config) { c.Faults.NodeProvider = FaultProviderKubeletStop }},
		"faults.deviceProvider":    {func(c *Config) { c.Faults.DeviceProvider = FaultProviderKubeletStop }, func(c *Config) { c.Faults.DeviceProvider = FaultProviderNone }},
		"faults.draDeviceProvider": {func(c *Config) { c.Faults.DRADeviceProvider = FaultProviderKubeletStop }, func(c *Config) { c.Faults.DRADeviceProvider = FaultProviderTaintRule }},
		"command-provider-needs-command": {func(c *Config) { c.Faults.DeviceProvider = FaultProviderCommand },
			func(c *Config) { c.Faults.DeviceProvider, c.Faults.Command = FaultProviderCommand, script }},
		"fault-command-used": {
			func(c *Config) {
				c.Faults = FaultsConfig{Command: script, NodeProvider: FaultProviderKubeletStop, DeviceProvider: FaultProviderLocal, DRADeviceProvider: FaultProviderTaintRule,
					KubeletStopFor: c.Faults.KubeletStopFor}
			},
			func(c *Config) {
				c.Faults = FaultsConfig{Command: script, NodeProvider: FaultProviderCommand, DeviceProvider: FaultProviderNone, DRADeviceProvider: FaultProviderNone,
					KubeletStopFor: c.Faults.KubeletStopFor}
			}},
		"fault-command-executable": {func(c *Config) { c.Faults.Command = filepath.Join(t.TempDir(), "absent.sh") }, func(c *Config) { c.Faults.Command = script }},
		"command-device-evicts-needs-command": {func(c *Config) { c.Faults.CommandDeviceEvicts = true },
			func(c *Config) { c.Faults.CommandDeviceEvicts, c.Faults.Command = true, script }},
		"kubelet-stop-for":    {func(c *Config) { c.Faults.KubeletStopFor.Duration = 5 * time.Second }, func(c *Config) { c.Faults.KubeletStopFor.Duration = 30 * time.Second }},
		"eviction-toleration": {func(c *Config) { c.Faults.EvictionToleration.Duration = -time.Second }, func(c *Config) { c.Faults.EvictionToleration.Duration = 0 }},
		"checkpoints-one-storage": {func(c *Config) { c.Checkpoints = CheckpointConfig{StorageClass: "efs", HostPath: "/mnt/nfs"} },
			func(c *Config) { c.Checkpoints = CheckpointConfig{StorageClass: "efs"} }},
		"checkpoints-host-path-absolute": {func(c *Config) { c.Checkpoints.HostPath = "mnt/nfs" }, func(c *Config) { c.Checkpoints.HostPath = "/mnt/nfs" }},
		"checkpoints-host-path-not-team": {func(c *Config) { c.Namespace, c.Checkpoints.HostPath = "team-a", "/mnt/nfs" },
			func(c *Config) { c.Namespace, c.Checkpoints.StorageClass = "team-a", "efs" }},
		"keep-or-cleanup":                {func(c *Config) { c.KeepResources, c.CleanupLeftovers = true, true }, func(c *Config) { c.KeepResources = true }},
		"upgrade-command-executable":     {func(c *Config) { c.Upgrade.Command = notExecutable }, func(c *Config) { c.Upgrade.Command = script }},
		"dra-upgrade-command-executable": {func(c *Config) { c.DRAUpgrade.Command = notExecutable }, func(c *Config) { c.DRAUpgrade.Command = script }},
	}
	seen := map[string]bool{}
	for _, r := range rules() {
		if seen[r.name] {
			t.Errorf("two rules are named %q", r.name)
		}
		seen[r.name] = true
		tc, ok := cases[r.name]
		if !ok {
			t.Errorf("rule %q has no test case", r.name)
			continue
		}
		t.Run(r.name, func(t *testing.T) {
			bad, good := Default(), Default()
			tc.fail(&bad)
			tc.pass(&good)
			if r.ok(bad) {
				t.Errorf("the failing case passes: %+v", bad)
			}
			var ue *UsageError
			if err := bad.Validate(); !errors.As(err, &ue) || !slices.Contains(ue.Problems, r.fix(bad)) {
				t.Errorf("Validate() = %v, want a *UsageError with %q", err, r.fix(bad))
			}
			if !r.ok(good) {
				t.Errorf("the passing case fails: %s", r.fix(good))
			}
			if err := good.Validate(); err != nil {
				t.Errorf("the passing case fails another rule: %v", err)
			}
		})
	}
	for name := range cases {
		if !seen[name] {
			t.Errorf("test case %q has no rule", name)
		}
	}
}

// Every way the flags or the file can be wrong is a *UsageError, so the caller can exit 2.
func TestErrorsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--kubecontext", "x"}, {"extra"}, {"--timeout", "soon"}, {"--config", "/does/not/exist.yaml"},
		{"--config", writeFile(t, "kubeconfg: /typo\n")}, {"--queues", "existing"},
	} {
		_, err := Parse(args)
		var ue *UsageError
		if !errors.As(err, &ue) || len(ue.Problems) == 0 {
			t.Errorf("%q: %v (%T), want a *UsageError", args, err, err)
		}
	}
	_, err := Parse([]string{"--config", "/does/not/exist.yaml"})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the file's error is lost: %v", err)
	}
}
