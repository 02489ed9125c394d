package diagnose

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
)

// Clients are the read-only API clients a diagnosis uses.
type Clients struct {
	// Kube reads core, batch and resource.k8s.io objects.
	Kube kubernetes.Interface
	// Kueue reads Workloads and queues; nil when the cluster does not serve
	// kueue.x-k8s.io/v1beta2, which a diagnosis reports as APIMissing only
	// if the target actually needs Kueue.
	Kueue kueueclient.Interface
	// Now stamps the snapshot's ReadAt; nil is time.Now. A test that compares a diagnosis over fake
	// clients with one decided from the recorded file gives one returning the zero time (unknown), as the
	// file has.
	Now func() time.Time
}

// Target names the object to diagnose.
type Target struct {
	// Kind is "Job", "Workload", "Pod" or an owner kind such as "Deployment" or "JobSet" (see ParseKind
	// for the aliases accepted).
	Kind string
	// Namespace and Name locate the object.
	Namespace, Name string
}

// String renders the target the way kubectl names objects.
func (t Target) String() string {
	return fmt.Sprintf("%s %s/%s", t.Kind, t.Namespace, t.Name)
}

// Stage is where in its life the workload is. It is a closed set.
type Stage string

// The stages, in the order a workload passes through them.
const (
	// StageQueued: Kueue manages the workload and has not admitted it.
	StageQueued Stage = "Queued"
	// StageScheduling: admitted (or not queue-managed) but a pod is not bound to a node.
	StageScheduling Stage = "Scheduling"
	// StageStarting: a pod is bound to a node but its containers are not running.
	StageStarting Stage = "Starting"
	// StageRunning: the containers run.
	StageRunning Stage = "Running"
	// StageFailed: the workload or a pod ended in failure.
	StageFailed Stage = "Failed"
	// StageSucceeded: the workload completed.
	StageSucceeded Stage = "Succeeded"
	// StageUnknown: the diagnosis could not read enough to place it.
	StageUnknown Stage = "Unknown"
)

// Layer is the component that holds the workload back. It is a closed set.
type Layer string

// The layers, from the queue down to the application.
const (
	// LayerKueue: Kueue quota, flavors, queues or admission checks.
	LayerKueue Layer = "Kueue"
	// LayerScheduler: kube-scheduler cannot place a pod.
	LayerScheduler Layer = "Scheduler"
	// LayerDRA: a ResourceClaim cannot be created, allocated or prepared.
	LayerDRA Layer = "DRA"
	// LayerKubelet: the node agent (admission, device plugin, volumes).
	LayerKubelet Layer = "Kubelet"
	// LayerRuntime: the container runtime (images, container creation).
	LayerRuntime Layer = "Runtime"
	// LayerApplication: the workload's own process.
	LayerApplication Layer = "Application"
	// LayerAPI: an API the target needs is not served, or the target is absent.
	LayerAPI Layer = "API"
	// LayerAdmission: the API server's admission (Pod Security, a webhook, a validating policy, a quota)
	// refused to create the workload's pods.
	LayerAdmission Layer = "Admission"
	// LayerRBAC: a read the diagnosis needs was denied.
	LayerRBAC Layer = "RBAC"
	// LayerNone: nothing is holding the workload back.
	LayerNone Layer = "None"
)

// Reason is the verdict's code. It is a closed set; Reasons lists it and
// Reason.Description says when each applies.
type Reason string

// Kueue layer reasons.
const (
	// QueueQuotaExhausted: QuotaReserved=False and Kueue's flavor assigner
	// said "insufficient quota" or "insufficient unused quota": the ClusterQueue
	// (and its cohort) has no room for the request now.
	QueueQuotaExhausted Reason = "QueueQuotaExhausted"
	// QueueNoMatchingFlavor: Kueue "couldn't assign flavors" for a reason other
	// than quota: the resource is not covered by the ClusterQueue, the flavor is
	// missing, or its taints/node labels exclude the pod set.
	QueueNoMatchingFlavor Reason = "QueueNoMatchingFlavor"
	// QueueInactive: the LocalQueue or ClusterQueue is missing, inactive or
	// stopped, so nothing in it is admitted.
	QueueInactive Reason = "QueueInactive"
	// QueueAdmissionCheckPending: quota is reserved but an AdmissionCheck is
	// Pending, Retry or Rejected.
	QueueAdmissionCheckPending Reason = "QueueAdmissionCheckPending"
	// QueueNotManaged: the Job is suspended and no Workload exists for it
	// (no queue-name label, or Kueue is not reconciling it), so nothing will
	// ever unsuspend it.
	QueueNotManaged Reason = "QueueNotManaged"
	// WorkloadEvicted: Evicted=True for a reason other than preemption
	// (PodsReadyTimeout, a stopped queue, node failures, admission check).
	WorkloadEvicted Reason = "WorkloadEvicted"
	// WorkloadPreempted: Evicted=True with reason Preempted; the workload waits
	// to be readmitted.
	WorkloadPreempted Reason = "WorkloadPreempted"
	// QueuePending: not admitted and no more specific Kueue cause was found.
	QueuePending Reason = "QueuePending"
)

// Scheduler layer reasons (pod not bound, PodScheduled=False).
const (
	// InsufficientDevice: the primary cause in the scheduler's node list is
	// "Insufficient <extended resource>" (e.g. nvidia.com/gpu) on the nodes
	// that passed taints and affinity.
	InsufficientDevice Reason = "InsufficientDevice"
	// DeviceNotAdvertised: the scheduler says "Insufficient <extended
	// resource>", but no node advertises that resource in its allocatable at
	// all: nothing will ever free a device, the device plugin (or the resource
	// name) is the problem. Reported with LayerKubelet, since the device
	// plugin registers through the kubelet. Needs a read-only list of nodes;
	// without it the verdict stays InsufficientDevice.
	DeviceNotAdvertised Reason = "DeviceNotAdvertised"
	// InsufficientCPU: the primary cause is "Insufficient cpu".
	InsufficientCPU Reason = "InsufficientCPU"
	// InsufficientMemory: the primary cause is "Insufficient memory".
	InsufficientMemory Reason = "InsufficientMemory"
	// UntoleratedTaint: the primary cause is an untolerated taint.
	UntoleratedTaint Reason = "UntoleratedTaint"
	// NodeSelectorMismatch: the primary cause is "didn't match Pod's node
	// affinity/selector".
	NodeSelectorMismatch Reason = "NodeSelectorMismatch"
	// UnboundVolume: the pod has unbound PersistentVolumeClaims or no node can
	// bind its volumes.
	UnboundVolume Reason = "UnboundVolume"
	// SchedulingPending: not bound yet and the scheduler has not said why
	// (scheduling gates, no attempt recorded yet).
	SchedulingPending Reason = "SchedulingPending"
	// Unknown: a component said why the workload waits, in a message the
	// classifier does not know; the raw text is the evidence.
	Unknown Reason = "Unknown"
	// KnownDefect: a component said it in the words of a known defect of its
	// own (known.go): the defect, its versions and the way round it are in the
	// messages; final, since every retry fails alike.
	KnownDefect Reason = "KnownDefect"
)

// Admission reasons.
const (
	// AdmissionDenied: the controller's creates of the workload's pods are
	// refused by admission (event FailedCreate): Pod Security, a webhook, a
	// ValidatingAdmissionPolicy, or another plugin that says forbidden.
	AdmissionDenied Reason = "AdmissionDenied"
	// QuotaExceeded: a ResourceQuota in the namespace refuses the pods
	// (event FailedCreate from the API server's ResourceQuota plugin): they
	// would exceed it, or a container does not set a resource it constrains
	// (limits.cpu on a pod that declares none), or the quota controller has
	// not counted its usage yet ("status unknown for quota": final only after
	// QuotaStatusGrace). The verdict names the quota and the resources.
	QuotaExceeded Reason = "QuotaExceeded"
	// LimitRangeViolated: a LimitRange in the namespace refuses the pods
	// (event FailedCreate from the LimitRanger plugin): a container or the pod
	// is outside its minimum, maximum or limit-to-request ratio.
	LimitRangeViolated Reason = "LimitRangeViolated"
)

// DRA layer reasons.
const (
	// DRAAllocationFailed: the dynamicresources plugin could not allocate a
	// claim ("cannot allocate all claims", ...), or a claim is unallocated
	// while the pod is unschedulable for no other dominant reason.
	DRAAllocationFailed Reason = "DRAAllocationFailed"
	// DRAClaimMissing: a ResourceClaim, ResourceClaimTemplate or DeviceClass
	// the pod needs does not exist or could not be created.
	DRAClaimMissing Reason = "DRAClaimMissing"
	// DRAPrepareFailed: the kubelet could not prepare the allocated devices
	// (event FailedPrepareDynamicResources from the DRA driver's NodePrepareResources).
	DRAPrepareFailed Reason = "DRAPrepareFailed"
)

// Kubelet and runtime reasons (pod bound, containers not running).
const (
	// ImagePullFailed: ErrImagePull, ImagePullBackOff, ErrImageNeverPull,
	// InvalidImageName, or the CRI's RegistryUnavailable or
	// SignatureValidationFailed. Final when the image can never be pulled, or
	// once the node failed the same pull three times.
	ImagePullFailed Reason = "ImagePullFailed"
	// ContainerCreateFailed: CreateContainerConfigError, CreateContainerError,
	// RunContainerError, PreStartHookError or a failed pod sandbox. Final once
	// the runtime failed a create or start (CreateContainerError,
	// RunContainerError) the same way three times, the node named.
	ContainerCreateFailed Reason = "ContainerCreateFailed"
	// DevicePluginAllocateFailed: the kubelet rejected the pod at admission
	// (UnexpectedAdmissionError "Allocate failed ...", or OutOf<resource> when
	// the device plugin no longer advertises the devices).
	DevicePluginAllocateFailed Reason = "DevicePluginAllocateFailed"
	// VolumeMountFailed: FailedMount / FailedAttachVolume events.
	VolumeMountFailed Reason = "VolumeMountFailed"
	// ContainerStarting: bound and starting with no error seen yet.
	ContainerStarting Reason = "ContainerStarting"
)

// Application reasons.
const (
	// ApplicationError: a container terminated non-zero or is in
	// CrashLoopBackOff, or the pod/Job failed after it started.
	ApplicationError Reason = "ApplicationError"
	// OOMKilled: a container was killed for exceeding its memory limit.
	OOMKilled Reason = "OOMKilled"
)

// Terminal reasons.
const (
	// ReasonRunning: the containers are running; nothing is waiting.
	ReasonRunning Reason = "Running"
	// ReasonCompleted: the workload finished successfully.
	ReasonCompleted Reason = "Completed"
)

// Access and API reasons. These are reported as themselves and never
// guessed into a device shortage.
const (
	// APIMissing: an API group/version the target needs is not served
	// (Kueue's kueue.x-k8s.io/v1beta2, DRA's resource.k8s.io/v1).
	APIMissing Reason = "APIMissing"
	// Forbidden: a read the diagnosis needs was denied by RBAC.
	Forbidden Reason = "Forbidden"
	// NotFound: the target object does not exist.
	NotFound Reason = "NotFound"
)

// reasonDescriptions is the one table of what each code means; Reasons and
// Description read it so the set stays closed in one place.
var reasonDescriptions = map[Reason]string{
	QueueQuotaExhausted:        "Kueue cannot reserve quota: the ClusterQueue (and its cohort) lacks unused quota for the request.",
	QueueNoMatchingFlavor:      "Kueue cannot assign a ResourceFlavor: no flavor covers the requested resources, tolerates its taints or matches the pod's node selector.",
	QueueInactive:              "The LocalQueue or ClusterQueue is missing, inactive or stopped, so Kueue admits nothing from it.",
	QueueAdmissionCheckPending: "Quota is reserved but an AdmissionCheck has not passed.",
	QueueNotManaged:            "The Job is suspended and Kueue has no Workload for it, so nothing will unsuspend it.",
	WorkloadEvicted:            "Kueue evicted the Workload; it waits to be readmitted.",
	WorkloadPreempted:          "Kueue preempted the Workload for another one; it waits to be readmitted.",
	QueuePending:               "The Workload waits in its queue for admission.",
	InsufficientDevice:         "No eligible node has enough free devices of the requested extended resource.",
	DeviceNotAdvertised:        "No node advertises the requested extended resource at all: the device plugin is missing, unregistered or unhealthy.",
	InsufficientCPU:            "No eligible node has enough free CPU.",
	InsufficientMemory:         "No eligible node has enough free memory.",
	UntoleratedTaint:           "The nodes are tainted and the pod does not tolerate the taints.",
	NodeSelectorMismatch:       "No node matches the pod's node selector or required node affinity.",
	UnboundVolume:              "The pod's PersistentVolumeClaims are unbound or cannot be bound on any node.",
	SchedulingPending:          "The pod is not bound to a node yet and the scheduler has not said why.",
	Unknown:                    "A component said why the workload waits, in a message this suite does not classify; the evidence quotes it.",
	KnownDefect:                "A component fails the workload through a known defect of its own; the evidence names it and the way round it.",
	AdmissionDenied:            "The API server's admission (Pod Security, a webhook, a policy) refuses to create the workload's pods.",
	QuotaExceeded:              "A ResourceQuota in the namespace refuses the workload's pods: they would exceed it, or a container does not set a resource it constrains.",
	LimitRangeViolated:         "A LimitRange in the namespace refuses the workload's pods: a container or the pod is outside its minimum, maximum or limit-to-request ratio.",
	DRAAllocationFailed:        "The scheduler cannot allocate devices for the pod's ResourceClaims from the published ResourceSlices.",
	DRAClaimMissing:            "A ResourceClaim, ResourceClaimTemplate or DeviceClass the pod needs does not exist.",
	DRAPrepareFailed:           "The kubelet could not prepare the allocated devices through the DRA driver.",
	ImagePullFailed:            "The container image cannot be pulled.",
	ContainerCreateFailed:      "The container runtime cannot create or start the container.",
	DevicePluginAllocateFailed: "The kubelet rejected the pod because the device plugin could not allocate the devices.",
	VolumeMountFailed:          "The kubelet cannot attach or mount a volume.",
	ContainerStarting:          "The pod is on a node and its containers are starting.",
	ApplicationError:           "The application exited with an error or keeps crashing.",
	OOMKilled:                  "A container was killed for exceeding its memory limit.",
	ReasonRunning:              "The workload is running.",
	ReasonCompleted:            "The workload completed successfully.",
	APIMissing:                 "An API the target needs is not served by this cluster.",
	Forbidden:                  "The diagnosis was denied a read it needs.",
	NotFound:                   "The target object does not exist.",
}

// Reasons returns every reason code, sorted, so tests and reports can check
// that they cover the closed set.
func Reasons() []Reason {
	out := make([]Reason, 0, len(reasonDescriptions))
	for r := range reasonDescriptions {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// Description says, in one sentence, what the reason means for the workload.
func (r Reason) Description() string {
	if d, ok := reasonDescriptions[r]; ok {
		return d
	}
	return "unrecognised reason code"
}

// ObjectRef names one object the verdict read.
type ObjectRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String renders the ref as Kind ns/name (or Kind name when cluster-scoped).
func (o ObjectRef) String() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

// Result is the verdict: where the workload waits, which layer holds it,
// why, the exact texts that say so, what was read, and what to run next.
type Result struct {
	Stage  Stage  `json:"stage"`
	Layer  Layer  `json:"layer"`
	Reason Reason `json:"reason"`
	// Messages are the exact source texts the verdict rests on: Workload
	// condition messages, FailedScheduling events, claim status, container
	// state reasons/messages.
	Messages []string `json:"messages"`
	// Objects lists every object read for the verdict; the first is the target.
	Objects []ObjectRef `json:"objects"`
	// Next is the read-only command a human should run next.
	Next string `json:"next"`
	// Terminal is set when the workload cannot get further without someone changing the cluster or the
	// workload (an admission denial, a quota the pod template cannot meet, a gate on every eligible node,
	// a request above every node's allocatable, an image that can never be pulled, a pull or container
	// create the node failed the same way three times, a failed Job): a wait for progress ends at once.
	Terminal bool `json:"terminal,omitempty"`
	// TerminalWhy says why the diagnosis is terminal.
	TerminalWhy string `json:"terminalWhy,omitempty"`
	// Workers are a gang's workers (an Indexed Job of several pods), each with where it is; the verdict
	// above is the worker that waits longest's.
	Workers []Worker `json:"workers,omitempty"`
}

// terminal marks the result terminal and says why; it returns the result for chaining.
func (r *Result) terminal(why string) *Result {
	r.Terminal, r.TerminalWhy = true, why
	return r
}

// String renders the verdict for a terminal or a failed-wait message.
func (r *Result) String() string {
	if r == nil {
		return "diagnosis: no result"
	}
	var b strings.Builder
	target := "workload"
	if len(r.Objects) > 0 {
		target = r.Objects[0].String()
	}
	fmt.Fprintf(&b, "Diagnosis of %s\n", target)
	fmt.Fprintf(&b, "  Stage:   %s\n", r.Stage)
	fmt.Fprintf(&b, "  Layer:   %s\n", r.Layer)
	fmt.Fprintf(&b, "  Reason:  %s: %s\n", r.Reason, r.Reason.Description())
	if len(r.Messages) > 0 {
		b.WriteString("  Evidence:\n")
		for _, m := range r.Messages {
			fmt.Fprintf(&b, "    - %s\n", m)
		}
	}
	if len(r.Objects) > 0 {
		refs := make([]string, len(r.Objects))
		for i, o := range r.Objects {
			refs[i] = o.String()
		}
		fmt.Fprintf(&b, "  Read:    %s\n", strings.Join(refs, ", "))
	}
	if len(r.Workers) > 0 {
		b.WriteString("  Workers:\n")
		for _, w := range r.Workers {
			fmt.Fprintf(&b, "    - %s\n", w)
		}
	}
	if r.Terminal {
		fmt.Fprintf(&b, "  Final:   %s\n", r.TerminalWhy)
	}
	fmt.Fprintf(&b, "  Next:    %s\n", r.Next)
	return b.String()
}
