package runlease

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const ns = "gpuconform-system"

func draExclusive() Holds { return Holds{Paths: map[string]Mode{"dra": Exclusive}} }

func draShared() Holds { return Holds{Paths: map[string]Mode{"dra": Shared}} }

// newKube is a fake cluster that stamps each lease it creates with stamp as creationTimestamp, as
// the API server does (the fake one stamps nothing); a lease created with a stamp of its own keeps it.
func newKube(stamp time.Time) *fake.Clientset {
	kube := fake.NewClientset()
	kube.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease)
		if l.CreationTimestamp.IsZero() {
			l.CreationTimestamp = metav1.NewTime(stamp)
		}
		return false, nil, nil
	})
	return kube
}

func opts(runID string, h Holds) Options {
	return Options{Namespace: ns, RunID: runID, Host: "h1", PID: 42, Holds: h, Poll: 20 * time.Millisecond}
}

// put writes another run's lease as that run would, created and last renewed when the test says.
func put(t *testing.T, kube kubernetes.Interface, o Options, created, renewed time.Time, proceeded bool) Info {
	t.Helper()
	o = o.withDefaults()
	obj := newObject(o, o.Holds, proceeded, renewed, renewed)
	obj.CreationTimestamp = metav1.NewTime(created)
	got, err := kube.CoordinationV1().Leases(ns).Create(t.Context(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return infoOf(got)
}

func getLease(t *testing.T, kube kubernetes.Interface, name string) (*coordinationv1.Lease, error) {
	t.Helper()
	return kube.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
}

// eventually polls cond for up to 2 s: generous, so that a slow machine does not fail the test.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s did not happen within 2s", what)
}

func release(t *testing.T, l *Lease) {
	t.Helper()
	if err := l.Release(t.Context()); err != nil {
		t.Error(err)
	}
}

func TestConflict(t *testing.T) {
	devicePlugin := Holds{Paths: map[string]Mode{"device-plugin": Exclusive}}
	disrupts := Holds{Disrupts: true}
	canary := Holds{Canary: []string{"gpuconform-worker3"}}
	for _, c := range []struct {
		name string
		a, b Holds
		want string // a piece of the reason; "" for none
	}{
		{"exclusive beside shared", draExclusive(), draShared(), "both use path dra and one holds it exclusive"},
		{"shared beside exclusive", draShared(), draExclusive(), "both use path dra and one holds it exclusive"},
		{"shared beside shared", draShared(), draShared(), ""},
		{"disjoint paths", draExclusive(), devicePlugin, ""},
		{"disruptive beside a holder", disrupts, draShared(), "this run stops nodes or fails devices"},
		{"a holder beside a disruptive", draShared(), disrupts, "the other run stops nodes or fails devices"},
		{"disruptive beside nothing", disrupts, Holds{}, ""},
		{"nothing beside nothing", Holds{}, Holds{}, ""},
		{"canary beside a holder", canary, draShared(), "this run upgrades canary gpuconform-worker3"},
		{"a holder beside a canary", devicePlugin, canary, "the other run upgrades canary gpuconform-worker3"},
		{"two disruptive", disrupts, canary, "this run stops nodes or fails devices"},
		{"exclusive on another pool", onNodes(draExclusive(), "a1", "a2"), onNodes(draExclusive(), "b1"), ""},
		{"disruptive on another pool", onNodes(disrupts, "a1"), onNodes(draShared(), "b1"), ""},
		{"pools that share a node", onNodes(draExclusive(), "a1", "x"), onNodes(draShared(), "x"), "both use path dra"},
		{"a pool beside an unknown one", onNodes(draExclusive(), "a1"), draShared(), "both use path dra"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Conflict(c.a, c.b)
			if (got == "") != (c.want == "") || !strings.Contains(got, c.want) {
				t.Errorf("Conflict = %q, want %q", got, c.want)
			}
		})
	}
}

// onNodes is h on the GPU pool of nodes.
func onNodes(h Holds, nodes ...string) Holds {
	h.Nodes = nodes
	return h
}

func TestHoldsString(t *testing.T) {
	h := Holds{Paths: map[string]Mode{"dra": Shared, "device-plugin": Exclusive}, Disrupts: true, Canary: []string{"gpuconform-worker3"}}
	want := "paths device-plugin (exclusive), dra (shared); stops nodes or fails devices; upgrades canary gpuconform-worker3"
	if got := h.String(); got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got := (Holds{}).String(); got != "nothing" {
		t.Errorf("String of no holds = %q", got)
	}
}

func TestLive(t *testing.T) {
	now := time.Date(2026, 12, 6, 6, 15, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		renewed time.Time
		want    bool
	}{
		{"renewed 30s ago", now.Add(-30 * time.Second), true},
		{"renewed 65s ago, within the skew", now.Add(-65 * time.Second), true},
		{"renewed 75s ago", now.Add(-75 * time.Second), false},
		{"never renewed", time.Time{}, false},
	} {
		if got := (Info{Renewed: c.renewed, Duration: 60 * time.Second}).Live(now); got != c.want {
			t.Errorf("%s: Live = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestInfoString(t *testing.T) {
	i := Info{
		RunID: "20261206-061500-ab12cd", Role: RoleSuite, Host: "h1", PID: 42, Holds: draShared(),
		Started: time.Date(2026, 12, 6, 6, 15, 0, 0, time.UTC), Renewed: time.Date(2026, 12, 6, 6, 15, 3, 0, time.UTC),
	}
	want := "run 20261206-061500-ab12cd on host h1 (pid 42, started 2026-12-06T06:15:00Z, renewed 2026-12-06T06:15:03Z, holds path dra (shared))"
	if got := i.String(); got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

func TestName(t *testing.T) {
	if got := Name(RoleSuite, "20261206-061500-AB12CD"); got != "gpuconform-suite-20261206-061500-ab12cd" {
		t.Errorf("Name = %q", got)
	}
	if got := Name(RoleRunner, "a_b"); got != "gpuconform-runner-a-b" {
		t.Errorf("Name = %q", got)
	}
}

func TestLiveRuns(t *testing.T) {
	now := time.Now()
	infos := []Info{
		{Name: "r1", RunID: "a", Role: RoleRunner, Renewed: now, Duration: time.Minute},
		{Name: "s1", RunID: "a", Role: RoleSuite, Renewed: now, Duration: time.Minute},
		{Name: "r2", RunID: "b", Role: RoleRunner, Renewed: now, Duration: time.Minute},
		{Name: "s2", RunID: "b", Role: RoleSuite, Renewed: now.Add(-time.Hour), Duration: time.Minute},
		{Name: "s3", RunID: "c", Role: RoleSuite, Renewed: now.Add(-time.Hour), Duration: time.Minute},
	}
	got := LiveRuns(infos, now)
	if len(got) != 2 || got["a"].Name != "s1" || got["b"].Name != "r2" {
		t.Errorf("LiveRuns = %v", got)
	}
}

func TestAcquireAlone(t *testing.T) {
	kube := newKube(time.Now())
	o := opts("20261206-061500-ab12cd", Holds{Paths: map[string]Mode{"dra": Exclusive, "device-plugin": Shared}, Canary: []string{"w3"}})
	l, err := Acquire(t.Context(), kube, o)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, l)
	if d, who := l.Waited(); d != 0 || who != nil {
		t.Errorf("Waited = %v, %v; want 0, nil", d, who)
	}
	lease, err := getLease(t, kube, "gpuconform-suite-20261206-061500-ab12cd")
	if err != nil {
		t.Fatal(err)
	}
	if lease.Labels[Label] != "true" || lease.Labels["app.kubernetes.io/managed-by"] != "gpuconform" {
		t.Errorf("labels = %v", lease.Labels)
	}
	if got := *lease.Spec.HolderIdentity; got != "20261206-061500-ab12cd@h1" {
		t.Errorf("holder = %q", got)
	}
	for _, k := range []string{AnnotationRunID, AnnotationRole, AnnotationHost, AnnotationPID, AnnotationStarted, AnnotationHolds} {
		if lease.Annotations[k] == "" {
			t.Errorf("annotation %s is missing: %v", k, lease.Annotations)
		}
	}
	infos, err := List(t.Context(), kube, ns)
	if err != nil || len(infos) != 1 {
		t.Fatalf("List = %v, %v", infos, err)
	}
	i := infos[0]
	if !reflect.DeepEqual(i.Holds, o.Holds) || i.RunID != o.RunID || i.Role != RoleSuite || i.Host != "h1" || i.PID != 42 ||
		!i.Proceeded || !i.Live(time.Now()) || i.Started.IsZero() || i.Duration != DefaultDuration {
		t.Errorf("List read %+v", i)
	}
	if got := l.Info(); !reflect.DeepEqual(got.Holds, o.Holds) || got.Name != i.Name {
		t.Errorf("Info = %+v", got)
	}
}

func TestAcquireWaitsForAnEarlierConflictingRun(t *testing.T) {
	now := time.Now()
	kube := newKube(now)
	earlier := put(t, kube, opts("20261206-060000-aaaaaa", draExclusive()), now.Add(-time.Minute), now, true)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = kube.CoordinationV1().Leases(ns).Delete(t.Context(), earlier.Name, metav1.DeleteOptions{})
	}()
	var lines []string
	var mu sync.Mutex
	o := opts("20261206-061500-ab12cd", draShared())
	o.WaitFor, o.Poll = 10*time.Second, 50*time.Millisecond
	o.Progress = func(line string) { mu.Lock(); lines = append(lines, line); mu.Unlock() }
	l, err := Acquire(t.Context(), kube, o)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, l)
	d, who := l.Waited()
	if d <= 0 || len(who) != 1 || !strings.Contains(who[0], "run 20261206-060000-aaaaaa on host h1") {
		t.Errorf("Waited = %v, %q", d, who)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) == 0 || !strings.Contains(lines[0], "20261206-060000-aaaaaa") || !strings.Contains(lines[0], "both use path dra") {
		t.Errorf("progress lines = %q", lines)
	}
}

func TestAcquireDoesNotWait(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name             string
		other            Options
		created, renewed time.Time
	}{
		{"for an expired conflicting run", opts("20261206-060000-aaaaaa", draExclusive()), now.Add(-time.Hour), now.Add(-5 * time.Minute)},
		{"for a live run that does not conflict", opts("20261206-060000-aaaaaa", draShared()), now.Add(-time.Hour), now},
		{"for a run created later", opts("20261206-060000-aaaaaa", draExclusive()), now.Add(time.Hour), now},
		{"for a run created in the same second with a later name", opts("zz", draExclusive()), now, now},
		{"for another run's runner", func() Options { o := opts("20261206-060000-aaaaaa", draExclusive()); o.Role = RoleRunner; return o }(), now.Add(-time.Hour), now},
	} {
		t.Run(c.name, func(t *testing.T) {
			kube := newKube(now)
			put(t, kube, c.other, c.created, c.renewed, false)
			l, err := Acquire(t.Context(), kube, opts("20261206-061500-ab12cd", draShared())) // WaitFor 0: a conflict fails at once
			if err != nil {
				t.Fatal(err)
			}
			release(t, l)
		})
	}
}

func TestAcquireWaitsFor(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name      string
		other     Options
		created   time.Time
		proceeded bool
	}{
		{"a run created in the same second with an earlier name", opts("00", draExclusive()), now, false},
		{"a run created later that has gone ahead", opts("20261206-060000-aaaaaa", draExclusive()), now.Add(time.Hour), true},
		{"an earlier run that itself waits", opts("20261206-060000-aaaaaa", Holds{Disrupts: true}), now.Add(-time.Hour), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			kube := newKube(now)
			put(t, kube, c.other, c.created, now, c.proceeded)
			_, err := Acquire(t.Context(), kube, opts("20261206-061500-ab12cd", draShared()))
			var we *WaitError
			if !errors.As(err, &we) || len(we.Holders) != 1 || we.Holders[0].RunID != c.other.RunID || we.Waited != 0 {
				t.Fatalf("Acquire = %v, want a *WaitError naming run %s", err, c.other.RunID)
			}
		})
	}
}

func TestRunnerNeverWaits(t *testing.T) {
	now := time.Now()
	kube := newKube(now)
	put(t, kube, opts("20261206-060000-aaaaaa", Holds{Disrupts: true}), now.Add(-time.Hour), now, true)
	o := opts("20261206-061500-ab12cd", draExclusive())
	o.Role = RoleRunner
	l, err := Acquire(t.Context(), kube, o)
	if err != nil {
		t.Fatal(err)
	}
	release(t, l)
}

func TestWaitForElapses(t *testing.T) {
	now := time.Now()
	kube := newKube(now)
	put(t, kube, opts("20261206-060000-aaaaaa", draExclusive()), now.Add(-time.Minute), now, true)
	o := opts("20261206-061500-ab12cd", draShared())
	o.WaitFor, o.Poll = 200*time.Millisecond, 50*time.Millisecond
	_, err := Acquire(t.Context(), kube, o)
	var we *WaitError
	if !errors.As(err, &we) {
		t.Fatalf("Acquire = %v, want a *WaitError", err)
	}
	if len(we.Holders) != 1 || we.Holders[0].RunID != "20261206-060000-aaaaaa" || len(we.Why) != 1 || we.Waited < o.WaitFor {
		t.Errorf("WaitError = %+v", we)
	}
	for _, want := range []string{"waited ", "run 20261206-060000-aaaaaa on host h1", "both use path dra and one holds it exclusive", "--wait-for-other-runs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := getLease(t, kube, Name(RoleSuite, o.RunID)); !apierrors.IsNotFound(err) {
		t.Errorf("the run's own lease is still there after the wait failed: %v", err)
	}
}

func TestAcquireEndsWithItsContext(t *testing.T) {
	now := time.Now()
	kube := newKube(now)
	put(t, kube, opts("20261206-060000-aaaaaa", draExclusive()), now.Add(-time.Minute), now, true)
	o := opts("20261206-061500-ab12cd", draShared())
	o.WaitFor = time.Minute
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := Acquire(ctx, kube, o); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v, want the context's end", err)
	}
	if _, err := getLease(t, kube, Name(RoleSuite, o.RunID)); !apierrors.IsNotFound(err) {
		t.Errorf("the run's own lease is still there: %v", err)
	}
}

func TestAcquireAdoptsNothing(t *testing.T) {
	now := time.Now()
	kube := newKube(now)
	o := opts("20261206-061500-ab12cd", draShared())
	put(t, kube, o, now, now, true)
	_, err := Acquire(t.Context(), kube, o)
	if err == nil || !apierrors.IsAlreadyExists(err) || !strings.Contains(err.Error(), "gpuconform-suite-20261206-061500-ab12cd") {
		t.Fatalf("Acquire = %v, want an error naming the lease that exists", err)
	}
}

func TestRelease(t *testing.T) {
	kube := newKube(time.Now())
	o := opts("20261206-061500-ab12cd", draShared())
	l, err := Acquire(t.Context(), kube, o)
	if err != nil {
		t.Fatal(err)
	}
	release(t, l)
	if _, err := getLease(t, kube, Name(RoleSuite, o.RunID)); !apierrors.IsNotFound(err) {
		t.Errorf("the lease is still there after Release: %v", err)
	}
	release(t, l)
	release(t, nil)
	if err := l.SetHolds(t.Context(), draExclusive()); err == nil {
		t.Error("SetHolds after Release wrote the lease again")
	}
}

func TestRenewal(t *testing.T) {
	kube := newKube(time.Now())
	o := opts("20261206-061500-ab12cd", draShared())
	o.Duration = 150 * time.Millisecond
	var failed atomic.Int32
	o.RenewFailed = func(error) { failed.Add(1) }
	l, err := Acquire(t.Context(), kube, o)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, l)
	name := Name(RoleSuite, o.RunID)
	first, err := getLease(t, kube, name)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a renewal", func() bool {
		now, err := getLease(t, kube, name)
		return err == nil && now.Spec.RenewTime.After(first.Spec.RenewTime.Time)
	})
	if err := kube.CoordinationV1().Leases(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted lease's return", func() bool {
		_, err := getLease(t, kube, name)
		return err == nil
	})
	if n := failed.Load(); n != 0 {
		t.Errorf("%d renewals failed", n)
	}
}

func TestSetHolds(t *testing.T) {
	kube := newKube(time.Now())
	l, err := Acquire(t.Context(), kube, opts("20261206-061500-ab12cd", draShared()))
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, l)
	want := Holds{Paths: map[string]Mode{"dra": Shared}, Canary: []string{"gpuconform-worker3"}}
	if err := l.SetHolds(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	infos, err := List(t.Context(), kube, ns)
	if err != nil || len(infos) != 1 || !reflect.DeepEqual(infos[0].Holds, want) || !infos[0].Proceeded {
		t.Fatalf("List = %+v, %v", infos, err)
	}
}

// Two runs that start together with conflicting holds take turns.
func TestConflictingRunsTakeTurns(t *testing.T) {
	kube := newKube(time.Now())
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for _, id := range []string{"20261206-061500-aaaaaa", "20261206-061500-bbbbbb", "20261206-061500-cccccc"} {
		wg.Go(func() {
			o := opts(id, draExclusive())
			o.WaitFor = 10 * time.Second
			l, err := Acquire(t.Context(), kube, o)
			if err != nil {
				t.Error(err)
				return
			}
			if inside.Add(1) > 1 {
				overlaps.Add(1)
			}
			time.Sleep(50 * time.Millisecond)
			inside.Add(-1)
			release(t, l)
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("runs with conflicting holds went ahead together %d times", n)
	}
}

func TestListOrder(t *testing.T) {
	now := time.Now()
	kube := newKube(now)
	put(t, kube, opts("c", draShared()), now.Add(-time.Minute), now, false)
	put(t, kube, opts("b", draShared()), now, now, false)
	put(t, kube, opts("a", draShared()), now, now, false)
	put(t, kube, opts("d", draShared()), now.Add(-time.Hour), now, false)
	infos, err := List(t.Context(), kube, ns)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, i := range infos {
		ids = append(ids, i.RunID)
	}
	if want := []string{"d", "c", "a", "b"}; !slices.Equal(ids, want) {
		t.Errorf("List order = %v, want %v", ids, want)
	}
}

// A lease that sorts before this run's but reaches the cluster only after this run first listed the
// leases must still keep this run waiting: the look this run takes after marking itself proceeded
// sees it.
func TestALateLeaseThatSortsFirstIsSeen(t *testing.T) {
	now := time.Now()
	kube := newKube(now)
	late := newObject(opts("00", draExclusive()).withDefaults(), draExclusive(), false, now, now)
	late.CreationTimestamp = metav1.NewTime(now)
	var once sync.Once
	kube.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		handled, ret, err := false, runtime.Object(nil), error(nil)
		once.Do(func() { // answer the first list as it stood, then let the late lease arrive
			handled = true
			ret, err = kube.Tracker().List(coordinationv1.SchemeGroupVersion.WithResource("leases"),
				coordinationv1.SchemeGroupVersion.WithKind("Lease"), ns)
			if err == nil {
				err = kube.Tracker().Create(coordinationv1.SchemeGroupVersion.WithResource("leases"), late, ns)
			}
		})
		return handled, ret, err
	})
	_, err := Acquire(t.Context(), kube, opts("20261206-061500-ab12cd", draShared()))
	var we *WaitError
	if !errors.As(err, &we) || len(we.Holders) != 1 || we.Holders[0].Name != late.Name {
		t.Fatalf("Acquire = %v, want a *WaitError naming %s", err, late.Name)
	}
}
