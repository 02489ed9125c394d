package timeline

import (
	"context"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuefake "sigs.k8s.io/kueue/client-go/clientset/versioned/fake"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func get(d *Duration) time.Duration {
	if d == nil {
		return -1
	}
	return time.Duration(*d)
}

// A training Job preempted once and resumed: every derived timing follows from the events.
func TestDerivePreemptedAndResumed(t *testing.T) {
	w := Workload{Name: "train", Events: []Event{
		{At: at(0), Kind: Created}, {At: at(0), Kind: Queued},
		{At: at(2), Kind: QuotaReserved}, {At: at(2), Kind: Admitted},
		{At: at(3), Kind: Scheduled}, {At: at(5), Kind: Started}, {At: at(6), Kind: FirstStep},
		{At: at(20), Kind: Preempted}, {At: at(21), Kind: Stopped},
		{At: at(30), Kind: Admitted}, {At: at(31), Kind: Scheduled}, {At: at(32), Kind: Started},
		{At: at(32), Kind: Resumed}, {At: at(34), Kind: FirstStep}, {At: at(50), Kind: Stopped}, {At: at(51), Kind: Finished},
	}}
	w.Derive()
	d := w.Derived
	for name, c := range map[string]struct{ got, want time.Duration }{
		"admission wait": {get(d.AdmissionWait), 2 * time.Second},
		"pending":        {get(d.Pending), 1 * time.Second},
		"start":          {get(d.Start), 2 * time.Second},
		// 6→20 and 34→50.
		"useful work": {get(d.UsefulWork), 30 * time.Second},
		// admitted 2→first step 6, re-admitted 30→first step 34.
		"idle reservation": {get(d.IdleReservation), 8 * time.Second},
	} {
		if c.got != c.want {
			t.Errorf("%s = %s, want %s", name, c.got, c.want)
		}
	}
	if d.Evictions != 1 {
		t.Errorf("evictions = %d, want 1", d.Evictions)
	}
}

// Without Kueue and without progress lines, what cannot be measured stays unmeasured (nil), never 0.
func TestDeriveWithoutKueueOrProgress(t *testing.T) {
	w := Workload{Name: "probe", Events: []Event{{At: at(0), Kind: Created}, {At: at(4), Kind: Scheduled}, {At: at(7), Kind: Started}, {At: at(8), Kind: Stopped}}}
	w.Derive()
	if w.Derived.AdmissionWait != nil || w.Derived.UsefulWork != nil || w.Derived.IdleReservation != nil {
		t.Errorf("unmeasurable timings were filled in: %+v", w.Derived)
	}
	if get(w.Derived.Pending) != 4*time.Second || get(w.Derived.Start) != 3*time.Second {
		t.Errorf("pending %s start %s, want 4s and 3s", w.Derived.Pending, w.Derived.Start)
	}
}

func TestParseProgress(t *testing.T) {
	log := `{"event":"start","resumed":true,"resumed_from":6,"time":"2026-12-01T10:00:01Z"}
not json
{"event":"first_step","step":7,"resumed":true,"time":"2026-12-01T10:00:02Z"}
{"event":"checkpoint","step":10,"reason":"interval","time":"2026-12-01T10:00:05Z"}
{"event":"done","steps":20,"time":"2026-12-01T10:00:09Z"}`
	evs := ParseProgress("train-x", log)
	if len(evs) != 3 || evs[0].Kind != Resumed || evs[1].Kind != FirstStep || evs[2].Kind != Checkpoint || evs[2].Detail != "step 10 (interval)" {
		t.Errorf("events = %+v", evs)
	}
}

// The recorder keeps each transition it sees, an eviction and the re-admission after it included, with
// the components' own timestamps, and attributes Workloads and pods to their Job.
func TestRecorderKeepsEveryTransition(t *testing.T) {
	ctx := t.Context()
	ctrl := true
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ns", UID: "j", CreationTimestamp: metav1.NewTime(at(0))}}
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Name: "job-train-1", Namespace: "ns", CreationTimestamp: metav1.NewTime(at(0)),
		OwnerReferences: []metav1.OwnerReference{{Kind: "Job", Name: "train", UID: "j", Controller: &ctrl}}}}
	wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(at(2))}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-abc", Namespace: "ns",
		OwnerReferences: []metav1.OwnerReference{{Kind: "Job", Name: "train", UID: "j", Controller: &ctrl}}}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at(3))}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: Container, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at(5))}}}}
	kube := fake.NewClientset(job, pod)
	kq := kueuefake.NewSimpleClientset(wl)

	r := Start(ctx, kube, kq, "ns", "")
	waitFor(t, func() bool {
		return r.Snapshot("s").Workload("train") != nil && len(r.Snapshot("s").Workload("train").Events) >= 5
	})

	// Preempted, then admitted again: both transitions must stay in the record.
	wl.Status.Conditions = []metav1.Condition{
		{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionFalse, LastTransitionTime: metav1.NewTime(at(20))},
		{Type: kueue.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: kueue.WorkloadEvictedByPreemption, LastTransitionTime: metav1.NewTime(at(20))},
	}
	if _, err := kq.KueueV1beta2().Workloads("ns").Update(ctx, wl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return r.Snapshot("s").Workload("train").Derived.Evictions == 1 })
	wl.Status.Conditions = []metav1.Condition{
		{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(at(30))},
		{Type: kueue.WorkloadEvicted, Status: metav1.ConditionFalse, LastTransitionTime: metav1.NewTime(at(30))},
	}
	if _, err := kq.KueueV1beta2().Workloads("ns").Update(ctx, wl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return count(r.Snapshot("s").Workload("train").Events, Admitted) == 2 })

	tl := r.Stop(ctx, "spec")
	w := tl.Workload("train")
	if w == nil || count(w.Events, Created) != 1 || count(w.Events, Queued) != 1 || count(w.Events, Scheduled) != 1 || count(w.Events, Started) != 1 || count(w.Events, Preempted) != 1 {
		t.Fatalf("events = %+v", w)
	}
	if get(w.Derived.AdmissionWait) != 2*time.Second || get(w.Derived.Pending) != time.Second || get(w.Derived.Start) != 2*time.Second {
		t.Errorf("derived = admission %s pending %s start %s", w.Derived.AdmissionWait, w.Derived.Pending, w.Derived.Start)
	}

	dir := t.TempDir()
	if _, err := tl.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := Read(dir)
	if err != nil || back.Workload("train") == nil || get(back.Workload("train").Derived.Start) != 2*time.Second {
		t.Errorf("read back: %+v, %v", back, err)
	}
}

func count(evs []Event, k Kind) int {
	n := 0
	for _, e := range evs {
		if e.Kind == k {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWorkerOfGangHasItsOwnBar(t *testing.T) {
	ctrl := true
	owner := []metav1.OwnerReference{{Kind: "Job", Name: "gang", Controller: &ctrl}}
	worker := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gang-1-abc", OwnerReferences: owner,
		Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: "1"}}}
	if got := workloadOf(worker); got != "gang[1]" {
		t.Fatalf("a gang worker's workload is %q, want gang[1]", got)
	}
	single := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-xyz", OwnerReferences: owner}}
	if got := workloadOf(single); got != "gang" {
		t.Fatalf("a one-pod Job's pod belongs to %q, want its Job", got)
	}
}

func TestMergeKeepsEveryWorkloadOfBothNamespaces(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	wl := func(name string, from, to int) Workload {
		return Workload{Name: name, Events: []Event{{At: at(from), Kind: Created}, {At: at(to), Kind: Finished}}}
	}
	check := Timeline{Spec: "s", Namespace: "check", Start: at(10), End: at(40), Workloads: []Workload{wl("gang", 12, 30), wl("fill-0", 31, 38)}}
	main := Timeline{Spec: "s", Namespace: "upgrade", Start: at(0), End: at(60), Workloads: []Workload{wl("sentinel", 1, 55), wl("gang", 41, 50)}}
	m := Merge(check, main)
	if !m.Start.Equal(at(0)) || !m.End.Equal(at(60)) || m.Namespace != "check" {
		t.Errorf("span %s–%s in %s, want the union of both", m.Start, m.End, m.Namespace)
	}
	var names []string
	for _, w := range m.Workloads {
		names = append(names, w.Name)
	}
	// Sorted by first event; the second "gang" keeps its own namespace in its name.
	if want := []string{"sentinel", "gang", "fill-0", "upgrade/gang"}; !slices.Equal(names, want) {
		t.Errorf("workloads %v, want %v", names, want)
	}
	if len(check.Workloads) != 2 {
		t.Errorf("Merge changed its first argument: %v", check.Workloads)
	}
}

// Waits read the spec's Jobs, Pods and Workloads from the recorder's informers: what the informers hold,
// filtered as asked, and a miss (not there, not synced) the caller asks the API server for.
func TestRecorderServesItsObjects(t *testing.T) {
	ctx := t.Context()
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ns"}}
	a := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-a", Namespace: "ns", Labels: map[string]string{batchv1.JobNameLabel: "train"}}}
	b := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "ns", Labels: map[string]string{batchv1.JobNameLabel: "other"}}}
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Name: "job-train-1", Namespace: "ns", Labels: map[string]string{"kueue.x-k8s.io/job-uid": "j"}}}
	r := Start(ctx, fake.NewClientset(job, a, b), kueuefake.NewSimpleClientset(wl), "ns", "")
	defer func() { _ = r.Stop(ctx, "s") }()
	waitFor(t, r.hasSynced)
	if got, ok := r.Job("train"); !ok || got.Name != "train" {
		t.Errorf("Job(train) = %v, %v", got, ok)
	}
	if _, ok := r.Job("missing"); ok {
		t.Error("a Job the informer does not hold was served")
	}
	if got, ok := r.Pod("other"); !ok || got.Name != "other" {
		t.Errorf("Pod(other) = %v, %v", got, ok)
	}
	pods, ok := r.Pods(labels.SelectorFromSet(labels.Set{batchv1.JobNameLabel: "train"}))
	if !ok || len(pods) != 1 || pods[0].Name != "train-a" {
		t.Errorf("Pods(job-name=train) = %v, %v", pods, ok)
	}
	pods[0].Labels["changed"] = "by the caller"
	if again, _ := r.Pod("train-a"); again.Labels["changed"] != "" {
		t.Error("a caller's change reached the informer's store: the recorder must hand out copies")
	}
	if wls, ok := r.Workloads(labels.SelectorFromSet(labels.Set{"kueue.x-k8s.io/job-uid": "j"})); !ok || len(wls) != 1 {
		t.Errorf("Workloads(job-uid=j) = %v, %v", wls, ok)
	}
	if noKueue := Start(ctx, fake.NewClientset(), nil, "ns", ""); noKueue != nil {
		defer func() { _ = noKueue.Stop(ctx, "s") }()
		if _, ok := noKueue.Workloads(labels.Everything()); ok {
			t.Error("a recorder without Kueue served Workloads")
		}
	}
}

// A pod deleted while the recorder runs: its deletion (the request's time, from deletionTimestamp less
// the grace period) and its end in the API are events, and the workload's teardown is measured.
func TestRecorderKeepsThePodsTeardown(t *testing.T) {
	ctx := t.Context()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "ns", CreationTimestamp: metav1.NewTime(at(0))}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: Container, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at(2))}}}}
	kube := fake.NewClientset(pod)
	r := Start(ctx, kube, nil, "ns", "")
	waitFor(t, func() bool { w := r.Snapshot("s").Workload("held"); return w != nil && count(w.Events, Started) == 1 })
	r.ReadLogs(ctx) // as a spec's cleanup does before it deletes

	// The API server's deletion: deletionTimestamp = request + grace (30 s), then the kubelet's final delete.
	terminating := pod.DeepCopy()
	terminating.DeletionTimestamp = ptr.To(metav1.NewTime(at(40)))
	terminating.DeletionGracePeriodSeconds = ptr.To[int64](30)
	if _, err := kube.CoreV1().Pods("ns").Update(ctx, terminating, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return count(r.Snapshot("s").Workload("held").Events, Deleting) == 1 })
	// The kubelet's final delete, grace 0, moves deletionTimestamp to its own time: not a second request.
	final := terminating.DeepCopy()
	final.DeletionTimestamp = ptr.To(metav1.NewTime(at(13)))
	final.DeletionGracePeriodSeconds = ptr.To[int64](0)
	if _, err := kube.CoreV1().Pods("ns").Update(ctx, final, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := kube.CoreV1().Pods("ns").Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return count(r.Snapshot("s").Workload("held").Events, Gone) == 1 })
	if n := count(r.Snapshot("s").Workload("held").Events, Deleting); n != 1 {
		t.Errorf("%d deleting events, want the request's only", n)
	}

	w := r.Stop(ctx, "spec").Workload("held")
	var deleting, gone time.Time
	for _, e := range w.Events {
		switch e.Kind {
		case Deleting:
			deleting = e.At
		case Gone:
			gone = e.At
		}
	}
	if !deleting.Equal(at(10)) {
		t.Errorf("deleting at %s, want the request's time %s (deletionTimestamp less the grace period)", deleting, at(10))
	}
	if gone.Before(before) {
		t.Errorf("gone at %s, before the pod was deleted (%s)", gone, before)
	}
	if w.Derived.Teardown == nil || time.Duration(*w.Derived.Teardown) != gone.Sub(deleting) {
		t.Errorf("teardown = %s, want %s", w.Derived.Teardown, gone.Sub(deleting))
	}
	if w.Events[len(w.Events)-1].Kind != Gone {
		t.Errorf("the last event is %s, want gone: %+v", w.Events[len(w.Events)-1].Kind, w.Events)
	}
}

// A change of a LocalQueue of the namespace wakes the waits (a queue turning Active), although it is no
// workload's event.
func TestRecorderWakesOnLocalQueues(t *testing.T) {
	ctx := t.Context()
	lq := &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: "ns"}}
	kq := kueuefake.NewSimpleClientset(lq)
	r := Start(ctx, fake.NewClientset(), kq, "ns", "")
	defer func() { _ = r.Stop(ctx, "s") }()
	waitFor(t, r.hasSynced)
	changed := r.Changed()
	lq.Status.Conditions = []metav1.Condition{{Type: kueue.LocalQueueActive, Status: metav1.ConditionTrue, Reason: "Ready"}}
	if _, err := kq.KueueV1beta2().LocalQueues("ns").UpdateStatus(ctx, lq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("a LocalQueue's change did not wake the waits")
	}
	if len(r.Snapshot("s").Workloads) != 0 {
		t.Errorf("a LocalQueue became a workload: %+v", r.Snapshot("s").Workloads)
	}
	// The wait reads it from the informer: the change is there.
	waitFor(t, func() bool {
		got, ok := r.LocalQueue("gpu")
		return ok && len(got.Status.Conditions) == 1
	})
	if _, ok := r.LocalQueue("missing"); ok {
		t.Error("a LocalQueue the informer does not hold was served")
	}
}

// The cleanup's wait for the spec's pods to be gone reads the recorder's informer: it names the pods left
// when its context ends first, and returns once the last is deleted.
func TestUntilNoPodsWaitsOnTheInformer(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "ns"}})
	r := Start(ctx, kube, nil, "ns", "")
	defer func() { _ = r.Stop(ctx, "s") }()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if left, err := r.UntilNoPods(short); err == nil || !slices.Equal(left, []string{"ns/held"}) {
		t.Errorf("with the pod still there: left %q, %v", left, err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.UntilNoPods(ctx); done <- err }()
	if err := kube.CoreV1().Pods("ns").Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after the delete: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end when the last pod was deleted")
	}
}
