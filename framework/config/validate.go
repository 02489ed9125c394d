package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"gpuconform.io/gpuconform/framework/timeouts"
)

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
