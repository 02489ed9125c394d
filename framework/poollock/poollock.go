// Package poollock keeps a spec that holds a path's devices, or its nodes, from running beside the specs
// that use them when Ginkgo runs specs in several processes (gpuconform run --procs, ginkgo run -p).
//
// Ginkgo's own Serial runs a spec alone, after every other spec. That is too much for a spec that fills a
// node's devices on one path, stops one node, or upgrades the canary pool: the local cluster, like a real
// node with a device plugin and a DRA driver side by side, gives each path devices of its own, so the
// other path's specs can run beside it. A spec takes its path's lock shared, a spec that holds the path
// takes it exclusive, a spec that needs one node leases that node's lock (HoldAny, or Take with a
// choice), and a spec that stops a node takes that node's lock exclusive on every path. scenarios'
// poolHold and canaryHold say which spec takes what.
//
// A holder asks for all its locks at once (Take) and gets them all at once: it never holds some while it
// waits for the others, so a spec that waits for one path keeps nobody off another (a node stopper holding
// one path shared while it waited for the other would keep that path's exclusive holders, and everything
// queued behind them, off it).
// Waiters are served in the order they came, with one rule against starvation: a waiter reserves, in its
// mode, its locks in name order up to the first one a holder keeps it from, and no waiter that came later
// takes a reserved lock in a conflicting mode (a queued exclusive holder goes before shared ones that
// come after it; a shared one before later exclusive ones), except a lock that a waiter before it asks
// for in a conflicting mode: that one is the earlier waiter's turn first. A later waiter whose locks
// conflict with nobody's hold or reservation goes at once, ahead of earlier ones it does not hinder.
//
// The queue is a table in a file of the run's own directory (Dir), read and written under flock(2): every
// process of a run is on one machine (Ginkgo starts them as local children). Each process flocks a file
// of its own for its lifetime; a holder or waiter whose process's file is no longer locked is dead, and
// the next reader drops it with its locks and reservations.
package poollock

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// WaitEntry names the Ginkgo report entry in which a spec records, in seconds, how long it waited for its
// locks while another process's spec held them: time neither the cluster's nor the spec's own (the bench
// keeps it apart).
const WaitEntry = "pool lock wait seconds"

// LeaseEntry names the Ginkgo report entry with the node a spec leased (HoldAny; scenarios' holds:node):
// the bench counts each node's holders apart.
const LeaseEntry = "pool lease node"

// LeaseHeldEntry names the Ginkgo report entry in which a spec that let its locks go before its end
// (Held.Drop: the upgrade rehearsal, once it has compared the known-good pool) records, in seconds, how
// long it held them: the bench counts that in the one-at-a-time chain and on its leased node, not the
// spec's whole work.
const LeaseHeldEntry = "pool lease held seconds"

// LeasePathEntry names the Ginkgo report entry with the path whose node lock the spec leased (LeaseEntry):
// a spec of no path (the upgrade rehearsal, which holds a known-good node) says it there.
const LeasePathEntry = "pool lease path"

// Mode is how a spec holds a lock.
type Mode int

const (
	// Shared is how specs that use a path's devices beside each other hold it.
	Shared Mode = iota
	// Exclusive is how a spec that needs the path's devices (or nodes) to itself holds it.
	Exclusive
)

func (m Mode) String() string {
	if m == Exclusive {
		return "exclusive"
	}
	return "shared"
}

// conflict reports whether a lock held (or reserved) in a may not be held in b beside it.
func conflict(a, b Mode) bool { return a == Exclusive || b == Exclusive }

// EnvDir names the lock directory the parent of a parallel run (gpuconform run --procs) gives its
// processes: one inside its own temporary directory, so that the parent removing that directory removes
// the locks too, even when a process was killed before the run's end could remove them.
const EnvDir = "GPUCONFORM_LOCK_DIR"

// Dir is the run's lock directory: the parent's ($GPUCONFORM_LOCK_DIR) when a parent set it, else one per
// run ID under $TMPDIR, so two runs on one machine never wait on each other. The run's first process
// removes it at the end of the suite; without a parent (go test, ginkgo run -p) nothing removes the
// directory of a run stopped before then.
func Dir(runID string) string {
	if dir := os.Getenv(EnvDir); dir != "" {
		return dir
	}
	return filepath.Join(os.TempDir(), "gpuconform-locks-"+runID)
}

// Poll is how often a waiting holder reads the table again (the wait must end with ctx).
var Poll = 100 * time.Millisecond

// Who names, when set, the holder that takes locks now (the suite: the running spec), so that a waiter
// can say who keeps it waiting; unset, a holder is named by its process.
var Who func() string

// Trace is told, when set, each change of what keeps a waiter waiting, with the time it has waited: a
// line such as "12.3s: path-dra (held exclusive by …), node-stops (reserved exclusive by …)". The suite
// writes it into the spec's log, where a slow run shows which holder or reservation each spec waited for.
var Trace func(line string)

// maxTraced bounds the lines one wait traces (Trace).
const maxTraced = 40

// Lock is one named lock and the mode a holder takes it in.
type Lock struct {
	Name string
	Mode Mode
	// Ahead: the waiter reserves this lock as soon as it is next in line for every other lock it asks for
	// (no waiter before it asks for one in a conflicting mode), not only once it reaches it in name
	// order, so that the lock's holders finish while the waiter waits for the others instead of after: a node stopper's node (its holders drain while the
	// stopper ahead of it in the chain still runs). It idles the lock meanwhile: only for a lock that is
	// a small part of its path.
	Ahead bool `json:",omitempty"`
}

// Each is names, every one in mode.
func Each(names []string, mode Mode) []Lock {
	out := make([]Lock, 0, len(names))
	for _, n := range names {
		out = append(out, Lock{Name: n, Mode: mode})
	}
	return out
}

// Request is what a holder asks for at once: Locks, each in its mode (a name given twice is taken once,
// in the stronger mode), and, when Any is set, AnyCount of the names in Any (one when AnyCount is 0) in
// AnyMode, whichever are free first beside Locks (a lease of one node, or of the few a gang needs).
type Request struct {
	Locks    []Lock
	Any      []string
	AnyCount int
	AnyMode  Mode
}

// Hold takes the named locks in dir, all in mode (Take).
func Hold(ctx context.Context, dir string, names []string, mode Mode) (release func(), waited time.Duration, err error) {
	return HoldLocks(ctx, dir, Each(names, mode))
}

// HoldLocks takes the locks in dir, each in its own mode (Take), and returns their release and how long
// it waited.
func HoldLocks(ctx context.Context, dir string, locks []Lock) (release func(), waited time.Duration, err error) {
	h, waited, err := HoldSet(ctx, dir, locks)
	if err != nil {
		return nil, 0, err
	}
	return h.Release, waited, nil
}

// HoldSet is HoldLocks, returning the locks as a Held set that can let some go before the others.
func HoldSet(ctx context.Context, dir string, locks []Lock) (*Held, time.Duration, error) {
	return Take(ctx, dir, Request{Locks: locks})
}

// HoldAny takes one of the named locks in mode, whichever comes free first, and returns its release, its
// name and how long it waited. It is the lease of one node of a path: exclusive for a spec that needs the
// node's devices to itself (scenarios' holds:node), shared for one that needs a few devices of one node
// (on:node). Specs that lease different nodes run side by side. It starts at a random name, so that
// leases spread over the nodes instead of queueing for the first.
func HoldAny(ctx context.Context, dir string, names []string, mode Mode) (release func(), name string, waited time.Duration, err error) {
	h, waited, err := Take(ctx, dir, Request{Any: names, AnyMode: mode})
	if err != nil {
		return nil, "", 0, err
	}
	return h.Release, h.Chosen(), waited, nil
}

// HoldSome takes n of the named locks in mode, all at once, whichever are free first (HoldAny for a
// holder that needs more than one node: a gang's workers on nodes of their own), and returns their
// release, their names and how long it waited. It fails at once when fewer than n names are given.
func HoldSome(ctx context.Context, dir string, names []string, n int, mode Mode) (release func(), chosen []string, waited time.Duration, err error) {
	if n < 1 {
		return nil, nil, 0, fmt.Errorf("cannot take %d of the locks %v", n, names)
	}
	h, waited, err := Take(ctx, dir, Request{Any: names, AnyCount: n, AnyMode: mode})
	if err != nil {
		return nil, nil, 0, err
	}
	return h.Release, h.ChosenAll(), waited, nil
}

// Held is the locks a Take got, for a holder that is done with some of them before the others: the
// upgrade rehearsal lets the known-good nodes and the faults lock go once it has compared the known-good
// pool, and keeps the canary's until its rollback.
type Held struct {
	mu     sync.Mutex
	dir    string
	id     int64
	locks  map[string]Mode
	chosen []string
}

// Chosen is the (first) name the request's choice (Request.Any) took: "" without one.
func (h *Held) Chosen() string {
	if len(h.chosen) == 0 {
		return ""
	}
	return h.chosen[0]
}

// ChosenAll are the names the request's choice took, in the order it took them (none without a choice).
func (h *Held) ChosenAll() []string { return slices.Clone(h.chosen) }

// Release lets every lock still held go. It may be called more than once.
func (h *Held) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.locks == nil {
		return
	}
	h.locks = nil
	_ = update(h.dir, func(t *table) bool {
		t.Entries = slices.DeleteFunc(t.Entries, func(e entry) bool { return e.ID == h.id })
		return true
	})
}

// Drop lets the named locks go now and keeps the others; a name not held (or already let go) is skipped.
func (h *Held) Drop(names ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.locks == nil {
		return
	}
	for _, n := range names {
		delete(h.locks, n)
	}
	h.rewrite()
}

// rewrite writes the holder's locks as h has them now into its entry of the table (h.mu held).
func (h *Held) rewrite() {
	held := lockList(h.locks)
	_ = update(h.dir, func(t *table) bool {
		for i := range t.Entries {
			if t.Entries[i].ID == h.id {
				t.Entries[i].Locks, t.Entries[i].Chosen = held, nil // held has the choice too, while kept
			}
		}
		return true
	})
}

// Holds reports whether the named lock is still held.
func (h *Held) Holds(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.locks[name]
	return ok
}

// Take asks for r's locks in dir and waits until it has them all or ctx ends (package doc: the order and
// the reservations). It returns them as a Held set and how long it waited.
func Take(ctx context.Context, dir string, r Request) (*Held, time.Duration, error) {
	if len(r.Locks) == 0 && len(r.Any) == 0 {
		return nil, 0, errors.New("no lock to take")
	}
	count := max(r.AnyCount, 1)
	if len(r.Any) == 0 {
		count = 0
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("lock directory: %w", err)
	}
	self, err := liveness(dir)
	if err != nil {
		return nil, 0, err
	}
	modes, ahead := map[string]Mode{}, map[string]bool{}
	for _, l := range r.Locks {
		modes[l.Name] = max(modes[l.Name], l.Mode)
		ahead[l.Name] = ahead[l.Name] || l.Ahead
	}
	choice := slices.Compact(slices.Sorted(slices.Values(r.Any)))
	if len(choice) > 0 {
		first := rand.IntN(len(choice))
		choice = append(choice[first:], choice[:first]...)
	}
	if count > len(choice) {
		return nil, 0, fmt.Errorf("cannot take %d of the %d locks %v", count, len(choice), choice)
	}
	me := entry{Owner: self, Locks: lockList(modes), Any: choice, AnyCount: count, AnyMode: r.AnyMode}
	if Who != nil {
		me.Who = Who()
	}
	for i := range me.Locks {
		me.Locks[i].Ahead = ahead[me.Locks[i].Name]
	}
	start := time.Now()
	var blocked []string
	traced, changes := "", 0
	for {
		granted := false
		err := update(dir, func(t *table) bool {
			if !slices.ContainsFunc(t.Entries, func(e entry) bool { return e.ID == me.ID }) {
				// first time, or the table was lost (the run's directory removed): ask, last in line
				t.Next++
				me.ID, me.Reserved = t.Next, nil
				t.Entries = append(t.Entries, me)
			}
			waits := t.schedule()
			e := &t.Entries[slices.IndexFunc(t.Entries, func(e entry) bool { return e.ID == me.ID })]
			blocked, granted, me = waits[me.ID], e.Held, *e
			return true
		})
		if err != nil {
			return nil, 0, err
		}
		if why := strings.Join(blocked, ", "); Trace != nil && why != traced && !granted && changes <= maxTraced {
			traced, changes = why, changes+1
			if changes > maxTraced {
				why = fmt.Sprintf("more than %d changes; the rest untraced", maxTraced)
			}
			Trace(fmt.Sprintf("%.1fs: %s", time.Since(start).Seconds(), why))
		}
		if granted {
			h := &Held{dir: dir, id: me.ID, locks: map[string]Mode{}, chosen: me.Chosen}
			for _, l := range me.Locks {
				h.locks[l.Name] = l.Mode
			}
			for _, c := range me.Chosen {
				h.locks[c] = max(h.locks[c], me.AnyMode)
			}
			return h, time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			_ = update(dir, func(t *table) bool {
				t.Entries = slices.DeleteFunc(t.Entries, func(e entry) bool { return e.ID == me.ID })
				return true
			})
			return nil, 0, fmt.Errorf("waiting for the pool locks %s (held or reserved by others: %s): %w", r, strings.Join(blocked, ", "), context.Cause(ctx))
		case <-time.After(Poll):
		}
	}
}

func (r Request) String() string {
	var parts []string
	for _, l := range r.Locks {
		parts = append(parts, l.Name+" "+l.Mode.String())
	}
	if len(r.Any) > 0 {
		parts = append(parts, fmt.Sprintf("%d of %v %s", max(r.AnyCount, 1), r.Any, r.AnyMode))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// lockList is modes as Locks in name order.
func lockList(modes map[string]Mode) []Lock {
	out := make([]Lock, 0, len(modes))
	for _, n := range slices.Sorted(maps.Keys(modes)) {
		out = append(out, Lock{Name: n, Mode: modes[n]})
	}
	return out
}

// entry is a holder or a waiter in the table.
type entry struct {
	ID       int64    `json:"id"`    // the order it came in
	Owner    string   `json:"owner"` // its process's liveness file
	Locks    []Lock   `json:"locks"`
	Any      []string `json:"any,omitempty"`
	AnyCount int      `json:"anyCount,omitempty"` // how many of Any it takes (1 when 0)
	AnyMode  Mode     `json:"anyMode,omitempty"`
	Held     bool     `json:"held,omitempty"`
	Who      string   `json:"who,omitempty"` // the holder's name (Who), for the waiters' messages
	Chosen   []string `json:"chosen,omitempty"`
	// Reserved are the locks a waiter reserved on the last pass (grant), in the mode it asks: a waiter
	// that came later may not take them in a conflicting mode.
	Reserved []Lock `json:"reserved,omitempty"`
}

// holds is the mode in which a holder holds name.
func (e *entry) holds(name string) (Mode, bool) {
	m, ok := Mode(0), false
	for _, l := range e.Locks {
		if l.Name == name {
			m, ok = max(m, l.Mode), true
		}
	}
	if slices.Contains(e.Chosen, name) {
		m, ok = max(m, e.AnyMode), true
	}
	return m, ok
}

// count is how many of Any the entry takes.
func (e *entry) count() int {
	if len(e.Any) == 0 {
		return 0
	}
	return max(e.AnyCount, 1)
}

// reserves is the mode in which a waiter reserved name.
func (e *entry) reserves(name string) (Mode, bool) {
	for _, l := range e.Reserved {
		if l.Name == name {
			return l.Mode, true
		}
	}
	return 0, false
}

// table is the run's queue: every holder and waiter, in the order they came.
type table struct {
	Next    int64   `json:"next"`
	Entries []entry `json:"entries"`
}

// keptBy reports whether the waiter w may take name in mode now: no holder holds it in a conflicting mode
// (byHolder false) and no waiter that came before w reserved it in one (byReserve false); by names those
// that keep w from it ("held exclusive by X", "reserved shared by Y").
func (t *table) keptBy(w *entry, name string, mode Mode) (byHolder, byReserve bool, by []string) {
	for i := range t.Entries {
		o := &t.Entries[i]
		if o.ID == w.ID {
			continue
		}
		if o.Held {
			if m, ok := o.holds(name); ok && conflict(m, mode) {
				byHolder = true
				by = append(by, "held "+m.String()+" by "+o.name())
			}
		} else if o.ID < w.ID {
			if m, ok := o.reserves(name); ok && conflict(m, mode) {
				byReserve = true
				by = append(by, "reserved "+m.String()+" by "+o.name())
			}
		}
	}
	return byHolder, byReserve, by
}

// name is how a waiter's messages call the entry: Who's name, else its process's.
func (e *entry) name() string {
	if e.Who != "" {
		return strconv.Quote(e.Who)
	}
	pid, _, _ := strings.Cut(strings.TrimPrefix(e.Owner, "live-"), "-") // liveness names it live-<pid>-<time>
	return "process " + pid
}

// schedule goes through the waiters in the order they came and grants each whose locks are free (grant),
// so that of two waiters that may both go now, the one that came first goes first, whichever process
// reads the table. It returns what keeps each waiter that is left waiting.
func (t *table) schedule() map[int64][]string {
	waits := map[int64][]string{}
	slices.SortFunc(t.Entries, func(a, b entry) int { return cmp.Compare(a.ID, b.ID) })
	for i := range t.Entries {
		if !t.Entries[i].Held {
			if blocked := t.grant(&t.Entries[i]); len(blocked) > 0 {
				waits[t.Entries[i].ID] = blocked
			}
		}
	}
	return waits
}

// grant gives the waiter w its locks if it may take them all now (w.Held, w.Chosen). Else it reserves, in
// name order, its locks up to the first that a holder keeps it from, that one included (the choice comes
// after the others): what it would hold, and wait at, if it took its locks one at a time in that order;
// none of them when the first lock in its way is another waiter's reservation. It returns the names that
// keep it waiting.
//
// The reservations are made anew on every pass. Reserving every lock in its way would idle a lock the
// waiter is far from needing (a node stopper that found a path busy would reserve it while it waits for
// the stops lock, and no spec of that path would run meanwhile); reserving only the first lock in its way would let a later holder take a lock before it, and
// the waiter might never find them all free at once. The prefix is neither: only waiters that came
// before it take those locks first, as with locks taken in name order, and it holds nothing meanwhile.
func (t *table) grant(w *entry) (blocked []string) {
	if w.Held {
		return nil
	}
	var prefix, ahead []Lock
	stopped := false
	// w is next in line when no waiter before it asks for any of its other locks in a conflicting mode,
	// and none of them is reserved against it: only holders keep it waiting. Then its Ahead locks are
	// reserved, so that their holders finish meanwhile. (Judged on the first lock in w's way alone, as
	// before, a kubelet restart whose node a node holder kept was next in line for that node while two
	// stoppers were queued before it for the stops lock, and idled its node through both.)
	nextInLine := true
	for _, l := range w.Locks {
		byHolder, byReserve, by := t.keptBy(w, l.Name, l.Mode)
		if byHolder || byReserve {
			blocked = append(blocked, l.Name+" ("+strings.Join(by, ", ")+")")
		}
		if l.Ahead {
			ahead = append(ahead, l)
		} else if byReserve || t.askedBefore(w, l.Name, l.Mode) {
			nextInLine = false
		}
		if stopped {
			continue
		}
		if !byReserve {
			prefix = append(prefix, l)
		}
		stopped = byHolder || byReserve
	}
	if nextInLine && stopped {
		for _, l := range ahead {
			if !slices.Contains(prefix, l) {
				prefix = append(prefix, l)
			}
		}
	}
	// The choice: the first AnyCount names free of holders and reservations. Short of them, it reserves
	// those it could take now and those a holder keeps (not those another waiter reserved), so that a
	// later lease of one node does not take, one at a time, the nodes a gang waits to have together.
	var chosen []string
	var anyByHolder, anyFree []Lock
	var anyBy []string
	for _, n := range w.Any {
		if len(chosen) == w.count() {
			break
		}
		byHolder, byReserve, by := t.keptBy(w, n, w.AnyMode)
		if !byHolder && !byReserve {
			chosen = append(chosen, n)
			anyFree = append(anyFree, Lock{Name: n, Mode: w.AnyMode})
			continue
		}
		anyBy = append(anyBy, n+": "+strings.Join(by, ", "))
		if byHolder {
			anyByHolder = append(anyByHolder, Lock{Name: n, Mode: w.AnyMode})
		}
	}
	if len(w.Any) > 0 && len(chosen) < w.count() {
		what := "one of "
		if w.count() > 1 {
			what = strconv.Itoa(w.count()) + " of "
		}
		blocked = append(blocked, what+strings.Join(w.Any, "/")+" ("+strings.Join(anyBy, "; ")+")")
		if !stopped {
			prefix = append(append(prefix, anyFree...), anyByHolder...)
		}
	}
	if len(blocked) == 0 {
		w.Held, w.Chosen, w.Reserved = true, chosen, nil
		return nil
	}
	// A lock that a waiter before w asks for in a mode that conflicts with w's is not reserved: w cannot
	// have it before that waiter has had it, and reserving it meanwhile would only keep later holders
	// that go beside that waiter off it (a path reserved exclusive behind the node stoppers, which each take
	// every path shared, would keep the path's node holders off it through the whole chain). The earliest waiter always
	// reserves, so every waiter gets its turn.
	w.Reserved = slices.DeleteFunc(prefix, func(l Lock) bool { return t.askedBefore(w, l.Name, l.Mode) })
	return blocked
}

// askedBefore reports whether a waiter that came before w asks for name in a mode that conflicts with
// mode.
func (t *table) askedBefore(w *entry, name string, mode Mode) bool {
	for i := range t.Entries {
		o := &t.Entries[i]
		if o.Held || o.ID >= w.ID {
			continue
		}
		for _, l := range o.Locks {
			if l.Name == name && conflict(l.Mode, mode) {
				return true
			}
		}
		if slices.Contains(o.Any, name) && conflict(o.AnyMode, mode) {
			return true
		}
	}
	return false
}

// update reads dir's table under its flock, drops the entries of dead processes, lets change edit it, and
// writes it back when change says it changed or anything was dropped.
func update(dir string, change func(*table) bool) error {
	lf, err := os.OpenFile(filepath.Join(dir, "table.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("lock table: %w", err)
	}
	defer lf.Close()
	for {
		err = syscall.Flock(int(lf.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("lock table: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) }()
	path := filepath.Join(dir, "table.json")
	var t table
	read, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("lock table: %w", err)
	default:
		if err := json.Unmarshal(read, &t); err != nil {
			return fmt.Errorf("lock table %s: %w", path, err)
		}
	}
	dropped := t.dropDead(dir)
	if !change(&t) && !dropped {
		return nil
	}
	b, err := json.Marshal(&t)
	if err != nil {
		return err
	}
	if string(read) == string(b) {
		return nil // a waiter's pass that changed nothing: no write
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("lock table: %w", err)
	}
	return os.Rename(tmp, path)
}

// dropDead drops the entries whose process is gone (its liveness file is not locked) and reports whether
// it dropped any.
func (t *table) dropDead(dir string) bool {
	alive := map[string]bool{}
	n := len(t.Entries)
	t.Entries = slices.DeleteFunc(t.Entries, func(e entry) bool {
		a, seen := alive[e.Owner]
		if !seen {
			a = isAlive(dir, e.Owner)
			alive[e.Owner] = a
		}
		return !a
	})
	return len(t.Entries) != n
}

var (
	livenessMu sync.Mutex
	livenessOf = map[string]string{} // dir → this process's liveness file name there
	livenessF  []*os.File            // kept open, and so locked, for the process's life
)

// liveness is this process's liveness file in dir, created and flocked on first use.
func liveness(dir string) (string, error) {
	livenessMu.Lock()
	defer livenessMu.Unlock()
	if name, ok := livenessOf[dir]; ok {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return name, nil
		}
	}
	name := "live-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", fmt.Errorf("lock directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return "", fmt.Errorf("lock directory: %w", err)
	}
	livenessOf[dir] = name
	livenessF = append(livenessF, f)
	return name, nil
}

// isAlive reports whether the process that owns the liveness file name in dir still runs: its flock is
// held. This process's own is alive.
func isAlive(dir, name string) bool {
	livenessMu.Lock()
	mine := livenessOf[dir] == name
	livenessMu.Unlock()
	if mine {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err != nil {
		return true // locked: its process holds it
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	_ = os.Remove(filepath.Join(dir, name))
	return false
}
