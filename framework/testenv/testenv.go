// Package testenv is what a spec works in: the clients, the run's fixtures factory, the timeouts, the
// waiter, and the create-with-cleanup helpers that give every spec its own namespace and remove
// everything it created (unless resources are kept), dumping evidence first when the spec failed.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/artifacts"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/diagnose"
	"gpuconform.io/gpuconform/framework/timeline"
	"gpuconform.io/gpuconform/framework/timeouts"
	"gpuconform.io/gpuconform/framework/wait"
)

// Env is shared by all specs of a run. Its one piece of per-spec state is the current spec's timeline
// recorder (the specs of one process run one at a time).
type Env struct {
	// Clients reach the cluster.
	Clients *cluster.Clients
	// KueuePresent says whether Kueue's API is served (diagnosis and dumps skip Kueue otherwise).
	KueuePresent bool
	// Factory builds fixtures with the run label.
	Factory fixtures.Factory
	// Timeouts are the run's budgets.
	Timeouts timeouts.Timeouts
	// Wait runs waits with the diagnosis wired in.
	Wait wait.Waiter
	// NamespacePrefix starts spec namespaces.
	NamespacePrefix string
	// ArtifactsDir receives per-spec dumps.
	ArtifactsDir string
	// KeepResources skips every delete.
	KeepResources bool
	// Namespace, when set, is the existing namespace every spec runs in (team-namespace mode): no
	// namespace is created, each spec's objects carry a spec tag in their names and labels, and cleanup
	// deletes by that label.
	Namespace string
	// HelperNamespace is where node-level helper pods (the podresources reader) run; empty: the spec's.
	HelperNamespace string

	// mu guards the recorders and written: a spec may create namespaces and wait from several goroutines
	// (the upgrade rehearsal checks each path's canary devices at once).
	mu sync.Mutex
	// recorder is the current spec's timeline recorder (specs of one process run one at a time): that of
	// its newest namespace. recorders are all its live recorders, one per namespace, which Changed follows.
	recorder  *timeline.Recorder
	recorders []*timeline.Recorder
	// written is what the current spec's recorders have written so far: a spec with several namespaces
	// (the upgrade rehearsal's checks) has one timeline of all their workloads.
	written timeline.Timeline
}

// Changed returns a channel closed at the next change of the current spec's Jobs, Pods or Workloads, in
// any of its namespaces (nil, which never fires, between specs). The run's Waiter wakes on it.
func (e *Env) Changed() <-chan struct{} {
	e.mu.Lock()
	rs := slices.Clone(e.recorders)
	e.mu.Unlock()
	switch len(rs) {
	case 0:
		return nil
	case 1:
		return rs[0].Changed()
	}
	return anyClosed(rs)
}

// cacheOf is the current spec's live recorder of ns (its informers), nil when ns is none of its
// namespaces.
func (e *Env) cacheOf(ns string) *timeline.Recorder {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range slices.Backward(e.recorders) {
		if r.Namespace() == ns {
			return r
		}
	}
	return nil
}

// The reads below are for waits: they serve the spec's own Jobs, Pods and Workloads from its informers
// (the timeline recorder's, whose changes wake the waits) and ask the API server only for what the
// informers do not have (another namespace, an object created a moment ago, informers not synced yet).
// A read that must see the cluster as it is now, outside a wait, uses the clients.

// GetJob reads Job ns/name for a wait.
func (e *Env) GetJob(ctx context.Context, ns, name string) (*batchv1.Job, error) {
	return cachedOr(e, ns, func(r *timeline.Recorder) (*batchv1.Job, bool) { return r.Job(name) },
		func() (*batchv1.Job, error) {
			return e.Clients.Kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		})
}

// GetLocalQueue reads Kueue LocalQueue ns/name for a wait.
func (e *Env) GetLocalQueue(ctx context.Context, ns, name string) (*kueue.LocalQueue, error) {
	return cachedOr(e, ns, func(r *timeline.Recorder) (*kueue.LocalQueue, bool) { return r.LocalQueue(name) },
		func() (*kueue.LocalQueue, error) {
			return e.Clients.Kueue.KueueV1beta2().LocalQueues(ns).Get(ctx, name, metav1.GetOptions{})
		})
}

// GetPod reads pod ns/name for a wait.
func (e *Env) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return cachedOr(e, ns, func(r *timeline.Recorder) (*corev1.Pod, bool) { return r.Pod(name) },
		func() (*corev1.Pod, error) {
			return e.Clients.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		})
}

// cachedOr reads from the spec's informers of ns what they hold, else from the API server.
func cachedOr[T any](e *Env, ns string, cached func(*timeline.Recorder) (T, bool), api func() (T, error)) (T, error) {
	if r := e.cacheOf(ns); r != nil {
		if v, ok := cached(r); ok {
			return v, nil
		}
	}
	return api()
}

// ListPods lists ns's pods matching selector for a wait; an empty list from the informers is asked of the
// API server again (a pod created a moment ago).
func (e *Env) ListPods(ctx context.Context, ns string, selector labels.Selector) ([]corev1.Pod, error) {
	return listCachedOr(e, ns, func(r *timeline.Recorder) ([]corev1.Pod, bool) { return r.Pods(selector) },
		func() ([]corev1.Pod, error) {
			list, err := e.Clients.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
			return itemsOf(list, err, func(l *corev1.PodList) []corev1.Pod { return l.Items })
		})
}

// ListWorkloads lists ns's Kueue Workloads matching selector for a wait, as ListPods.
func (e *Env) ListWorkloads(ctx context.Context, ns string, selector labels.Selector) ([]kueue.Workload, error) {
	return listCachedOr(e, ns, func(r *timeline.Recorder) ([]kueue.Workload, bool) { return r.Workloads(selector) },
		func() ([]kueue.Workload, error) {
			list, err := e.Clients.Kueue.KueueV1beta2().Workloads(ns).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
			return itemsOf(list, err, func(l *kueue.WorkloadList) []kueue.Workload { return l.Items })
		})
}

// listCachedOr is cachedOr for a list: an empty one from the informers is asked of the API server.
func listCachedOr[T any](e *Env, ns string, cached func(*timeline.Recorder) ([]T, bool), api func() ([]T, error)) ([]T, error) {
	return cachedOr(e, ns, func(r *timeline.Recorder) ([]T, bool) {
		v, ok := cached(r)
		return v, ok && len(v) > 0
	}, api)
}

// itemsOf returns a list call's items, or its error.
func itemsOf[L any, T any](list *L, err error, items func(*L) []T) ([]T, error) {
	if err != nil {
		return nil, err
	}
	return items(list), nil
}

// anyClosed returns a channel closed when any recorder's Changed channel is; a recorder that stops closes
// its channel too, so the goroutine that watches them always ends.
func anyClosed(rs []*timeline.Recorder) <-chan struct{} {
	cases := make([]reflect.SelectCase, len(rs))
	for i, r := range rs {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(r.Changed())}
	}
	out := make(chan struct{})
	go func() {
		reflect.Select(cases)
		close(out)
	}()
	return out
}

// Note records an event the spec observed (a fault, a node state) in the timeline of workload (a Job
// name) of the current spec.
func (e *Env) Note(workload string, kind timeline.Kind, object, detail string) {
	if r := e.current(); r != nil {
		r.Note(workload, timeline.Event{At: time.Now().UTC(), Kind: kind, Object: object, Detail: detail})
	}
}

// current is the current spec's newest recorder (nil between specs).
func (e *Env) current() *timeline.Recorder {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.recorder
}

// Timeline returns the current spec's timeline as recorded so far (its workloads' events and timings),
// for a spec that asserts on or reports them. It is written to the spec's artifacts when the spec ends.
func (e *Env) Timeline() timeline.Timeline {
	r := e.current()
	if r == nil {
		return timeline.Timeline{}
	}
	return r.Snapshot(ginkgo.CurrentSpecReport().FullText())
}

// timelineEnd is where a spec's recorder waits for the end of its cleanup: the namespace's deletion and
// the wait for its pods to be gone run while it still records, so that each pod's teardown is in the
// timeline.
type timelineEnd struct{ r *timeline.Recorder }

// endTimeline registers stopping the recorder that recordTimeline will put in the returned slot and
// writing its timeline into the spec's artifacts directory. Registered before the namespace's deletion,
// it runs after it.
func (e *Env) endTimeline() *timelineEnd {
	end := &timelineEnd{}
	ginkgo.DeferCleanup(func() {
		if end.r != nil {
			e.stopTimeline(end.r)
		}
	})
	return end
}

// recordTimeline starts the spec's timeline recorder on ns (selector: the spec's objects in a shared
// namespace) into end (endTimeline). Its logs are read by a cleanup registered after the namespace's
// deletion, which runs before it, while the pods and their logs still exist.
func (e *Env) recordTimeline(ctx context.Context, ns, selector string, end *timelineEnd) {
	r := timeline.Start(context.WithoutCancel(ctx), e.Clients.Kube, e.kueueOrNil(), ns, selector)
	e.mu.Lock()
	e.recorder = r
	e.recorders = append(e.recorders, r)
	e.mu.Unlock()
	end.r = r
	ginkgo.DeferCleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r.ReadLogs(ctx)
	})
}

// stopTimeline stops r and writes (or merges) the spec's timeline.
func (e *Env) stopTimeline(r *timeline.Recorder) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := ginkgo.CurrentSpecReport().FullText()
	e.mu.Lock()
	e.recorders = slices.DeleteFunc(e.recorders, func(x *timeline.Recorder) bool { return x == r })
	e.mu.Unlock()
	t := r.Stop(ctx, spec)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.recorder == r {
		e.recorder = nil
	}
	if len(t.Workloads) == 0 {
		return
	}
	first := e.written.Spec != spec
	if first {
		e.written = t
	} else {
		e.written = timeline.Merge(e.written, t)
	}
	if path, err := e.written.Write(artifacts.SpecDir(e.ArtifactsDir, spec)); err != nil {
		ginkgo.GinkgoWriter.Printf("writing the timeline: %v\n", err)
	} else if first {
		ginkgo.AddReportEntry(timeline.ReportEntry, path)
	}
}

// NewNamespace creates a namespace for the current spec, named by the API server from
// <prefix>-<purpose>- (metadata.generateName), carrying the run label. Cleanup (registered right after
// the create, so it runs last) deletes it and waits until its pods and claims are gone, so the devices
// they held are free for the next spec (the namespace itself finalizes in the background; the leak audit
// waits for it); a failed spec's namespace is dumped before that.
func (e *Env) NewNamespace(ctx context.Context, purpose string) *corev1.Namespace {
	ginkgo.GinkgoHelper()
	return e.newNamespace(ctx, purpose, nil)
}

// NewLabelledNamespace is NewNamespace for a namespace that carries labels besides the run's (the DRA
// admin-access label, say). In team-namespace mode the suite labels no namespace: it returns nil there.
func (e *Env) NewLabelledNamespace(ctx context.Context, purpose string, labels map[string]string) *corev1.Namespace {
	ginkgo.GinkgoHelper()
	if e.Namespace != "" {
		return nil
	}
	return e.newNamespace(ctx, purpose, labels)
}

func (e *Env) newNamespace(ctx context.Context, purpose string, labels map[string]string) *corev1.Namespace {
	ginkgo.GinkgoHelper()
	if e.Namespace != "" {
		return e.useTeamNamespace(purpose)
	}
	if e.Factory.SpecTag != "" { // never written when goroutines share the Env (not in team-namespace mode)
		e.Factory.SpecTag = ""
	}
	end := e.endTimeline()
	created := e.Factory.Namespace("")
	maps.Copy(created.Labels, labels)
	// The API server appends the random suffix (the prefix ends in one dash) and picks a free name.
	created.GenerateName = e.NamespacePrefix + "-" + purpose + "-"
	err := e.Clients.Resources.Create(ctx, created)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "creating a spec namespace %s*", created.GenerateName)

	ginkgo.DeferCleanup(func() {
		if e.KeepResources {
			ginkgo.GinkgoWriter.Printf("keeping namespace %s (keep-resources)\n", created.Name)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.Timeouts.Cleanup)
		defer cancel()
		err := e.Clients.Resources.Delete(ctx, created)
		if err != nil && !apierrors.IsNotFound(err) {
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting spec namespace %s", created.Name)
		}
		// The namespace finalizes in the background (the leak audit at the end waits for it); the next
		// spec needs only the devices back.
		e.waitDevicesFree(ctx, created.Name, "")
	})
	e.recordTimeline(ctx, created.Name, "", end)
	// Registered after the delete, so it runs before it.
	e.dumpOnFailure(created.Name, "")
	return created
}

// useTeamNamespace gives the current spec the configured namespace. The spec's objects are named and
// labelled with a fresh tag (fixtures.SpecLabel); cleanup (registered first, so it runs last) deletes
// whatever still carries the tag and waits until its pods and claims are gone, so the devices are free
// for the next spec; a failed spec's objects are dumped before that.
func (e *Env) useTeamNamespace(purpose string) *corev1.Namespace {
	ginkgo.GinkgoHelper()
	tag := purpose + "-" + rand.String(5)
	e.Factory.SpecTag = tag
	ns := e.Namespace
	selector := fixtures.SpecLabel + "=" + tag
	end := e.endTimeline()
	ginkgo.DeferCleanup(func() {
		if e.KeepResources {
			ginkgo.GinkgoWriter.Printf("keeping the objects labelled %s in %s (keep-resources)\n", selector, ns)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.Timeouts.Cleanup)
		defer cancel()
		gomega.Expect(e.deleteLabelled(ctx, ns, selector)).To(gomega.Succeed())
		e.waitDevicesFree(ctx, ns, selector)
	})
	e.recordTimeline(context.Background(), ns, selector, end)
	e.dumpOnFailure(ns, selector)
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
}

// waitDevicesFree waits until ns holds no pod and no ResourceClaim of the spec (those matching selector;
// "" for all): their devices are free for the next spec. The spec's informers are stopped by then, so it
// lists and watches each kind once (untilNone) instead of polling: the cleanup of every spec runs here.
func (e *Env) waitDevicesFree(ctx context.Context, ns, selector string) {
	ginkgo.GinkgoHelper()
	e.waitGone(ctx, ns, selector, true)
}

// WaitDevicesFree waits, within the cleanup timeout, until ns holds no pod and no ResourceClaim matching
// selector ("" for all): a step that deleted the pods holding some devices waits here before it lets
// another spec have them.
func (e *Env) WaitDevicesFree(ctx context.Context, ns, selector string) {
	ginkgo.GinkgoHelper()
	e.waitGone(ctx, ns, selector, true)
}

// SpecSelector selects the objects of the namespace the current spec was given last (NewNamespace): ""
// for a namespace of its own, its tag's label where the spec shares the configured namespace.
func (e *Env) SpecSelector() string {
	if e.Factory.SpecTag == "" {
		return ""
	}
	return fixtures.SpecLabel + "=" + e.Factory.SpecTag
}

// WaitPodsGone waits, within the cleanup timeout, until ns holds no pod matching selector ("" for all),
// listing and watching once (untilNone) instead of polling: a step that deleted its pods waits here
// before the next step needs their devices.
func (e *Env) WaitPodsGone(ctx context.Context, ns, selector string) {
	ginkgo.GinkgoHelper()
	e.waitGone(ctx, ns, selector, false)
}

// waitGone is waitDevicesFree, for the pods only unless claims.
func (e *Env) waitGone(ctx context.Context, ns, selector string, claimsToo bool) {
	ginkgo.GinkgoHelper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, e.Timeouts.Cleanup)
	defer cancel()
	kube := e.Clients.Kube
	opts := func(o metav1.ListOptions) metav1.ListOptions {
		o.LabelSelector = selector
		return o
	}
	fail := func(kind string, left []string, err error) {
		ginkgo.GinkgoHelper()
		ginkgo.Fail(fmt.Sprintf("timed out after %s waiting for the pods and ResourceClaims of the spec in %s to be gone: %s of this spec still exist in %s: %s (%v)",
			time.Since(start).Round(time.Second), ns, kind, ns, strings.Join(left, ", "), err))
	}
	// The spec's recorder runs until its cleanup ends (stopTimeline): its informer already watches these pods.
	if r := e.cacheOf(ns); r != nil && r.Selector() == selector {
		if left, err := r.UntilNoPods(ctx); err != nil {
			fail("pods", left, err)
		}
	} else if left, err := untilNone(ctx, podsListWatch(kube, ns, opts), &corev1.Pod{}); err != nil {
		fail("pods", left, err)
	}
	if !claimsToo {
		return
	}
	// Claims only where DRA's API is served; the list tells, and is the wait when none is left.
	claims, err := kube.ResourceV1().ResourceClaims(ns).List(ctx, opts(metav1.ListOptions{}))
	if err != nil || len(claims.Items) == 0 {
		return
	}
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kube.ResourceV1().ResourceClaims(ns).List(ctx, opts(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kube.ResourceV1().ResourceClaims(ns).Watch(ctx, opts(o))
		},
	}, kube)
	if left, err := untilNone(ctx, lw, &resourcev1.ResourceClaim{}); err != nil {
		fail("ResourceClaims", left, err)
	}
}

// podsListWatch lists and watches ns's pods with opts applied, wrapped so that the reflector knows whether
// the client can stream the list in the watch (WatchList).
func podsListWatch(kube kubernetes.Interface, ns string, opts func(metav1.ListOptions) metav1.ListOptions) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kube.CoreV1().Pods(ns).List(ctx, opts(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kube.CoreV1().Pods(ns).Watch(ctx, opts(o))
		},
	}, kube)
}

// untilNone waits until lw lists no object, with one list and one watch, or one watch that streams the
// list where the client and server can (client-go's UntilWithSync), rather than a list per poll, and returns the names still listed when it gave up.
func untilNone(ctx context.Context, lw cache.ListerWatcher, obj runtime.Object) (left []string, err error) {
	var store cache.Store
	none := func() bool { return len(store.List()) == 0 }
	_, err = watchtools.UntilWithSync(ctx, lw, obj,
		func(s cache.Store) (bool, error) { store = s; return none(), nil },
		func(watch.Event) (bool, error) { return none(), nil })
	if err == nil || store == nil {
		return nil, err
	}
	for _, o := range store.List() {
		if m, merr := meta.Accessor(o); merr == nil {
			left = append(left, m.GetName())
		}
	}
	slices.Sort(left)
	return left, err
}

// dumpOnFailure registers, for a failed spec, a dump of its objects in ns (those matching selector, when
// set) into the spec's artifacts directory.
func (e *Env) dumpOnFailure(ns, selector string) {
	ginkgo.DeferCleanup(func() {
		if !ginkgo.CurrentSpecReport().Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dir := artifacts.SpecDir(e.ArtifactsDir, ginkgo.CurrentSpecReport().FullText())
		artifacts.DumpNamespace(ctx, e.Clients.Kube, e.kueueOrNil(), ns, selector, dir)
		ginkgo.AddReportEntry("artifacts", dir)
	})
}

// kueueOrNil is the Kueue client when Kueue is installed.
func (e *Env) kueueOrNil() kueueclient.Interface {
	if e.KueuePresent {
		return e.Clients.Kueue
	}
	return nil
}

// labelledKinds are the namespaced kinds the suite creates that deleteLabelled removes. Generated
// ResourceClaims go with their pods; Kueue's Workloads with their Jobs; ReplicaSets with their Deployments.
var labelledKinds = []func() k8s.ObjectList{
	func() k8s.ObjectList { return &autoscalingv2.HorizontalPodAutoscalerList{} },
	func() k8s.ObjectList { return &appsv1.DeploymentList{} },
	func() k8s.ObjectList { return &batchv1.JobList{} },
	func() k8s.ObjectList { return &corev1.PodList{} },
	func() k8s.ObjectList { return &resourcev1.ResourceClaimTemplateList{} },
	func() k8s.ObjectList { return &corev1.PersistentVolumeClaimList{} },
	func() k8s.ObjectList { return &corev1.ServiceList{} },
}

// deleteLabelled deletes the objects of labelledKinds in ns that carry the selector. A kind whose API
// is not served (no DRA) has nothing to delete.
func (e *Env) deleteLabelled(ctx context.Context, ns, selector string) error {
	res := e.Clients.ResourcesIn(ns)
	var errs []error
	keep := func(err error) {
		if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			errs = append(errs, err)
		}
	}
	for _, newList := range labelledKinds {
		list := newList()
		if err := res.List(ctx, list, resources.WithLabelSelector(selector)); err != nil {
			keep(err)
			continue
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			keep(err)
			continue
		}
		for _, it := range items {
			keep(res.Delete(ctx, it.(k8s.Object), background))
		}
	}
	return errors.Join(errs...)
}

// background deletes dependents (a Job's pods, a Workload) after the owner, without waiting.
var background = resources.WithDeletePropagation(string(metav1.DeletePropagationBackground))

// Create creates obj and registers its deletion (fresh context, LIFO). Any kind in klient's scheme
// works (built-in and Kueue's). It returns the created object; obj itself is left as it was.
func (e *Env) Create(ctx context.Context, obj fixtures.Object) fixtures.Object {
	ginkgo.GinkgoHelper()
	created, err := e.create(ctx, obj)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "creating %s", describe(obj))
	ginkgo.DeferCleanup(func() {
		if e.KeepResources {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.Timeouts.Cleanup)
		defer cancel()
		err := e.delete(ctx, created)
		if err != nil && !apierrors.IsNotFound(err) {
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting %s", describe(created))
		}
	})
	return created
}

// TryCreate creates obj and returns the API error, for specs that expect a rejection. Should the
// create unexpectedly succeed, the object's deletion is registered as with Create.
func (e *Env) TryCreate(ctx context.Context, obj fixtures.Object) error {
	created, err := e.create(ctx, obj)
	if err == nil {
		ginkgo.DeferCleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), e.Timeouts.Cleanup)
			defer cancel()
			_ = e.delete(ctx, created)
		})
	}
	return err
}

// create creates a copy of obj through klient, which serves every kind in its scheme (built-in and
// Kueue's), and returns it as the server answered. The copy leaves obj reusable as a template. A create
// the namespace's ResourceQuota refuses with "status unknown for quota" (a bare pod's, or any object an
// object-count quota constrains) is retried for diagnose.QuotaStatusGrace (retryQuotaStatus).
func (e *Env) create(ctx context.Context, obj fixtures.Object) (fixtures.Object, error) {
	var created fixtures.Object
	err := retryQuotaStatus(ctx, diagnose.QuotaStatusGrace, max(e.Timeouts.Poll, 100*time.Millisecond), func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, e.Timeouts.API)
		defer cancel()
		created = obj.DeepCopyObject().(fixtures.Object)
		return e.Clients.Resources.Create(ctx, created)
	})
	if err != nil {
		return nil, err
	}
	return created, nil
}

func (e *Env) delete(ctx context.Context, obj fixtures.Object) error {
	return e.Clients.Resources.Delete(ctx, obj, background)
}

func describe(obj fixtures.Object) string {
	kind := fmt.Sprintf("%T", obj)
	kind = kind[strings.LastIndex(kind, ".")+1:]
	if obj.GetNamespace() != "" {
		return kind + " " + obj.GetNamespace() + "/" + obj.GetName()
	}
	return kind + " " + obj.GetName()
}

// DiagnoseExplainer returns the explainer every wait prints on failure: framework/diagnose's decision
// tree for the waited-on object. The Kueue client is passed only when Kueue is installed.
func DiagnoseExplainer(c *cluster.Clients, kueuePresent bool) wait.Explainer {
	dc := diagnose.Clients{Kube: c.Kube}
	if kueuePresent {
		dc.Kueue = c.Kueue
	}
	return func(ctx context.Context, t wait.Target) string {
		if t.Kind == "Node" {
			return explainNode(ctx, c, t.Name)
		}
		if _, err := diagnose.ParseKind(t.Kind); err != nil {
			return "" // a kind the diagnosis does not read (a Gateway API object): its wait's check says its state
		}
		return diagnose.Explain(ctx, dc, diagnose.Target{Kind: t.Kind, Namespace: t.Namespace, Name: t.Name})
	}
}

// explainNode is what a failed wait on a node prints: its Ready condition, taints, cordon, the GPU
// resources it advertises (capacity and allocatable of every extended resource) and the devices its
// ResourceSlices publish.
func explainNode(ctx context.Context, c *cluster.Clients, name string) string {
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("Node %s: %v", name, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Node %s:\n", name)
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			fmt.Fprintf(&b, "  Ready=%s (%s) since %s: %s\n", cond.Status, cond.Reason, cond.LastTransitionTime.UTC().Format(time.RFC3339), cond.Message)
		}
	}
	for _, t := range n.Spec.Taints {
		fmt.Fprintf(&b, "  taint %s\n", cluster.FormatTaint(t))
	}
	if n.Spec.Unschedulable {
		b.WriteString("  cordoned\n")
	}
	for res, q := range n.Status.Capacity {
		if strings.Contains(string(res), "/") {
			a := n.Status.Allocatable[res]
			fmt.Fprintf(&b, "  %s: capacity %s, allocatable %s\n", res, q.String(), a.String())
		}
	}
	if slices, err := c.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name}); err == nil {
		for _, sl := range slices.Items {
			fmt.Fprintf(&b, "  ResourceSlice %s (driver %s, pool %s): %d devices\n", sl.Name, sl.Spec.Driver, sl.Spec.Pool.Name, len(sl.Spec.Devices))
		}
		if len(slices.Items) == 0 {
			b.WriteString("  no ResourceSlice on this node\n")
		}
	}
	return b.String()
}

// DiagnoseJudge returns the judge progress waits consult: framework/diagnose's verdict for the target and
// whether it is final. Targets it cannot diagnose (nodes) are never final.
func DiagnoseJudge(c *cluster.Clients, kueuePresent bool) wait.Judge {
	dc := diagnose.Clients{Kube: c.Kube}
	if kueuePresent {
		dc.Kueue = c.Kueue
	}
	return func(ctx context.Context, t wait.Target) (string, bool) {
		if _, err := diagnose.ParseKind(t.Kind); err != nil {
			return "", false
		}
		res, err := diagnose.Run(ctx, dc, diagnose.Target{Kind: t.Kind, Namespace: t.Namespace, Name: t.Name})
		if err != nil {
			return "", false
		}
		return res.String(), res.Terminal
	}
}
