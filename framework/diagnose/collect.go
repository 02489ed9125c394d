package diagnose

import (
	"context"
	"errors"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/constants"
)

// Collect reads what a diagnosis of t needs, one layer after the other, with get and list only. A read
// that fails is recorded in the Snapshot's Errors and not returned: whether it matters is Decide's call.
// Each reader reads only what a decision can use, given what the readers before it found. Collect
// returns an error only for a target it cannot diagnose: an unsupported kind, or no Kubernetes client.
func Collect(ctx context.Context, c Clients, t Target) (*Snapshot, error) {
	if c.Kube == nil {
		return nil, errors.New("diagnose: Clients.Kube is nil")
	}
	t, err := normalise(t)
	if err != nil {
		return nil, err
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	col := &collector{c: c, s: &Snapshot{Target: t, ReadAt: now()}}
	col.readTarget(ctx)        // application: the target, its owner Job or controllers, its pods
	col.readQueue(ctx)         // Kueue: the Workload, its events, its queues
	col.readEvents(ctx)        // kubelet, runtime, scheduler: what they said about the pod (or controllers about missing pods)
	col.readClaims(ctx)        // DRA: the pod's ResourceClaims and templates
	col.readNodes(ctx)         // scheduler: the nodes, when its message names a gate or a lack of capacity
	col.readDeviceClasses(ctx) // DRA: the claims' DeviceClasses and the published devices, when they cannot be allocated
	return col.s, nil
}

// collector fills one Snapshot.
type collector struct {
	c Clients
	s *Snapshot
}

// got records how a read went and reports whether it returned an object to keep: a get's NotFound
// leaves the object absent, any other failure goes to Errors.
func (col *collector) got(r Read, err error) bool {
	if err == nil {
		return true
	}
	if !isObjectMissing(err, r) {
		col.s.Errors = append(col.s.Errors, ReadError{Read: r, Err: err})
	}
	return false
}

// readTarget reads the target and what it is made of, stopping at the first read that fails, since each
// read names the next: a Job and its pods; a Workload, its Job and the pods; a Pod and its Job; another
// owner, what it controls (ReplicaSets or Jobs) and the namespace's pods.
func (col *collector) readTarget(ctx context.Context) {
	s, kube := col.s, col.c.Kube
	ns, name := s.Target.Namespace, s.Target.Name
	switch s.Target.Kind {
	case "Job":
		if col.readJob(ctx, name) {
			col.readJobPods(ctx, name)
		}
	case "Workload":
		r := workloadsRead("get", ns, name)
		if col.c.Kueue == nil {
			col.got(r, errNoKueue)
			return
		}
		wl, err := col.c.Kueue.KueueV1beta2().Workloads(ns).Get(ctx, name, metav1.GetOptions{})
		if !col.got(r, err) {
			return
		}
		s.Workloads = append(s.Workloads, *wl)
		if owner := jobOwner(wl.OwnerReferences); owner != "" && col.readJob(ctx, owner) {
			col.readJobPods(ctx, owner)
		}
	case "Pod":
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if !col.got(getRead("pods", "", ns, name), err) {
			return
		}
		s.Pods = append(s.Pods, *pod)
		if owner := jobOwner(pod.OwnerReferences); owner != "" {
			col.readJob(ctx, owner)
		}
	default:
		if r, ok := ownerRead(s.Target); ok {
			var obj metav1.Object
			var err error
			switch s.Target.Kind {
			case "Deployment":
				obj, err = kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			case "StatefulSet":
				obj, err = kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
			case "ReplicaSet":
				obj, err = kube.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
			}
			if !col.got(r, err) {
				return
			}
			s.Owner = meta.AsPartialObjectMetadata(obj)
			s.Owner.Kind = s.Target.Kind
		}
		if r, kind, ok := controllersRead(s.Target); ok {
			if kind == "ReplicaSet" {
				list, err := kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
				if !col.got(r, err) {
					return
				}
				s.ReplicaSets = list.Items
			} else {
				list, err := kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
				if !col.got(r, err) {
					return
				}
				s.Jobs = list.Items
			}
		}
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if col.got(listRead("pods", "", ns), err) {
			s.Pods = list.Items
		}
	}
}

// readJob reads one Job and reports whether it exists.
func (col *collector) readJob(ctx context.Context, name string) bool {
	ns := col.s.Target.Namespace
	job, err := col.c.Kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
	if !col.got(getRead("jobs", "batch", ns, name), err) {
		return false
	}
	col.s.Jobs = append(col.s.Jobs, *job)
	return true
}

func (col *collector) readJobPods(ctx context.Context, job string) {
	ns := col.s.Target.Namespace
	sel := labels.SelectorFromSet(labels.Set{batchv1.JobNameLabel: job}).String()
	list, err := col.c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if col.got(listRead("pods", "", ns), err) {
		col.s.Pods = list.Items
	}
}

// readQueue reads the Workloads that may be the target's (a Job's by the job-UID label Kueue sets, an
// owner's all, since Kueue may have created one per pod), then, while the target's Workload waits for
// quota: when its QuotaReserved condition does not say why, its events, LocalQueue and ClusterQueue
// (they may); when Kueue blames quota or flavors, its LocalQueue (it names the ClusterQueue to look at).
func (col *collector) readQueue(ctx context.Context) {
	s, ns := col.s, col.s.Target.Namespace
	f := s.frame()
	switch s.Target.Kind {
	case "Workload": // the target, read with it
	case "Job", "Pod":
		if f.job != nil && needsKueue(f.job) && (f.job.UID != "" || col.c.Kueue == nil) {
			col.readWorkloads(ctx, labels.SelectorFromSet(labels.Set{constants.JobUIDLabel: string(f.job.UID)}).String())
		}
	default:
		if f.whole() { // the pods were read
			col.readWorkloads(ctx, "")
		}
	}
	if f = s.frame(); !f.whole() || f.wl == nil || f.wl.Spec.QueueName == "" || !awaitsQuota(f.wl) {
		return
	}
	said := kueueSaid(f.wl)
	if said == "" {
		if _, ok := col.readEventsOf(ctx, "Workload", f.wl.Name, f.wl.UID); !ok {
			return
		}
	} else if f.wl.Status.Admission != nil || !blamesQuota(classifyKueueMessage(said)) {
		return
	}
	lqName := string(f.wl.Spec.QueueName)
	lq, err := col.c.Kueue.KueueV1beta2().LocalQueues(ns).Get(ctx, lqName, metav1.GetOptions{})
	if !col.got(queueRead("localqueues", ns, lqName), err) {
		return
	}
	s.LocalQueues = append(s.LocalQueues, *lq)
	if said != "" {
		return
	}
	cqName := string(lq.Spec.ClusterQueue)
	cq, err := col.c.Kueue.KueueV1beta2().ClusterQueues().Get(ctx, cqName, metav1.GetOptions{})
	if col.got(queueRead("clusterqueues", "", cqName), err) {
		s.ClusterQueues = append(s.ClusterQueues, *cq)
	}
}

func (col *collector) readWorkloads(ctx context.Context, selector string) {
	s, ns := col.s, col.s.Target.Namespace
	r := workloadsRead("list", ns, "")
	if col.c.Kueue == nil {
		col.got(r, errNoKueue)
		return
	}
	list, err := col.c.Kueue.KueueV1beta2().Workloads(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if col.got(r, err) {
		s.Workloads = list.Items
	}
}

// readEvents reads the events that may say why the workload waits: the explaining pod's (the scheduler's,
// the kubelet's and the runtime's) unless its status alone explains it and no repeated pull or create
// failure is to be counted (countsRepeats); and, when there are no pods and no Workload holds them back,
// those of the controllers that should have created them (an unfinished, unsuspended Job, or an owner's
// ReplicaSets or Jobs until one reports FailedCreate, then the owner).
func (col *collector) readEvents(ctx context.Context) {
	f := col.s.frame()
	if !f.whole() {
		return
	}
	if len(f.pods) > 0 {
		if pod := representativePod(f.pods); !statusExplains(pod) || countsRepeats(pod) {
			evs, _ := col.readEventsOf(ctx, "Pod", pod.Name, pod.UID)
			switch {
			case jobOf(pod) == "":
			case countsRepeats(pod):
				col.readPredecessorFailures(ctx, pod, eventFailed)
			case notRegistered(evs):
				col.readPredecessorFailures(ctx, pod, eventFailedPrepareDRA)
			}
		}
	}
	if len(f.pods) > 0 {
		return
	}
	if f.job != nil && createsPods(f.job, f.wl) {
		col.readEventsOf(ctx, "Job", f.job.Name, f.job.UID)
	}
	if !isOwnerKind(col.s.Target.Kind) || (f.wl != nil && !meta.IsStatusConditionTrue(f.wl.Status.Conditions, kueue.WorkloadAdmitted)) {
		return
	}
	for _, c := range f.controllers {
		evs, ok := col.readEventsOf(ctx, f.controllerKind, c.GetName(), c.GetUID())
		if !ok || latestEvent(evs, eventFailedCreate) != nil {
			return
		}
	}
	col.readEventsOf(ctx, col.s.Target.Kind, col.s.Target.Name, "")
}

// readPredecessorFailures adds the kubelet's events of one reason (Failed for a container's pull or create,
// FailedPrepareDynamicResources for a DRA driver) about the pods the Job replaced before pod (its other
// pods, gone now: Kueue's PodsReady eviction or the Job controller replaced them), so that the failures a
// replaced pod saw on the same node count toward its successor's. One list of the namespace's pod events
// of that reason; the pods are told apart by name (predecessorOf).
func (col *collector) readPredecessorFailures(ctx context.Context, pod *corev1.Pod, reason string) {
	ns := col.s.Target.Namespace
	sel := fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
		fields.OneTermEqualSelector("reason", reason),
	).String()
	list, err := col.c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if !col.got(eventsRead(ns, "Pod", "*"), err) {
		return
	}
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Pod" && e.Reason == reason && e.InvolvedObject.Name != pod.Name && predecessorOf(e, pod) {
			col.s.Events = append(col.s.Events, e)
		}
	}
}

// readEventsOf lists the events about one object, adds them to the snapshot and returns them (oldest
// first), or reports that the list failed. The field selector keeps the read small on a real cluster;
// eventsOf repeats it because not every client (fakes, older servers) honours field selectors.
func (col *collector) readEventsOf(ctx context.Context, kind, name string, uid types.UID) ([]corev1.Event, bool) {
	ns := col.s.Target.Namespace
	sel := fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.kind", kind),
		fields.OneTermEqualSelector("involvedObject.name", name),
	).String()
	list, err := col.c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if !col.got(eventsRead(ns, kind, name), err) {
		return nil, false
	}
	col.s.Events = append(col.s.Events, eventsOf(list.Items, kind, name, "")...)
	return eventsOf(list.Items, kind, name, uid), true
}

// readClaims reads the explaining pod's ResourceClaims, until one read fails: a named claim directly, a
// template-based one through status.resourceClaimStatuses (where the resourceclaim controller records
// the generated name), and a template that has no generated claim yet.
func (col *collector) readClaims(ctx context.Context) {
	pod, _ := col.waitingPod()
	if pod == nil {
		return
	}
	rc := col.c.Kube.ResourceV1()
	for _, pc := range pod.Spec.ResourceClaims {
		var r Read
		switch name, template := podClaim(pod, pc); {
		case name != "":
			r = getRead("resourceclaims", resourcev1.GroupName, pod.Namespace, name)
			if claim, err := rc.ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{}); col.got(r, err) {
				col.s.ResourceClaims = append(col.s.ResourceClaims, *claim)
			}
		case template != "":
			r = getRead("resourceclaimtemplates", resourcev1.GroupName, pod.Namespace, template)
			if tmpl, err := rc.ResourceClaimTemplates(pod.Namespace).Get(ctx, template, metav1.GetOptions{}); col.got(r, err) {
				col.s.ResourceClaimTemplates = append(col.s.ResourceClaimTemplates, *tmpl)
			}
		}
		if col.s.Errors.failed(r) != nil {
			return
		}
	}
}

// readNodes lists every node when the explaining pod is unscheduled, its claims could be read, and the
// scheduler's message names a gate (taint, node affinity) or a lack of CPU, memory or devices: only the
// nodes can tell a device no node has from one in use, or which gate really excludes the nodes the pod
// wants.
func (col *collector) readNodes(ctx context.Context) {
	pod, evs := col.waitingPod()
	if pod == nil || pod.Spec.NodeName != "" || !nodesMatter(schedulerSaid(pod, evs)) ||
		slices.ContainsFunc(col.s.Errors, func(e ReadError) bool { return e.Group == resourcev1.GroupName }) {
		return
	}
	list, err := col.c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if col.got(listRead("nodes", "", ""), err) {
		col.s.Nodes = list.Items
	}
}

// waitingPod is the pod that explains the workload, with its events, when its status alone does not
// and its events could be read (a failed read is the verdict, nothing after it is needed); else nil.
func (col *collector) waitingPod() (*corev1.Pod, []corev1.Event) {
	f := col.s.frame()
	if !f.whole() || len(f.pods) == 0 {
		return nil, nil
	}
	pod := representativePod(f.pods)
	if statusExplains(pod) || col.s.Errors.failed(eventsRead(pod.Namespace, "Pod", pod.Name)) != nil {
		return nil, nil
	}
	return pod, eventsOf(col.s.Events, "Pod", pod.Name, pod.UID)
}
