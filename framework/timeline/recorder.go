package timeline

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
	kueueinformers "sigs.k8s.io/kueue/client-go/informers/externalversions"
)

// Container is the container whose log carries the workload's progress lines (fixtures.WorkloadContainer;
// repeated so the framework's lowest layer imports no fixtures).
const Container = "workload"

// Recorder watches one spec's Jobs, Pods and Kueue Workloads and turns what it sees into events. It
// keeps every transition it observes (an eviction and the re-admission after it), and the last state
// of deleted objects.
type Recorder struct {
	kube     kubernetes.Interface
	ns       string
	selector string
	stop     chan struct{}
	wg       sync.WaitGroup

	// The informers' stores: waits read the spec's Jobs, Pods and Workloads from them (Job, Pods,
	// Workloads) instead of the API server. wlStore is nil without Kueue.
	jobStore, podStore, wlStore cache.Store
	synced                      []cache.InformerSynced
	podsSynced                  cache.InformerSynced
	// The namespace's LocalQueues (nil without Kueue), kept apart from synced: nothing else waits for them.
	lqStore  cache.Store
	lqSynced cache.InformerSynced

	mu      sync.Mutex
	changed chan struct{} // closed at the next change; see Changed
	start   time.Time
	events  map[string]map[string]Event // workload → key → event (deduplicated)
	owner   map[string]string           // "Pod/name" or "Workload/name" → workload
	jobs    map[string]bool
	logged  map[string]bool // pods whose logs were read after their container stopped
	// deleting: pods whose deletion was recorded (the first deletionTimestamp seen).
	deleting map[string]bool
	// logsRead: ReadLogs ran; the pods left are read no more (they are being deleted).
	logsRead bool
}

// Start starts informers on the namespace (objects matching selector; "" for all) and returns at once;
// Stop ends them. kq may be nil (no Kueue).
func Start(ctx context.Context, kube kubernetes.Interface, kq kueueclient.Interface, ns, selector string) *Recorder {
	r := &Recorder{kube: kube, ns: ns, selector: selector, stop: make(chan struct{}), start: time.Now().UTC(),
		events: map[string]map[string]Event{}, owner: map[string]string{}, jobs: map[string]bool{}, logged: map[string]bool{}, deleting: map[string]bool{}}
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = selector }
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns), informers.WithTweakListOptions(tweak))
	// record is told whether the object is gone from the API (an informer's delete).
	handler := func(record func(obj any, gone bool)) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { record(obj, false); r.signal() },
			UpdateFunc: func(_, obj any) { record(obj, false); r.signal() },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				record(obj, true)
				r.signal()
			},
		}
	}
	jobs, pods := f.Batch().V1().Jobs().Informer(), f.Core().V1().Pods().Informer()
	_, _ = jobs.AddEventHandler(handler(func(obj any, _ bool) {
		if j, ok := obj.(*batchv1.Job); ok {
			r.job(j)
		}
	}))
	_, _ = pods.AddEventHandler(handler(func(obj any, gone bool) {
		if p, ok := obj.(*corev1.Pod); ok {
			r.pod(ctx, p, gone)
		}
	}))
	r.jobStore, r.podStore = jobs.GetStore(), pods.GetStore()
	r.synced = []cache.InformerSynced{jobs.HasSynced, pods.HasSynced}
	r.podsSynced = pods.HasSynced
	f.Start(r.stop)
	if kq != nil {
		// Kueue's Workloads carry none of the suite's labels: all of the namespace's are watched and
		// attributed to a workload through their owner Job.
		kf := kueueinformers.NewSharedInformerFactoryWithOptions(kq, 0, kueueinformers.WithNamespace(ns))
		wls := kf.Kueue().V1beta2().Workloads().Informer()
		_, _ = wls.AddEventHandler(handler(func(obj any, _ bool) {
			if w, ok := obj.(*kueue.Workload); ok {
				r.workload(w)
			}
		}))
		// The namespace's LocalQueues wake the waits (a queue turning Active) and serve them
		// (LocalQueue); they are no workload's events.
		lqs := kf.Kueue().V1beta2().LocalQueues().Informer()
		_, _ = lqs.AddEventHandler(handler(func(any, bool) {}))
		r.lqStore, r.lqSynced = lqs.GetStore(), lqs.HasSynced
		r.wlStore = wls.GetStore()
		// Not among synced: nothing is served from the LocalQueues, so the stores need not wait for them.
		r.synced = append(r.synced, wls.HasSynced)
		kf.Start(r.stop)
	}
	return r
}

// Namespace is the namespace the recorder watches.
func (r *Recorder) Namespace() string { return r.ns }

// hasSynced reports whether every informer has listed once: before, a missing object may only be late.
func (r *Recorder) hasSynced() bool {
	for _, s := range r.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Job returns a copy of the spec's Job name as the informer last saw it; false when the informers have not
// synced or the Job is not (yet) there, where the caller asks the API server.
func (r *Recorder) Job(name string) (*batchv1.Job, bool) {
	return fromStore[batchv1.Job](r, r.jobStore, name)
}

// Pod returns a copy of the spec's pod name as the informer last saw it; false as Job.
func (r *Recorder) Pod(name string) (*corev1.Pod, bool) {
	return fromStore[corev1.Pod](r, r.podStore, name)
}

// fromStore returns a copy of object name of the recorder's namespace in store; false when store is nil,
// the informers have not synced or it does not hold the object.
func fromStore[T any, P interface {
	*T
	DeepCopy() *T
}](r *Recorder, store cache.Store, name string) (*T, bool) {
	if store == nil || !r.hasSynced() {
		return nil, false
	}
	obj, ok, err := store.GetByKey(r.ns + "/" + name)
	o, isT := obj.(P)
	if err != nil || !ok || !isT {
		return nil, false
	}
	return o.DeepCopy(), true
}

// LocalQueue returns a copy of the namespace's LocalQueue name as the informer last saw it; false without
// Kueue, before its informer synced, or when it does not hold it.
func (r *Recorder) LocalQueue(name string) (*kueue.LocalQueue, bool) {
	if r.lqStore == nil || !r.lqSynced() {
		return nil, false
	}
	obj, ok, err := r.lqStore.GetByKey(r.ns + "/" + name)
	lq, isLQ := obj.(*kueue.LocalQueue)
	if err != nil || !ok || !isLQ {
		return nil, false
	}
	return lq.DeepCopy(), true
}

// Pods returns copies of the spec's pods matching sel as the informer last saw them, sorted by name;
// false when the informers have not synced.
func (r *Recorder) Pods(sel labels.Selector) ([]corev1.Pod, bool) {
	return listStore[corev1.Pod](r, r.podStore, sel)
}

// Workloads returns copies of the namespace's Kueue Workloads matching sel as the informer last saw them,
// sorted by name; false without Kueue or before the informers synced.
func (r *Recorder) Workloads(sel labels.Selector) ([]kueue.Workload, bool) {
	return listStore[kueue.Workload](r, r.wlStore, sel)
}

// listStore returns copies of the objects in store matching sel, sorted by name; false when store is nil
// or the informers have not synced.
func listStore[T any, P interface {
	*T
	DeepCopy() *T
	GetName() string
	GetLabels() map[string]string
}](r *Recorder, store cache.Store, sel labels.Selector) ([]T, bool) {
	if store == nil || !r.hasSynced() {
		return nil, false
	}
	var out []T
	for _, obj := range store.List() {
		if o, ok := obj.(P); ok && sel.Matches(labels.Set(o.GetLabels())) {
			out = append(out, *o.DeepCopy())
		}
	}
	slices.SortFunc(out, func(a, b T) int { return cmp.Compare(P(&a).GetName(), P(&b).GetName()) })
	return out, true
}

// Changed returns a channel that is closed at the next change the recorder sees (any add, update or
// delete of the spec's Jobs, Pods or Workloads): waits sleep on it instead of polling.
func (r *Recorder) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

func (r *Recorder) signal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// Note records an event the spec observed itself (a fault it injected, a node going NotReady) in a
// workload's timeline.
func (r *Recorder) Note(workload string, e Event) {
	r.add(workload, e)
	r.signal()
}

func (r *Recorder) add(workload string, e Event) {
	if workload == "" || e.At.IsZero() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.events[workload] == nil {
		r.events[workload] = map[string]Event{}
	}
	key := string(e.Kind) + "|" + e.Object + "|" + e.At.Format(time.RFC3339Nano)
	if _, seen := r.events[workload][key]; !seen {
		r.events[workload][key] = e
	}
}

func (r *Recorder) job(j *batchv1.Job) {
	r.mu.Lock()
	r.jobs[j.Name] = true
	r.mu.Unlock()
	obj := "Job/" + j.Name
	r.add(j.Name, Event{At: j.CreationTimestamp.UTC(), Kind: Created, Object: obj})
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			r.add(j.Name, Event{At: c.LastTransitionTime.UTC(), Kind: Finished, Object: obj})
		case batchv1.JobFailed:
			r.add(j.Name, Event{At: c.LastTransitionTime.UTC(), Kind: Failed, Object: obj, Detail: c.Reason + ": " + c.Message})
		}
	}
}

// workloadOf names the workload a pod belongs to: its Job, or the pod itself. A worker of an Indexed Job
// (a gang) is a workload of its own, "<job>[i]", so that the timeline has one bar per worker beside the
// Job's (whose events are the queue's: created, admitted, evicted, finished).
func workloadOf(p *corev1.Pod) string {
	if c := metav1.GetControllerOf(p); c != nil && c.Kind == "Job" {
		if i, ok := p.Annotations[batchv1.JobCompletionIndexAnnotation]; ok {
			return WorkerName(c.Name, i)
		}
		return c.Name
	}
	return p.Name
}

// WorkerName is the timeline's name for worker index of a gang Job.
func WorkerName(job, index string) string { return job + "[" + index + "]" }

func (r *Recorder) pod(ctx context.Context, p *corev1.Pod, gone bool) {
	w := workloadOf(p)
	obj := "Pod/" + p.Name
	bare := metav1.GetControllerOf(p) == nil
	if bare {
		r.add(w, Event{At: p.CreationTimestamp.UTC(), Kind: Created, Object: obj})
	}
	// The API server sets deletionTimestamp to the time of the request plus the grace period it granted.
	// Only the first is the request: the kubelet's final delete (grace 0) moves both again.
	if dt := p.DeletionTimestamp; dt != nil && r.firstDeletion(p.Name) {
		at := dt.Time
		if g := p.DeletionGracePeriodSeconds; g != nil {
			at = at.Add(-time.Duration(*g) * time.Second)
		}
		r.add(w, Event{At: at.UTC(), Kind: Deleting, Object: obj})
	}
	if gone {
		// No object is left to carry a timestamp: the time is when the informer saw it go, which trails
		// the API server by the watch's latency.
		r.add(w, Event{At: time.Now().UTC(), Kind: Gone, Object: obj})
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			r.add(w, Event{At: c.LastTransitionTime.UTC(), Kind: Scheduled, Object: obj, Detail: p.Spec.NodeName})
		}
		// The taint-eviction controller, the pod GC and preemption say why they delete a pod here.
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			r.add(w, Event{At: c.LastTransitionTime.UTC(), Kind: PodEvicted, Object: obj, Detail: strings.TrimSpace(c.Reason + ": " + c.Message)})
		}
	}
	stopped := false
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != Container {
			continue
		}
		for _, st := range []corev1.ContainerState{cs.LastTerminationState, cs.State} {
			if st.Running != nil {
				r.add(w, Event{At: st.Running.StartedAt.UTC(), Kind: Started, Object: obj, Detail: p.Spec.NodeName})
			}
			if t := st.Terminated; t != nil {
				r.add(w, Event{At: t.StartedAt.UTC(), Kind: Started, Object: obj, Detail: p.Spec.NodeName})
				r.add(w, Event{At: t.FinishedAt.UTC(), Kind: Stopped, Object: obj, Detail: t.Reason})
				stopped = true
			}
		}
	}
	if bare {
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			r.add(w, Event{At: lastFinish(p), Kind: Finished, Object: obj})
		case corev1.PodFailed:
			r.add(w, Event{At: lastFinish(p), Kind: Failed, Object: obj, Detail: p.Status.Reason})
		}
	}
	// A stopped container's log is read once, at once: the pod may be deleted before the spec ends.
	if stopped {
		r.mu.Lock()
		first := !r.logged[p.Name] && !r.logsRead
		r.logged[p.Name] = true
		r.mu.Unlock()
		if first {
			r.wg.Go(func() { r.readLog(ctx, w, p.Name) })
		}
	}
}

// firstDeletion reports whether pod's deletion is seen for the first time.
func (r *Recorder) firstDeletion(pod string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deleting[pod] {
		return false
	}
	r.deleting[pod] = true
	return true
}

func lastFinish(p *corev1.Pod) time.Time {
	var at time.Time
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(at) {
			at = t.FinishedAt.UTC()
		}
	}
	return at
}

func (r *Recorder) workload(wl *kueue.Workload) {
	var job string
	for _, o := range wl.OwnerReferences {
		if o.Kind == "Job" {
			job = o.Name
		}
	}
	if job == "" {
		return
	}
	obj := "Workload/" + wl.Name
	r.add(job, Event{At: wl.CreationTimestamp.UTC(), Kind: Queued, Object: obj})
	for _, c := range wl.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			continue
		}
		at := c.LastTransitionTime.UTC()
		switch c.Type {
		case kueue.WorkloadQuotaReserved:
			r.add(job, Event{At: at, Kind: QuotaReserved, Object: obj})
		case kueue.WorkloadAdmitted:
			r.add(job, Event{At: at, Kind: Admitted, Object: obj})
		case kueue.WorkloadEvicted:
			kind := Evicted
			if c.Reason == kueue.WorkloadEvictedByPreemption {
				kind = Preempted
			}
			r.add(job, Event{At: at, Kind: kind, Object: obj, Detail: c.Reason + ": " + c.Message})
		}
	}
}

// progressLine is one JSON line of the workload's own log (gpu-workload train).
type progressLine struct {
	Event   string    `json:"event"`
	Time    time.Time `json:"time"`
	Step    int       `json:"step"`
	Resumed bool      `json:"resumed"`
	From    int       `json:"resumed_from"`
	Reason  string    `json:"reason"`
}

// readLog turns the workload container's progress lines into events.
func (r *Recorder) readLog(ctx context.Context, workload, pod string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	raw, err := r.kube.CoreV1().Pods(r.ns).GetLogs(pod, &corev1.PodLogOptions{Container: Container}).DoRaw(ctx)
	if err != nil {
		return
	}
	for _, e := range ParseProgress(pod, string(raw)) {
		r.add(workload, e)
	}
}

// ParseProgress turns the JSON progress lines of a workload container's log (gpu-workload train: start,
// first_step, checkpoint) into events; other lines are ignored.
func ParseProgress(pod, log string) []Event {
	obj := "Pod/" + pod
	var out []Event
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var l progressLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Event == "" || l.Time.IsZero() {
			continue
		}
		switch l.Event {
		case "first_step":
			out = append(out, Event{At: l.Time.UTC(), Kind: FirstStep, Object: obj, Detail: "step " + strconv.Itoa(l.Step)})
		case "checkpoint":
			out = append(out, Event{At: l.Time.UTC(), Kind: Checkpoint, Object: obj, Detail: "step " + strconv.Itoa(l.Step) + " (" + l.Reason + ")"})
		case "start":
			if l.Resumed {
				out = append(out, Event{At: l.Time.UTC(), Kind: Resumed, Object: obj, Detail: "from step " + strconv.Itoa(l.From)})
			}
		}
	}
	return out
}

// Snapshot returns the timeline as recorded so far, for a spec that asserts on its timings.
func (r *Recorder) Snapshot(spec string) Timeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := Timeline{Spec: spec, Namespace: r.ns, Start: r.start, End: time.Now().UTC()}
	for name, evs := range r.events {
		w := Workload{Name: name}
		for _, e := range evs {
			w.Events = append(w.Events, e)
		}
		w.Derive()
		t.Workloads = append(t.Workloads, w)
	}
	sortWorkloads(t.Workloads)
	return t
}

// Stop reads the logs not read yet (ReadLogs), stops the informers and returns the timeline. A spec's
// cleanup calls ReadLogs before it deletes the pods and Stop once they are gone, so that the timeline
// holds each pod's teardown (deleting → gone) too.
func (r *Recorder) Stop(ctx context.Context, spec string) Timeline {
	r.ReadLogs(ctx)
	close(r.stop)
	r.signal() // whoever waits on Changed wakes (and finds the recorder gone)
	return r.Snapshot(spec)
}

// ReadLogs reads the logs of the pods whose containers have not stopped yet and waits for the log reads
// in flight: called before the pods are deleted, it keeps their progress lines. Only the first call reads.
func (r *Recorder) ReadLogs(ctx context.Context) {
	r.mu.Lock()
	done := r.logsRead
	r.logsRead = true
	r.mu.Unlock()
	if done {
		r.wg.Wait()
		return
	}
	// The spec's pods as the informer holds them; the API server only before it synced.
	pods, ok := r.Pods(labels.Everything())
	if !ok {
		list, err := r.kube.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: r.selector})
		if err == nil {
			pods = list.Items
		}
	}
	for i := range pods {
		p := &pods[i]
		r.mu.Lock()
		done := r.logged[p.Name]
		r.logged[p.Name] = true
		r.mu.Unlock()
		if !done && (p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
			r.readLog(ctx, workloadOf(p), p.Name)
		}
	}
	r.wg.Wait()
}

// Selector is the label selector of the objects the recorder watches ("" for all of its namespace's).
func (r *Recorder) Selector() string { return r.selector }

// UntilNoPods waits until the informer holds none of the spec's pods (each is gone from the API), waking
// on its changes, and returns the names of those left when ctx ends first. The recorder must be running.
func (r *Recorder) UntilNoPods(ctx context.Context) ([]string, error) {
	for {
		changed := r.Changed()
		if r.podsSynced() && len(r.podStore.ListKeys()) == 0 {
			return nil, nil
		}
		select {
		case <-changed:
		case <-r.stop:
			return r.podStore.ListKeys(), errors.New("the recorder was stopped")
		case <-ctx.Done():
			return r.podStore.ListKeys(), ctx.Err()
		}
	}
}

func sortWorkloads(ws []Workload) {
	first := func(w Workload) time.Time {
		if len(w.Events) == 0 {
			return time.Time{}
		}
		return w.Events[0].At
	}
	slices.SortStableFunc(ws, func(a, b Workload) int {
		return cmp.Or(first(a).Compare(first(b)), strings.Compare(a.Name, b.Name))
	})
}
