// Package poollock keeps a spec that holds a path's devices, or its nodes, from running beside the specs
// that use them when Ginkgo runs specs in several processes (gpuconform run --procs, ginkgo run -p).
//
// Ginkgo's own Serial runs a spec alone, after every other spec. That is too much for a spec that fills a
// node's devices on one path, stops one node, or upgrades the canary pool: the local cluster, like a real
// node with a device plugin and a DRA driver side by side, gives each path devices of its own, so the
// other path's specs can run beside it. A spec takes its path's lock shared, a spec that holds the path
// takes it exclusive, a spec that needs one node leases that node's lock (HoldAny), and a spec that
// stops a node takes that node's lock exclusive on every path (HoldLocks: each lock in its own mode).
// scenarios' poolHold and canaryHold say which spec takes what. A queued exclusive holder goes before shared holders
// that come after it, and a queued SharedFirst holder (the node stoppers' and the upgrade rehearsal's hold
// on every path) before any holder that comes after it (HoldLocks).
//
// The locks are flock(2) on one file per name in a directory of the run's own (Dir): every process of a
// run is on one machine (Ginkgo starts them as local children), and a process that dies loses its locks.
package poollock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
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
	// SharedFirst is Shared for a holder that queues as an exclusive one does (HoldLocks): it holds the
	// lock beside other shared holders, but while it waits, no holder that comes after it goes first. It
	// is for the specs of the run's longest line (the bench's lock floor: the node stoppers and the
	// upgrade rehearsal, one at a time), which hold every path shared: waiting as a plain shared holder,
	// such a spec lets every exclusive holder of the path that queues after it go first, one after
	// another (each gang of the path), and the whole line waits behind them.
	SharedFirst
	// Exclusive is how a spec that needs the path's devices (or nodes) to itself holds it.
	Exclusive
)

func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case SharedFirst:
		return "shared, queued first"
	}
	return "shared"
}

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

// Poll is how often a waiting holder tries again (flock has no timeout; the wait must end with ctx).
var Poll = 100 * time.Millisecond

// Lock is one named lock and the mode a holder takes it in.
type Lock struct {
	Name string
	Mode Mode
}

// Each is names, every one in mode.
func Each(names []string, mode Mode) []Lock {
	out := make([]Lock, 0, len(names))
	for _, n := range names {
		out = append(out, Lock{Name: n, Mode: mode})
	}
	return out
}

// Hold takes the named locks in dir, all in mode (HoldLocks).
func Hold(ctx context.Context, dir string, names []string, mode Mode) (release func(), waited time.Duration, err error) {
	return HoldLocks(ctx, dir, Each(names, mode))
}

// HoldLocks takes the locks in dir, each in its own mode, in the order of their names so that two
// holders never wait on each other (a name given twice is taken once, in the strongest of its modes:
// Exclusive over SharedFirst over Shared), and returns their release and how long it waited. It waits
// until they are free or ctx ends.
//
// An exclusive holder goes first: it queues at the lock's turnstile (a second file, name+".turnstile")
// and keeps it until it has the lock, and a shared holder must pass the turnstile before it takes the
// lock. Without it, flock lets shared holders that overlap one another keep the lock for as long as
// they keep coming, and the exclusive holders wait behind specs that could have run later. A SharedFirst
// holder queues at the turnstile as an exclusive one does, then takes the lock shared: it waits only for
// the holder that has the lock exclusive now. The turnstile is taken just before its lock, in the same
// name order, so it adds no wait that the lock's order does not allow.
func HoldLocks(ctx context.Context, dir string, locks []Lock) (release func(), waited time.Duration, err error) {
	h, waited, err := HoldSet(ctx, dir, locks)
	if err != nil {
		return nil, 0, err
	}
	return h.Release, waited, nil
}

// Held is the locks a HoldSet took, for a holder that is done with some of them before the others: the
// upgrade rehearsal lets the known-good nodes and the faults lock go once it has compared the known-good
// pool, and keeps the canary's until its rollback. Letting a lock go early adds no wait to anyone, so the
// name order that keeps holders from waiting on each other still holds.
type Held struct {
	mu    sync.Mutex
	names []string // in the order taken
	files map[string]*os.File
}

// Release lets every lock still held go, the last taken first. It may be called more than once.
func (h *Held) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range slices.Backward(h.names) {
		if f := h.files[n]; f != nil {
			unlock(f)
			delete(h.files, n)
		}
	}
}

// Drop lets the named locks go now and keeps the others; a name not held (or already let go) is skipped.
func (h *Held) Drop(names ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range names {
		if f := h.files[n]; f != nil {
			unlock(f)
			delete(h.files, n)
		}
	}
}

// Holds reports whether the named lock is still held.
func (h *Held) Holds(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.files[name] != nil
}

// HoldSet is HoldLocks, returning the locks as a Held set that can let some go before the others.
func HoldSet(ctx context.Context, dir string, locks []Lock) (*Held, time.Duration, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("lock directory: %w", err)
	}
	modes := map[string]Mode{}
	for _, l := range locks {
		modes[l.Name] = max(modes[l.Name], l.Mode)
	}
	h := &Held{files: map[string]*os.File{}}
	start := time.Now()
	for _, name := range slices.Sorted(maps.Keys(modes)) {
		mode := modes[name]
		how := syscall.LOCK_SH
		if mode == Exclusive {
			how = syscall.LOCK_EX
		}
		turnstile, err := take(ctx, dir, name+".turnstile", syscall.LOCK_EX, mode)
		if err != nil {
			h.Release()
			return nil, 0, err
		}
		if mode == Shared {
			unlock(turnstile) // passed: no exclusive holder is queued
		}
		f, err := take(ctx, dir, name, how, mode)
		if mode != Shared {
			unlock(turnstile)
		}
		if err != nil {
			h.Release()
			return nil, 0, err
		}
		h.names = append(h.names, name)
		h.files[name] = f
	}
	return h, time.Since(start), nil
}

// HoldAny takes one of the named locks in mode (Shared or Exclusive), whichever comes free first, and returns its release, its
// name and how long it waited. It is the lease of one node of a path: exclusive for a spec that needs the
// node's devices to itself (scenarios' holds:node), shared for one that needs a few devices of one node
// (on:node). Specs that lease different nodes run side by side. It starts at a random name, so that
// leases spread over the nodes instead of queueing for the first.
//
// It never blocks while it holds anything: every Poll it tries each name's lock without waiting. An
// exclusive lease, while it waits, keeps the turnstiles it can get, so shared holders that come after it
// wait (a queued exclusive holder goes first, as in Hold); a shared one passes a name's turnstile only
// when no exclusive holder is queued there.
func HoldAny(ctx context.Context, dir string, names []string, mode Mode) (release func(), name string, waited time.Duration, err error) {
	if len(names) == 0 {
		return nil, "", 0, errors.New("no lock to choose from")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", 0, fmt.Errorf("lock directory: %w", err)
	}
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	first := rand.IntN(len(names))
	names = append(names[first:], names[:first]...)
	how := syscall.LOCK_SH
	if mode == Exclusive {
		how = syscall.LOCK_EX
	}
	turnstiles := map[string]*os.File{}
	defer func() {
		for _, f := range turnstiles {
			unlock(f)
		}
	}()
	start := time.Now()
	for {
		for _, n := range names {
			if turnstiles[n] == nil {
				f, ok, err := try(dir, n+".turnstile", syscall.LOCK_EX)
				if err != nil {
					return nil, "", 0, err
				}
				switch {
				case ok && mode == Shared:
					unlock(f) // passed: no exclusive holder is queued
				case ok:
					turnstiles[n] = f
				case mode == Shared:
					continue // an exclusive holder is queued here: it goes first
				}
			}
			f, ok, err := try(dir, n, how)
			if err != nil {
				return nil, "", 0, err
			}
			if ok {
				return func() { unlock(f) }, n, time.Since(start), nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, "", 0, fmt.Errorf("waiting for any of the %s locks %v: %w", mode, names, context.Cause(ctx))
		case <-time.After(Poll):
		}
	}
}

// try flocks dir/name how without waiting: the open file and true when it got the lock, false when
// another holder has it.
func try(dir, name string, how int) (*os.File, bool, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	if err == nil {
		return f, true, nil
	}
	_ = f.Close()
	if errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EINTR) {
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("lock %s: %w", name, err)
}

// take flocks dir/name how (try), trying every Poll until it may or ctx ends.
func take(ctx context.Context, dir, name string, how int, mode Mode) (*os.File, error) {
	for {
		f, ok, err := try(dir, name, how)
		if err != nil || ok {
			return f, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the %s lock on %s: %w", mode, name, context.Cause(ctx))
		case <-time.After(Poll):
		}
	}
}

// unlock releases f's lock and closes it.
func unlock(f *os.File) {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	_ = f.Close()
}
