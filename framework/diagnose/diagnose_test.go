package diagnose

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuefake "sigs.k8s.io/kueue/client-go/clientset/versioned/fake"
	kueuescheme "sigs.k8s.io/kueue/client-go/clientset/versioned/scheme"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// fixtureObjects decodes a recorded multi-document YAML file.
func fixtureObjects(t *testing.T, file string) []runtime.Object {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := kueuescheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	raw, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for doc := range strings.SplitSeq(string(raw), "\n---\n") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if strings.TrimSpace(string(js)) == "null" {
			continue
		}
		obj, _, err := decoder.Decode(js, nil, nil)
		if err != nil {
			t.Fatalf("%s: decode: %v", file, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// fixtureClients loads a recorded file into fake clientsets: Kueue objects
// into the Kueue fake, everything else into the Kubernetes fake.
func fixtureClients(t *testing.T, file string) (*fake.Clientset, *kueuefake.Clientset) {
	t.Helper()
	var kubeObjs, kueueObjs []runtime.Object
	for _, obj := range fixtureObjects(t, file) {
		if obj.GetObjectKind().GroupVersionKind().Group == kueue.GroupVersion.Group {
			kueueObjs = append(kueueObjs, obj)
		} else {
			kubeObjs = append(kubeObjs, obj)
		}
	}
	return fake.NewSimpleClientset(kubeObjs...), kueuefake.NewSimpleClientset(kueueObjs...)
}

// caseClients are the fake clients of a case, with its fault in place: a
// reactor that fails the read, or no Kueue client for errNoKueue.
func caseClients(t *testing.T, tc runCase) (Clients, *fake.Clientset, *kueuefake.Clientset) {
	t.Helper()
	kube, kq := fixtureClients(t, tc.file)
	c := Clients{Kube: kube, Kueue: kq, Now: func() time.Time { return time.Time{} }} // as the recorded files: no read time
	switch f := tc.fault; {
	case f == nil:
	case errors.Is(f.Err, errNoKueue):
		c.Kueue = nil
	default:
		fail := func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, f.Err }
		kube.PrependReactor(f.Verb, f.Resource, fail)
		kq.PrependReactor(f.Verb, f.Resource, fail)
	}
	return c, kube, kq
}

type runCase struct {
	name   string
	file   string
	target Target
	// fault is a read that fails: a reactor on the fake clients for Run, a
	// ReadError in the snapshot for Decide.
	fault      *ReadError
	stage      Stage
	layer      Layer
	reason     Reason
	wantMsgs   []string // each must appear verbatim in one of Result.Messages
	wantObject string   // optional ObjectRef.String() that must be listed
	notMsgs    []string // texts that must not appear (stale or unrelated evidence)
	terminal   bool     // the verdict must be final (a wait for progress stops at once)
	onceMsgs   []string // texts that must appear in exactly one message
}

func job(name string) Target { return Target{Kind: "Job", Namespace: "ml", Name: name} }
func pod(name string) Target { return Target{Kind: "pod", Namespace: "ml", Name: name} }
func workload(name string) Target {
	return Target{Kind: "workloads.kueue.x-k8s.io", Namespace: "ml", Name: name}
}

const (
	podName = "train-0-x7k2p"
	wlName  = "job-train-5b7c9"
)

// reader is the user denied reads in the cases.
const reader = "system:serviceaccount:ml:reader"

// unserved is the API server's 404 for a resource it does not serve: it names no object.
func unserved() error { return apierrors.NewNotFound(schema.GroupResource{}, "") }

// forbidden is the API server's 403 for reader's verb on resource in the namespace ml.
func forbidden(verb, resource string) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "",
		errors.New(`User "`+reader+`" cannot `+verb+` resource "`+resource+`" in API group "" in the namespace "ml"`))
}

func runCases() []runCase {
	return []runCase{
		// Kueue layer.
		{name: "quota exhausted", file: "queue-quota-exhausted.yaml", target: job("train"),
			stage: StageQueued, layer: LayerKueue, reason: QueueQuotaExhausted,
			wantMsgs:   []string{"couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu-a100, 2 more needed"},
			wantObject: "Workload ml/job-train-5b7c9"},
		{name: "no matching flavor", file: "queue-no-matching-flavor.yaml", target: job("train"),
			terminal: true, stage: StageQueued, layer: LayerKueue, reason: QueueNoMatchingFlavor,
			wantMsgs: []string{"couldn't assign flavors to pod set main: resource example.com/gpu unavailable in ClusterQueue"}},
		{name: "local queue missing", file: "queue-inactive.yaml", target: workload(wlName),
			stage: StageQueued, layer: LayerKueue, reason: QueueInactive,
			wantMsgs: []string{"LocalQueue gpu-queue doesn't exist"}},
		{name: "cluster queue inactive", file: "queue-inactive-clusterqueue.yaml", target: workload(wlName),
			stage: StageQueued, layer: LayerKueue, reason: QueueInactive,
			wantMsgs:   []string{"Can't admit new workloads: references missing ResourceFlavor(s): gpu-a100."},
			wantObject: "ClusterQueue gpu-cq"},
		{name: "admission check pending", file: "queue-admission-check-pending.yaml", target: workload(wlName),
			stage: StageQueued, layer: LayerKueue, reason: QueueAdmissionCheckPending,
			wantMsgs: []string{"Waiting for the ProvisioningRequest ml/job-train-5b7c9-gpu-provisioning-1 to be provisioned", "The workload has not all checks ready"}},
		{name: "suspended job without queue", file: "queue-not-managed.yaml", target: job("train"),
			stage: StageQueued, layer: LayerKueue, reason: QueueNotManaged,
			wantMsgs: []string{"spec.suspend=true"}},
		{name: "evicted by PodsReady timeout", file: "workload-evicted.yaml", target: job("train"),
			stage: StageQueued, layer: LayerKueue, reason: WorkloadEvicted,
			wantMsgs: []string{"Exceeded the PodsReady timeout ml/job-train-5b7c9"}},
		{name: "preempted", file: "workload-preempted.yaml", target: job("train"),
			stage: StageQueued, layer: LayerKueue, reason: WorkloadPreempted,
			wantMsgs: []string{"Preempted to accommodate a workload (UID: 1f2e-high, JobUID: 9a8b-high) due to prioritization in the ClusterQueue; preemptor path: /gpu-cq; preemptee path: /gpu-cq"}},
		{name: "pending without a message, healthy queues", file: "queue-pending.yaml", target: workload(wlName),
			stage: StageQueued, layer: LayerKueue, reason: QueuePending},

		// Scheduler layer.
		{name: "GPU shortage behind a tainted control plane", file: "insufficient-device.yaml", target: job("train"),
			stage: StageScheduling, layer: LayerScheduler, reason: InsufficientDevice,
			wantMsgs: []string{
				"0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient nvidia.com/gpu.",
				"0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod.",
			},
			wantObject: "Pod ml/train-x7k2p",
			// The fixture also holds a newer event about an earlier pod with the same name.
			notMsgs: []string{"3 node(s) didn't match Pod's node affinity/selector"}},
		{name: "cpu", file: "insufficient-cpu.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerScheduler, reason: InsufficientCPU,
			wantMsgs: []string{"0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu."}},
		{name: "memory dominates cpu", file: "insufficient-memory.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerScheduler, reason: InsufficientMemory,
			wantMsgs: []string{"2 Insufficient memory."}},
		{name: "taint", file: "untolerated-taint.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerScheduler, reason: UntoleratedTaint,
			wantMsgs: []string{"2 node(s) had untolerated taint(s)."}},
		{name: "selector", file: "node-selector-mismatch.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerScheduler, reason: NodeSelectorMismatch,
			wantMsgs: []string{"2 node(s) didn't match Pod's node affinity/selector."}},
		// Scheduler layer, refined by a read-only list of nodes.
		{name: "pinned to the tainted control plane is a taint, not a selector mismatch", file: "taint-behind-selector.yaml", target: pod(podName),
			terminal: true, stage: StageScheduling, layer: LayerScheduler, reason: UntoleratedTaint,
			wantMsgs: []string{
				"1 node(s) had untolerated taint(s), 3 node(s) didn't match Pod's node affinity/selector.",
				"every node matching the pod's node selector and required node affinity (1 of 4) carries a taint the pod does not tolerate: kind-control-plane (node-role.kubernetes.io/control-plane=:NoSchedule)",
			},
			wantObject: "Node kind-control-plane"},
		{name: "a selector no node matches stays a selector mismatch", file: "selector-matches-no-node.yaml", target: pod(podName),
			terminal: true, stage: StageScheduling, layer: LayerScheduler, reason: NodeSelectorMismatch,
			wantMsgs: []string{"no node matches the pod's node selector and required node affinity (nodeSelector {kubernetes.io/hostname=no-such-node}; 4 node(s) read)"}},
		{name: "nodes unreadable: the scheduler's counts decide", file: "taint-behind-selector.yaml", target: pod(podName),
			fault: &ReadError{Read: listRead("nodes", "", ""), Err: forbidden("list", "nodes")},
			stage: StageScheduling, layer: LayerScheduler, reason: NodeSelectorMismatch,
			wantMsgs: []string{"nodes could not be read", "the verdict rests on the scheduler's message alone"},
			onceMsgs: []string{"nodes could not be read"}},
		{name: "more devices than any node has", file: "device-exceeds-every-node.yaml", target: pod(podName),
			terminal: true, stage: StageScheduling, layer: LayerScheduler, reason: InsufficientDevice,
			wantMsgs: []string{
				"3 Insufficient nvidia.com/gpu.",
				"the pod requests 5 nvidia.com/gpu; the most any node has allocatable is 4 (node kind-worker): no node can ever satisfy the request, whatever is freed",
			},
			wantObject: "Node kind-worker"},
		{name: "no node advertises the device", file: "device-not-advertised.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerKubelet, reason: DeviceNotAdvertised,
			wantMsgs: []string{
				"3 Insufficient example.com/tpu.",
				"no node advertises example.com/tpu in status.allocatable (4 node(s) read)",
			}},
		{name: "unbound pvc", file: "unbound-volume.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerScheduler, reason: UnboundVolume,
			wantMsgs: []string{"0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."}},
		{name: "no attempt yet", file: "scheduling-pending.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerScheduler, reason: SchedulingPending},
		{name: "a message the classifier does not know is quoted, not guessed", file: "unknown-scheduler-message.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerScheduler, reason: Unknown,
			wantMsgs: []string{"3 node(s) didn't satisfy existing pods anti-affinity rules"}},
		{name: "GPU dedication taint on every eligible node outranks the unallocated claim", file: "dedicated-gpu-taint.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerScheduler, reason: UntoleratedTaint, terminal: true,
			wantMsgs: []string{"4 node(s) had untolerated taint(s)", "gpu-a (nvidia.com/gpu=present:NoSchedule)"},
			notMsgs:  []string{"control-plane ("}},

		{name: "a node that is only NotReady is not a final gate", file: "dedicated-gpu-taint-notready.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerScheduler, reason: UntoleratedTaint,
			wantMsgs: []string{"not final: node gpu-b carries node.kubernetes.io/not-ready=:NoSchedule"}},

		// Other workload kinds, through owner references.
		{name: "a Deployment whose ReplicaSet is refused by a webhook", file: "deployment-admission-denied.yaml", target: Target{Kind: "deployment", Namespace: "ml", Name: "serve"},
			stage: StageScheduling, layer: LayerAdmission, reason: AdmissionDenied, terminal: true,
			wantMsgs: []string{`ReplicaSet ml/serve-5d8f7 cannot create its pods: refused by admission webhook "gpu-quota.example.com"`}, wantObject: "ReplicaSet ml/serve-5d8f7"},
		{name: "a StatefulSet's pod behind the GPU dedication taint", file: "statefulset-untolerated.yaml", target: Target{Kind: "statefulset", Namespace: "ml", Name: "infer"},
			stage: StageScheduling, layer: LayerScheduler, reason: UntoleratedTaint, terminal: true,
			wantMsgs: []string{"gpu-a (nvidia.com/gpu=present:NoSchedule)"}, wantObject: "Pod ml/infer-0"},
		{name: "a JobSet's pod through its child Job, quota first", file: "jobset-queued.yaml", target: Target{Kind: "jobsets.jobset.x-k8s.io", Namespace: "ml", Name: "pretrain"},
			stage: StageQueued, layer: LayerKueue, reason: QueueQuotaExhausted,
			wantMsgs: []string{"insufficient unused quota"}, wantObject: "Workload ml/jobset-pretrain-7a1b2"},

		// Admission.
		{name: "pods refused by Pod Security", file: "admission-denied.yaml", target: job("train"),
			stage: StageScheduling, layer: LayerAdmission, reason: AdmissionDenied, terminal: true,
			wantMsgs: []string{`refused by PodSecurity "restricted:latest"`, `pods "train-clfbc" is forbidden`}},
		{name: "a Kueue-admitted Job whose pods set no limits the namespace quota constrains", file: "quota-unset.yaml", target: job("train"),
			stage: StageScheduling, layer: LayerAdmission, reason: QuotaExceeded, terminal: true,
			wantMsgs: []string{
				`Job ml/train cannot create its pods: refused by ResourceQuota "team-quota": limits.cpu not set by container(s) setup, workload; limits.memory not set by container(s) setup, workload`,
				"must specify limits.cpu for: setup,workload",
			},
			wantObject: "Workload ml/job-train-5b7c9", notMsgs: []string{"no pods exist yet"}},
		{name: "a GPU request above the namespace quota's hard limit", file: "quota-exceeded.yaml", target: job("train"),
			stage: StageScheduling, layer: LayerAdmission, reason: QuotaExceeded, terminal: true,
			wantMsgs: []string{`refused by ResourceQuota "team-gpus": requests.nvidia.com/gpu requested 4, used 0, limited 2`},
			notMsgs:  []string{"PodSecurity"}},
		{name: "a quota exceeded only beside other workloads' usage is not final", file: "quota-exceeded-fits.yaml", target: job("train"),
			stage: StageScheduling, layer: LayerAdmission, reason: QuotaExceeded,
			wantMsgs: []string{
				`refused by ResourceQuota "team-quota": limits.cpu requested 2, used 7, limited 8`,
				"not final: the pod's request fits",
			}},
		{name: "pods refused by a LimitRange on two counts", file: "limitrange-violated.yaml", target: job("train"),
			stage: StageScheduling, layer: LayerAdmission, reason: LimitRangeViolated, terminal: true,
			wantMsgs: []string{"refused by LimitRange: maximum cpu usage per Container is 2, but limit is 4; minimum memory usage per Container is 64Mi, but request is 16Mi"}},

		// DRA layer.
		{name: "claim not allocatable", file: "dra-allocation-failed.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerDRA, reason: DRAAllocationFailed,
			wantMsgs: []string{
				"0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 cannot allocate all claims.",
				"ResourceClaim ml/train-0-x7k2p-gpu-6xq9d: not allocated (status.allocation is empty)",
			},
			wantObject: "ResourceClaim ml/train-0-x7k2p-gpu-6xq9d"},
		{name: "a DeviceClass that selects none of the published devices is final", file: "dra-class-selects-nothing.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerDRA, reason: DRAAllocationFailed, terminal: true,
			wantMsgs: []string{
				"2 cannot allocate all claims.",
				`DeviceClass gpu.nvidia.com selects 0 of 3 published devices: expression "device.attributes['gpu.nvidia.com'].productName == 'gpuconform-never-published'" is false for gpu-4 on node gpu-worker-1 (driver gpu.nvidia.com; attributes: driverVersion=550.54.15, index=4, productName=NVIDIA H100 80GB HBM3, type=gpu)`,
			},
			wantObject: "DeviceClass gpu.nvidia.com"},
		{name: "an extended resource a DeviceClass serves through DRA", file: "dra-extended-resource.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerDRA, reason: DRAAllocationFailed,
			wantMsgs: []string{
				"1 cannot allocate all claims",
				"the pod's nvidia.com/gpu is served through DRA by DeviceClass gpu.nvidia.com (spec.extendedResourceName) on nodes where no device plugin advertises it",
				"DeviceClass gpu.nvidia.com matches 2 of 2 published devices",
			},
			wantObject: "DeviceClass gpu.nvidia.com"},
		{name: "a pod asking both ways on Kubernetes v1.37: the scheduler's known PreBind defect", file: "known-defect-extended-mapping.yaml", target: pod(podName),
			terminal: true, stage: StageScheduling, layer: LayerDRA, reason: KnownDefect,
			wantMsgs: []string{
				`running PreBind plugin "DynamicResources": nil or empty request mappings, no update of pod ml/train-0-x7k2p ExtendedResourceClaimStatus`,
				"known defect of kube-scheduler v1.37 (DynamicResources plugin, PreBind; seen on v1.37.2): a pod with a ResourceClaim of its own that also asks for an extended resource a DeviceClass maps",
			},
			onceMsgs: []string{`running PreBind plugin "DynamicResources": nil or empty request mappings`}},
		{name: "template missing", file: "dra-claim-missing.yaml", target: pod(podName),
			stage: StageScheduling, layer: LayerDRA, reason: DRAClaimMissing,
			wantMsgs: []string{`PodResourceClaim gpu: resource claim template "single-gpu": resourceclaimtemplate.resource.k8s.io "single-gpu" not found`}},
		{name: "driver prepare failed", file: "dra-prepare-failed.yaml", target: pod(podName),
			stage: StageStarting, layer: LayerDRA, reason: DRAPrepareFailed,
			wantMsgs: []string{
				"Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim train-0-x7k2p-gpu-6xq9d: error preparing devices for claim 2c4d: device gpu-0 is not healthy",
				"ResourceClaim ml/train-0-x7k2p-gpu-6xq9d: allocated gpu.example.com/gpu-worker-1/gpu-0",
			}},
		{name: "driver not registered on the node, twice in 10 s", file: "dra-not-registered.yaml", target: pod(podName),
			stage: StageStarting, layer: LayerDRA, reason: DRAPrepareFailed,
			wantMsgs: []string{
				"prepare dynamic resources: DRA driver gpu.nvidia.com is not registered",
				"the kubelet on node gpu-worker-1 found DRA driver gpu.nvidia.com not registered 2 time(s) over 10s",
				"not final yet: final after 3 identical failures or 30s",
			}},

		// Kubelet and runtime.
		{name: "image pull", file: "image-pull-failed.yaml", target: pod(podName),
			terminal: true, stage: StageStarting, layer: LayerRuntime, reason: ImagePullFailed,
			wantMsgs: []string{`ImagePullBackOff: Back-off pulling image "registry.local/gpu-workload:v9"`}},
		{name: "an image pull refused three times on its node is final", file: "image-pull-unreachable.yaml", target: pod(podName),
			terminal: true, stage: StageStarting, layer: LayerRuntime, reason: ImagePullFailed,
			wantMsgs: []string{
				"dial tcp 10.96.0.50:443: connect: connection refused",
				"node gpu-worker-2 failed to pull the image of container main 3 time(s) for the same reason (events Failed, count 3)",
			},
			wantObject: "Event ml/train-0-x7k2p.18b0000000000021"},
		{name: "a Job's pod carries the pull failures of the pods it replaced on its node", file: "image-pull-replaced.yaml", target: job("train"),
			terminal: true, stage: StageStarting, layer: LayerRuntime, reason: ImagePullFailed,
			wantMsgs: []string{
				"node gpu-worker-2 failed to pull the image of container main 3 time(s) for the same reason (events Failed, count 3), 2 of them by pod(s) the Job replaced before it (train-ffg7x)",
			}},
		{name: "a Job's pod carries the unregistered-driver failures of the pods it replaced on its node", file: "dra-not-registered-replaced.yaml", target: job("train"),
			terminal: true, stage: StageStarting, layer: LayerDRA, reason: DRAPrepareFailed,
			wantMsgs: []string{
				"the kubelet on node gpu-worker-1 found DRA driver gpu.nvidia.com not registered 2 time(s) over 40s (events FailedPrepareDynamicResources, count 2, 1 of them by pod(s) the Job replaced before it (train-ffg7x))",
			}},
		{name: "an image pull that failed once is not final", file: "image-pull-once.yaml", target: pod(podName),
			stage: StageStarting, layer: LayerRuntime, reason: ImagePullFailed,
			wantMsgs: []string{"i/o timeout", "failed to pull the image of container main 1 time(s)", "not final yet"}},
		{name: "CDI devices the runtime cannot resolve, three creates in a row", file: "cdi-unresolvable-repeated.yaml", target: job("train"),
			terminal: true, stage: StageStarting, layer: LayerRuntime, reason: ContainerCreateFailed,
			wantMsgs: []string{
				"CreateContainerError: failed to generate container",
				"unresolvable CDI devices nvidia.com/gpu=0",
				"the runtime on node gpu-worker-1 failed to create container main 3 time(s) for the same reason",
			}},
		{name: "a missing device node after one create is not final", file: "device-node-missing.yaml", target: pod(podName),
			stage: StageStarting, layer: LayerRuntime, reason: ContainerCreateFailed,
			wantMsgs: []string{"lstat /dev/nvidia0: no such file or directory", "failed to create container main 1 time(s)", "not final yet"}},
		{name: "config error", file: "container-create-failed.yaml", target: pod(podName),
			stage: StageStarting, layer: LayerRuntime, reason: ContainerCreateFailed,
			wantMsgs: []string{`CreateContainerConfigError: secret "hf-token" not found`}},
		{name: "device plugin allocate", file: "device-plugin-allocate-failed.yaml", target: pod(podName),
			terminal: true, stage: StageFailed, layer: LayerKubelet, reason: DevicePluginAllocateFailed,
			wantMsgs: []string{"Pod was rejected: Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected"}},
		{name: "mount", file: "volume-mount-failed.yaml", target: pod(podName),
			stage: StageStarting, layer: LayerKubelet, reason: VolumeMountFailed,
			wantMsgs: []string{`MountVolume.SetUp failed for volume "checkpoints" : configmap "train-config" not found`}},
		{name: "starting", file: "container-starting.yaml", target: pod(podName),
			stage: StageStarting, layer: LayerKubelet, reason: ContainerStarting,
			wantMsgs: []string{"container main waiting: ContainerCreating"}},

		// Application and terminal.
		{name: "crash loop", file: "application-error.yaml", target: pod(podName),
			stage: StageRunning, layer: LayerApplication, reason: ApplicationError,
			wantMsgs: []string{"probe: requested 1 device(s), container sees 0", "CrashLoopBackOff"}},
		{name: "oom", file: "oomkilled.yaml", target: pod(podName),
			terminal: true, stage: StageFailed, layer: LayerApplication, reason: OOMKilled,
			wantMsgs: []string{"exit code 137, reason OOMKilled"}},
		{name: "running", file: "running.yaml", target: pod(podName),
			stage: StageRunning, layer: LayerNone, reason: ReasonRunning},
		{name: "completed", file: "completed.yaml", target: pod(podName),
			stage: StageSucceeded, layer: LayerNone, reason: ReasonCompleted},

		// Access and API.
		{name: "kueue client absent", file: "api-missing.yaml", target: job("train"),
			fault: &ReadError{Read: workloadsRead("list", "ml", ""), Err: errNoKueue},
			stage: StageQueued, layer: LayerAPI, reason: APIMissing,
			wantMsgs: []string{"kueue.x-k8s.io/v1beta2"}},
		{name: "kueue API not served", file: "api-missing.yaml", target: job("train"),
			fault: &ReadError{Read: workloadsRead("list", "ml", ""), Err: unserved()},
			stage: StageQueued, layer: LayerAPI, reason: APIMissing,
			wantMsgs: []string{"the API kueue.x-k8s.io/v1beta2 (resource workloads) is not served by this cluster"}},
		{name: "workload target without kueue", file: "queue-pending.yaml", target: workload(wlName),
			fault: &ReadError{Read: workloadsRead("get", "ml", wlName), Err: errNoKueue},
			stage: StageUnknown, layer: LayerAPI, reason: APIMissing,
			wantMsgs: []string{"kueue.x-k8s.io/v1beta2"}},
		{name: "DRA API not served", file: "dra-allocation-failed.yaml", target: pod(podName),
			fault: &ReadError{Read: getRead("resourceclaims", "resource.k8s.io", "ml", "train-0-x7k2p-gpu-6xq9d"), Err: unserved()},
			stage: StageScheduling, layer: LayerAPI, reason: APIMissing,
			wantMsgs: []string{"the API resource.k8s.io/v1 (resource resourceclaims) is not served by this cluster"}},
		{name: "events forbidden is not a GPU shortage", file: "insufficient-device.yaml", target: job("train"),
			fault: &ReadError{Read: eventsRead("ml", "Pod", "train-x7k2p"), Err: forbidden("list", "events")},
			stage: StageUnknown, layer: LayerRBAC, reason: Forbidden,
			wantMsgs: []string{
				`user "system:serviceaccount:ml:reader" may not list events -n ml`,
				`events is forbidden: User "system:serviceaccount:ml:reader" cannot list resource "events" in API group "" in the namespace "ml"`,
			}},
		{name: "a denied list of an owner's Workloads names the namespace", file: "jobset-queued.yaml", target: Target{Kind: "jobset", Namespace: "ml", Name: "pretrain"},
			fault: &ReadError{Read: workloadsRead("list", "ml", ""), Err: forbidden("list", "workloads")},
			stage: StageQueued, layer: LayerRBAC, reason: Forbidden,
			wantMsgs: []string{`user "system:serviceaccount:ml:reader" may not list workloads.kueue.x-k8s.io -n ml`}},
		{name: "target missing", file: "queue-not-managed.yaml", target: job("does-not-exist"),
			stage: StageUnknown, layer: LayerAPI, reason: NotFound,
			wantMsgs: []string{`jobs.batch "does-not-exist" not found`}},
	}
}

func TestRun(t *testing.T) {
	covered := map[Reason]bool{}
	for _, tc := range runCases() {
		t.Run(tc.name, func(t *testing.T) {
			c, kube, kq := caseClients(t, tc)
			res, err := Run(t.Context(), c, tc.target)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			checkResult(t, tc, res)
			assertReadOnly(t, kube.Actions())
			assertReadOnly(t, kq.Actions())
		})
		covered[tc.reason] = true
	}
	for _, r := range Reasons() {
		if !covered[r] {
			t.Errorf("reason %s has no table case", r)
		}
	}
}

// checkResult holds a verdict to its case.
func checkResult(t *testing.T, tc runCase, res *Result) {
	t.Helper()
	if res.Stage != tc.stage || res.Layer != tc.layer || res.Reason != tc.reason {
		t.Fatalf("got %s/%s/%s, want %s/%s/%s\n%s", res.Stage, res.Layer, res.Reason, tc.stage, tc.layer, tc.reason, res)
	}
	for _, want := range tc.wantMsgs {
		if !containsText(res.Messages, want) {
			t.Errorf("no message contains %q; messages:\n  %s", want, strings.Join(res.Messages, "\n  "))
		}
	}
	for _, bad := range tc.notMsgs {
		if containsText(res.Messages, bad) {
			t.Errorf("messages contain %q, which belongs to another object", bad)
		}
	}
	for _, once := range tc.onceMsgs {
		if n := countText(res.Messages, once); n != 1 {
			t.Errorf("%d messages contain %q, want 1", n, once)
		}
	}
	if res.Terminal != tc.terminal {
		t.Errorf("terminal = %v (%s), want %v", res.Terminal, res.TerminalWhy, tc.terminal)
	}
	if res.Next == "" {
		t.Error("Next is empty")
	}
	if len(res.Objects) == 0 {
		t.Error("Objects is empty")
	}
	if tc.wantObject != "" && !containsRef(res.Objects, tc.wantObject) {
		t.Errorf("objects %v lack %s", res.Objects, tc.wantObject)
	}
}

func containsText(msgs []string, want string) bool {
	for _, m := range msgs {
		if strings.Contains(m, want) {
			return true
		}
	}
	return false
}

func countText(msgs []string, want string) int {
	n := 0
	for _, m := range msgs {
		if strings.Contains(m, want) {
			n++
		}
	}
	return n
}

func containsRef(refs []ObjectRef, want string) bool {
	for _, r := range refs {
		if r.String() == want {
			return true
		}
	}
	return false
}

// assertReadOnly holds the package to its promise: get/list/watch only.
func assertReadOnly(t *testing.T, actions []k8stesting.Action) {
	t.Helper()
	for _, a := range actions {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			t.Errorf("diagnosis made a %s call on %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

func TestEveryReasonDocumented(t *testing.T) {
	for _, r := range Reasons() {
		if r.Description() == "unrecognised reason code" || r.Description() == "" {
			t.Errorf("%s has no description", r)
		}
	}
}

func TestStringGolden(t *testing.T) {
	kube, kq := fixtureClients(t, "insufficient-device.yaml")
	res, err := Run(t.Context(), Clients{Kube: kube, Kueue: kq}, job("train"))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "insufficient-device.golden")
	got := []byte(res.String())
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("String() differs from %s:\n--- got\n%s--- want\n%s", golden, got, want)
	}
}

func TestExplain(t *testing.T) {
	kube, kq := fixtureClients(t, "running.yaml")
	c := Clients{Kube: kube, Kueue: kq, Now: func() time.Time { return time.Time{} }} // as the recorded files: no read time
	if got := Explain(t.Context(), c, pod(podName)); !strings.Contains(got, "Reason:  Running") {
		t.Errorf("Explain = %q", got)
	}
	if got := Explain(t.Context(), Clients{}, pod(podName)); !strings.HasPrefix(got, "diagnosis of pod ml/train-0-x7k2p failed:") {
		t.Errorf("Explain without clients = %q", got)
	}
	if got := Explain(t.Context(), c, Target{Kind: "node", Namespace: "ml", Name: "x"}); !strings.Contains(got, "unsupported kind") {
		t.Errorf("Explain with a bad kind = %q", got)
	}
}

func TestParseKind(t *testing.T) {
	for in, want := range map[string]string{
		"job": "Job", "Jobs": "Job", "jobs.batch": "Job", "workload": "Workload",
		"workloads.kueue.x-k8s.io": "Workload", "POD": "Pod", "pods": "Pod", "po": "Pod",
		"deployments.apps": "Deployment", "sts": "StatefulSet", "jobsets.jobset.x-k8s.io": "JobSet", "RayJob": "RayJob",
		"deploy": "Deployment", "statefulsets": "StatefulSet", "rs": "ReplicaSet", "replicasets.apps": "ReplicaSet",
		"lws": "LeaderWorkerSet", "leaderworkersets": "LeaderWorkerSet", "rayclusters": "RayCluster",
		"pytorchjobs.kubeflow.org": "PyTorchJob", "tfjob": "TFJob", "mpijobs": "MPIJob", "xgboostjob": "XGBoostJob",
		"paddlejobs": "PaddleJob", "jaxjob": "JAXJob", "trainjobs.trainer.kubeflow.org": "TrainJob", "appwrappers": "AppWrapper",
	} {
		if got, err := ParseKind(in); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseKind("node"); err == nil {
		t.Error("ParseKind(node) succeeded: a node is not a workload")
	}
}
