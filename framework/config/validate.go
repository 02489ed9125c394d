package config

import (
	"fmt"
	"os/exec"
	"path"
	"slices"
	"strings"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/timeouts"
)

// UsageError is a configuration the user must change before the suite may start: a flag, a key of the
// --config file, or a combination of them. Callers detect it with errors.As (var ue *config.UsageError)
// and exit 2, the usage code.
type UsageError struct {
	// Problems says what to change, one line each, naming the key or flag.
	Problems []string
	// Err is the underlying error, where there is one (an unreadable --config file, a flag's parse error).
	Err error
}

// Error lists the problems.
func (e *UsageError) Error() string {
	return "invalid gpuconform configuration:\n  - " + strings.Join(e.Problems, "\n  - ")
}

// Unwrap returns the underlying error.
func (e *UsageError) Unwrap() error { return e.Err }

// usageError wraps err, whose message says what to change.
func usageError(err error) *UsageError {
	return &UsageError{Problems: []string{err.Error()}, Err: err}
}

// rule is one row of the validation table.
type rule struct {
	// name identifies the rule in tests.
	name string
	// ok reports whether c passes.
	ok func(c Config) bool
	// fix is the usage message for a c that fails: the key or flag, and what to do.
	fix func(c Config) string
}

// Validate checks c against every rule and returns a *UsageError with every problem at once, each naming
// the key and what to do. It reads nothing but c and, for the fault and upgrade scripts, the local file
// system, so it runs before anything connects to a cluster.
func (c Config) Validate() error {
	var problems []string
	for _, r := range rules() {
		if !r.ok(c) {
			problems = append(problems, r.fix(c))
		}
	}
	if len(problems) > 0 {
		return &UsageError{Problems: problems}
	}
	return nil
}

// ruleTable is the validation table; Validate reports the failures in its order.
var ruleTable = []rule{
	namespaceRule("namespace", func(c Config) string { return c.Namespace }),
	namespaceRule("helperNamespace", func(c Config) string { return c.HelperNamespace }),
	{"namespace-prefix", func(c Config) bool { return len(c.NamespacePrefix) <= 40 && isDNSLabel(c.NamespacePrefix) },
		func(c Config) string {
			return fmt.Sprintf("namespacePrefix %q (--namespace-prefix): must be a DNS label of at most 40 characters (lowercase letters, digits, '-')", c.NamespacePrefix)
		}},
	{"dedication-taints", func(c Config) bool { return len(badTaintKeys(c)) == 0 },
		func(c Config) string {
			return fmt.Sprintf("dedicationTaints: %q: not taint keys (give the key alone, e.g. nvidia.com/gpu)", badTaintKeys(c))
		}},
	{"allocation-paths-empty", func(c Config) bool { return len(c.AllocationPaths) > 0 },
		func(Config) string {
			return "allocationPaths: empty; use [auto] or a subset of [device-plugin, dra, extended-resource-dra]"
		}},
	{"allocation-paths-auto-alone", func(c Config) bool {
		return !slices.Contains(c.AllocationPaths, PathAuto) || len(c.AllocationPaths) == 1
	}, func(c Config) string {
		return fmt.Sprintf("allocationPaths %q: %q cannot be combined with explicit paths", c.AllocationPaths, PathAuto)
	}},
	{"allocation-paths-known", func(c Config) bool { return len(unknownPaths(c)) == 0 },
		func(c Config) string {
			var msgs []string
			for _, p := range unknownPaths(c) {
				msgs = append(msgs, fmt.Sprintf("unknown path %q", p))
			}
			return "allocationPaths: " + strings.Join(msgs, ", ") + "; use auto, device-plugin, dra or extended-resource-dra"
		}},
	selectorRule("gpu", "gpu-pool", func(c Config) string { return c.Pools.GPU }),
	selectorRule("canary", "canary-pool", func(c Config) string { return c.Pools.Canary }),
	selectorRule("knownGood", "known-good-pool", func(c Config) string { return c.Pools.KnownGood }),
	selectorRule("autoscaling", "autoscaling-pool", func(c Config) string { return c.Pools.Autoscaling }),
	{"autoscaling-tolerations-need-pool", func(c Config) bool { return len(c.Pools.AutoscalingTolerations) == 0 || c.Pools.Autoscaling != "" },
		func(Config) string {
			return "pools.autoscalingTolerations (--autoscaling-toleration) without pools.autoscaling: name the autoscaled pool with --autoscaling-pool SELECTOR"
		}},
	{"autoscaling-pool-not-everything", func(c Config) bool {
		sel, err := labels.Parse(c.Pools.Autoscaling)
		return c.Pools.Autoscaling == "" || err != nil || !sel.Empty()
	}, func(c Config) string {
		return fmt.Sprintf("pools.autoscaling %q (--autoscaling-pool): selects every node; name the autoscaled node group's label, e.g. karpenter.sh/nodepool=gpu", c.Pools.Autoscaling)
	}},
	{"queues-mode", func(c Config) bool { return c.Queues.Mode == QueuesOwn || c.Queues.Mode == QueuesExisting },
		func(c Config) string {
			return fmt.Sprintf("queues.mode %q: use %q or %q", c.Queues.Mode, QueuesOwn, QueuesExisting)
		}},
	{"existing-queues-need-local-queue", func(c Config) bool { return c.Queues.Mode != QueuesExisting || c.Queues.LocalQueue != "" },
		func(Config) string {
			return `queues.mode is "existing" but queues.localQueue is empty; name the LocalQueue to submit to (--local-queue NS/NAME)`
		}},
	{"local-queue-needs-existing-mode", func(c Config) bool { return c.Queues.LocalQueue == "" || c.Queues.Mode != QueuesOwn },
		func(c Config) string {
			return fmt.Sprintf("queues.localQueue %q is set but queues.mode is %q, which would ignore it; set queues.mode: %s (--local-queue implies it) or drop localQueue",
				c.Queues.LocalQueue, QueuesOwn, QueuesExisting)
		}},
	{"local-queue-name", func(c Config) bool {
		ns, name, namespaced := localQueueRef(c.Queues.LocalQueue)
		return c.Queues.LocalQueue == "" || (len(validation.IsDNS1123Subdomain(name)) == 0 && (!namespaced || isDNSLabel(ns)))
	}, func(c Config) string {
		return fmt.Sprintf("queues.localQueue %q: want NS/NAME or NAME, the LocalQueue's namespace and name", c.Queues.LocalQueue)
	}},
	{"local-queue-namespace-agrees", func(c Config) bool {
		ns, _, namespaced := localQueueRef(c.Queues.LocalQueue)
		return !namespaced || c.Namespace == "" || c.Namespace == ns
	}, func(c Config) string {
		ns, _, _ := localQueueRef(c.Queues.LocalQueue)
		return fmt.Sprintf("queues.localQueue %q is in namespace %q but namespace is %q; give the namespace once (--local-queue NS/NAME, or --namespace NS --local-queue NAME)",
			c.Queues.LocalQueue, ns, c.Namespace)
	}},
	{"local-queue-needs-namespace", func(c Config) bool {
		_, _, namespaced := localQueueRef(c.Queues.LocalQueue)
		return c.Queues.LocalQueue == "" || c.Namespace != "" || namespaced
	}, func(c Config) string {
		return fmt.Sprintf("queues.localQueue %q without namespace: the LocalQueue cannot exist in the suite's fresh per-spec namespaces; give --namespace NS, or --local-queue NS/%s",
			c.Queues.LocalQueue, c.Queues.LocalQueue)
	}},
	{"priority-classes-paired", func(c Config) bool {
		return (c.Preemption.LowPriorityClass == "") == (c.Preemption.HighPriorityClass == "")
	}, func(Config) string {
		return "preemption: name both lowPriorityClass and highPriorityClass (--low-priority-class, --high-priority-class), or neither"
	}},
	{"priority-classes-differ", func(c Config) bool {
		return c.Preemption.LowPriorityClass == "" || c.Preemption.LowPriorityClass != c.Preemption.HighPriorityClass
	}, func(c Config) string {
		return fmt.Sprintf("preemption: lowPriorityClass and highPriorityClass are both %q, so the urgent job cannot preempt; name two WorkloadPriorityClasses, the high one of higher value",
			c.Preemption.LowPriorityClass)
	}},
	{"priority-classes-need-local-queue", func(c Config) bool {
		return c.Preemption == PreemptionConfig{} || c.Queues.Mode == QueuesExisting
	}, func(Config) string {
		return "preemption: --low-priority-class and --high-priority-class name your WorkloadPriorityClasses for your LocalQueue; give --local-queue NS/NAME too, or drop them (with its own queues the suite creates its own classes)"
	}},
	{"noisy-neighbour-command-needs-image", func(c Config) bool { return len(c.NoisyNeighbour.Command) == 0 || c.NoisyNeighbour.Image != "" },
		func(c Config) string {
			return fmt.Sprintf("noisyNeighbour.command %q without noisyNeighbour.image: the command would run in the project's workload image, which cannot load a GPU; name the image that drives the device (--noisy-neighbour-image)",
				strings.Join(c.NoisyNeighbour.Command, " "))
		}},
	{"device-test-command-needs-image", func(c Config) bool { return len(c.DeviceTest.Command) == 0 || c.DeviceTest.Image != "" },
		func(c Config) string {
			return fmt.Sprintf("deviceTest.command %q without deviceTest.image: the default device test is the workload image's own gpu-workload device-test; name the vendor's image (--device-test-image), or the workload image itself to run another command in it",
				strings.Join(c.DeviceTest.Command, " "))
		}},
	{"device-test-workload-image-needs-command", func(c Config) bool {
		return c.DeviceTest.Image == "" || c.DeviceTest.Image != c.Image || len(c.DeviceTest.Command) > 0
	}, func(c Config) string {
		return fmt.Sprintf("deviceTest.image %q is the workload image with no command: its entrypoint, gpu-workload, needs a subcommand; drop deviceTest.image for the default (gpu-workload device-test) or give deviceTest.command (--device-test-command)",
			c.DeviceTest.Image)
	}},
	{"device-test-image", func(c Config) bool { return !strings.ContainsFunc(c.DeviceTest.Image, unicode.IsSpace) },
		func(c Config) string {
			return fmt.Sprintf("deviceTest.image %q (--device-test-image): an image reference has no white space; give the command with --device-test-command", c.DeviceTest.Image)
		}},
	{"device-test-command-arguments", func(c Config) bool { return !slices.Contains(c.DeviceTest.Command, "") },
		func(c Config) string {
			return fmt.Sprintf("deviceTest.command %q: an empty argument; drop it from the list", c.DeviceTest.Command)
		}},
	{"dra-kueue-resource", func(c Config) bool { return c.DRA.KueueResourceName != "" },
		func(Config) string {
			return "dra.kueueResourceName: empty; set the resource name of Kueue's deviceClassMappings (--dra-kueue-resource, default example.com/gpu)"
		}},
	{"image", func(c Config) bool { return c.Image != "" },
		func(Config) string { return "image: empty; name the workload image (--workload-image)" }},
	quantityRule("podResources.cpu", "pod-cpu", "100m or 0.5", func(c Config) string { return c.PodResources.CPU }),
	quantityRule("podResources.memory", "pod-memory", "128Mi or 1Gi", func(c Config) string { return c.PodResources.Memory }),
	{"timeout-profile", func(c Config) bool { _, err := timeouts.ForProfile(c.TimeoutProfile); return err == nil },
		func(c Config) string {
			_, err := timeouts.ForProfile(c.TimeoutProfile)
			return "timeoutProfile (--timeout-profile): " + err.Error()
		}},
	{"run-timeout", func(c Config) bool { return c.RunTimeout.Duration >= 0 },
		func(c Config) string {
			return fmt.Sprintf("timeout %s: negative; give a positive duration such as 2h, or none for the default", c.RunTimeout.Duration)
		}},
	{"signoff-require", func(c Config) bool { return len(badRequires(c)) == 0 },
		func(c Config) string {
			return fmt.Sprintf("signoff.require (--require) %q: want path:NAME, scenario:NAME or conformance:REQUIREMENT", badRequires(c))
		}},
	{"profile", func(c Config) bool { _, _, err := conformance.ParseProfile(c.Profile); return err == nil },
		func(c Config) string {
			_, _, err := conformance.ParseProfile(c.Profile)
			return "profile (--profile): " + err.Error()
		}},
	{"accelerator-metrics", func(c Config) bool { _, err := ParseMetricsEndpoint(c.AcceleratorMetrics); return err == nil },
		func(c Config) string {
			_, err := ParseMetricsEndpoint(c.AcceleratorMetrics)
			return "acceleratorMetrics (--accelerator-metrics): " + err.Error()
		}},
	{"monitoring", func(c Config) bool { _, err := ParseMetricsEndpoint(c.Monitoring); return err == nil },
		func(c Config) string {
			_, err := ParseMetricsEndpoint(c.Monitoring)
			return "monitoring (--monitoring): " + err.Error()
		}},
	{"hpa-metric", func(c Config) bool { return !strings.ContainsAny(c.HPAMetric, "/?# \t\n") },
		func(c Config) string {
			return fmt.Sprintf("hpaMetric (--hpa-metric) %q: a custom metrics API metric name is one path segment, without '/', '?', '#' or white space", c.HPAMetric)
		}},
	{"artifacts-dir", func(c Config) bool { return c.ArtifactsDir != "" },
		func(Config) string {
			return "artifactsDir: empty; name the directory for reports and dumps (--artifacts DIR)"
		}},
	{"namespace-not-disruptive", func(c Config) bool { return c.Namespace == "" || !c.Disruptive },
		func(c Config) string {
			return fmt.Sprintf("namespace %q with disruptive: disruptive specs change nodes, which team-namespace mode never does; drop one of them", c.Namespace)
		}},
	oneOfRule("faults.nodeProvider", func(c Config) string { return c.Faults.NodeProvider },
		FaultProviderAuto, FaultProviderLocal, FaultProviderCommand, FaultProviderKubeletStop, FaultProviderNone),
	oneOfRule("faults.deviceProvider", func(c Config) string { return c.Faults.DeviceProvider },
		FaultProviderAuto, FaultProviderLocal, FaultProviderCommand, FaultProviderNone),
	oneOfRule("faults.draDeviceProvider", func(c Config) string { return c.Faults.DRADeviceProvider },
		FaultProviderAuto, FaultProviderTaintRule, FaultProviderLocal, FaultProviderCommand, FaultProviderNone),
	{"command-provider-needs-command", func(c Config) bool {
		return c.Faults.Command != "" || !slices.Contains(c.Faults.providers(), FaultProviderCommand)
	},
		func(Config) string {
			return "faults: the command provider is chosen but faults.command (--fault-command) is empty; name the script"
		}},
	{"fault-command-used", func(c Config) bool {
		return c.Faults.Command == "" || slices.ContainsFunc(c.Faults.providers(), func(p string) bool {
			return p == FaultProviderCommand || p == FaultProviderAuto
		})
	}, func(c Config) string {
		return fmt.Sprintf("faults.command %q is set but no provider uses it (nodeProvider %q, deviceProvider %q, draDeviceProvider %q); choose command or auto for one of them, or drop --fault-command",
			c.Faults.Command, c.Faults.NodeProvider, c.Faults.DeviceProvider, c.Faults.DRADeviceProvider)
	}},
	{"fault-command-executable", func(c Config) bool { return c.Faults.Command == "" || isExecutable(c.Faults.Command) },
		func(c Config) string {
			return fmt.Sprintf("faults.command %q: not an executable file (or a name on PATH); give the script's path", c.Faults.Command)
		}},
	{"command-device-evicts-needs-command", func(c Config) bool { return !c.Faults.CommandDeviceEvicts || c.Faults.Command != "" },
		func(Config) string {
			return "faults.commandDeviceEvicts is set but faults.command is empty; name the script or drop commandDeviceEvicts"
		}},
	{"kubelet-stop-for", func(c Config) bool { return c.Faults.KubeletStopFor.Duration >= 30*time.Second },
		func(c Config) string {
			return fmt.Sprintf("faults.kubeletStopFor %s: give at least 30s (--kubelet-stop-for), so the node is seen NotReady", c.Faults.KubeletStopFor.Duration)
		}},
	{"eviction-toleration", func(c Config) bool { return c.Faults.EvictionToleration.Duration >= 0 },
		func(c Config) string {
			return fmt.Sprintf("faults.evictionToleration %s: negative; give 0 or more (--eviction-toleration)", c.Faults.EvictionToleration.Duration)
		}},
	{"checkpoints-one-storage", func(c Config) bool { return c.Checkpoints.StorageClass == "" || c.Checkpoints.HostPath == "" },
		func(Config) string {
			return "checkpoints: storageClass and hostPath are both set; pick one (--checkpoint-storage-class or --checkpoint-host-path)"
		}},
	{"checkpoints-host-path-absolute", func(c Config) bool { return c.Checkpoints.HostPath == "" || path.IsAbs(c.Checkpoints.HostPath) },
		func(c Config) string {
			return fmt.Sprintf("checkpoints.hostPath %q: give an absolute path on the nodes (--checkpoint-host-path)", c.Checkpoints.HostPath)
		}},
	{"checkpoints-host-path-not-team", func(c Config) bool { return c.Checkpoints.HostPath == "" || c.Namespace == "" },
		func(c Config) string {
			return fmt.Sprintf("checkpoints.hostPath %q with namespace %q: the shared directory needs a PersistentVolume, a cluster-scoped object team-namespace mode never creates; give --checkpoint-storage-class (ReadWriteMany) instead",
				c.Checkpoints.HostPath, c.Namespace)
		}},
	{"keep-or-cleanup", func(c Config) bool { return !c.KeepResources || !c.CleanupLeftovers },
		// Not contradictory strictly, but almost always a mistake worth saying out loud.
		func(Config) string {
			return "keepResources and cleanupLeftovers are both set: this run would keep what the next one must delete; pick one"
		}},
	{"keep-upgraded-needs-disruptive", func(c Config) bool { return !c.Upgrade.KeepUpgraded || c.Disruptive },
		func(Config) string {
			return "upgrade.keepUpgraded without disruptive: only the disruptive upgrade rehearsal upgrades anything; add --disruptive or drop --keep-upgraded"
		}},
	{"upgrade-load-min-ratio", func(c Config) bool { return c.Upgrade.Load.MinRatio >= 0 && c.Upgrade.Load.MinRatio <= 1 },
		func(c Config) string {
			return fmt.Sprintf("upgrade.load.minRatio %g: give a ratio between 0 and 1, e.g. 0.8 (--upgrade-load-min-ratio)", c.Upgrade.Load.MinRatio)
		}},
	{"upgrade-load-duration", func(c Config) bool {
		return c.Upgrade.Load.Duration.Duration == 0 || c.Upgrade.Load.Duration.Duration >= 10*time.Second
	},
		func(c Config) string {
			return fmt.Sprintf("upgrade.load.duration %s: too short to measure a progress rate; give 10s or more (--upgrade-load-duration)", c.Upgrade.Load.Duration.Duration)
		}},
	{"upgrade-serving", func(c Config) bool {
		r, m := c.Upgrade.ServingReplicas()
		return r >= 0 && m >= 0 && m <= r
	},
		func(c Config) string {
			r, m := c.Upgrade.ServingReplicas()
			return fmt.Sprintf("upgrade.serving: replicas %d, minAvailable %d: give 0 or more replicas and a minAvailable between 0 and the replicas (--upgrade-serving-replicas, --upgrade-serving-min-available)", r, m)
		}},
	{"upgrade-command-executable", func(c Config) bool { return c.Upgrade.Command == "" || isExecutable(c.Upgrade.Command) },
		func(c Config) string {
			return fmt.Sprintf("upgrade.command %q: not an executable file (or a name on PATH); give the script's path", c.Upgrade.Command)
		}},
	{"dra-upgrade-command-executable", func(c Config) bool { return c.DRAUpgrade.Command == "" || isExecutable(c.DRAUpgrade.Command) },
		func(c Config) string {
			return fmt.Sprintf("draUpgrade.command %q: not an executable file (or a name on PATH); give the script's path", c.DRAUpgrade.Command)
		}},
}

// rules is the validation table.
func rules() []rule { return ruleTable }

// namespaceRule checks that key, when set, names a namespace.
func namespaceRule(key string, get func(Config) string) rule {
	return rule{key, func(c Config) bool { return get(c) == "" || isDNSLabel(get(c)) },
		func(c Config) string {
			return fmt.Sprintf("%s %q: not a namespace name (a DNS label of at most 63 characters)", key, get(c))
		}}
}

// selectorRule checks that the pool's selector parses.
func selectorRule(pool, flag string, get func(Config) string) rule {
	return rule{"pools." + pool, func(c Config) bool { _, err := labels.Parse(get(c)); return err == nil },
		func(c Config) string {
			_, err := labels.Parse(get(c))
			return fmt.Sprintf("pools.%s %q (--%s): not a label selector: %v", pool, get(c), flag, err)
		}}
}

// oneOfRule checks that key's value is one of allowed.
func oneOfRule(key string, get func(Config) string, allowed ...string) rule {
	return rule{key, func(c Config) bool { return slices.Contains(allowed, get(c)) },
		func(c Config) string {
			return fmt.Sprintf("%s %q: use one of %s", key, get(c), strings.Join(allowed, ", "))
		}}
}

// quantityRule checks that key, when set, is a positive Kubernetes quantity.
func quantityRule(key, flag, example string, get func(Config) string) rule {
	problem := func(c Config) string {
		if get(c) == "" {
			return ""
		}
		q, err := resource.ParseQuantity(get(c))
		switch {
		case err != nil:
			return "not a Kubernetes quantity"
		case q.Sign() <= 0:
			return "not above zero"
		}
		return ""
	}
	return rule{key, func(c Config) bool { return problem(c) == "" },
		func(c Config) string {
			return fmt.Sprintf("%s %q (--%s): %s; give a positive quantity such as %s", key, get(c), flag, problem(c), example)
		}}
}

// isDNSLabel reports whether s may name a namespace.
func isDNSLabel(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

// badTaintKeys are the dedication taints that no taint can have as its key.
func badTaintKeys(c Config) []string {
	var bad []string
	for _, k := range c.DedicationTaints {
		if len(validation.IsQualifiedName(k)) > 0 {
			bad = append(bad, k)
		}
	}
	return bad
}

// unknownPaths are the allocation paths that are neither auto nor a known path.
func unknownPaths(c Config) []string {
	var bad []string
	for _, p := range c.AllocationPaths {
		if !slices.Contains([]string{PathAuto, PathDevicePlugin, PathDRA, PathExtendedDRA}, p) {
			bad = append(bad, p)
		}
	}
	return bad
}

// badRequires are the signoff requirements that are not path:NAME or scenario:NAME.
func badRequires(c Config) []string {
	var bad []string
	for _, r := range c.Signoff.Require {
		kind, name, ok := strings.Cut(r, ":")
		if !ok || name == "" || (kind != "path" && kind != "scenario" && kind != "conformance") {
			bad = append(bad, r)
		}
	}
	return bad
}

// isExecutable reports whether a script name resolves as exec.Command would resolve it: a name with a
// slash as a file, a bare name on PATH.
func isExecutable(script string) bool {
	_, err := exec.LookPath(script)
	return err == nil
}
