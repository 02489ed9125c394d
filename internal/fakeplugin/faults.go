package fakeplugin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Fault names a deliberate misbehaviour of the fake GPU agent. Each one plays a defect that real GPU stacks
// have shown and that the conformance suite claims to catch; `make selfcheck` switches them on one at a
// time and requires the suite's verdict to turn NO-GO. They are never on by default.
//
// A fault is switched on for the agent's whole life with --fault, or at run time on one node with the node
// annotation FaultsAnnotation (a comma-separated list), which the agent watches.
type Fault string

const (
	// FaultWrongIDs gives containers other GPUs than the ones allocated to them (device plugin: other than
	// the IDs the kubelet asked for; DRA: other than the claim's devices). Plays a plugin whose ID-to-device
	// mapping is broken. Caught by comparing what the container sees with the kubelet's or the claim's view.
	FaultWrongIDs Fault = "wrong-ids"
	// FaultOverAdvertise makes the device plugin advertise one GPU more than the node has. The kubelet hands
	// it out like any other; the runtime then cannot create the container it goes to (the CDI device does
	// not exist), as NVIDIA's toolkit refuses an unknown GPU. Plays a plugin that counts a GPU that fell off
	// the bus. Caught by filling a node: one of the pods never runs.
	FaultOverAdvertise Fault = "over-advertise"
	// FaultDoubleAllocate gives each allocation the GPU of the previous allocation again, while that one
	// still uses it. Plays a broken allocator (or time-slicing reported as exclusive). Caught by running
	// GPU pods side by side: two of them see the same GPU.
	FaultDoubleAllocate Fault = "double-allocate"
	// FaultIgnoreHealth keeps a GPU marked unhealthy advertised as healthy (device plugin) and untainted in
	// the ResourceSlice (DRA), so it is still handed out. Caught by the health check: the unhealthy GPU
	// must be withheld.
	FaultIgnoreHealth Fault = "ignore-health"
	// FaultLeakAll shows every container on the node every GPU, including containers that asked for none
	// (and the GPUs of other pods). Plays the NVIDIA runtime set as the default runtime with an image that
	// says NVIDIA_VISIBLE_DEVICES=all. Caught by the isolation checks.
	FaultLeakAll Fault = "leak-all"
	// FaultDRAPrepareFail makes the DRA half fail NodePrepareResources for every claim. Plays a broken DRA
	// kubelet plugin; pods stay in ContainerCreating with FailedPrepareDynamicResources events.
	FaultDRAPrepareFail Fault = "dra-prepare-fail"
	// FaultPhantomSliceDevice makes the ResourceSlice publish one device more than the node has; a claim
	// allocated that device cannot be prepared. Plays a driver that publishes stale inventory.
	FaultPhantomSliceDevice Fault = "phantom-slice-device"
	// FaultNoReregister keeps the device plugin from registering again after the kubelet restarts (and
	// wipes the device-plugin sockets), so its devices disappear from the node once the kubelet's grace
	// period ends. Plays a plugin without a socket watch. Caught by the kubelet-restart and node-recovery
	// checks.
	FaultNoReregister Fault = "no-reregister"
	// FaultStaleAfterReboot makes the agent, when its node comes back from a restart, find the state it
	// left before the restart and refuse to serve: the device plugin never registers and the DRA half
	// publishes no slice, so the node returns Ready without its GPUs. Plays a driver or plugin that does
	// not come back after a reboot (a stale lock, a driver that needs a manual reload). A restart of the
	// agent alone is not a reboot. Caught by the failed-worker check (the node's devices must come back).
	FaultStaleAfterReboot Fault = "stale-after-reboot"
	// FaultDRANoRepublish makes the DRA half stop publishing once its node's ResourceSlice exists: a slice
	// deleted from then on stays gone, as the starting kubelet deletes its node's slices after a kubelet or
	// node restart. Plays a DRA driver that publishes its inventory once at start and does not watch its
	// slices (a hand-written publisher instead of the ResourceSlice controller). Switched off, the agent
	// publishes again. Caught by the DRA kubelet-restart check: the node's devices must come back in slices
	// published after the restart.
	FaultDRANoRepublish Fault = "dra-no-republish"
	// FaultDriverMismatch makes nvidia-smi in the node's containers report another driver version
	// (MismatchedDriverVersion of the advertised one) while the node labels (nvidia.com/cuda.driver-version.*)
	// and the ResourceSlice's driverVersion attribute keep the advertised one. Plays a driver upgraded on
	// the host without its labels following (stale GPU Feature Discovery labels). Only the fake driver's
	// inventory changes, so containers created while the fault is on see it. Caught by comparing the version
	// a GPU pod's nvidia-smi prints with what its node advertises.
	FaultDriverMismatch Fault = "driver-mismatch"
	// FaultMissingNvidiaSMI stops the fake driver from injecting its nvidia-smi into GPU containers: the CDI
	// spec (both paths use it), the device-specs allocations and the leak-all injection leave the tool out,
	// while the device nodes, /dev/nvidiactl and the inventory stay. Plays a driver whose user-space part is
	// missing from the container toolkit's mounts (a CDI spec generated before the user-space libraries were
	// installed, or with the wrong driver root): the GPU is there, and nothing in the container can use it.
	// Containers created while the fault is on lack the tool. Caught by the vendor's device test, which
	// needs nvidia-smi on PATH.
	FaultMissingNvidiaSMI Fault = "missing-nvidia-smi"
	// FaultMetricsMissingDevice makes the agent's DCGM-exporter-compatible metrics endpoint (metrics.go) leave
	// out every sample of each holding pod's first GPU (by index), while the GPU stays advertised, allocated
	// and visible in its container; every pod that holds GPUs misses one, whoever else holds others. Plays an exporter that lost a device (a DCGM host engine that dropped a
	// GPU from its watch group). Nothing is left out while no pod holds a GPU. Caught by looking up a running
	// GPU pod's GPU in its node's exporter.
	FaultMetricsMissingDevice Fault = "metrics-missing-device"
	// FaultMetricsWrongPod makes the metrics endpoint attribute each held GPU to another pod than the one the
	// kubelet says holds it: the holder's name with MetricsWrongPodSuffix appended (namespace and container
	// stay). Plays a broken pod mapper in the exporter. Caught by comparing the pod label of a running GPU
	// pod's GPU with the pod.
	FaultMetricsWrongPod Fault = "metrics-wrong-pod"
	// FaultExtraReplica (time-slicing, mps) advertises one replica more per GPU than the node's labels
	// (nvidia.com/gpu.replicas) say: N+1 IDs per GPU, the last one "<uuid>::<N>". Plays a plugin whose
	// sharing config and GFD disagree. Caught by the sharing checks: a GPU hands out more than its replica
	// count.
	FaultExtraReplica Fault = "extra-replica"
	// FaultMPSNoLimits (mps) leaves the node's MPS control daemon without default limits (mps.go): it
	// answers its built-in defaults, get_default_active_thread_percentage "100.0" and
	// get_default_device_pinned_mem_limit <dev> "0" (no limit); allocations keep the pipe directory.
	// Plays a plugin that started its daemon but never set the limits: MPS sharing as good as
	// time-slicing. Caught by the MPS check, which asks the daemon through nvidia-cuda-mps-control in the
	// container for its defaults: 100/replicas percent and the GPU's memory / replicas.
	FaultMPSNoLimits Fault = "mps-no-limits"
	// FaultMIGWithParent (mig-mixed) also advertises the whole GPU of every split GPU on nvidia.com/gpu, so
	// a pod can get the parent while others hold its MIG devices. Plays a plugin that ignores MIG mode.
	// Caught by the MIG checks: a GPU's partitions and the whole GPU are never handed out together.
	FaultMIGWithParent Fault = "mig-with-parent"
	// FaultDRAPartitionNoCounters (DRA, MIG modes) publishes the partition devices without
	// ConsumesCounters, so the scheduler can hand out a GPU and its partitions, or overlapping partitions,
	// together. Plays a DRA driver whose partitions do not share their GPU's counters. Caught by the DRA
	// partition checks: allocated partitions never overlap.
	FaultDRAPartitionNoCounters Fault = "dra-partition-no-counters"
	// FaultDRACapacityOverstated (DRA, time-slicing and MPS) publishes each shared DRA GPU's memory capacity
	// as twice the memory the GPU has, so the scheduler lets twice as many claims share it as its memory
	// holds. Plays a DRA driver that reports the wrong framebuffer size. Caught by the DRA capacity check:
	// the published capacity must not exceed the memory the GPU shows in the container.
	FaultDRACapacityOverstated Fault = "dra-capacity-overstated"
	// FaultKueueNoPodsReady runs the local Kueue without waitForPodsReady: nothing then withdraws a gang
	// that only partly fits, whose running workers hold devices they cannot use. Not the agent's: `make
	// selfcheck` applies it to Kueue's Configuration (the agent ignores it). Caught by the gang scenario's
	// partial-start check.
	FaultKueueNoPodsReady Fault = "kueue-no-pods-ready"
	// FaultSlowGPU holds every GPU of the node at 1/SlowGPUFactor of its maximum SM clock, in performance
	// state P8, with HW Slowdown among its active clock event reasons (fakegpu.SlowedClocks): the fake
	// driver's inventory says so, and the fake nvidia-smi prints it for clocks.sm against clocks.max.sm,
	// pstate, power.draw and clocks_event_reasons.active, and in `-q -d CLOCK,PERFORMANCE`, as a real GPU's
	// does. Plays a driver that leaves the GPUs at low clocks or in a low power mode. Device counts,
	// identities and isolation are all right. Like FaultDriverMismatch only the inventory changes, so
	// containers created while the fault is on see it. Caught by the upgrade rehearsal's representative
	// load: the clocks of the load's GPU on the upgraded canary against the known-good pool's.
	FaultSlowGPU Fault = "slow-gpu"
	// FaultKueueWebhookSkipsValidation gives Kueue's validating webhook for ResourceFlavors an object
	// selector nothing matches, so the API server stores a flavor Kueue would deny: a webhook configuration
	// that lost its rule. Cluster fault. Caught by the operator scenario's webhook check.
	FaultKueueWebhookSkipsValidation Fault = "kueue-webhook-skips-validation"
	// FaultMetricsAPIUnavailable scales the local custom metrics API's adapter (prometheus-adapter) to zero,
	// so the aggregator finds APIService v1beta1.custom.metrics.k8s.io without endpoints: an adapter that
	// is gone. Cluster fault. Caught by the platform scenario's metrics API check (never not applicable).
	FaultMetricsAPIUnavailable Fault = "metrics-api-unavailable"
	// FaultHPAMetricUnserved restarts the local prometheus-adapter with its rule naming a counter's rate
	// X_rate instead of X_per_second: a custom metrics API that serves the workload's series, but not under
	// the name the HPA is written for. Cluster fault. Caught by the pod autoscaling scenario (the pods
	// metric is never served for its pod, so no HPA is created).
	FaultHPAMetricUnserved Fault = "hpa-metric-unserved"
	// FaultHPAControllerOff restarts kube-controller-manager with its horizontal-pod-autoscaler-controller
	// disabled: HPAs are accepted and never act. Cluster fault. Caught by the pod autoscaling scenario (the
	// Deployment stays at one replica; the HPA's status is never written).
	FaultHPAControllerOff Fault = "hpa-controller-off"
	// FaultAutoscalerUnhealthy writes cluster-autoscaler's status ConfigMap with its cluster-wide health
	// Unhealthy: an autoscaler that cannot scale. Cluster fault. Caught by the platform scenario's
	// autoscaler check.
	FaultAutoscalerUnhealthy Fault = "autoscaler-unhealthy"
	// FaultAutoscalerDown scales the local node autoscaler (Karpenter's Deployment) to zero: a node group
	// nobody grows. Cluster fault. Caught by the cluster autoscaling scenario (its pending pod gets no node).
	FaultAutoscalerDown Fault = "autoscaler-down"
	// FaultAutoscalerNoScaleDown sets the local NodePool's consolidateAfter to Never: a node autoscaler
	// configured never to remove an empty node, which keeps paying for idle GPUs. Cluster fault. Caught by
	// the cluster autoscaling scenario (the added node stays after its pod is gone).
	FaultAutoscalerNoScaleDown Fault = "autoscaler-no-scale-down"
	// FaultGatewayNoController stops the local Gateway API implementation (Traefik scaled to zero) and
	// creates its GatewayClass anew, which nobody then accepts: the Gateway API's CRDs and a class without an
	// implementation. Cluster fault. Caught by the platform scenario's Gateway API check.
	FaultGatewayNoController Fault = "gateway-no-controller"
	// FaultGatewayDown stops the local Gateway API implementation (Traefik scaled to zero): its GatewayClass
	// stays accepted, as one whose controller stopped does, and no new Gateway is programmed. Cluster
	// fault. Caught by the inference gateway scenario (its Gateway is never programmed).
	FaultGatewayDown Fault = "gateway-down"
	// FaultGatewayWeightsStripped installs a MutatingAdmissionPolicy that rebuilds every HTTPRoute's rules
	// as it is created without its backends' weights: a platform's admission policy that rewrites routes, so
	// that the Gateway splits traffic evenly whatever the route asks. Cluster fault. Caught by the inference
	// gateway scenario's split check.
	FaultGatewayWeightsStripped Fault = "gateway-weights-stripped"
	// FaultMonitoringOwnNamespaceOnly restarts the local Prometheus with its Kubernetes pod discovery
	// limited to its own namespace: a monitoring system that never discovers the workloads. Cluster
	// fault. Caught by the service metrics scenario (the workload's counter never reaches the query API).
	FaultMonitoringOwnNamespaceOnly Fault = "monitoring-own-namespace-only"
	// FaultDRANoSubrequests makes the DRA half refuse to prepare a device allocated for a sub-request of a
	// prioritized list (a result whose request is "request/alternative"): a driver written before
	// DRAPrioritizedList, which looks a result's request up among the claim's top-level requests (for its
	// configuration) and finds none. Claims without alternatives are prepared as before. Caught by the
	// prioritized-list scenario (its pod never starts; the diagnosis is DRAPrepareFailed).
	FaultDRANoSubrequests Fault = "dra-no-subrequests"
	// FaultDRANoAdminAccess makes the DRA half refuse to prepare a device allocated with administrative
	// access (DRAAdminAccess) as one in use by another claim: a driver that does not support admin access
	// and treats a monitor's claim on a held device as a double allocation. Caught by the admin-access
	// scenario (the monitor's pod never starts; the diagnosis is DRAPrepareFailed).
	FaultDRANoAdminAccess Fault = "dra-no-admin-access"
	// FaultDRAXIDIgnored makes the DRA half taint an unhealthy GPU's devices with effect None instead of
	// NoSchedule: a driver told to treat the critical XID as harmless (NVIDIA's DRA driver's
	// additionalXidsToIgnore), whose slice shows the fault but keeps the device allocatable. Caught by the
	// DRA device-health check: the device is never withdrawn, and the failure quotes its taint.
	FaultDRAXIDIgnored Fault = "dra-xid-ignored"
	// FaultDRANoTaintEviction restarts kube-controller-manager without its device-taint-eviction-controller
	// (--controllers=*,-device-taint-eviction-controller): a control plane that honours device taints in
	// scheduling but never evicts the pods on a device tainted NoExecute. Cluster fault. Caught by the
	// failed-device check on a DRA path (the training pod keeps running on the failed device).
	FaultDRANoTaintEviction Fault = "dra-no-taint-eviction"
	// FaultDRAPluginNoStart makes the agent's DRA kubelet plugin fail to start: the agent exits with an
	// error before it registers anything, so its container restarts and ends in CrashLoopBackOff. Carried
	// on a plugin version ("v2-dra-plugin-no-start", VersionFaults): plays a new DRA driver release that
	// cannot start on the node (a missing host library, an incompatible kubelet). Caught by the DRA
	// driver's rolling-upgrade rehearsal: the new plugin pod never becomes Ready, the old one keeps serving,
	// and the rehearsal says NO-GO naming the pod.
	FaultDRAPluginNoStart Fault = "dra-plugin-no-start"
	// FaultDRASliceChurn makes the DRA half delete its node's ResourceSlices when it starts and publish them
	// anew, instead of adopting the slices the previous instance published. Carried on a plugin version:
	// plays a driver release that wipes its pool at start. For a moment the node offers no DRA device, and
	// every slice is a new object. Caught by the DRA driver's rolling-upgrade rehearsal's slice watch.
	FaultDRASliceChurn Fault = "dra-slice-churn"
	// FaultDRATolerationsStripped installs a MutatingAdmissionPolicy that removes the device tolerations
	// of every ResourceClaim's first request as the claim is created: a platform's admission policy that
	// rewrites claims, so the toleration a pod's template declares never reaches its claim. Cluster fault.
	// Caught by the tolerated-taint check on the DRA path (the tolerating pod is evicted).
	FaultDRATolerationsStripped Fault = "dra-tolerations-stripped"
)

// SlowGPUFactor is how far below their maximum FaultSlowGPU holds the GPUs' core clocks.
const SlowGPUFactor = 4

// VersionFaults are the faults a fake driver version carries: a version ending in "-<fault>"
// ("560.35.03-wrong-ids") is a driver with that defect, which the agent running it injects on its node. An
// upgrade rehearsal to such a version is a broken upgrade whose defect the rehearsal must catch.
func VersionFaults(version string) []Fault {
	var out []Fault
	for _, f := range AllFaults() {
		if !f.Cluster() && strings.HasSuffix(version, "-"+string(f)) {
			out = append(out, f)
		}
	}
	return out
}

// Cluster reports whether the fault is applied to the cluster's components rather than to the agent.
func (f Fault) Cluster() bool {
	switch f {
	case FaultKueueNoPodsReady, FaultKueueWebhookSkipsValidation, FaultMetricsAPIUnavailable, FaultHPAMetricUnserved, FaultHPAControllerOff, FaultAutoscalerUnhealthy, FaultAutoscalerDown, FaultAutoscalerNoScaleDown, FaultGatewayNoController, FaultGatewayDown, FaultGatewayWeightsStripped,
		FaultMonitoringOwnNamespaceOnly, FaultDRANoTaintEviction, FaultDRATolerationsStripped:
		return true
	}
	return false
}

// FaultsAnnotation is the node annotation that switches faults on at run time on that node only: a
// comma-separated list of Fault names. Removing it switches them off again (faults given with --fault
// stay on).
const FaultsAnnotation = "gpuconform.io/fake-gpu-faults"

// AllFaults lists every fault, in the order the documentation and `make selfcheck` use.
func AllFaults() []Fault {
	return []Fault{FaultWrongIDs, FaultOverAdvertise, FaultDoubleAllocate, FaultIgnoreHealth, FaultLeakAll,
		FaultDRAPrepareFail, FaultPhantomSliceDevice, FaultNoReregister, FaultDRANoRepublish, FaultStaleAfterReboot, FaultDriverMismatch,
		FaultMissingNvidiaSMI, FaultMetricsMissingDevice, FaultMetricsWrongPod, FaultExtraReplica, FaultMPSNoLimits, FaultMIGWithParent, FaultDRAPartitionNoCounters,
		FaultDRACapacityOverstated, FaultKueueNoPodsReady, FaultSlowGPU, FaultKueueWebhookSkipsValidation, FaultMetricsAPIUnavailable,
		FaultHPAMetricUnserved, FaultHPAControllerOff, FaultAutoscalerUnhealthy, FaultAutoscalerDown, FaultAutoscalerNoScaleDown, FaultGatewayNoController, FaultGatewayDown, FaultGatewayWeightsStripped, FaultMonitoringOwnNamespaceOnly,
		FaultDRANoSubrequests,
		FaultDRANoAdminAccess, FaultDRAXIDIgnored, FaultDRANoTaintEviction, FaultDRATolerationsStripped, FaultDRAPluginNoStart, FaultDRASliceChurn}
}

// MismatchedDriverVersion is the driver version nvidia-smi reports under FaultDriverMismatch on a node that
// advertises the given one: its major bumped ("550.54.15" → "551.54.15"), or a fixed 535.183.01 when the
// advertised version has no numeric major.
func MismatchedDriverVersion(advertised string) string {
	major, rest, dotted := strings.Cut(advertised, ".")
	n, err := strconv.Atoi(major)
	if err != nil || n < 0 {
		return "535.183.01"
	}
	if !dotted {
		return strconv.Itoa(n + 1)
	}
	return strconv.Itoa(n+1) + "." + rest
}

// ParseFaults parses a comma-separated list of fault names; an unknown name is an error naming the known ones.
func ParseFaults(s string) ([]Fault, error) {
	var out []Fault
	for raw := range strings.SplitSeq(s, ",") {
		f := Fault(strings.TrimSpace(raw))
		if f == "" {
			continue
		}
		if !slices.Contains(AllFaults(), f) {
			known := make([]string, 0, len(AllFaults()))
			for _, k := range AllFaults() {
				known = append(known, string(k))
			}
			return nil, fmt.Errorf("unknown fault %q (known: %s)", f, strings.Join(known, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out, nil
}

// JoinFaults is the inverse of ParseFaults.
func JoinFaults(fs []Fault) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = string(f)
	}
	return strings.Join(parts, ",")
}

// faultSet is the set of faults in force: the configured ones plus the node annotation's.
type faultSet map[Fault]bool

func newFaultSet(lists ...[]Fault) faultSet {
	s := faultSet{}
	for _, l := range lists {
		for _, f := range l {
			s[f] = true
		}
	}
	return s
}

func (s faultSet) list() []Fault {
	out := make([]Fault, 0, len(s))
	for f := range s {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}
