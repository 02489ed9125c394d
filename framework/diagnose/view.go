package diagnose

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// view is what Decide's passes read, resolved from the snapshot once (Snapshot.view): the workload's frame
// and, for the pod that explains it best, its events, claims, DeviceClasses and the nodes; for its
// Workload, the events and queues; for its controllers, their events. A read that failed is resolved there
// as well, into the verdict on it (a got's stop, or the API server's error): a pass that needs what the
// read would have given returns that verdict, a pass that does not never sees it. The passes are functions
// of the view, and name the objects they rest on in the Result they return (Result.rests).
type view struct {
	frame
	target Target
	// readAt is when the snapshot was read (zero when unknown).
	readAt time.Time
	// pod is the pod that explains the workload best (representativePod), nil without pods.
	pod *corev1.Pod
	// events are the events about the pod, the Workload, the Job, each controller and the target, by
	// "Kind/name" (eventsKey).
	events map[string]got[[]corev1.Event]
	// replaced are the kubelet's failures of the pods the Job replaced before pod on its node
	// (predecessorFailures).
	replaced []corev1.Event
	// claims are what pod's ResourceClaims say.
	claims got[*claimState]
	// classes are the DeviceClasses pod's claims ask for, slices the devices published.
	classes []classRead
	slices  got[[]resourcev1.ResourceSlice]
	// nodes are every node, read when the scheduler's message names a gate or a lack of capacity.
	nodes got[[]corev1.Node]
	// queues are the Workload's LocalQueue and ClusterQueue.
	queues queues
}

// got is what one read gave: its objects, or the verdict on why they could not be read (stop: Forbidden,
// APIMissing), or the API server's error where that failure is no verdict.
type got[T any] struct {
	val  T
	stop *Result
	err  error
}

func (g got[T]) failed() bool { return g.stop != nil || g.err != nil }

// verdict is what a pass returns for a read it needs that failed: the verdict on the read, resting on
// what res (the pass's result so far, may be nil) rests on.
func (g got[T]) verdict(res *Result) (*Result, error) {
	if g.stop == nil {
		return nil, g.err
	}
	stop := *g.stop
	if res != nil {
		stop.Objects = slices.Clone(res.Objects)
	}
	return &stop, g.err
}

// classRead is one DeviceClass the pod's claims ask for: the class (nil when absent or not read), or the
// error of its read.
type classRead struct {
	name  string
	class *resourcev1.DeviceClass
	err   error
}

// queues are a Workload's LocalQueue and its ClusterQueue, each with the read that looked for it (its
// absence is said in the read's words).
type queues struct {
	lqRead, cqRead Read
	lq             got[*kueue.LocalQueue]
	cq             got[*kueue.ClusterQueue]
}

func eventsKey(kind, name string) string { return kind + "/" + name }

// view resolves the frame and what the passes read beyond it. A frame that a failed read ended is the
// view as it is: Decide stops there.
func (s *Snapshot) view() view {
	w := view{frame: s.frame(), target: s.Target, readAt: s.ReadAt, events: map[string]got[[]corev1.Event]{}}
	if !w.whole() {
		return w
	}
	ns := s.Target.Namespace
	events := func(kind, name string, uid types.UID) {
		r := eventsRead(ns, kind, name)
		stop, err := s.Errors.check(r, StageUnknown)
		w.events[eventsKey(kind, name)] = got[[]corev1.Event]{val: eventsOf(s.Events, kind, name, uid), stop: stop, err: err}
	}
	events(s.Target.Kind, s.Target.Name, "")
	if w.job != nil {
		events("Job", w.job.Name, w.job.UID)
	}
	for _, c := range w.controllers {
		events(w.controllerKind, c.GetName(), c.GetUID())
	}
	if w.wl != nil {
		events("Workload", w.wl.Name, w.wl.UID)
		w.queues = queuesOf(w.wl, s.LocalQueues, s.ClusterQueues, s.Errors)
	}
	if len(w.pods) > 0 {
		w.pod = representativePod(w.pods)
		events("Pod", w.pod.Name, w.pod.UID)
		w.replaced = predecessorFailures(s.Events, w.pod)
		w.claims = claimsOf(w.pod, s.ResourceClaims, s.ResourceClaimTemplates, s.Errors)
		for _, name := range deviceClassesOf(w.pod, s.ResourceClaims, s.ResourceClaimTemplates, s.DeviceClasses) {
			c := classRead{name: name, class: named(s.DeviceClasses, "", name), err: s.Errors.failed(getRead("deviceclasses", resourcev1.GroupName, "", name))}
			w.classes = append(w.classes, c)
		}
	}
	w.slices = got[[]resourcev1.ResourceSlice]{val: s.ResourceSlices, err: s.Errors.failed(listRead("resourceslices", resourcev1.GroupName, ""))}
	w.nodes = got[[]corev1.Node]{val: s.Nodes, err: s.Errors.failed(listRead("nodes", "", ""))}
	return w
}

// queuesOf finds the Workload's LocalQueue and the ClusterQueue it points to among what was read.
func queuesOf(wl *kueue.Workload, lqs []kueue.LocalQueue, cqs []kueue.ClusterQueue, errs ReadErrors) queues {
	var q queues
	if wl.Spec.QueueName == "" {
		return q
	}
	q.lqRead = queueRead("localqueues", wl.Namespace, string(wl.Spec.QueueName))
	q.lq.stop, q.lq.err = errs.check(q.lqRead, StageQueued)
	q.lq.val = named(lqs, wl.Namespace, string(wl.Spec.QueueName))
	if q.lq.val != nil {
		q.cqRead = queueRead("clusterqueues", "", string(q.lq.val.Spec.ClusterQueue))
		q.cq.stop, q.cq.err = errs.check(q.cqRead, StageQueued)
		q.cq.val = named(cqs, "", q.cqRead.Name)
	}
	return q
}

// rests adds an object the verdict rests on, once.
func (r *Result) rests(kind, ns, name string) {
	if o := (ObjectRef{Kind: kind, Namespace: ns, Name: name}); !slices.Contains(r.Objects, o) {
		r.Objects = append(r.Objects, o)
	}
}
