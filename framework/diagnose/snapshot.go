package diagnose

import (
	"errors"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/constants"
)

// Snapshot is what Collect read about one target, as plain objects: the lists hold what the API server
// returned (a recorded YAML file can fill them as well), and Decide works out which of them belong to the
// target. A read that failed is in Errors; an object absent where Decide looks was not found.
type Snapshot struct {
	// Target is what is diagnosed.
	Target Target

	// Owner is the target when it is a Deployment, StatefulSet or ReplicaSet, read only to know that it
	// exists; other owner kinds (JobSet, RayJob, ...) are known by what they own.
	Owner *metav1.PartialObjectMetadata
	// Jobs are the target Job, the Job owning the target Pod or Workload, or the namespace's Jobs when
	// the target is another owner kind.
	Jobs []batchv1.Job
	// ReplicaSets are the namespace's ReplicaSets when the target is a Deployment.
	ReplicaSets []appsv1.ReplicaSet
	// Pods are the target Pod, or the pods of the target's Job or owner.
	Pods []corev1.Pod

	// Workloads are the target Workload, or those Kueue may have created for the target.
	Workloads []kueue.Workload
	// LocalQueues and ClusterQueues are the queues of a Workload without reserved quota.
	LocalQueues   []kueue.LocalQueue
	ClusterQueues []kueue.ClusterQueue

	// Events are the events about the pod that explains the workload, its Workload and its
	// controllers, in the order they were listed.
	Events []corev1.Event

	// Nodes are every node, read when the scheduler's message names a gate or a lack of capacity.
	Nodes []corev1.Node

	// ResourceClaims and ResourceClaimTemplates are those the explaining pod refers to.
	ResourceClaims         []resourcev1.ResourceClaim
	ResourceClaimTemplates []resourcev1.ResourceClaimTemplate
	// DeviceClasses are those the claims ask for, and ResourceSlices the devices published for them,
	// read when the scheduler cannot allocate the claims.
	DeviceClasses  []resourcev1.DeviceClass
	ResourceSlices []resourcev1.ResourceSlice

	// Errors are the reads that failed, in the order they were made.
	Errors ReadErrors

	// ReadAt is when Collect began reading; zero for a snapshot recorded without it. A failure the kubelet
	// retries with a growing back-off is judged by how long it has lasted by then, not only by the span
	// between its own events (see unregistered).
	ReadAt time.Time
}

// Read names one API read, so a failure can say what was denied or not served.
type Read struct {
	// Verb is get or list.
	Verb string
	// Resource, Group and Version name the API resource ("jobs", "batch", "v1").
	Resource, Group, Version string
	// Namespace is empty for cluster-scoped reads; Name is the object of a get.
	Namespace, Name string
	// About is the Kind/name of the object a list of events is about.
	About string
}

// ReadError is a read that failed, with the API server's answer.
type ReadError struct {
	Read
	Err error
}

// errNoKueue stands for a Kueue read made without a Kueue client.
var errNoKueue = errors.New("no Kueue client: kueue.x-k8s.io/v1beta2 was not discovered on this cluster")

// The reads, named once for Collect (which makes them) and Decide (which looks their failures up).
func getRead(resource, group, ns, name string) Read {
	return Read{Verb: "get", Resource: resource, Group: group, Version: "v1", Namespace: ns, Name: name}
}

func listRead(resource, group, ns string) Read {
	return Read{Verb: "list", Resource: resource, Group: group, Version: "v1", Namespace: ns}
}

func workloadsRead(verb, ns, name string) Read {
	return Read{Verb: verb, Resource: "workloads", Group: kueue.GroupVersion.Group, Version: kueue.GroupVersion.Version, Namespace: ns, Name: name}
}

func queueRead(resource, ns, name string) Read {
	return Read{Verb: "get", Resource: resource, Group: kueue.GroupVersion.Group, Version: kueue.GroupVersion.Version, Namespace: ns, Name: name}
}

func eventsRead(ns, kind, name string) Read {
	r := listRead("events", "", ns)
	r.About = kind + "/" + name
	return r
}

// ReadErrors are the reads that failed, in the order they were made.
type ReadErrors []ReadError

// check is the verdict on the read r: nil when it succeeded or was not made, Forbidden or APIMissing
// when it was denied or not served; any other failure is the API server's error.
func (errs ReadErrors) check(r Read, stage Stage) (*Result, error) {
	return classifyReadErr(errs.failed(r), r, stage)
}

// failed returns the error of the read r, or nil when it succeeded or was not made.
func (errs ReadErrors) failed(r Read) error {
	for _, e := range errs {
		if e.Read == r {
			return e.Err
		}
	}
	return nil
}

// frame is the workload as the snapshot shows it.
type frame struct {
	// job is the target Job, or the Job owning the target Pod or Workload.
	job *batchv1.Job
	// controllers are the ReplicaSets or Jobs an owner target controls, whose events say why pods are
	// missing.
	controllers []metav1.Object
	// controllerKind is the controllers' kind: ReplicaSet or Job.
	controllerKind string
	pods           []corev1.Pod
	wl             *kueue.Workload
	// read lists, in the order they were read, the objects that make up the workload.
	read []ObjectRef
	// kueueMissing says why Kueue could not be asked about a Job that may need it.
	kueueMissing string
	// stop is the verdict on the read that ended the frame (Forbidden, APIMissing, NotFound), err the
	// API server's error where that failure is no verdict; both nil for a whole frame.
	stop *Result
	err  error
}

// frame finds the target's Job, controllers, pods and Workload among what was read, checking their reads
// in the order Collect made them. It ends at the first read that failed, with what was found before it:
// stop is the verdict on it (Forbidden, APIMissing; NotFound for an absent target), err the API server's
// error where the failure is no verdict. Collect uses the objects to know what to read next; Decide, the
// objects and where the frame ended.
func (s *Snapshot) frame() frame {
	t := s.Target
	f := frame{}
	ref := func(kind, name string) {
		f.read = append(f.read, ObjectRef{Kind: kind, Namespace: t.Namespace, Name: name})
	}
	// readable reports a read that succeeded or was not made; else the frame ends there.
	readable := func(r Read, stage Stage) bool {
		f.stop, f.err = s.Errors.check(r, stage)
		return f.whole()
	}
	// withJob finds the Job named by the target Pod or Workload's owner reference, if any.
	withJob := func(owner string) bool {
		if owner == "" {
			return true
		}
		if !readable(getRead("jobs", "batch", t.Namespace, owner), StageUnknown) {
			return false
		}
		if f.job = named(s.Jobs, t.Namespace, owner); f.job != nil {
			ref("Job", owner)
		}
		return true
	}
	// withWorkload finds the Workload Kueue created for f.job; a Kueue that cannot be asked is noted, not
	// a verdict, because a Job that has pods does not need it.
	withWorkload := func() bool {
		if f.job == nil || !needsKueue(f.job) {
			return true
		}
		res, err := s.Errors.check(workloadsRead("list", t.Namespace, ""), StageQueued)
		switch {
		case err != nil || (res != nil && res.Reason != APIMissing):
			f.stop, f.err = res, err
			return false
		case res != nil:
			f.kueueMissing = res.Messages[1]
			return true
		}
		if f.wl = workloadForJob(s.Workloads, f.job); f.wl != nil {
			ref("Workload", f.wl.Name)
		}
		return true
	}
	switch t.Kind {
	case "Job":
		r := getRead("jobs", "batch", t.Namespace, t.Name)
		if !readable(r, StageUnknown) {
			return f
		}
		if f.job = named(s.Jobs, t.Namespace, t.Name); f.job == nil {
			f.stop = notFound(r, "job")
			return f
		}
		ref("Job", t.Name)
		if withWorkload() && readable(listRead("pods", "", t.Namespace), StageUnknown) {
			f.pods = jobPods(s.Pods, t.Namespace, t.Name)
		}
	case "Workload":
		r := workloadsRead("get", t.Namespace, t.Name)
		if !readable(r, StageUnknown) {
			return f
		}
		if f.wl = named(s.Workloads, t.Namespace, t.Name); f.wl == nil {
			f.stop = notFound(r, "workloads.kueue.x-k8s.io")
			return f
		}
		if withJob(jobOwner(f.wl.OwnerReferences)) && f.job != nil && readable(listRead("pods", "", t.Namespace), StageUnknown) {
			f.pods = jobPods(s.Pods, t.Namespace, f.job.Name)
		}
	case "Pod":
		r := getRead("pods", "", t.Namespace, t.Name)
		if !readable(r, StageUnknown) {
			return f
		}
		p := named(s.Pods, t.Namespace, t.Name)
		if p == nil {
			f.stop = notFound(r, "pod")
			return f
		}
		f.pods = []corev1.Pod{*p}
		if withJob(jobOwner(f.pods[0].OwnerReferences)) {
			withWorkload()
		}
	default:
		s.owned(&f, readable)
	}
	return f
}

// whole reports a frame that no failed read ended.
func (f frame) whole() bool { return f.stop == nil && f.err == nil }

// owned fills f for an owner target: its pods are those whose controller chain (pod → ReplicaSet or
// Job → target) reaches it, its Workload the one Kueue created for it, its controllers or its pods.
// A read that fails ends it (readable).
func (s *Snapshot) owned(f *frame, readable func(Read, Stage) bool) {
	t := s.Target
	if r, ok := ownerRead(t); ok {
		if !readable(r, StageUnknown) {
			return
		}
		if s.Owner == nil || s.Owner.Name != t.Name {
			f.stop = notFound(r, r.Resource)
			return
		}
	}
	controls := func(obj metav1.Object) bool {
		c := metav1.GetControllerOf(obj)
		return c != nil && c.Kind == t.Kind && c.Name == t.Name
	}
	mid := map[string]bool{} // "Kind/name" of the controllers the target controls
	if r, kind, ok := controllersRead(t); ok {
		f.controllerKind = kind
		if !readable(r, StageUnknown) {
			return
		}
		var objs []metav1.Object
		if kind == "ReplicaSet" {
			rs := slices.Clone(s.ReplicaSets)
			slices.SortStableFunc(rs, func(a, b appsv1.ReplicaSet) int { return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) })
			for i := range rs {
				objs = append(objs, &rs[i])
			}
		} else {
			for i := range s.Jobs {
				objs = append(objs, &s.Jobs[i])
			}
		}
		for _, o := range objs {
			if o.GetNamespace() == t.Namespace && controls(o) {
				mid[kind+"/"+o.GetName()] = true
				f.controllers = append(f.controllers, o)
				f.read = append(f.read, ObjectRef{Kind: kind, Namespace: t.Namespace, Name: o.GetName()})
			}
		}
	}
	if !readable(listRead("pods", "", t.Namespace), StageUnknown) {
		return
	}
	podNames := map[string]bool{}
	for _, p := range s.Pods {
		if c := metav1.GetControllerOf(&p); p.Namespace == t.Namespace && c != nil && ((c.Kind == t.Kind && c.Name == t.Name) || mid[c.Kind+"/"+c.Name]) {
			f.pods = append(f.pods, p)
			podNames[p.Name] = true
		}
	}
	// An unserved Kueue API leaves the target without a Workload; nothing here needs one.
	if res, err := s.Errors.check(workloadsRead("list", t.Namespace, ""), StageQueued); err != nil || (res != nil && res.Reason != APIMissing) {
		f.stop, f.err = res, err
		return
	}
	var found []kueue.Workload
	for _, wl := range s.Workloads {
		if wl.Namespace != t.Namespace {
			continue
		}
		if slices.ContainsFunc(wl.OwnerReferences, func(ref metav1.OwnerReference) bool {
			return (ref.Kind == t.Kind && ref.Name == t.Name) || (ref.Kind == "Pod" && podNames[ref.Name]) || mid[ref.Kind+"/"+ref.Name]
		}) {
			found = append(found, wl)
		}
	}
	// The one that still waits matters: unadmitted first, then the newest.
	if wl := first(found, kueue.WorkloadAdmitted); wl != nil {
		f.wl = wl
		f.read = append(f.read, ObjectRef{Kind: "Workload", Namespace: wl.Namespace, Name: wl.Name})
	}
}

// ownerRead is the read that tells whether a built-in owner target exists; custom kinds have none.
func ownerRead(t Target) (Read, bool) {
	switch t.Kind {
	case "Deployment":
		return getRead("deployments", "apps", t.Namespace, t.Name), true
	case "StatefulSet":
		return getRead("statefulsets", "apps", t.Namespace, t.Name), true
	case "ReplicaSet":
		return getRead("replicasets", "apps", t.Namespace, t.Name), true
	}
	return Read{}, false
}

// controllersRead is the list that finds what an owner target controls between itself and its pods: a
// Deployment's ReplicaSets, a custom kind's Jobs (JobSet, ...); a StatefulSet or ReplicaSet owns its pods.
func controllersRead(t Target) (Read, string, bool) {
	switch t.Kind {
	case "Deployment":
		return listRead("replicasets", "apps", t.Namespace), "ReplicaSet", true
	case "StatefulSet", "ReplicaSet":
		return Read{}, "", false
	}
	return listRead("jobs", "batch", t.Namespace), "Job", true
}

// named is the object of items in namespace ns ("" for a cluster-scoped kind) called name, or nil.
func named[T any, P interface {
	*T
	GetNamespace() string
	GetName() string
}](items []T, ns, name string) *T {
	for i := range items {
		if o := P(&items[i]); o.GetNamespace() == ns && o.GetName() == name {
			return &items[i]
		}
	}
	return nil
}

// jobPods are the pods the Job controller labelled with the Job's name.
func jobPods(pods []corev1.Pod, ns, job string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Namespace == ns && p.Labels[batchv1.JobNameLabel] == job {
			out = append(out, p)
		}
	}
	return out
}

// workloadForJob finds the Workload Kueue created for the Job by the job-UID label Kueue puts on it
// (names are job-<name>-<hash>, so the name alone is not enough), preferring an unfinished one.
func workloadForJob(wls []kueue.Workload, job *batchv1.Job) *kueue.Workload {
	if job.UID == "" {
		return nil
	}
	var found []kueue.Workload
	for _, wl := range wls {
		if wl.Namespace == job.Namespace && wl.Labels[constants.JobUIDLabel] == string(job.UID) {
			found = append(found, wl)
		}
	}
	return first(found, kueue.WorkloadFinished)
}

// first returns the newest Workload without condition cond True, else the newest, or nil.
func first(wls []kueue.Workload, cond string) *kueue.Workload {
	if len(wls) == 0 {
		return nil
	}
	slices.SortStableFunc(wls, func(a, b kueue.Workload) int {
		ta, tb := meta.IsStatusConditionTrue(a.Status.Conditions, cond), meta.IsStatusConditionTrue(b.Status.Conditions, cond)
		if ta != tb {
			if ta {
				return 1
			}
			return -1
		}
		return b.CreationTimestamp.Compare(a.CreationTimestamp.Time)
	})
	return &wls[0]
}

// needsKueue reports whether a Job's progress depends on Kueue: it names a queue, or it is suspended
// (which, under manageJobsWithoutQueueName, Kueue would also own).
func needsKueue(job *batchv1.Job) bool {
	return job.Labels[constants.QueueLabel] != "" || isSuspended(job)
}

func isSuspended(job *batchv1.Job) bool {
	return job.Spec.Suspend != nil && *job.Spec.Suspend
}

func jobOwner(refs []metav1.OwnerReference) string {
	for _, r := range refs {
		if r.Kind == "Job" && strings.HasPrefix(r.APIVersion, "batch/") {
			return r.Name
		}
	}
	return ""
}
