// Package runlease lets a gpuconform run say on the cluster that it is alive: it holds a
// coordination.k8s.io/v1 Lease that it renews while it runs. That serves two ends:
//
//   - objects of a run whose lease is current are never taken for the leftovers of a dead run
//     (LiveRuns), and
//   - two runs on one cluster coordinate: a run waits for the live runs whose holds conflict with its
//     own (Acquire, Conflict).
//
// Runs are served in the order of their leases' creation (creationTimestamp, then name, since the API
// server keeps that timestamp to the second). That order alone is not enough: a lease that sorts
// before mine may reach the API server only after I last listed the leases, and then both runs would go
// ahead. So a run that finds nothing in its way first marks its lease as proceeded, then lists again, and
// goes ahead only if still nothing is in its way, where "in its way" means a conflicting live lease that
// sorts before it or has itself been marked proceeded. Of two such runs the one that marked itself
// last always sees the other's mark and steps back; the later one in the order does not mark itself
// again while the earlier one lives, so they do not step back in turn forever.
//
// The in-cluster runner holds a lease of its own (role "runner") for the same run ID: it only keeps the
// run's objects live, never waits, and is never waited for.
package runlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// ClockSkew is allowed between the renewing host's clock and the reader's: a lease is taken for
// expired only that much after its duration has run out.
const ClockSkew = 10 * time.Second

// DefaultDuration is a lease's duration; it is renewed every third of it, so two renewals may fail
// before others take the run for dead.
const DefaultDuration = 60 * time.Second

// Label marks the suite's leases (value "true"), so List selects them and nothing else.
const Label = "gpuconform.io/run-lease"

// Annotation keys on a run's lease: they say whose it is and what the run holds.
const (
	// AnnotationRunID holds the run ID.
	AnnotationRunID = "gpuconform.io/run-id"
	// AnnotationRole holds the lease's role (RoleSuite or RoleRunner).
	AnnotationRole = "gpuconform.io/role"
	// AnnotationHost holds the name of the host the lease's process runs on.
	AnnotationHost = "gpuconform.io/host"
	// AnnotationPID holds that process's ID.
	AnnotationPID = "gpuconform.io/pid"
	// AnnotationStarted holds when the run started (RFC 3339).
	AnnotationStarted = "gpuconform.io/started"
	// AnnotationHolds holds the run's Holds as JSON.
	AnnotationHolds = "gpuconform.io/holds"
	// AnnotationProceeded is "true" once the run has stopped waiting and goes ahead (see the package
	// comment for why a run marks that).
	AnnotationProceeded = "gpuconform.io/proceeded"
)

// Roles of a run's leases.
const (
	// RoleSuite is the lease of the suite process, the one runs wait for.
	RoleSuite = "suite"
	// RoleRunner is the lease of the in-cluster runner: it keeps the run's objects live, never waits
	// and is never waited for.
	RoleRunner = "runner"
)

const (
	managedByLabel  = "app.kubernetes.io/managed-by"
	managedBy       = "gpuconform"
	defaultPoll     = 2 * time.Second
	progressEvery   = 30 * time.Second
	releaseTimeout  = 10 * time.Second
	timestampLayout = time.RFC3339
)

// Info is one run's lease as read from the cluster.
type Info struct {
	// Name is the Lease's name.
	Name string
	// Namespace is the Lease's namespace.
	Namespace string
	// RunID is the run the lease belongs to.
	RunID string
	// Role is RoleSuite or RoleRunner.
	Role string
	// Host is the host the lease's process runs on.
	Host string
	// PID is that process's ID.
	PID int
	// Started is when the run started.
	Started time.Time
	// Holds is what the run holds.
	Holds Holds
	// Proceeded says the run has stopped waiting for others and goes ahead.
	Proceeded bool
	// Created is the Lease's creationTimestamp: runs are served in that order (then by Name).
	Created time.Time
	// Renewed is the lease's spec.renewTime.
	Renewed time.Time
	// Duration is the lease's spec.leaseDurationSeconds.
	Duration time.Duration
}

// Live reports whether the lease is current at now: renewed less than Duration (plus ClockSkew) ago.
// A lease with no renewTime is not live; one with no duration gets DefaultDuration, so that a lease
// somebody wrote by hand is not taken for dead at once.
func (i Info) Live(now time.Time) bool {
	if i.Renewed.IsZero() {
		return false
	}
	d := i.Duration
	if d <= 0 {
		d = DefaultDuration
	}
	return now.Sub(i.Renewed) < d+ClockSkew
}

// String names the run for a person. It gives times as timestamps, not as durations before now, so
// the same lease always reads the same.
func (i Info) String() string {
	who := "run " + i.RunID
	if i.Role == RoleRunner {
		who = "runner of run " + i.RunID
	}
	if i.Host != "" {
		who += " on host " + i.Host
	}
	var details []string
	if i.PID > 0 {
		details = append(details, "pid "+strconv.Itoa(i.PID))
	}
	if !i.Started.IsZero() {
		details = append(details, "started "+i.Started.UTC().Format(timestampLayout))
	}
	if i.Renewed.IsZero() {
		details = append(details, "never renewed")
	} else {
		details = append(details, "renewed "+i.Renewed.UTC().Format(timestampLayout))
	}
	details = append(details, "holds "+i.Holds.String())
	return who + " (" + strings.Join(details, ", ") + ")"
}

// before reports whether a is served before b: by creation, then by name. The API server keeps
// creation to the second, and a fake one none at all, so equal or missing times fall back to the
// name, which is unique in a namespace and so makes the order total.
func before(a, b Info) bool {
	if !a.Created.IsZero() && !b.Created.IsZero() && !a.Created.Equal(b.Created) {
		return a.Created.Before(b.Created)
	}
	return a.Name < b.Name
}

// Name is the lease name of a run ID and role: "gpuconform-" + role + "-" + runID, lowercased, with
// any character a Kubernetes name may not hold replaced by "-".
func Name(role, runID string) string {
	return strings.Map(nameRune, strings.ToLower("gpuconform-"+role+"-"+runID))
}

func nameRune(r rune) rune {
	if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
		return r
	}
	return '-'
}

// List reads every gpuconform lease in namespace, in the order runs are served in.
func List(ctx context.Context, kube kubernetes.Interface, namespace string) ([]Info, error) {
	list, err := kube.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{LabelSelector: Label + "=true"})
	if err != nil {
		return nil, fmt.Errorf("listing the gpuconform run leases in namespace %s: %w", namespace, err)
	}
	infos := make([]Info, len(list.Items))
	for i := range list.Items {
		infos[i] = infoOf(&list.Items[i])
	}
	slices.SortFunc(infos, order)
	return infos, nil
}

// order compares leases the way runs are served, for sorting.
func order(a, b Info) int {
	switch {
	case before(a, b):
		return -1
	case before(b, a):
		return 1
	}
	return 0
}

// LiveRuns maps the run IDs with at least one live lease at now to that lease's Info, the suite's
// where both the suite's and the runner's are live (it says more about the run).
func LiveRuns(infos []Info, now time.Time) map[string]Info {
	runs := map[string]Info{}
	for _, i := range infos {
		if i.RunID == "" || !i.Live(now) {
			continue
		}
		if have, ok := runs[i.RunID]; ok && (have.Role == RoleSuite || i.Role != RoleSuite) {
			continue
		}
		runs[i.RunID] = i
	}
	return runs
}

// infoOf reads a lease. Holds that do not parse are taken for disruptive, so that a lease this suite
// cannot read keeps everyone who holds anything waiting rather than letting them run beside it.
func infoOf(l *coordinationv1.Lease) Info {
	a := l.Annotations
	info := Info{
		Name:      l.Name,
		Namespace: l.Namespace,
		RunID:     a[AnnotationRunID],
		Role:      a[AnnotationRole],
		Host:      a[AnnotationHost],
		Proceeded: a[AnnotationProceeded] == "true",
		Created:   l.CreationTimestamp.Time,
	}
	info.PID, _ = strconv.Atoi(a[AnnotationPID])
	info.Started, _ = time.Parse(timestampLayout, a[AnnotationStarted])
	if h := a[AnnotationHolds]; h != "" && json.Unmarshal([]byte(h), &info.Holds) != nil {
		info.Holds = Holds{Disrupts: true}
	}
	if l.Spec.RenewTime != nil {
		info.Renewed = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil {
		info.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return info
}

// Options say which lease to hold and how long to wait for others.
type Options struct {
	// Namespace is where the lease lives; all runs on a cluster must use the same one to see each other.
	Namespace string
	// RunID is the run's ID.
	RunID string
	// Role is RoleSuite (the default) or RoleRunner.
	Role string
	// Host is the host's name (default os.Hostname()).
	Host string
	// PID is the process's ID (default os.Getpid()).
	PID int
	// Started is when the run started (default now).
	Started time.Time
	// Holds is what the run holds.
	Holds Holds
	// Duration is the lease's duration (default DefaultDuration); the cluster keeps it in whole seconds.
	Duration time.Duration
	// WaitFor bounds the wait for earlier live runs whose holds conflict; 0 means do not wait: a
	// conflict is at once a *WaitError.
	WaitFor time.Duration
	// Poll is how often the wait reads the leases again (default 2s).
	Poll time.Duration
	// Progress, when set, is told a line when the wait starts, whenever the set of runs waited for
	// changes, and at least every 30 s while waiting: whom it waits for, and how much of WaitFor has
	// passed.
	Progress func(line string)
	// RenewFailed, when set, is told each renewal that failed: the lease expires, and others take the
	// run for dead, once renewals have failed for its whole Duration.
	RenewFailed func(err error)
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

// withDefaults fills what the caller left out.
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Role == "" {
		o.Role = RoleSuite
	}
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	if o.PID == 0 {
		o.PID = os.Getpid()
	}
	if o.Started.IsZero() {
		o.Started = o.Now()
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.Poll <= 0 {
		o.Poll = defaultPoll
	}
	o.WaitFor = max(o.WaitFor, 0)
	return o
}

func (o Options) validate() error {
	if o.Namespace == "" {
		return errors.New("runlease: no namespace for the run's lease")
	}
	if o.RunID == "" {
		return errors.New("runlease: no run ID for the run's lease")
	}
	return nil
}

// newObject is the lease a run with options o holds, as it writes it.
func newObject(o Options, holds Holds, proceeded bool, acquired, renewed time.Time) *coordinationv1.Lease {
	seconds := int32((o.Duration + time.Second - 1) / time.Second)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        Name(o.Role, o.RunID),
			Namespace:   o.Namespace,
			Labels:      map[string]string{Label: "true", managedByLabel: managedBy},
			Annotations: annotations(o, holds, proceeded),
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       new(o.RunID + "@" + o.Host),
			LeaseDurationSeconds: new(seconds),
			AcquireTime:          new(metav1.NewMicroTime(acquired)),
			RenewTime:            new(metav1.NewMicroTime(renewed)),
		},
	}
}

func annotations(o Options, holds Holds, proceeded bool) map[string]string {
	h, _ := json.Marshal(holds) // maps of strings, a bool and strings always marshal
	return map[string]string{
		AnnotationRunID:     o.RunID,
		AnnotationRole:      o.Role,
		AnnotationHost:      o.Host,
		AnnotationPID:       strconv.Itoa(o.PID),
		AnnotationStarted:   o.Started.UTC().Format(timestampLayout),
		AnnotationHolds:     string(h),
		AnnotationProceeded: strconv.FormatBool(proceeded),
	}
}

// Lease is a lease a run holds: Acquire took it, a goroutine renews it, Release lets it go.
type Lease struct {
	kube kubernetes.Interface
	o    Options

	// mu serialises the writes of the lease (the renewals and SetHolds) and guards the fields below.
	mu        sync.Mutex
	holds     Holds
	proceeded bool
	acquired  time.Time
	current   *coordinationv1.Lease // as the cluster last answered a write
	released  bool

	stopRenewing context.CancelFunc
	renewed      chan struct{} // closed when the renewing goroutine has ended

	waited    time.Duration
	waitedFor []string
}

// errReleased answers a write of a lease that was released: writing it would bring it back.
var errReleased = errors.New("runlease: the lease was released")

// Acquire creates the run's lease, keeps renewing it every third of its Duration, and then, for a
// suite's lease, waits until no live lease that is served before it (or has already proceeded) has holds
// that conflict with o.Holds. Expired leases of other runs belong to dead runs and are never waited for.
// Serving runs in order means that nobody starves: a later run waits for an earlier one even while that
// one itself waits.
//
// A lease of the same name already there is not adopted: its run, or a process that still holds it, is
// someone else's, so Acquire returns an error naming it. When WaitFor passes with a conflict still
// there, Acquire releases its lease and returns a *WaitError; when ctx ends, it releases its lease and
// returns ctx's error, wrapped. A runner's lease (RoleRunner) never waits.
func Acquire(ctx context.Context, kube kubernetes.Interface, o Options) (*Lease, error) {
	o = o.withDefaults()
	o.Holds = o.Holds.clone()
	if err := o.validate(); err != nil {
		return nil, err
	}
	l, err := create(ctx, kube, o)
	if err != nil {
		return nil, err
	}
	l.startRenewing(ctx)
	if o.Role == RoleRunner {
		return l, nil
	}
	if err := l.await(ctx); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		if rerr := l.Release(rctx); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		return nil, err
	}
	return l, nil
}

// create writes the run's lease for the first time.
func create(ctx context.Context, kube kubernetes.Interface, o Options) (*Lease, error) {
	now := o.Now()
	obj := newObject(o, o.Holds, false, now, now)
	created, err := kube.CoordinationV1().Leases(o.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("lease %s/%s of run %s already exists: another process holds it, or held it moments ago; "+
			"give this run an ID of its own: %w", o.Namespace, obj.Name, o.RunID, err)
	}
	if err != nil {
		return nil, fmt.Errorf("creating lease %s/%s of run %s: %w", o.Namespace, obj.Name, o.RunID, err)
	}
	return &Lease{kube: kube, o: o, holds: o.Holds, acquired: now, current: created}, nil
}

// startRenewing renews the lease until Release. It keeps ctx's values but not its end: the lease
// outlives the call that acquired it.
func (l *Lease) startRenewing(ctx context.Context) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.stopRenewing = cancel
	l.renewed = make(chan struct{})
	go l.renew(rctx)
}

func (l *Lease) renew(ctx context.Context) {
	defer close(l.renewed)
	every := l.o.Duration / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			l.renewOnce(ctx, every)
		}
	}
}

// renewOnce gives a renewal no longer than till the next one, so that one stuck call does not hold
// up those after it (nor SetHolds, which waits for it).
func (l *Lease) renewOnce(ctx context.Context, within time.Duration) {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	err := l.write(wctx, nil)
	if err != nil && ctx.Err() == nil && l.o.RenewFailed != nil {
		l.o.RenewFailed(fmt.Errorf("renewing lease %s/%s: %w", l.o.Namespace, Name(l.o.Role, l.o.RunID), err))
	}
}

// write applies change (if any) to what the lease should say and writes that, with a fresh renewTime,
// to the cluster: it re-reads and retries when an update conflicts, and recreates the lease when it
// was deleted, since a run that is still alive must not look dead. A change stays even when the write
// fails: the next renewal writes it.
func (l *Lease) write(ctx context.Context, change func()) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return errReleased
	}
	if change != nil {
		change()
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return l.writeOnce(ctx) })
}

// writeOnce writes the lease once; l.mu is held.
func (l *Lease) writeOnce(ctx context.Context) error {
	leases := l.kube.CoordinationV1().Leases(l.o.Namespace)
	want := newObject(l.o, l.holds, l.proceeded, l.acquired, l.o.Now())
	have, err := leases.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		created, err := leases.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			l.current = created
		}
		return err
	}
	if err != nil {
		return err
	}
	next := have.DeepCopy()
	next.Labels = merge(next.Labels, want.Labels)
	next.Annotations = merge(next.Annotations, want.Annotations)
	next.Spec = want.Spec
	updated, err := leases.Update(ctx, next, metav1.UpdateOptions{})
	if err == nil {
		l.current = updated
	}
	return err
}

// merge sets into's keys from from, keeping the keys others put there.
func merge(into, from map[string]string) map[string]string {
	if into == nil {
		into = map[string]string{}
	}
	maps.Copy(into, from)
	return into
}

// Waited says how long Acquire waited and for whom (each run's Info.String() when first seen, in
// that order); zero and nil when it did not wait.
func (l *Lease) Waited() (time.Duration, []string) {
	return l.waited, slices.Clone(l.waitedFor)
}

// Info is the lease as this run holds it, as the cluster last answered a write of it.
func (l *Lease) Info() Info {
	l.mu.Lock()
	defer l.mu.Unlock()
	return infoOf(l.current)
}

// SetHolds updates the holds on the cluster, for what a run learns only once it runs (its canary
// nodes, say). It does not wait for others: a run that comes to hold more should say so before it
// acts, so that runs that start later wait for it.
func (l *Lease) SetHolds(ctx context.Context, h Holds) error {
	if err := l.write(ctx, func() { l.holds = h.clone() }); err != nil {
		return fmt.Errorf("updating the holds on lease %s/%s: %w", l.o.Namespace, Name(l.o.Role, l.o.RunID), err)
	}
	return nil
}

// Release stops renewing the lease and deletes it; a lease that is gone already is fine. It is safe
// to call more than once, and on a nil *Lease.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.stopRenewing()
	<-l.renewed
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	name := Name(l.o.Role, l.o.RunID)
	err := l.kube.CoordinationV1().Leases(l.o.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting lease %s/%s: %w", l.o.Namespace, name, err)
	}
	return nil
}

// blocker is a run this one waits for, and why.
type blocker struct {
	info Info
	why  string
}

// await waits until nothing is in the lease's way, marking it proceeded and checking once more before
// it goes ahead (the package comment says why).
func (l *Lease) await(ctx context.Context) error {
	w := &waiting{o: l.o, start: l.o.Now()}
	for {
		blockers, err := l.blockers(ctx)
		if err == nil && len(blockers) == 0 {
			blockers, err = l.proceed(ctx)
		}
		if err != nil {
			return err
		}
		if len(blockers) == 0 {
			l.waited, l.waitedFor = w.result()
			return nil
		}
		if err := w.note(blockers); err != nil {
			return err
		}
		if err := sleep(ctx, min(l.o.Poll, w.left())); err != nil {
			return fmt.Errorf("waiting for other gpuconform runs on this cluster: %w", err)
		}
	}
}

// proceed marks the lease proceeded and looks again; if something is in the way now, it takes the
// mark back and answers what.
func (l *Lease) proceed(ctx context.Context) ([]blocker, error) {
	if err := l.write(ctx, func() { l.proceeded = true }); err != nil {
		return nil, fmt.Errorf("marking lease %s/%s proceeded: %w", l.o.Namespace, Name(l.o.Role, l.o.RunID), err)
	}
	blockers, err := l.blockers(ctx)
	if err != nil || len(blockers) == 0 {
		return blockers, err
	}
	if err := l.write(ctx, func() { l.proceeded = false }); err != nil {
		return nil, fmt.Errorf("taking back the proceeded mark of lease %s/%s: %w", l.o.Namespace, Name(l.o.Role, l.o.RunID), err)
	}
	return blockers, nil
}

// blockers reads the leases and answers those in this one's way, in the order runs are served.
func (l *Lease) blockers(ctx context.Context) ([]blocker, error) {
	infos, err := List(ctx, l.kube, l.o.Namespace)
	if err != nil {
		return nil, err
	}
	self, now := l.Info(), l.o.Now()
	var in []blocker
	for _, other := range infos {
		if why := blocks(other, self, now); why != "" {
			in = append(in, blocker{other, why})
		}
	}
	return in, nil
}

// blocks says why other is in self's way, or "" when it is not: other must be another run's live
// suite lease, served before self or already gone ahead, whose holds conflict with self's.
func blocks(other, self Info, now time.Time) string {
	switch {
	case other.Name == self.Name, other.RunID == self.RunID, other.Role == RoleRunner, !other.Live(now):
		return ""
	case !other.Proceeded && !before(other, self):
		return ""
	}
	return Conflict(self.Holds, other.Holds)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// waiting keeps track of one Acquire's wait: whom it has seen, and what it last told Progress.
type waiting struct {
	o         Options
	start     time.Time
	seen      map[string]bool
	waitedFor []string
	lastSet   string
	lastLine  time.Time
}

func (w *waiting) elapsed() time.Duration { return w.o.Now().Sub(w.start) }

// left is how long the wait may go on; never less than a moment, so that the last poll happens.
func (w *waiting) left() time.Duration { return max(w.o.WaitFor-w.elapsed(), time.Millisecond) }

// note records blockers, tells Progress about them when it is due, and answers a *WaitError once
// WaitFor has passed.
func (w *waiting) note(blockers []blocker) error {
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	for _, b := range blockers {
		if !w.seen[b.info.Name] {
			w.seen[b.info.Name] = true
			w.waitedFor = append(w.waitedFor, b.info.String())
		}
	}
	elapsed := w.elapsed()
	if w.o.WaitFor == 0 {
		return waitError(0, blockers) // it did not wait: whatever time passed went on reading
	}
	if elapsed >= w.o.WaitFor {
		return waitError(elapsed, blockers)
	}
	w.progress(elapsed, blockers)
	return nil
}

// progress tells Progress a line when the wait starts, when the runs waited for change, and every
// progressEvery in between.
func (w *waiting) progress(elapsed time.Duration, blockers []blocker) {
	if w.o.Progress == nil {
		return
	}
	names := make([]string, len(blockers))
	for i, b := range blockers {
		names[i] = b.info.Name
	}
	set, now := strings.Join(names, ","), w.o.Now()
	if set == w.lastSet && now.Sub(w.lastLine) < progressEvery {
		return
	}
	w.lastSet, w.lastLine = set, now
	w.o.Progress(fmt.Sprintf("waiting for %d other gpuconform %s on this cluster (%s of %s): %s",
		len(blockers), plural(len(blockers), "run", "runs"), round(elapsed), round(w.o.WaitFor), describe(blockers)))
}

// result is how long the wait took and for whom; zero and nil when nobody was in the way.
func (w *waiting) result() (time.Duration, []string) {
	if len(w.waitedFor) == 0 {
		return 0, nil
	}
	return w.elapsed(), w.waitedFor
}

func waitError(elapsed time.Duration, blockers []blocker) *WaitError {
	e := &WaitError{Waited: elapsed}
	for _, b := range blockers {
		e.Holders = append(e.Holders, b.info)
		e.Why = append(e.Why, b.why)
	}
	return e
}

func describe(blockers []blocker) string {
	items := make([]string, len(blockers))
	for i, b := range blockers {
		items[i] = b.info.String() + ": " + b.why
	}
	return strings.Join(items, "; ")
}

// round shortens a duration for a person: to the second from a second up, to the millisecond below.
func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// WaitError is Acquire's answer when the runs it waited for still held what it needs after WaitFor
// (at once, when WaitFor is 0).
type WaitError struct {
	// Waited is how long Acquire waited.
	Waited time.Duration
	// Holders are the runs still in the way, in the order runs are served.
	Holders []Info
	// Why gives the Conflict reason of each holder, index for index.
	Why []string
}

// Error says whom the run waited for, why, and what the person running it can do.
func (e *WaitError) Error() string {
	items := make([]string, len(e.Holders))
	for i, h := range e.Holders {
		items[i] = h.String()
		if i < len(e.Why) {
			items[i] += ": " + e.Why[i]
		}
	}
	held := strings.Join(items, "; ")
	if e.Waited <= 0 {
		return "other gpuconform runs on this cluster hold what this run needs: " + held +
			"; raise --wait-for-other-runs to wait for them, or run again when they have ended"
	}
	return fmt.Sprintf("waited %s for other gpuconform runs on this cluster, which still hold what this run needs: %s; "+
		"raise --wait-for-other-runs, or run again when they have ended", round(e.Waited), held)
}
