package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/internal/fakeplugin"
)

func TestSelfcheckTableCoversEveryFault(t *testing.T) {
	rows := map[fakeplugin.Fault]int{}
	for _, r := range selfcheckTable() {
		if r.Check == "" { // a fault's own row; a second one, with a Check, proves another check with it
			rows[r.Fault]++
		}
		if (r.Focus == "") == (r.NoCheck == "") {
			t.Errorf("%s: a row either names the specs that catch it or says why none does", r.Fault)
		}
		if r.Focus != "" && (r.Catcher == "" || len(r.Because) == 0) {
			t.Errorf("%s: a row that runs specs names the catching spec and the reason it must fail for", r.Fault)
		}
	}
	for _, f := range fakeplugin.AllFaults() {
		if rows[f] != 1 {
			t.Errorf("fault %s has %d rows of its own (no Check) in the selfcheck table, want 1", f, rows[f])
		}
	}
}

// sampleFailures are, per fault, a failure message of its catching spec as the check prints it (the
// formats of scenarios/, framework/wait and framework/diagnose, filled in as a run on the local cluster
// fills them).
func sampleFailures() map[fakeplugin.Fault]string {
	return map[fakeplugin.Fault]string{
		fakeplugin.FaultWrongIDs: "container saw [GPU-6b1e] but kubelet pod-resources API on gpuconform-worker allocated [GPU-0c2f] (node gpuconform-worker; probe: 1 device visible: [GPU-6b1e] (as expected))",
		fakeplugin.FaultOverAdvertise: "Timed out after 91.000s.\ntimed out after 1m31s waiting for pod isol-x/fill-3 to run\n\nDiagnosis of Pod isol-x/fill-3:\nDiagnosis of Pod isol-x/fill-3\n" +
			"  Stage:   Starting\n  Layer:   Runtime\n  Reason:  ContainerCreateFailed: The container runtime cannot create or start the container.\n" +
			"  Evidence:\n    - container workload waiting: CreateContainerError: failed to create containerd container: CDI device injection failed: unresolvable CDI devices nvidia.com/gpu=gpu4\n",
		fakeplugin.FaultDoubleAllocate: "container saw [GPU-0c2f] but kubelet pod-resources API on gpuconform-worker allocated [GPU-9d3a] (node gpuconform-worker; probe: 1 device visible: [GPU-0c2f] (as expected))",
		fakeplugin.FaultIgnoreHealth: "Timed out after 60.001s.\ntimed out after 1m0s waiting for gpuconform-worker to offer 3 devices on the device-plugin path (GPU-0c2f withdrawn)\n\nDiagnosis of Node /gpuconform-worker:\n" +
			"Node gpuconform-worker:\n  nvidia.com/gpu: capacity 4, allocatable 4\ngpuconform-worker offers 4 devices on the device-plugin path\nExpected\n    <int64>: 4\nto equal\n    <int64>: 3",
		fakeplugin.FaultLeakAll: "Told to stop trying after 8.002s.\ngave up after 8s waiting for pod isol-x/isolated-0 to run: the diagnosis of Pod isol-x/isolated-0 is final (pod phase)\n\nDiagnosis of Pod isol-x/isolated-0:\n" +
			"  Reason:  ApplicationError: The application exited with an error or keeps crashing.\n  Evidence:\n" +
			`    - container init terminated: exit code 1, reason Error: {"devices":["GPU-0c2f","GPU-6b1e"],"ok":false,"message":"expected 0 devices, container sees 2: [GPU-0c2f GPU-6b1e]"}`,
		fakeplugin.FaultDRAPrepareFail: "Timed out after 91.000s.\ntimed out after 1m31s waiting for pod alloc-x/held-1 to run\n\nDiagnosis of Pod alloc-x/held-1:\n" +
			"  Reason:  DRAPrepareFailed: The kubelet could not prepare the allocated devices through the DRA driver.\n  Evidence:\n" +
			"    - Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim held-1-gpu-7x: fake GPU driver on gpuconform-worker: prepare of claim alloc-x/held-1-gpu-7x failed (fault injection dra-prepare-fail)\n",
		fakeplugin.FaultDRANoSubrequests: "Timed out after 91.000s.\ntimed out after 1m31s waiting for pod prio-x/prio to run\n\nDiagnosis of Pod prio-x/prio:\n" +
			"  Reason:  DRAPrepareFailed: The kubelet could not prepare the allocated devices through the DRA driver.\n  Evidence:\n" +
			"    - Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim prio-gpus-7x: fake GPU driver on gpuconform-worker: " +
			"claim prio-x/prio-gpus-7x has no request \"gpus/one\" for device gpu-2 (its requests: gpus; alternative \"one\" ignored; fault injection dra-no-subrequests)\n",
		fakeplugin.FaultDRAXIDIgnored: "Timed out after 61.237s.\ntimed out after 1m1s waiting for gpuconform-worker to offer 3 devices on the dra path (GPU-648a1326-9e54-58a0-b0c0-22201bb54997 withdrawn)\n\nDiagnosis of Node /gpuconform-worker:\n" +
			"gpuconform-worker offers 4 devices on the dra path; GPU-648a1326-9e54-58a0-b0c0-22201bb54997 (gpuconform-worker/gpu-4), reported unhealthy through local (docker, fake GPU agent), " +
			"is in ResourceSlice gpuconform-worker-gpu.nvidia.com-r6pkx with taint gpu.nvidia.com/xid=79:None\nExpected\n    <int64>: 4\nto equal\n    <int64>: 3",
		fakeplugin.FaultDRATolerationsStripped: "Told to stop trying after 1.204s.\npod gpuconform-fail-x/tolerant, whose claim's template tolerates gpuconform.io/unhealthy (Exists:NoExecute), was evicted from GPU-8ea8 " +
			"when the device was tainted NoExecute (DisruptionTarget: DeletionByDeviceTaintManager: Device Taint manager: deleting due to NoExecute taint); its claim tolerant-gpus-7x, " +
			"generated from template tolerant-gpus, which has the toleration, carries none: something between them dropped it (a mutating admission policy or webhook on resourceclaims: kubectl get mutatingadmissionpolicies,mutatingwebhookconfigurations)",
		fakeplugin.FaultDRANoTaintEviction: "Told to stop trying after 41.022s.\npod train-cnd7b was not evicted from the unhealthy device GPU-8ea81920-660a-552a-a8b0-f9bf418d6fd0 (phase Succeeded: it finished there): " +
			"DeviceTaintRule gpuconform-20261206-203404-4083be-gpuconform-worker3-gpu-4 has no status condition: kube-controller-manager's device-taint-eviction-controller has not processed it",
		fakeplugin.FaultDRANoAdminAccess: "Timed out after 91.000s.\ntimed out after 1m31s waiting for pod gpuconform-admin-mon-x/monitor to run\n\nDiagnosis of Pod gpuconform-admin-mon-x/monitor:\n" +
			"  Reason:  DRAPrepareFailed: The kubelet could not prepare the allocated devices through the DRA driver.\n  Evidence:\n" +
			"    - Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim monitor-gpus-7x: fake GPU driver on gpuconform-worker: " +
			"device gpu-2 of claim gpuconform-admin-mon-x/monitor-gpus-7x is in use by another claim: refusing to hand it out twice (admin access not supported; fault injection dra-no-admin-access)\n",
		fakeplugin.FaultPhantomSliceDevice: "Timed out after 91.000s.\ntimed out after 1m31s waiting for pod isol-x/fill-4 to run\n\nDiagnosis of Pod isol-x/fill-4:\n" +
			"  Reason:  DRAPrepareFailed: The kubelet could not prepare the allocated devices through the DRA driver.\n  Evidence:\n" +
			"    - Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim fill-4-gpu-2b: fake GPU driver on gpuconform-worker: device gpu-8 of claim isol-x/fill-4-gpu-2b does not exist on this node (it has gpu-4..gpu-7)\n",
		fakeplugin.FaultNoReregister: "Timed out after 120.000s.\ntimed out after 2m0s waiting for gpuconform-worker2 to offer 4 devices on the device-plugin path (after the kubelet restart)\n\nDiagnosis of Node /gpuconform-worker2:\n" +
			"Node gpuconform-worker2:\n  nvidia.com/gpu: capacity 0, allocatable 0\n",
		fakeplugin.FaultDRANoRepublish: "Timed out after 120.000s.\ntimed out after 2m0s waiting for gpuconform-worker to offer 4 devices on the dra path (after the kubelet restart, in ResourceSlices published anew)\n" +
			"gpuconform-worker offers 0 devices on the dra path in 0 ResourceSlices published after the restart\nExpected\n    <int64>: 0\nto equal\n    <int64>: 4\n",
		fakeplugin.FaultStaleAfterReboot: "Timed out after 300.000s.\ntimed out after 5m0s waiting for gpuconform-worker to offer 4 devices on the device-plugin path (after it came back)\n\nDiagnosis of Node /gpuconform-worker:\n" +
			"Node gpuconform-worker:\n  Ready=True (KubeletReady)\n",
		fakeplugin.FaultDriverMismatch: "node gpuconform-worker advertises driver 550.54.15 (node labels nvidia.com/cuda.driver-version.full, nvidia.com/cuda.runtime-version.full) but nvidia-smi in pod driver-0 prints 551.54.15\n" +
			"Expected\n    <string>: 551.54.15\nto equal\n    <string>: 550.54.15",
		fakeplugin.FaultMissingNvidiaSMI: deviceTestFailure(`"missing":["nvidia-smi is not on PATH (PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin): the driver's user-space tools were not injected into the container"]`),
		fakeplugin.FaultMetricsMissingDevice: "Timed out after 30.001s.\ntimed out after 30s waiting for the devices of pod metrics-x/metrics-2 on the accelerator metrics endpoint\n" +
			"device GPU-0c2f held by pod metrics-x/metrics-2 on gpuconform-worker has no DCGM_FI_DEV_GPU_UTIL and no DCGM_FI_DEV_FB_USED sample on the exporter (devices it lists: GPU-6b1e, GPU-9d3a)",
		fakeplugin.FaultMetricsWrongPod: "Timed out after 30.001s.\ntimed out after 30s waiting for the devices of pod metrics-x/metrics-2 on the accelerator metrics endpoint\n" +
			"device GPU-0c2f held by pod metrics-x/metrics-2 is attributed to metrics-x/metrics-2-misattributed on the exporter, not to its holder",
		fakeplugin.FaultKueueNoPodsReady: "gang gpuconform-gang-x/toobig started partly and stayed so for 1m0s: worker 0 on gpuconform-worker2, worker 1 on gpuconform-worker run; worker 2 (Unschedulable: 0/4 nodes are available: 2 Insufficient nvidia.com/gpu) wait; " +
			"Kueue waitForPodsReady off: Kueue's Configuration has no waitForPodsReady: nothing withdraws a gang that only partly fits, whose running workers hold devices they cannot use",
		// Measured on the local cluster (make selfcheck of these faults).
		fakeplugin.FaultKueueWebhookSkipsValidation: "the API server accepted ResourceFlavor invalid-gpuconform-operator-hsh8r with nodeLabels value \"not a label value!\" (dry run): Kueue's validating webhook did not run for it; " +
			"webhooks with a rule on resourceflavors: kueue-validating-webhook-configuration/vresourceflavor.kb.io",
		fakeplugin.FaultMetricsAPIUnavailable: "a metrics API is registered but not available: the HPA cannot read AI metrics through it\nExpected\n    <[]string | len:1, cap:1>: [\n" +
			"        \"APIService v1beta1.custom.metrics.k8s.io (service monitoring/prometheus-adapter): Available=False MissingEndpoints endpointslices for service/prometheus-adapter in \\\"monitoring\\\" have no addresses with port name \\\"https\\\"\",\n    ]\nto be empty",
		fakeplugin.FaultHPAControllerOff: "Timed out after 210.001s.\ntimed out after 3m30s waiting for 2 running replicas of Deployment gpuconform-hpa-x/serve\n" +
			"pods of Deployment gpuconform-hpa-x/serve: serve-5d8f-abcde Running on \"gpuconform-worker2\"; HPA serve: current 0, desired 0 replicas\nExpected\n    <[]string | len:1, cap:1>: [\"serve-5d8f-abcde\"]\nto have length 2",
		fakeplugin.FaultHPAMetricUnserved: "Timed out after 120.001s.\ntimed out after 2m0s waiting for the custom metrics API to serve gpuconform_inference_requests_per_second for pod hpa-x/serve-5d8f-abcde above zero\n" +
			"the custom metrics API does not serve gpuconform_inference_requests_per_second for pod hpa-x/serve-5d8f-abcde: its adapter has no rule that maps the pod's series to that name, " +
			"or has not relisted since the pod's first scrape (name the metric it serves with --hpa-metric)\nUnexpected error:\n    <*errors.StatusError>: the server could not find the metric gpuconform_inference_requests_per_second for pods",
		fakeplugin.FaultAutoscalerUnhealthy: "cluster-autoscaler's status (ConfigMap kube-system/cluster-autoscaler-status) gives its cluster-wide health as Unhealthy: it cannot scale node groups\nExpected\n    <string>: Unhealthy\nto equal\n    <string>: Healthy",
		fakeplugin.FaultAutoscalerDown: "Timed out after 180.227s.\ntimed out after 3m0s waiting for the autoscaler to add a node to gpuconform.io/pool=autoscaled for pod gpuconform-nodescale-rzfv2/grow\n\n" +
			"Expected success, but got an error:\n    pod gpuconform-nodescale-rzfv2/grow is not bound: PodScheduled=False Unschedulable since 12:06:50: 0/6 nodes are available: 1 node(s) had untolerated taint(s), " +
			"5 node(s) didn't match Pod's node affinity/selector. preemption: 0/6 nodes are available: 6 Preemption is not helpful for scheduling.; the pod's events: FailedScheduling Warning (default-scheduler ×1): " +
			"0/6 nodes are available: 1 node(s) had untolerated taint(s), 5 node(s) didn't match Pod's node affinity/selector.",
		fakeplugin.FaultAutoscalerNoScaleDown: "Timed out after 180.966s.\ntimed out after 3m1s waiting for the autoscaler to remove node kwok-gpuconform-gpu-hn9mf-razorlake-2-ofsrqawkfg-3287889685 from gpuconform.io/pool=autoscaled once empty\n\n" +
			"Expected success, but got an error:\n    node kwok-gpuconform-gpu-hn9mf-razorlake-2-ofsrqawkfg-3287889685 is still there (taints [gpuconform.io/autoscaled=true:NoSchedule], unschedulable false, deleting false): " +
			"the autoscaler did not remove it once empty; its events: RegisteredNode: Node kwok-gpuconform-gpu-hn9mf-razorlake-2-ofsrqawkfg-3287889685 event: Registered Node in Controller | " +
			"DisruptionBlocked: Node is nominated for a pending pod | Unconsolidatable: NodePool \"gpuconform-gpu\" has consolidation disabled",
		fakeplugin.FaultGatewayNoController: "the Gateway API is served but no controller accepted a GatewayClass (1 GatewayClass(es)): no implementation serves it\nExpected\n    <[]string | len:0, cap:0>: nil\nnot to be empty",
		fakeplugin.FaultGatewayDown: "gave up after 1m5s waiting for Gateway gpuconform-gateway-p56vr/inference programmed and HTTPRoute gpuconform-gateway-p56vr/inference accepted by traefik.io/gateway-controller: " +
			"the diagnosis of HTTPRoute gpuconform-gateway-p56vr/inference is final (no controller has written the Gateway's status in 1m7s: its conditions are the API's defaults (Waiting for controller); " +
			"the GatewayClass's controller is not running or does not serve this namespace\nExpected\n    <bool>: false\nto be true)",
		fakeplugin.FaultGatewayWeightsStripped: "through Gateway gpuconform-gateway-6xnwm/inference (traefik.io/gateway-controller)\nExpected success, but got an error:\n    <*errors.joinError | 0x26f11dcdb1a0>: \n" +
			"    plain requests were split map[model-a:200 model-b:200], want model-a:model-b 3:1 (model-a about 300 of 400, within 43)",
		fakeplugin.FaultMonitoringOwnNamespaceOnly: "Timed out after 30.001s.\ntimed out after 30s waiting for pod svcmetrics-x/serve's metrics collected by Prometheus Service monitoring/prometheus:web through the API server's service proxy\n" +
			"Prometheus Service monitoring/prometheus:web through the API server's service proxy has not collected pod svcmetrics-x/serve's gpuconform_inference_requests_total (no series): " +
			"gpuconform_inference_requests_total{gpuconform_nonce=\"1f2e\"}; it has no target, active or dropped, for pod svcmetrics-x/serve: its discovery does not see the pod's namespace (active scrape pools: kubernetes-pods)",
		fakeplugin.FaultExtraReplica: "GPU GPU-0c2f is held by 3 pods (ts-0, ts-4, ts-8) on gpuconform-worker, which the node's labels share 2 ways (time-slicing, 2 replicas): a device was handed out more often than it has replicas",
		fakeplugin.FaultMPSNoLimits: "pod mps-0 on an MPS node lacks its MPS limits: the MPS control daemon behind CUDA_MPS_PIPE_DIRECTORY=/mps/nvidia.com/gpu/pipe, asked through nvidia-cuda-mps-control in the container, has no default limits set: " +
			`get_default_active_thread_percentage answered "100.0" (the daemon's default: no limit), want 50 (100 divided among 2 replicas); get_default_device_pinned_mem_limit 0 answered "0" (no limit), want 40779M (81559 MiB divided among 2 replicas)`,
		fakeplugin.FaultMIGWithParent:          "GPU GPU-9d3a is held whole by pod mig-0-2 while pod mig-1-0 holds its MIG device MIG-4e1c-aa (3g.40gb), both running on gpuconform-worker: a MIG device's parent was handed out with it (1 MIG device(s) of it held in all)",
		fakeplugin.FaultDRAPartitionNoCounters: "Told to stop trying after 3.001s.\nGPU GPU-7a1b and its partition gpuconform-worker-gpu.nvidia.com-1/gpu-4-mig-1g10gb-0 were handed out together",
		fakeplugin.FaultDRAPluginNoStart: "the DRA driver's rolling upgrade on the canary pool failed: on gpuconform-worker5 the new plugin pod gpuconform-system/fake-device-plugin-canary-8xf4w " +
			"(DaemonSet fake-device-plugin-canary, version v2-dra-plugin-no-start) cannot start (CrashLoopBackOff: back-off 20s restarting failed container=fake-device-plugin; last exit: Error, exit code 1, 2 restarts); " +
			"still there from before the roll: gpuconform-system/fake-device-plugin-canary-jmmjx (DaemonSet fake-device-plugin-canary, version v1) Ready=true",
		fakeplugin.FaultDRASliceChurn: "the DRA driver's rolling upgrade on the canary pool failed: 02:40:14.968: ResourceSlice gpuconform-worker5-gpu.nvidia.com-vs4n8 of gpuconform-worker5 (4 devices) deleted; " +
			"02:40:14.968: gpuconform-worker5 offered 0 of its 4 devices of gpu.nvidia.com; 02:40:16.805: ResourceSlice gpuconform-worker5-gpu.nvidia.com-597mh of gpuconform-worker5 (4 devices) created",
		fakeplugin.FaultSlowGPU: "representative load: the upgraded canary gpuconform-worker3 runs its GPU at 495 of 1980 MHz (pstate P8, HW Slowdown active, clocks_event_reasons.active 0x0000000000000008, power.draw 86.25 of 700.00 W); " +
			"the known-good gpuconform-worker at 1980 of 1980 MHz (pstate P0, no clock event reason active, clocks_event_reasons.active 0x0000000000000000, power.draw 412.38 of 700.00 W): " +
			"clocks.sm below 0.80 of clocks.max.sm on the canary only; HW Slowdown active on the canary only",
		fakeplugin.FaultDRACapacityOverstated: "device gpu-4 (GPU GPU-7a1b) on gpuconform-worker publishes memory capacity 163118Mi (163118 MiB), but the GPU shows 81559 MiB of memory in pod cap-0: the driver overstates the capacity, so claims share more memory than the GPU has",
	}
}

// deviceTestFailure is the device test spec's failure when the stand-in's report lists missing.
func deviceTestFailure(missing string) string {
	return "the device test in pod alloc-x/device-test-k2x9q on gpuconform-worker failed (image gpuconform.local/gpu-workload:dev, command /usr/local/bin/gpu-workload device-test; exit 1, reason Error); its log ends:\n" +
		`    {"node":"gpuconform-worker","pod":"device-test-k2x9q","ok":false,"device_nodes":["/dev/nvidia0"],"nvidiactl":true,"nvidia_smi":null,` + missing + `,"message":"…"}` + "\n" +
		"    gpu-workload device-test: …"
}

// The device test failing for another layer than nvidia-smi is not missing-nvidia-smi caught.
func TestSelfcheckMissingNvidiaSMIIsTheToolOnly(t *testing.T) {
	for _, r := range selfcheckTable() {
		if r.Fault != fakeplugin.FaultMissingNvidiaSMI {
			continue
		}
		other := deviceTestFailure(`"missing":["no /dev/nvidiactl in the container: the driver's control device was not injected, so no CUDA program can reach the driver"]`)
		if said, ok := matchAll(r.Because, other); ok {
			t.Errorf("Because matches a device test that failed for its control device (%q)", said)
		}
	}
}

// Each row's Because matches what its catching check says// Each row's Because matches what its catching check says, and none matches what a check says when it
// fails for something other than a fault of the GPU stack (here: an image the node cannot pull).
func TestSelfcheckBecauseMatchesTheChecksMessages(t *testing.T) {
	unrelated := "Timed out after 91.000s.\ntimed out after 1m31s waiting for pod alloc-x/held-1 to run\n\nDiagnosis of Pod alloc-x/held-1:\n" +
		"  Reason:  ImagePullFailed: The container image cannot be pulled.\n  Evidence:\n    - container workload waiting: ImagePullBackOff: Back-off pulling image \"gpu-workload:dev\"\n"
	failureOf := sampleFailures()
	// A fault's second row quotes another check's message.
	secondRows := map[string]string{
		"dra-partition-no-counters/mig-else-whole": "claim gpuconform-prio-x/whole-next-gpus-2b was allocated alternative gpus/mig (gpus/mig → gpu.nvidia.com/gpuconform-worker3/gpu-4-mig-1g10gb-0), " +
			"where gpus/whole must be: the alternatives are mig (mig.nvidia.com, 1, device.attributes['gpu.nvidia.com'].parentUUID == 'GPU-8ea8') then whole (gpu.nvidia.com, 1)",
		"no-reregister/every-path": "Timed out after 180.001s.\ntimed out after 3m0s waiting for gpuconform-worker2 to offer 4 devices on the device-plugin path (before the spec returns it to the other specs)\n\nDiagnosis of Node /gpuconform-worker2:\n" +
			"Node gpuconform-worker2:\n  nvidia.com/gpu: capacity 0, allocatable 0\n",
	}
	keys := map[string]bool{}
	for _, r := range selfcheckTable() {
		if keys[r.key()] {
			t.Errorf("two rows named %s: a fault's second row needs a Check of its own", r.key())
		}
		keys[r.key()] = true
		msg, ok := failureOf[r.Fault]
		if r.Check != "" {
			msg, ok = secondRows[r.key()]
			if said, caught := matchAll(r.Because, failureOf[r.Fault]); caught {
				t.Errorf("%s: Because matches the fault's own row's message (%q): the row proves nothing the other does not", r.key(), said)
			}
		}
		if !ok {
			t.Errorf("%s: no sample failure message in this test", r.key())
			continue
		}
		if said, ok := matchAll(r.Because, msg); !ok || said == "" {
			t.Errorf("%s: Because %v does not match its check's message:\n%s", r.Fault, r.Because, msg)
		}
		if said, ok := matchAll(r.Because, unrelated); ok {
			t.Errorf("%s: Because matches an unrelated failure (%q)", r.Fault, said)
		}
	}
	// The two DRA prepare faults share a diagnosis reason; each row must still tell its own cause.
	rows := map[fakeplugin.Fault]selfcheckRow{}
	for _, r := range selfcheckTable() {
		if r.Check == "" {
			rows[r.Fault] = r
		}
	}
	for a, b := range map[fakeplugin.Fault]fakeplugin.Fault{
		fakeplugin.FaultDRAPrepareFail: fakeplugin.FaultPhantomSliceDevice, fakeplugin.FaultPhantomSliceDevice: fakeplugin.FaultDRAPrepareFail,
		fakeplugin.FaultNoReregister: fakeplugin.FaultStaleAfterReboot, fakeplugin.FaultIgnoreHealth: fakeplugin.FaultNoReregister,
		fakeplugin.FaultDRANoRepublish: fakeplugin.FaultNoReregister, fakeplugin.FaultDRANoSubrequests: fakeplugin.FaultDRAPrepareFail,
		fakeplugin.FaultDRANoAdminAccess: fakeplugin.FaultDRANoSubrequests, fakeplugin.FaultDRAXIDIgnored: fakeplugin.FaultIgnoreHealth,
	} {
		if said, ok := matchAll(rows[a].Because, failureOf[b]); ok {
			t.Errorf("%s's Because matches the failure %s causes (%q)", a, b, said)
		}
	}
}

// spec is a leaf spec of a synthetic Ginkgo report.
func spec(container, leaf string, state types.SpecState, message string) types.SpecReport {
	return types.SpecReport{ContainerHierarchyTexts: []string{container}, LeafNodeText: leaf, LeafNodeType: types.NodeTypeIt,
		State: state, Failure: types.Failure{Message: message}}
}

func TestSelfcheckCaughtOnlyForTheFaultsReason(t *testing.T) {
	row := selfcheckTable()[0] // wrong-ids
	const (
		dp  = "GPU allocation on the device-plugin path"
		dra = "GPU allocation on the dra path"
		it  = "shows a running pod exactly the 1 device the kubelet allocated to it, and frees them when the pod is deleted"
	)
	mismatch := sampleFailures()[fakeplugin.FaultWrongIDs]
	pullFailed := "Timed out after 91.000s.\ntimed out after 1m31s waiting for pod alloc-x/held-1 to run\n\nDiagnosis: ImagePullFailed"
	for _, tc := range []struct {
		name       string
		verdict    string
		specs      []types.SpecReport
		caught     bool
		caughtBy   []string
		reason     string
		noteHas    string
		failedSpec int
	}{
		{name: "caught", verdict: "NO-GO", caught: true,
			specs:    []types.SpecReport{spec(dp, it, types.SpecStateFailed, mismatch), spec(dra, it, types.SpecStatePassed, "")},
			caughtBy: []string{dp + " " + it}, failedSpec: 1,
			reason: "container saw [GPU-6b1e] but kubelet pod-resources API on gpuconform-worker allocated ["},
		{name: "failed for another reason", verdict: "NO-GO",
			specs:   []types.SpecReport{spec(dp, it, types.SpecStateTimedout, pullFailed), spec(dra, it, types.SpecStatePassed, "")},
			reason:  "failed for another reason: timed out after 1m31s waiting for pod alloc-x/held-1 to run",
			noteHas: "failed for the fault's reason", failedSpec: 1},
		{name: "not failed", verdict: "GO",
			specs:   []types.SpecReport{spec(dp, it, types.SpecStatePassed, ""), spec(dra, it, types.SpecStatePassed, "")},
			noteHas: `no spec matching "shows a running pod exactly" failed`},
		{name: "the reason from a spec that is not the catcher", verdict: "NO-GO",
			specs:   []types.SpecReport{spec("GPU exclusivity and isolation on the dra path", "gives each device of a full node …", types.SpecStateFailed, mismatch)},
			noteHas: `no spec matching "shows a running pod exactly" failed`, failedSpec: 1},
		{name: "the suite's set-up failed", verdict: "NO-GO",
			specs: []types.SpecReport{{LeafNodeType: types.NodeTypeSynchronizedBeforeSuite, State: types.SpecStateFailed,
				Failure: types.Failure{Message: "the cluster holds objects of earlier gpuconform runs; refusing to start\n- Namespace x"}},
				{ContainerHierarchyTexts: []string{dp}, LeafNodeText: it, LeafNodeType: types.NodeTypeIt, State: types.SpecStateSkipped}},
			reason:  "the suite's SynchronizedBeforeSuite failed, so no spec ran: the cluster holds objects of earlier gpuconform runs; refusing to start",
			noteHas: `no spec matching "shows a running pod exactly" ran`},
		{name: "the reason, but the run signed GO", verdict: "GO",
			specs:    []types.SpecReport{spec(dp, it, types.SpecStateFailed, mismatch)},
			caughtBy: []string{dp + " " + it}, noteHas: "verdict is GO", failedSpec: 1,
			reason: "container saw [GPU-6b1e] but kubelet pod-resources API on gpuconform-worker allocated ["},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := selfcheckResult{Row: row, Verdict: tc.verdict}
			judgeSelfcheckRow(&res, []types.Report{{SpecReports: tc.specs}})
			if res.Caught != tc.caught || res.Reason != tc.reason || len(res.Failed) != tc.failedSpec ||
				strings.Join(res.CaughtBy, "|") != strings.Join(tc.caughtBy, "|") || !strings.Contains(res.Note, tc.noteHas) {
				t.Errorf("got caught=%t caughtBy=%q reason=%q failed=%q note=%q", res.Caught, res.CaughtBy, res.Reason, res.Failed, res.Note)
			}
			if tc.caught && res.Note != "" {
				t.Errorf("a caught row has a note: %q", res.Note)
			}
		})
	}
}

// A failure seen on the local cluster before the driver scenario built its pods' claim templates first:
// the title-only selfcheck counted it as catching driver-mismatch.
func TestSelfcheckDriverSpecFailingOtherwiseIsNotCaught(t *testing.T) {
	var row selfcheckRow
	for _, r := range selfcheckTable() {
		if r.Fault == fakeplugin.FaultDriverMismatch {
			row = r
		}
	}
	msg := "Timed out after 91.189s.\ntimed out after 1m31s waiting for the probe report of container workload of pod gpuconform-driver-5txns/driver-0\n\n" +
		"Diagnosis of Pod gpuconform-driver-5txns/driver-0:\nDiagnosis of Pod gpuconform-driver-5txns/driver-0\n  Stage:   Scheduling\n  Layer:   DRA\n" +
		"  Reason:  DRAClaimMissing: A ResourceClaim, ResourceClaimTemplate or DeviceClass the pod needs does not exist.\n"
	res := selfcheckResult{Row: row, Verdict: "NO-GO"}
	judgeSelfcheckRow(&res, []types.Report{{SpecReports: []types.SpecReport{
		spec("GPU driver and runtime versions on the dra path", "shows a pod on each GPU node the driver and CUDA versions the node advertises on this path", types.SpecStateFailed, msg),
	}}})
	want := "failed for another reason: timed out after 1m31s waiting for the probe report of container workload of pod gpuconform-driver-5txns/driver-0"
	if res.Caught || res.Reason != want {
		t.Errorf("caught=%t reason=%q, want not caught, reason %q", res.Caught, res.Reason, want)
	}
}

func TestSelfcheckTableUncaughtRowsFail(t *testing.T) {
	var b bytes.Buffer
	printSelfcheck(&b, []selfcheckResult{
		{Row: selfcheckRow{Fault: fakeplugin.FaultLeakAll, Catcher: "second container"}, Verdict: "NO-GO", Caught: true,
			CaughtBy: []string{"GPU exclusivity and isolation on the dra path shows a GPU pod's second container …"},
			Reason:   "expected 0 devices, container sees 4"},
		{Row: selfcheckRow{Fault: fakeplugin.FaultWrongIDs, Catcher: "shows a running pod exactly"}, Verdict: "NO-GO",
			Note: "no spec matching \"shows a running pod exactly\" failed for the fault's reason", Reason: "failed for another reason: image pull"},
		{Row: selfcheckRow{Fault: fakeplugin.FaultIgnoreHealth, NoCheck: "no check"}, Verdict: "-", Note: "no check"},
	})
	out := b.String()
	for _, want := range []string{
		`^selfcheck: 1 passed, 2 failed$`,
		`^FAULT +VERDICT +CAUGHT +CATCHING SPEC / WHY NOT +REASON$`,
		`^leak-all +NO-GO +yes +GPU exclusivity .* second container … +expected 0 devices, container sees 4$`,
		`^wrong-ids +NO-GO +no +no spec .* failed for the fault's reason +failed for another reason: image pull$`,
		`^ignore-health +- +no +no check +-$`,
	} {
		if !regexpLine(out, want) {
			t.Errorf("no line of the table matches %q:\n%s", want, out)
		}
	}
}

// regexpLine reports whether a line of s matches expr.
func regexpLine(s, expr string) bool {
	for line := range strings.SplitSeq(s, "\n") {
		if ok, _ := regexp.MatchString(expr, line); ok {
			return true
		}
	}
	return false
}
