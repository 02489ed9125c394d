package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onsi/ginkgo/v2/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/upgrade"
	"gpuconform.io/gpuconform/infra/localcluster"
	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/internal/fakeplugin"
	"gpuconform.io/gpuconform/internal/textcut"
	"gpuconform.io/gpuconform/reports"
)

// selfcheckRow says which conformance specs must catch one fault of the fake GPU stack, and why: with the
// fault on, a run of the specs matched by Focus must fail (NO-GO), and one of the failed specs must be one
// whose text contains Catcher and whose failure message matches every expression of Because. A Catcher
// spec that failed for something else did not catch the fault. A fault with no catching check yet has an
// empty Focus and says why: it is a failing row, never a silent pass.
type selfcheckRow struct {
	Fault fakeplugin.Fault
	// Check names a second row of a fault that another check catches as well (the fault's own row has
	// none): the row's name is then "<fault>/<check>" (key), in the table and its artifacts directory.
	Check   string
	Focus   string
	Catcher string
	// Because is the fault's reason in the words of the catching check or of the diagnosis it prints:
	// each expression must match the failure message (alternatives go inside one expression, with |).
	Because []*regexp.Regexp
	NoCheck string
	// RestartAgents restarts the fake GPU agents after the row: a fault that leaves an agent out of
	// service (no-reregister) is not undone by switching it off.
	RestartAgents bool
	// Upgrade carries the fault on a driver version instead of the node annotation: the row runs the upgrade
	// rehearsal to the local stack's target with "-<fault>" appended (fakeplugin.VersionFaults), so that only
	// the upgraded canary pool has it and the known-good pool is the reference it is measured against.
	Upgrade bool
	// DRAUpgrade carries the fault on a plugin version: the row runs the DRA driver's rolling-upgrade
	// rehearsal to the local canary agent's target with "-<fault>" appended, so that only the new plugin
	// pods on the canary have it.
	DRAUpgrade bool
	// Sharing is the sharing mode the fake GPUs must be in for the fault to mean anything (a MIG fault
	// on whole GPUs changes nothing); the zero value is the cluster's exclusive default. The table keeps
	// rows of one mode together so that the cluster switches modes as few times as it can.
	Sharing sharingMode
}

// key names the row: its fault, and its check after a slash for a fault's second row.
func (r selfcheckRow) key() string {
	if r.Check == "" {
		return string(r.Fault)
	}
	return string(r.Fault) + "/" + r.Check
}

// mode is the row's sharing mode, exclusive when it names none.
func (r selfcheckRow) mode() sharingMode {
	if r.Sharing.Mode == "" {
		return exclusive
	}
	return r.Sharing
}

// because compiles a row's Because expressions.
func because(exprs ...string) []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(exprs))
	for i, e := range exprs {
		out[i] = regexp.MustCompile(e)
	}
	return out
}

// selfcheckTable is the proof table of `make selfcheck`: every fault mode of internal/fakeplugin. The
// Because expressions quote the messages of scenarios/, framework/wait and framework/diagnose (README,
// "make selfcheck", says where each comes from); a change to one of those messages must change its row.
func selfcheckTable() []selfcheckRow {
	// The identity comparison of a running pod (scenarios expectSameDevices).
	identity := `container saw \[[^\]]*\] but .+? allocated \[`
	// A capacity wait that ran out (framework/wait's message around scenarios expectLiveCapacity's).
	capacity := func(why string) string {
		return `waiting for \S+ to offer \d+ devices on the \S+ path \(` + why + `\)`
	}
	return []selfcheckRow{
		{Fault: fakeplugin.FaultWrongIDs, Focus: "shows a running pod exactly", Catcher: "shows a running pod exactly",
			Because: because(identity)},
		{Fault: fakeplugin.FaultOverAdvertise, Focus: "full node", Catcher: "full node",
			Because: because(`Reason: +ContainerCreateFailed|unresolvable CDI devices`)},
		// A device handed out twice is first seen by the identity comparison of the second pod (it sees
		// its neighbour's GPU, not the one the kubelet or its claim recorded); the duplicate check after
		// it speaks only where identities cannot be read.
		{Fault: fakeplugin.FaultDoubleAllocate, Focus: "full node", Catcher: "full node",
			Because: because(identity + `|a device was handed out twice`)},
		{Fault: fakeplugin.FaultIgnoreHealth, Focus: "withdraws exactly the device reported unhealthy", Catcher: "withdraws exactly the device reported unhealthy",
			Because: because(capacity(`[^)]* withdrawn`) + `|which is reported unhealthy`)},
		// A DRA driver that taints the failed GPU without a scheduling effect (effect None): the health
		// check's capacity wait quotes the device's taint from its ResourceSlice (scenarios expectWithdrawn).
		{Fault: fakeplugin.FaultDRAXIDIgnored, Focus: "withdraws exactly the device reported unhealthy", Catcher: "dra path withdraws exactly the device reported unhealthy",
			Because: because(capacity(`[^)]* withdrawn`), `is in ResourceSlice \S+ with taint gpu\.nvidia\.com/xid=79:None`)},
		// kube-controller-manager without its device-taint-eviction-controller (cmd/gpuconform-dev/
		// selfcheck_kcm.go): the training pod on the device a NoExecute DeviceTaintRule taints is never
		// evicted, and the rule carries no status from the controller.
		{Fault: fakeplugin.FaultDRANoTaintEviction, Focus: "keeps a failed device from a training job's replacement", Catcher: "dra path keeps a failed device from a training job's replacement",
			Because: because(`pod \S+ was not evicted from the unhealthy device \S+ \(phase [^)]*\): DeviceTaintRule \S+ has no status condition`)},
		// A MutatingAdmissionPolicy that strips a claim's device tolerations (selfcheck_platform.go): the pod
		// whose template tolerates the NoExecute taint is evicted, and its claim shows the toleration gone.
		{Fault: fakeplugin.FaultDRATolerationsStripped, Focus: "keeps a pod whose claim tolerates a device's NoExecute taint", Catcher: "dra path keeps a pod whose claim tolerates a device's NoExecute taint",
			Because: because(`was evicted from \S+ when the device was tainted NoExecute`, `carries none: something between them dropped it`)},
		// The init container runs first and fails its probe; the per-container check speaks if it did not.
		{Fault: fakeplugin.FaultLeakAll, Focus: "second container", Catcher: "second container",
			Because: because(`expected 0 devices, container sees [1-9]|asked for no device (sees \[[^\]]|has GPU device nodes)`)},
		{Fault: fakeplugin.FaultDRAPrepareFail, Focus: "shows a running pod exactly", Catcher: "on the dra path",
			Because: because(`Reason: +DRAPrepareFailed`, `fault injection `+string(fakeplugin.FaultDRAPrepareFail))},
		// A driver that cannot prepare the device of a prioritized list's alternative (scenarios/prioritized.go).
		{Fault: fakeplugin.FaultDRANoSubrequests, Focus: "allocates the first alternative that fits", Catcher: "allocates the first alternative that fits",
			Because: because(`Reason: +DRAPrepareFailed`, `has no request "gpus/one"`)},
		// A driver that refuses a monitor's admin-access claim on a held device (scenarios/adminaccess.go).
		{Fault: fakeplugin.FaultDRANoAdminAccess, Focus: "gives a monitor a held device only in an admin-access namespace", Catcher: "gives a monitor a held device only in an admin-access namespace",
			Because: because(`Reason: +DRAPrepareFailed`, `is in use by another claim: refusing to hand it out twice`)},
		{Fault: fakeplugin.FaultPhantomSliceDevice, Focus: "full node", Catcher: "on the dra path",
			Because: because(`Reason: +DRAPrepareFailed`, `does not exist on this node`)},
		{Fault: fakeplugin.FaultNoReregister, Focus: "after its kubelet restarts", Catcher: "device-plugin path advertises a node's devices again after its kubelet restarts", RestartAgents: true,
			Because: because(capacity(`after the kubelet restart`) + `|a one-device pod to run on \S+ on the \S+ path after its kubelet restarted`)},
		// The same fault seen from the other path: the DRA path's kubelet restart gets its own devices back,
		// and must not return the node to the other specs while its device-plugin devices are missing
		// (scenarios Spec.stopping's every-path wait).
		{Fault: fakeplugin.FaultNoReregister, Check: "every-path", Focus: "dra path advertises a node's devices again after its kubelet restarts", Catcher: "dra path advertises a node's devices again after its kubelet restarts", RestartAgents: true,
			Because: because(capacity(`before the spec returns it to the other specs`))},
		// The starting kubelet deletes its node's ResourceSlices: the DRA devices are back only in slices
		// published anew (scenarios expectCapacityAfterRestart), which the driver under this fault never
		// publishes.
		{Fault: fakeplugin.FaultDRANoRepublish, Focus: "dra path advertises a node's devices again after its kubelet restarts", Catcher: "dra path advertises a node's devices again after its kubelet restarts",
			Because: because(capacity(`after the kubelet restart, in ResourceSlices published anew`))},
		{Fault: fakeplugin.FaultStaleAfterReboot, Focus: "device-plugin path reschedules a training job whose GPU node fails", Catcher: "whose GPU node fails", RestartAgents: true,
			Because: because(capacity(`after it came back`) + `|a one-device pod to run on \S+ on the \S+ path after the node came back`)},
		{Fault: fakeplugin.FaultDriverMismatch, Focus: "driver and CUDA versions the node advertises", Catcher: "driver and CUDA versions the node advertises",
			Because: because(`advertises driver \S+ \([^)]*\) but nvidia-smi in pod \S+ prints \S+`)},
		// The vendor's device test (scenarios/devicetest.go) quotes the test's last log lines, where the
		// stand-in (internal/workload/devicetest) names what the container lacks.
		{Fault: fakeplugin.FaultMissingNvidiaSMI, Focus: "runs the vendor's device test", Catcher: "runs the vendor's device test",
			Because: because(`the device test in pod \S+ on \S+ failed`, `nvidia-smi is not on PATH`)},
		// The fake agent's DCGM-exporter stand-in (internal/fakeplugin/metrics.go) and the metrics scenario.
		{Fault: fakeplugin.FaultMetricsMissingDevice, Focus: "exposes utilisation and memory metrics", Catcher: "exposes utilisation and memory metrics",
			Because: because(`device GPU-\S+ held by pod \S+ on \S+ has no DCGM_FI_DEV_GPU_UTIL and no DCGM_FI_DEV_FB_USED sample on the exporter`)},
		{Fault: fakeplugin.FaultMetricsWrongPod, Focus: "exposes utilisation and memory metrics", Catcher: "exposes utilisation and memory metrics",
			Because: because(`device GPU-\S+ held by pod (\S+) is attributed to \S+-misattributed on the exporter, not to its holder`)},
		// Cluster faults of the operator and platform checks (cmd/gpuconform-dev/selfcheck_platform.go).
		{Fault: fakeplugin.FaultKueueWebhookSkipsValidation, Focus: "rejects an invalid ResourceFlavor", Catcher: "rejects an invalid ResourceFlavor",
			Because: because(`the API server accepted ResourceFlavor \S+ with nodeLabels value "not a label value!" \(dry run\): Kueue's validating webhook did not run`)},
		{Fault: fakeplugin.FaultMetricsAPIUnavailable, Focus: "serves a registered custom metrics API", Catcher: "serves a registered custom metrics API",
			Because: because(`a metrics API is registered but not available`, `APIService v1beta1\.custom\.metrics\.k8s\.io \(service monitoring/prometheus-adapter\): Available=False`)},
		{Fault: fakeplugin.FaultHPAMetricUnserved, Focus: "scales a GPU Deployment with an HPA", Catcher: "scales a GPU Deployment with an HPA",
			Because: because(`the custom metrics API does not serve gpuconform_inference_requests_per_second for pod \S+`)},
		{Fault: fakeplugin.FaultHPAControllerOff, Focus: "scales a GPU Deployment with an HPA", Catcher: "scales a GPU Deployment with an HPA",
			Because: because(`waiting for 2 running replicas of Deployment \S+`, `HPA serve: current 0, desired 0 replicas`)},
		{Fault: fakeplugin.FaultAutoscalerUnhealthy, Focus: "shows a cluster autoscaler", Catcher: "shows a cluster autoscaler",
			Because: because(`cluster-autoscaler's status \(ConfigMap kube-system/cluster-autoscaler-status\) gives its cluster-wide health as Unhealthy`)},
		{Fault: fakeplugin.FaultAutoscalerDown, Focus: "grows the autoscaled GPU node group", Catcher: "grows the autoscaled GPU node group",
			Because: because(`waiting for the autoscaler to add a node to gpuconform\.io/pool=autoscaled for pod \S+`, `pod \S+ is not bound: PodScheduled=False Unschedulable`)},
		{Fault: fakeplugin.FaultAutoscalerNoScaleDown, Focus: "grows the autoscaled GPU node group", Catcher: "grows the autoscaled GPU node group",
			Because: because(`waiting for the autoscaler to remove node \S+ from gpuconform\.io/pool=autoscaled once empty`, `node \S+ is still there`)},
		{Fault: fakeplugin.FaultGatewayNoController, Focus: "serves the Gateway API", Catcher: "serves the Gateway API",
			Because: because(`the Gateway API is served but no controller accepted a GatewayClass`)},
		{Fault: fakeplugin.FaultGatewayDown, Focus: "routes inference traffic to GPU model servers", Catcher: "routes inference traffic to GPU model servers",
			Because: because(`waiting for Gateway \S+ programmed and HTTPRoute \S+ accepted by traefik\.io/gateway-controller`, `no controller has written the Gateway's status in \S+`)},
		{Fault: fakeplugin.FaultGatewayWeightsStripped, Focus: "routes inference traffic to GPU model servers", Catcher: "routes inference traffic to GPU model servers",
			Because: because(`plain requests were split map\[\S+:\d+ \S+:\d+\], want \S+:\S+ 3:1`)},
		// The local Prometheus restarted with its pod discovery limited to its own namespace
		// (cmd/gpuconform-dev/selfcheck_monitoring.go); the service metrics scenario reads its target list.
		{Fault: fakeplugin.FaultMonitoringOwnNamespaceOnly, Focus: "own metrics collected by the cluster's monitoring", Catcher: "own metrics collected by the cluster's monitoring",
			Because: because(`has not collected pod \S+'s gpuconform_inference_requests_total \(no series\)`, `it has no target, active or dropped, for pod \S+: its discovery does not see the pod's namespace`)},
		// A driver version that leaves the GPUs slow, rehearsed on the canary pool (the only pool it reaches):
		// the clocks nvidia-smi shows in the representative load's container there against the known-good
		// pool's (framework/upgrade Load.ClockFinding).
		{Fault: fakeplugin.FaultSlowGPU, Upgrade: true, Focus: "upgrades the canary pool", Catcher: "upgrades the canary pool",
			Because: because(`representative load: the upgraded canary \S+ runs its GPU at \d+ of \d+ MHz`, `clocks\.sm below [\d.]+ of clocks\.max\.sm on the canary only`)},
		// A DRA driver release that cannot start, rolled on the canary pool with a surge (scenarios/
		// dra_upgrade.go): the new plugin pod crash-loops, the old one keeps serving, and the rehearsal names both.
		{Fault: fakeplugin.FaultDRAPluginNoStart, DRAUpgrade: true, Focus: "rolls the DRA kubelet plugin", Catcher: "rolls the DRA kubelet plugin",
			Because: because(`the new plugin pod \S+ \(DaemonSet \S+, version \S+-dra-plugin-no-start\) cannot start \(CrashLoopBackOff`,
				`still there from before the roll: \S+ \(DaemonSet \S+, version \S+\) Ready=true`)},
		// A DRA driver release that deletes its node's slices at start: the rehearsal's slice watch.
		{Fault: fakeplugin.FaultDRASliceChurn, DRAUpgrade: true, Focus: "rolls the DRA kubelet plugin", Catcher: "rolls the DRA kubelet plugin",
			Because: because(`ResourceSlice \S+ of \S+ \(\d+ devices\) deleted`, `\S+ offered 0 of its \d+ devices of \S+`)},
		// A cluster fault (cmd/gpuconform-dev/selfcheck_kueue.go): Kueue restarted without waitForPodsReady.
		{Fault: fakeplugin.FaultKueueNoPodsReady, Focus: "never keeps part of a gang running", Catcher: "never keeps part of a gang running",
			Because: because(`gang \S+ started partly and stayed so for \S+: worker \d+ on \S+.* run; .*wait; Kueue waitForPodsReady off`)},
		// The sharing modes' faults, each in the mode it breaks (scenarios/sharing*.go; the replica limit is
		// framework/gpu CheckExclusive's, from the labels' replicas).
		{Fault: fakeplugin.FaultExtraReplica, Sharing: sharingMode{Mode: fakegpu.SharingTimeSlicing, Replicas: 2},
			Focus: "maps every time-slicing replica", Catcher: "maps every time-slicing replica",
			Because: because(`which the node's labels share 2 ways .*: a device was handed out more often than it has replicas`)},
		// On the DRA path time-slicing shares each GPU by its memory capacity (scenarios/sharing_dra_capacity.go).
		{Fault: fakeplugin.FaultDRACapacityOverstated, Sharing: sharingMode{Mode: fakegpu.SharingTimeSlicing, Replicas: 2},
			Focus: "shares one GPU among as many claims as its published capacity allows", Catcher: "shares one GPU among as many claims as its published capacity allows",
			Because: because(`publishes \S+ capacity \S+ \(\d+ MiB\), but the GPU shows \d+ MiB of memory in pod \S+: the driver overstates the capacity`)},
		{Fault: fakeplugin.FaultMPSNoLimits, Sharing: sharingMode{Mode: fakegpu.SharingMPS, Replicas: 2},
			Focus: "maps every mps replica", Catcher: "maps every mps replica",
			Because: because(`lacks its MPS limits: the MPS control daemon behind CUDA_MPS_PIPE_DIRECTORY=\S+, asked through nvidia-cuda-mps-control in the container, has no default limits set: get_default_active_thread_percentage answered "100\.0" \(the daemon's default: no limit\), want 50 `)},
		{Fault: fakeplugin.FaultMIGWithParent, Sharing: sharingMode{Mode: fakegpu.SharingMIGMixed, Replicas: 1},
			Focus: "never beside its whole parent GPU", Catcher: "never beside its whole parent GPU",
			Because: because(`GPU \S+ is held whole by pod \S+ while pod \S+ holds its MIG device MIG-\S+ \(\S+\), both running on \S+: a MIG device's parent was handed out with it`)},
		{Fault: fakeplugin.FaultDRAPartitionNoCounters, Sharing: sharingMode{Mode: fakegpu.SharingMIGMixed, Replicas: 1},
			Focus: "does not allocate a partition of a GPU whose whole device", Catcher: "does not allocate a partition of a GPU whose whole device",
			Because: because(`GPU GPU-\S+ and its partition .+ were handed out together`)},
		// The prioritized list's MIG-else-whole claim: with no counters, a partition of the GPU another pod
		// holds whole still "fits", and the claim never falls to a whole GPU.
		{Fault: fakeplugin.FaultDRAPartitionNoCounters, Check: "mig-else-whole", Sharing: sharingMode{Mode: fakegpu.SharingMIGMixed, Replicas: 1},
			Focus: "allocates a MIG partition first", Catcher: "allocates a MIG partition first",
			Because: because(`was allocated alternative gpus/mig \(.+\), where gpus/whole must be`)},
	}
}

// statusSettle covers one kubelet node-status period (nodeStatusUpdateFrequency, 10 s by default) and a
// margin: after it the API shows what a fault changed in the node's allocatable.
const statusSettle = 15 * time.Second

// selfcheckResult is one row's outcome.
type selfcheckResult struct {
	Row     selfcheckRow
	Verdict string   // NO-GO or GO (the subset run's), "-" when not run
	Failed  []string // every failed spec of the run
	// CaughtBy are the Catcher specs that failed for the fault's reason.
	CaughtBy []string
	Caught   bool
	// Reason is what the first of CaughtBy said that Because matched, or, when Catcher specs failed for
	// something else, "failed for another reason: " and the first line of one's failure.
	Reason string
	Note   string
}

// selfcheckCommand switches each fault of the fake GPU stack on, on every GPU/canary node of the local
// cluster, runs the specs that must catch it, and requires them to fail; it prints the table and exits 1
// when a row was not caught.
func selfcheckCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	h, ok := parseHarness("selfcheck", "faults", "row", "comma-separated subset of faults to check (default: all)", args, stderr)
	if !ok {
		return 2
	}
	want, err := fakeplugin.ParseFaults(h.only)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform selfcheck: --faults: %v\n", err)
		return 2
	}
	clients, err := cluster.Connect(ctx, cluster.ConnectOptions{Kubeconfig: h.kubeconfig, Timeout: 30 * time.Second})
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform selfcheck: %v\n", err)
		return 2
	}
	// make selfcheck brings the cluster up first, in its exclusive default; a row of another mode switches
	// the fake GPUs into it, and the cluster ends exclusive again.
	bin, current := shipped(h.binary), exclusive
	defer func() {
		if current == exclusive {
			return
		}
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if err := bin.switchSharing(cctx, stderr, exclusive); err != nil {
			fmt.Fprintf(stderr, "selfcheck: back to whole GPUs: %v\n", err)
		}
	}()
	rows := slices.DeleteFunc(selfcheckTable(), func(row selfcheckRow) bool { return len(want) > 0 && !slices.Contains(want, row.Fault) })
	return runRows(rows, func(row selfcheckRow) selfcheckResult {
		res := selfcheckResult{Row: row, Verdict: "-"}
		if row.NoCheck != "" {
			res.Note = row.NoCheck
			return res
		}
		if m := row.mode(); m != current {
			fmt.Fprintf(stderr, "selfcheck: switching the fake GPUs to %s\n", m)
			if err := bin.switchSharing(ctx, stderr, m); err != nil {
				res.Note = err.Error()
				return res
			}
			current = m
		}
		fmt.Fprintf(stderr, "selfcheck: %s on, running specs matching %q\n", row.key(), row.Focus)
		return runSelfcheckRow(ctx, clients, bin, h.kubeconfig, filepath.Join(h.artifacts, strings.ReplaceAll(row.key(), "/", "-")), row, stderr)
	}, func(rs []selfcheckResult) { printSelfcheck(stdout, rs) }, func(r selfcheckResult) bool { return r.Caught })
}

// runSelfcheckRow switches the row's fault on, runs the specs that must catch it with the shipped binary,
// and switches the fault off again.
func runSelfcheckRow(ctx context.Context, clients *cluster.Clients, bin shipped, kubeconfig, dir string, row selfcheckRow, stderr io.Writer) selfcheckResult {
	res := selfcheckResult{Row: row, Verdict: "-"}
	kube := clients.Kube
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: localcluster.PoolLabel})
	if err != nil || len(nodes.Items) == 0 {
		res.Note = fmt.Sprintf("cannot list the pool nodes: %v", err)
		return res
	}
	set := func(value *string) error {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fakeplugin.FaultsAnnotation: value}}})
		for _, n := range nodes.Items {
			if _, err := kube.CoreV1().Nodes().Patch(ctx, n.Name, k8stypes.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
	if row.Upgrade {
		target, err := (&upgrade.Local{Kube: kube, Namespace: localcluster.SystemNamespace}).LocalTarget(ctx)
		if err != nil || target == "" {
			res.Note = fmt.Sprintf("the local fake stack declares no upgrade target (%v)", err)
			return res
		}
		// The rehearsal rolls the canary back itself, also when it fails.
		return runSelfcheckSpecs(ctx, bin, kubeconfig, dir, res, stderr, "--upgrade-to="+target+"-"+string(row.Fault))
	}
	if row.DRAUpgrade {
		target, err := (&upgrade.LocalDRA{Kube: kube, Namespace: localcluster.SystemNamespace}).LocalTarget(ctx)
		if err != nil || target == "" {
			res.Note = fmt.Sprintf("the local canary agent declares no plugin upgrade target (%v)", err)
			return res
		}
		// The rehearsal rolls the plugin back itself, also when it fails.
		return runSelfcheckSpecs(ctx, bin, kubeconfig, dir, res, stderr, "--dra-upgrade-to="+target+"-"+string(row.Fault))
	}
	if row.Fault.Cluster() {
		undo, err := applyClusterFault(ctx, clients, row.Fault)
		if err != nil {
			res.Note = "switching the fault on: " + err.Error()
			return res
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			if err := undo(cctx); err != nil {
				fmt.Fprintf(stderr, "selfcheck: switching %s off: %v\n", row.Fault, err)
			}
		}()
		return runSelfcheckSpecs(ctx, bin, kubeconfig, dir, res, stderr)
	}
	on := string(row.Fault)
	start := time.Now()
	if err := set(&on); err != nil {
		res.Note = "switching the fault on: " + err.Error()
		return res
	}
	defer func() {
		// A fresh context: the fault must come off even when ctx was cancelled.
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		off := time.Now()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fakeplugin.FaultsAnnotation: nil}}})
		for _, n := range nodes.Items {
			_, _ = kube.CoreV1().Nodes().Patch(cctx, n.Name, k8stypes.MergePatchType, patch, metav1.PatchOptions{})
		}
		_ = waitAgentsLogged(cctx, kube, nodes.Items, off, "was="+on)
		if row.RestartAgents {
			restartAgents(cctx, kube, nodes.Items, stderr)
		}
	}()
	if err := waitAgentsLogged(ctx, kube, nodes.Items, start, "faults="+on); err != nil {
		res.Note = err.Error()
		return res
	}
	// What the agents now advertise reaches the Node objects with the kubelet's next status update (every
	// 10 s by default); the run's discovery must see it, or it sizes its checks from the old allocatable.
	select {
	case <-ctx.Done():
	case <-time.After(statusSettle):
	}
	return runSelfcheckSpecs(ctx, bin, kubeconfig, dir, res, stderr)
}

// runSelfcheckSpecs runs the row's specs with its fault on, and judges the run.
func runSelfcheckSpecs(ctx context.Context, bin shipped, kubeconfig, dir string, res selfcheckResult, stderr io.Writer, extra ...string) selfcheckResult {
	row := res.Row
	_ = os.RemoveAll(dir)
	_ = os.MkdirAll(filepath.Dir(dir), 0o755)
	log := io.Discard
	if f, err := os.Create(dir + ".log"); err == nil {
		defer f.Close()
		log = f
	}
	runErr := bin.run(ctx, log, slices.Concat([]string{"--timeout=30m", "--kubeconfig=" + kubeconfig, "--artifacts=" + dir, "--disruptive",
		"--ginkgo.no-color", "--ginkgo.focus=" + regexp.QuoteMeta(row.Focus)}, localcluster.AutoscalingRunArgs, extra)...)
	suites, err := reports.ReadGinkgoJSON(filepath.Join(dir, "gpuconform-report.json"))
	if err != nil {
		res.Note = fmt.Sprintf("no report from the run (%v; run error %v; log %s.log)", err, runErr, dir)
		return res
	}
	res.Verdict = "GO"
	if runErr != nil {
		res.Verdict = "NO-GO"
	}
	judgeSelfcheckRow(&res, suites)
	fmt.Fprintf(stderr, "selfcheck: %s → %s (%d failed spec(s); log %s.log)\n", row.key(), res.Verdict, len(res.Failed), dir)
	return res
}

// judgeSelfcheckRow decides from the run's Ginkgo report whether the row's fault was caught: the run is
// NO-GO and a spec whose text contains Catcher failed with a message that Because matches.
func judgeSelfcheckRow(res *selfcheckResult, suites []types.Report) {
	var failed []types.SpecReport
	setup := "" // a suite node (BeforeSuite, say) that failed: no spec ran, so none could catch the fault
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			switch {
			case reports.SpecResult(sp) == reports.ResultFailed:
				failed = append(failed, sp)
			case sp.LeafNodeType.Is(types.NodeTypesForSuiteLevelNodes) && sp.State.Is(types.SpecStateFailureStates) && setup == "":
				setup = "the suite's " + sp.LeafNodeType.String() + " failed, so no spec ran: " + firstLine(sp.Failure.Message)
			}
		}
	}
	slices.SortStableFunc(failed, func(a, b types.SpecReport) int { return strings.Compare(a.FullText(), b.FullText()) })
	other := ""
	for _, sp := range failed {
		name := sp.FullText()
		res.Failed = append(res.Failed, name)
		if !strings.Contains(name, res.Row.Catcher) {
			continue
		}
		said, ok := matchAll(res.Row.Because, sp.Failure.Message)
		switch {
		case ok:
			res.CaughtBy = append(res.CaughtBy, name)
			res.Reason = cmp.Or(res.Reason, said)
		case other == "":
			other = "failed for another reason: " + firstLine(sp.Failure.Message)
		}
	}
	res.Caught = len(res.CaughtBy) > 0 && res.Verdict == "NO-GO"
	switch {
	case res.Caught:
	case len(res.CaughtBy) > 0:
		res.Note = "the run's verdict is " + res.Verdict + " although a spec matching " + strconv.Quote(res.Row.Catcher) + " failed"
	case other != "":
		res.Reason = other
		res.Note = "no spec matching " + strconv.Quote(res.Row.Catcher) + " failed for the fault's reason"
	case setup != "":
		res.Reason = setup
		res.Note = "no spec matching " + strconv.Quote(res.Row.Catcher) + " ran"
	default:
		res.Note = "no spec matching " + strconv.Quote(res.Row.Catcher) + " failed"
	}
}

// matchAll reports whether every expression matches msg, with the matched texts (each cut to a table
// cell) joined.
func matchAll(exprs []*regexp.Regexp, msg string) (string, bool) {
	if len(exprs) == 0 {
		return "", false
	}
	said := make([]string, 0, len(exprs))
	for _, e := range exprs {
		loc := e.FindStringIndex(msg)
		if loc == nil {
			return "", false
		}
		said = append(said, cell(msg[loc[0]:loc[1]]))
	}
	return strings.Join(said, " + "), true
}

// firstLine is textcut.FirstLine cut to a table cell, or says there was no message.
func firstLine(msg string) string {
	if said := textcut.FirstLine(msg); said != "" {
		return cell(said)
	}
	return "(no failure message)"
}

// cell cuts s to a table cell's width.
func cell(s string) string {
	const width = 120
	if r := []rune(s); len(r) > width {
		return string(r[:width-1]) + "…"
	}
	return s
}

// restartAgents deletes the fake GPU agent pods of the pool (their DaemonSet recreates them) and waits until
// every pool node advertises its device-plugin GPUs again.
func restartAgents(ctx context.Context, kube kubernetes.Interface, nodes []corev1.Node, stderr io.Writer) {
	_ = kube.CoreV1().Pods(localcluster.SystemNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: agentSelector})
	for _, n := range nodes {
		want := n.Status.Capacity[corev1.ResourceName(localcluster.GPUResource)]
		err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // a failed read is retried until the node answers or ctx ends
			}
			q := got.Status.Allocatable[corev1.ResourceName(localcluster.GPUResource)]
			return q.Cmp(want) == 0 || want.IsZero(), nil
		})
		if err != nil {
			fmt.Fprintf(stderr, "selfcheck: %s did not advertise its GPUs again after the agents restarted: %v\n", n.Name, err)
			return
		}
	}
}

// agentSelector selects the fake GPU agent pods.
const agentSelector = "app.kubernetes.io/name=fake-device-plugin"

// waitAgentsLogged waits, up to a minute in all, until the fake GPU agent on every node has logged that
// the faults in force changed (with the given fragment) since start.
func waitAgentsLogged(ctx context.Context, kube kubernetes.Interface, nodes []corev1.Node, start time.Time, fragment string) error {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	since := metav1.NewTime(start.Add(-time.Second))
	for _, n := range nodes {
		err := wait.PollUntilContextCancel(wctx, time.Second, true, func(ctx context.Context) (bool, error) {
			pods, err := kube.CoreV1().Pods(localcluster.SystemNamespace).List(ctx, metav1.ListOptions{
				LabelSelector: agentSelector, FieldSelector: "spec.nodeName=" + n.Name})
			if err != nil {
				return false, nil
			}
			for _, p := range pods.Items {
				logs, err := kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &since}).DoRaw(ctx)
				if err != nil {
					continue
				}
				for line := range strings.SplitSeq(string(logs), "\n") {
					if strings.Contains(line, fakeplugin.LogFaultsChanged) && strings.Contains(line, fragment) {
						return true, nil
					}
				}
			}
			return false, nil
		})
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return fmt.Errorf("the fake GPU agent on %s did not log %q with %q within a minute", n.Name, fakeplugin.LogFaultsChanged, fragment)
		}
	}
	return nil
}

// printSelfcheck prints one row per fault: the run's verdict, whether the fault was caught, the specs
// that caught it (or why none did) and the reason they failed for.
func printSelfcheck(w io.Writer, results []selfcheckResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tVERDICT\tCAUGHT\tCATCHING SPEC / WHY NOT\tREASON")
	caught := 0
	for _, r := range results {
		mark, why := "no", r.Note
		if r.Caught {
			mark, why = "yes", strings.Join(r.CaughtBy, " | ")
			caught++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Row.key(), r.Verdict, mark, why, cmp.Or(r.Reason, "-"))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "selfcheck: %d passed, %d failed\n", caught, len(results)-caught)
}
