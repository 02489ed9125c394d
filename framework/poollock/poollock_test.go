package poollock

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The locks must hold between processes, as Ginkgo's are: the holder here is a child process (this
// test binary again) that takes a lock and keeps it until its stdin closes.
func TestMain(m *testing.M) {
	if dir := os.Getenv("POOLLOCK_HOLDER_DIR"); dir != "" {
		mode := Shared
		if os.Getenv("POOLLOCK_HOLDER_MODE") == "exclusive" {
			mode = Exclusive
		}
		release, _, err := Hold(context.Background(), dir, []string{os.Getenv("POOLLOCK_HOLDER_NAME")}, mode)
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("held\n")
		_, _ = os.Stdin.Read(make([]byte, 1)) // until the test closes it
		release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// holder starts a child process that holds name in mode; stop releases it.
func holder(t *testing.T, dir, name string, mode Mode) (stop func()) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "POOLLOCK_HOLDER_DIR="+dir, "POOLLOCK_HOLDER_NAME="+name, "POOLLOCK_HOLDER_MODE="+mode.String())
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf) != "held\n" {
		t.Fatalf("the holder did not take its lock: %q %v", buf, err)
	}
	return func() { _ = in.Close(); _ = cmd.Wait() }
}

func tryHold(t *testing.T, dir string, names []string, mode Mode, within time.Duration) (func(), error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	release, _, err := Hold(ctx, dir, names, mode)
	return release, err
}

func TestAnExclusiveHolderKeepsEveryoneElseOffItsPathOnly(t *testing.T) {
	dir := t.TempDir()
	stop := holder(t, dir, "path-device-plugin", Exclusive)
	if _, err := tryHold(t, dir, []string{"path-device-plugin"}, Shared, 300*time.Millisecond); err == nil {
		t.Fatal("a shared holder got the path another process holds exclusive")
	}
	if _, err := tryHold(t, dir, []string{"path-device-plugin", "path-dra"}, Exclusive, 300*time.Millisecond); err == nil {
		t.Fatal("a holder of every path got them while one was held")
	}
	release, err := tryHold(t, dir, []string{"path-dra"}, Exclusive, time.Second)
	if err != nil {
		t.Fatalf("the other path was not free: %v", err)
	}
	release()
	stop()
	release, err = tryHold(t, dir, []string{"path-device-plugin"}, Exclusive, 2*time.Second)
	if err != nil {
		t.Fatalf("the path was not free after its holder let go: %v", err)
	}
	release()
}

func TestSharedHoldersRunTogetherAndAnExclusiveOneWaitsForThem(t *testing.T) {
	dir := t.TempDir()
	stop := holder(t, dir, "path-dra", Shared)
	release, err := tryHold(t, dir, []string{"path-dra"}, Shared, time.Second)
	if err != nil {
		t.Fatalf("two shared holders could not hold together: %v", err)
	}
	release()
	if _, err := tryHold(t, dir, []string{"path-dra"}, Exclusive, 300*time.Millisecond); err == nil {
		t.Fatal("an exclusive holder got the path while another process held it shared")
	}
	done := make(chan time.Duration)
	go func() {
		release, waited, err := Hold(t.Context(), dir, []string{"path-dra"}, Exclusive)
		if err == nil {
			release()
		}
		done <- waited
	}()
	time.Sleep(300 * time.Millisecond)
	stop()
	select {
	case waited := <-done:
		if waited < 250*time.Millisecond {
			t.Errorf("waited %s, want at least the 300ms the shared holder kept it", waited)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the exclusive holder did not get the lock after the shared one let go")
	}
}

// A stop:node spec holds the faults lock and its node's locks exclusive and the paths shared in one call:
// each lock is taken in its own mode, so a holder of another node of the path runs beside it, and a
// holder of the same node, or of the whole path, waits.
func TestHoldLocksTakesEachLockInItsOwnMode(t *testing.T) {
	dir := t.TempDir()
	locks := []Lock{{Name: "path-dra", Mode: Shared}, {Name: "path-dra@worker", Mode: Exclusive}, {Name: "node-stops", Mode: Exclusive}, {Name: "path-dra", Mode: Exclusive}, {Name: "path-device-plugin", Mode: Shared}}
	release, _, err := HoldLocks(t.Context(), dir, locks)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := tryHold(t, dir, []string{"path-device-plugin"}, Shared, time.Second); err != nil {
		t.Errorf("a shared holder of a path held shared waited: %v", err)
	} else {
		r()
	}
	for _, busy := range []string{"path-dra", "path-dra@worker", "node-stops"} {
		if _, err := tryHold(t, dir, []string{busy}, Shared, 300*time.Millisecond); err == nil {
			t.Errorf("%s was taken shared beside a holder that asked for it exclusive (a name given twice is taken in its strongest mode)", busy)
		}
	}
	if _, err := tryHold(t, dir, []string{"path-device-plugin"}, Exclusive, 300*time.Millisecond); err == nil {
		t.Error("an exclusive holder got a path held shared")
	}
	release()
	if r, err := tryHold(t, dir, []string{"path-dra", "path-dra@worker", "node-stops"}, Exclusive, time.Second); err != nil {
		t.Errorf("the locks were not free after the release: %v", err)
	} else {
		r()
	}
}

// A queued exclusive holder goes before shared holders that come after it, although the path is only
// held shared: otherwise overlapping shared holders could keep it from the path for as long as they come.
func TestAnExclusiveHolderGoesBeforeLaterSharedOnes(t *testing.T) {
	dir := t.TempDir()
	stop := holder(t, dir, "path-dra", Shared)
	got := make(chan func())
	go func() {
		release, _, err := Hold(t.Context(), dir, []string{"path-dra"}, Exclusive)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- release
	}()
	time.Sleep(300 * time.Millisecond) // the exclusive holder is queued: it reserved the path
	if _, err := tryHold(t, dir, []string{"path-dra"}, Shared, 300*time.Millisecond); err == nil {
		t.Fatal("a shared holder overtook the exclusive one queued before it")
	}
	if release, err := tryHold(t, dir, []string{"path-device-plugin"}, Shared, time.Second); err != nil {
		t.Fatalf("the queue on one path held up the other: %v", err)
	} else {
		release()
	}
	stop()
	var release func()
	select {
	case release = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the exclusive holder did not get the lock after the shared one let go")
	}
	if _, err := tryHold(t, dir, []string{"path-dra"}, Shared, 300*time.Millisecond); err == nil {
		t.Fatal("a shared holder got the path while the exclusive one held it")
	}
	release()
	if release, err := tryHold(t, dir, []string{"path-dra"}, Shared, 2*time.Second); err != nil {
		t.Fatalf("the path was not free after the exclusive holder let go: %v", err)
	} else {
		release()
	}
}

func TestDirIsTheParentsWhenItGaveOneElseTheRunIDs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv(EnvDir, "")
	if got, want := Dir("r1"), filepath.Join(tmp, "gpuconform-locks-r1"); got != want {
		t.Errorf("without a parent's directory: Dir = %q, want %q", got, want)
	}
	parents := filepath.Join(tmp, "gpuconform-procs-1", "locks")
	t.Setenv(EnvDir, parents)
	if got := Dir("r1"); got != parents {
		t.Errorf("with %s=%q: Dir = %q, want the parent's", EnvDir, parents, got)
	}
}

// A node lease takes whichever node is free, waits for the first to come free when none is, and keeps
// shared holders that come after it from the nodes it waits for.
func TestHoldAnyLeasesAFreeNodeOrWaitsForTheFirstToComeFree(t *testing.T) {
	dir := t.TempDir()
	nodes := []string{"path-dra@n1", "path-dra@n2"}
	stopN1 := holder(t, dir, nodes[0], Exclusive)
	release, got, waited, err := HoldAny(t.Context(), dir, nodes, Exclusive)
	if err != nil || got != nodes[1] {
		t.Fatalf("with n1 leased: HoldAny = %q, %v; want %s at once", got, err, nodes[1])
	}
	if waited > time.Second {
		t.Errorf("waited %s for a free node", waited)
	}
	if _, err := tryHold(t, dir, nodes[1:], Shared, 300*time.Millisecond); err == nil {
		t.Fatal("a shared holder got the node leased exclusive")
	}
	release()

	stopN2 := holder(t, dir, nodes[1], Shared)
	type lease struct {
		release func()
		name    string
		err     error
	}
	done := make(chan lease, 1)
	go func() {
		r, n, _, err := HoldAny(t.Context(), dir, nodes, Exclusive)
		done <- lease{r, n, err}
	}()
	time.Sleep(300 * time.Millisecond) // queued: it reserved both nodes
	if _, err := tryHold(t, dir, nodes[1:], Shared, 300*time.Millisecond); err == nil {
		t.Fatal("a later shared holder overtook the queued lease")
	}
	select {
	case l := <-done:
		t.Fatalf("leased %q (%v) while every node was held", l.name, l.err)
	default:
	}
	stopN2()
	select {
	case l := <-done:
		if l.err != nil || l.name != nodes[1] {
			t.Fatalf("after n2's holder let go: HoldAny = %q, %v; want %s", l.name, l.err, nodes[1])
		}
		l.release()
	case <-time.After(5 * time.Second):
		t.Fatal("the lease did not take n2 after its holder let go")
	}
	stopN1()
	if release, err := tryHold(t, dir, nodes, Shared, 2*time.Second); err != nil {
		t.Fatalf("the reservations stayed after the lease was taken: %v", err)
	} else {
		release()
	}

	stop := holder(t, dir, nodes[0], Exclusive)
	defer stop()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, _, _, err := HoldAny(ctx, dir, nodes[:1], Exclusive); err == nil {
		t.Fatal("HoldAny returned without the lock when its context ended")
	}
	if _, _, _, err := HoldAny(t.Context(), dir, nil, Exclusive); err == nil {
		t.Fatal("HoldAny of no name succeeded")
	}
}

// A lease of several nodes takes them all at once or none: with one of three held it takes the other two;
// with two held it waits and keeps a later one-node lease off the node it could take already, so that
// single leases cannot starve it; once a node comes free it has both. Asking for more
// names than it gives fails at once.
func TestHoldSomeTakesEveryNodeItNeedsAtOnceAndIsNotOvertaken(t *testing.T) {
	dir := t.TempDir()
	nodes := []string{"path-dra@n1", "path-dra@n2", "path-dra@n3"}
	stopN1 := holder(t, dir, nodes[0], Exclusive)
	release, got, waited, err := HoldSome(t.Context(), dir, nodes, 2, Exclusive)
	if slices.Sort(got); err != nil || !slices.Equal(got, nodes[1:]) {
		t.Fatalf("with n1 leased: HoldSome(2) = %v, %v; want %v at once", got, err, nodes[1:])
	}
	if waited > time.Second {
		t.Errorf("waited %s for two free nodes", waited)
	}
	release()

	stopN2 := holder(t, dir, nodes[1], Exclusive)
	type lease struct {
		release func()
		names   []string
		err     error
	}
	done := make(chan lease, 1)
	go func() {
		r, n, _, err := HoldSome(t.Context(), dir, nodes, 2, Exclusive)
		done <- lease{r, n, err}
	}()
	time.Sleep(300 * time.Millisecond) // queued: n3 is free, n1 and n2 are held
	if _, _, _, err := tryHoldAny(t, dir, nodes, Exclusive, 300*time.Millisecond); err == nil {
		t.Fatal("a later one-node lease took the node the two-node lease waits to have with another")
	}
	select {
	case l := <-done:
		t.Fatalf("leased %v (%v) with one node free", l.names, l.err)
	default:
	}
	stopN2()
	select {
	case l := <-done:
		if slices.Sort(l.names); l.err != nil || !slices.Equal(l.names, nodes[1:]) {
			t.Fatalf("after n2's holder let go: HoldSome(2) = %v, %v; want %v", l.names, l.err, nodes[1:])
		}
		l.release()
	case <-time.After(5 * time.Second):
		t.Fatal("the lease did not take n2 and n3 after n2's holder let go")
	}
	stopN1()
	if _, _, _, err := HoldSome(t.Context(), dir, nodes[:2], 3, Exclusive); err == nil {
		t.Fatal("HoldSome of 3 of 2 names succeeded")
	}
	if release, err := tryHold(t, dir, nodes, Exclusive, 2*time.Second); err != nil {
		t.Fatalf("a lease left a lock or a reservation behind: %v", err)
	} else {
		release()
	}
}

// tryHoldAny is HoldAny that gives up after d.
func tryHoldAny(t *testing.T, dir string, names []string, mode Mode, d time.Duration) (func(), string, time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return HoldAny(ctx, dir, names, mode)
}

// A shared lease takes a node another spec holds shared, never one held exclusive or with an exclusive
// holder queued at it; and leases start at a random node, so they spread over free nodes.
func TestHoldAnySharedLeasesANodeBesideSharedHoldersOnly(t *testing.T) {
	dir := t.TempDir()
	nodes := []string{"path-dra@n1", "path-dra@n2"}
	stop1 := holder(t, dir, nodes[0], Exclusive)
	stop2 := holder(t, dir, nodes[1], Shared)
	for range 5 {
		release, got, _, err := HoldAny(t.Context(), dir, nodes, Shared)
		if err != nil || got != nodes[1] {
			t.Fatalf("HoldAny shared = %q, %v; want %s, the node held shared", got, err, nodes[1])
		}
		release()
	}
	// An exclusive lease reserves both nodes (n1 is held exclusive, n2 shared): a later shared lease
	// must not take n2 before it.
	queued := make(chan func(), 1)
	go func() {
		r, _, _, err := HoldAny(t.Context(), dir, nodes, Exclusive)
		if err == nil {
			queued <- r
		}
	}()
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if release, got, _, err := HoldAny(ctx, dir, nodes, Shared); err == nil {
		release()
		t.Fatalf("a shared lease took %s while an exclusive one was queued there", got)
	}
	stop2()
	select {
	case r := <-queued:
		r()
	case <-time.After(5 * time.Second):
		t.Fatal("the exclusive lease did not take n2 after its shared holder let go")
	}
	stop1()
	seen := map[string]bool{}
	for range 40 {
		release, got, _, err := HoldAny(t.Context(), dir, nodes, Shared)
		if err != nil {
			t.Fatal(err)
		}
		seen[got] = true
		release()
	}
	if len(seen) != 2 {
		t.Errorf("40 leases of two free nodes all took %v: they must spread", seen)
	}
}

// A queued shared holder (a node stopper, which holds every path shared) is not overtaken either: while
// it waits for the path's exclusive holder (a gang) to end, an exclusive holder that comes after it (the
// next gang) does not go first; once in, it holds the path shared, and the exclusive one waits for it.
func TestAQueuedSharedHolderIsNotOvertakenByALaterExclusiveOne(t *testing.T) {
	dir := t.TempDir()
	stop := holder(t, dir, "path-device-plugin", Exclusive)
	type got struct {
		release func()
		err     error
	}
	first := make(chan got, 1)
	go func() {
		release, _, err := HoldLocks(t.Context(), dir, []Lock{{Name: "path-device-plugin", Mode: Shared}})
		first <- got{release, err}
	}()
	time.Sleep(300 * time.Millisecond) // it is queued
	later := make(chan got, 1)
	go func() {
		release, _, err := HoldLocks(t.Context(), dir, []Lock{{Name: "path-device-plugin", Mode: Exclusive}})
		later <- got{release, err}
	}()
	time.Sleep(300 * time.Millisecond)
	stop()
	var a got
	select {
	case a = <-first:
		if a.err != nil {
			t.Fatal(a.err)
		}
	case b := <-later:
		if b.err == nil {
			b.release()
		}
		t.Fatal("the exclusive holder that came later went first")
	case <-time.After(5 * time.Second):
		t.Fatal("the queued shared holder did not get the path after its exclusive holder let go")
	}
	select {
	case b := <-later:
		t.Fatalf("the exclusive holder got the path while the shared one held it (%v)", b.err)
	case <-time.After(300 * time.Millisecond):
	}
	a.release()
	select {
	case b := <-later:
		if b.err != nil {
			t.Fatal(b.err)
		}
		b.release()
	case <-time.After(5 * time.Second):
		t.Fatal("the exclusive holder did not get the path after the shared one let go")
	}
}

// A holder gets all its locks at once or none: a node stopper that waits for the DRA path (held by a
// gang there) holds nothing meanwhile, so the device-plugin path it asks shared stays open to that path's
// specs (CI e381481: held shared while the stopper waited, and a device-plugin gang queued exclusive
// behind it, the device-plugin path stood idle 200 s). It reserves its locks up to the DRA path, as if it
// took them one at a time in name order: a later device-plugin gang, or a devices:none spec (the stops
// lock), does not go before it.
func TestAWaiterHoldsNothingAndReservesItsLocksUpToTheFirstInItsWay(t *testing.T) {
	dir := t.TempDir()
	stop := holder(t, dir, "path-dra", Exclusive)
	waiting := make(chan func(), 1)
	go func() {
		r, _, err := HoldLocks(t.Context(), dir, []Lock{{Name: "node-stops", Mode: Exclusive}, {Name: "path-device-plugin", Mode: Shared}, {Name: "path-dra", Mode: Shared}})
		if err != nil {
			t.Error(err)
			close(waiting)
			return
		}
		waiting <- r
	}()
	time.Sleep(300 * time.Millisecond) // the stopper is queued behind the DRA gang
	if r, err := tryHold(t, dir, []string{"path-device-plugin"}, Shared, time.Second); err != nil {
		t.Fatalf("a node holder of the device-plugin path waited for a stopper that waits for the DRA path: %v", err)
	} else {
		r()
	}
	if _, err := tryHold(t, dir, []string{"path-device-plugin"}, Exclusive, 300*time.Millisecond); err == nil {
		t.Fatal("a later device-plugin gang went before the stopper, which reserved the path shared")
	}
	if _, err := tryHold(t, dir, []string{"node-stops"}, Shared, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "held or reserved by others: node-stops") {
		t.Errorf("a devices:none spec's wait for the stops lock the stopper reserved ended %v; want an error naming node-stops", err)
	}
	stop()
	select {
	case r := <-waiting:
		if r == nil {
			t.Fatal("the stopper did not get its locks")
		}
		if _, err := tryHold(t, dir, []string{"path-dra"}, Exclusive, 300*time.Millisecond); err == nil {
			t.Error("the DRA path was taken exclusive beside the stopper")
		}
		r()
	case <-time.After(5 * time.Second):
		t.Fatal("the stopper did not get its locks after the DRA gang let go")
	}
}

// A waiter reserves only the first lock in its way: a node stopper waiting for the stops lock (held by the
// stopper ahead of it) does not reserve its path, so that path's gangs and node holders go on meanwhile.
func TestAWaiterForTheStopsLockDoesNotReserveItsPath(t *testing.T) {
	dir := t.TempDir()
	stopDP := holder(t, dir, "path-device-plugin", Shared) // a node holder of the path
	stopStops := holder(t, dir, "node-stops", Exclusive)   // the stopper ahead
	waiting := make(chan func(), 1)
	go func() {
		r, _, err := HoldLocks(t.Context(), dir, []Lock{{Name: "node-stops", Mode: Exclusive}, {Name: "path-device-plugin", Mode: Exclusive}})
		if err != nil {
			t.Error(err)
			close(waiting)
			return
		}
		waiting <- r
	}()
	time.Sleep(300 * time.Millisecond)
	if r, err := tryHold(t, dir, []string{"path-device-plugin"}, Shared, time.Second); err != nil {
		t.Fatalf("a node holder of the path waited for a stopper that waits for the stops lock: %v", err)
	} else {
		r()
	}
	stopStops()
	time.Sleep(300 * time.Millisecond) // the stops lock is free: the path, held shared, is now in its way
	if _, err := tryHold(t, dir, []string{"path-device-plugin"}, Shared, 300*time.Millisecond); err == nil {
		t.Fatal("a later shared holder of the path overtook the stopper that waits for it")
	}
	stopDP()
	select {
	case r := <-waiting:
		if r == nil {
			t.Fatal("the stopper did not get its locks")
		}
		if _, err := tryHold(t, dir, []string{"path-device-plugin"}, Shared, 300*time.Millisecond); err == nil {
			t.Error("the path was taken beside the stopper that holds it exclusive")
		}
		r()
	case <-time.After(5 * time.Second):
		t.Fatal("the stopper did not get its locks after the path's holder let go")
	}
}

// A waiter does not reserve a lock that a waiter before it asks for in a conflicting mode: a gang that
// waits for its path exclusive behind a node stopper (which asks for every path shared) would otherwise
// keep the path's node holders, which go beside the stopper, off the path until the stopper is done.
func TestAWaiterBehindAnEarlierConflictingOneDoesNotReserve(t *testing.T) {
	dir := t.TempDir()
	stopStops := holder(t, dir, "node-stops", Exclusive)   // the stopper ahead in the chain
	stopDP := holder(t, dir, "path-device-plugin", Shared) // a node holder of the path
	type got struct {
		release func()
		err     error
	}
	stopper, gang := make(chan got, 1), make(chan got, 1)
	go func() {
		r, _, err := HoldLocks(t.Context(), dir, []Lock{{Name: "node-stops", Mode: Exclusive}, {Name: "path-device-plugin", Mode: Shared}})
		stopper <- got{r, err}
	}()
	time.Sleep(300 * time.Millisecond)
	go func() {
		r, _, err := HoldLocks(t.Context(), dir, []Lock{{Name: "path-device-plugin", Mode: Exclusive}})
		gang <- got{r, err}
	}()
	time.Sleep(300 * time.Millisecond)
	if r, err := tryHold(t, dir, []string{"path-device-plugin"}, Shared, time.Second); err != nil {
		t.Fatalf("a node holder waited for a gang queued behind a stopper: %v", err)
	} else {
		r()
	}
	stopStops()
	var s got
	select {
	case s = <-stopper:
		if s.err != nil {
			t.Fatal(s.err)
		}
	case g := <-gang:
		t.Fatalf("the gang went before the stopper queued ahead of it (%v)", g.err)
	case <-time.After(5 * time.Second):
		t.Fatal("the stopper did not get its locks")
	}
	s.release()
	time.Sleep(300 * time.Millisecond) // the gang, now first, reserves the path
	if _, err := tryHold(t, dir, []string{"path-device-plugin"}, Shared, 300*time.Millisecond); err == nil {
		t.Fatal("a later node holder went before the gang, now the first waiter for the path")
	}
	stopDP()
	select {
	case g := <-gang:
		if g.err != nil {
			t.Fatal(g.err)
		}
		g.release()
	case <-time.After(5 * time.Second):
		t.Fatal("the gang did not get the path")
	}
}

// A node stopper next in line for the stops lock reserves its node ahead (Lock.Ahead): the node's
// holders finish while the stopper ahead of it runs. The stopper behind it does not, and neither does a
// lock not marked ahead.
func TestTheNextInLineReservesItsAheadLocks(t *testing.T) {
	dir := t.TempDir()
	stopStops := holder(t, dir, "node-stops", Exclusive) // the stopper that runs
	type got struct {
		release func()
		err     error
	}
	next, behind := make(chan got, 1), make(chan got, 1)
	go func() {
		r, _, err := HoldLocks(t.Context(), dir, []Lock{{Name: "node-stops", Mode: Exclusive}, {Name: "path-dp", Mode: Shared},
			{Name: "path-dp@n1", Mode: Exclusive, Ahead: true}})
		next <- got{r, err}
	}()
	time.Sleep(300 * time.Millisecond)
	go func() {
		r, _, err := HoldLocks(t.Context(), dir, []Lock{{Name: "node-stops", Mode: Exclusive}, {Name: "path-dp", Mode: Shared},
			{Name: "path-dp@n2", Mode: Exclusive, Ahead: true}})
		behind <- got{r, err}
	}()
	time.Sleep(300 * time.Millisecond)
	if _, err := tryHold(t, dir, []string{"path-dp@n1"}, Shared, 300*time.Millisecond); err == nil {
		t.Error("a holder took the node that the next stopper in line reserved ahead")
	}
	if r, err := tryHold(t, dir, []string{"path-dp@n2"}, Shared, time.Second); err != nil {
		t.Errorf("the node of the stopper behind was reserved ahead: %v", err)
	} else {
		r()
	}
	if r, err := tryHold(t, dir, []string{"path-dp"}, Exclusive, time.Second); err != nil {
		t.Errorf("a lock not marked ahead was reserved before its turn: %v", err)
	} else {
		r()
	}
	stopStops()
	for _, c := range []chan got{next, behind} {
		select {
		case g := <-c:
			if g.err != nil {
				t.Fatal(g.err)
			}
			g.release()
		case <-time.After(5 * time.Second):
			t.Fatal("a stopper did not get its locks")
		}
	}
}

// A waiter that is killed leaves the queue: the holders and waiters of a process whose liveness file is
// no longer locked are dropped with their reservations.
func TestADeadProcesssHoldsAndReservationsAreDropped(t *testing.T) {
	dir := t.TempDir()
	stop := holder(t, dir, "path-dra", Exclusive)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A second holder that queues for path-dra exclusive (reserving it), then is killed.
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "POOLLOCK_HOLDER_DIR="+dir, "POOLLOCK_HOLDER_NAME=path-dra", "POOLLOCK_HOLDER_MODE=exclusive")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := tryHold(t, dir, []string{"path-dra"}, Shared, 300*time.Millisecond); err == nil {
		t.Fatal("a shared holder overtook the queued exclusive one")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	stop()
	if r, err := tryHold(t, dir, []string{"path-dra"}, Shared, 2*time.Second); err != nil {
		t.Fatalf("the killed waiter's reservation was kept: %v", err)
	} else {
		r()
	}
}

// A holds:node spec asks for its path shared and a node lease in one request: while every node is
// leased it holds nothing (it reserves the path shared and the nodes), so the path's other specs go on.
func TestTakeWithAChoiceHoldsThePathOnlyWithTheLease(t *testing.T) {
	dir := t.TempDir()
	nodes := []string{"path-dra@n1", "path-dra@n2"}
	stop1 := holder(t, dir, nodes[0], Exclusive)
	h, waited, err := Take(t.Context(), dir, Request{Locks: []Lock{{Name: "path-dra", Mode: Shared}}, Any: nodes, AnyMode: Exclusive})
	if err != nil || h.Chosen() != nodes[1] || !h.Holds("path-dra") || !h.Holds(nodes[1]) || h.Holds(nodes[0]) {
		t.Fatalf("with n1 leased: Take = %+v, %v; want path-dra and %s", h, err, nodes[1])
	}
	if waited > time.Second {
		t.Errorf("waited %s with a node free", waited)
	}
	h.Release()
	stop2 := holder(t, dir, nodes[1], Exclusive)
	done := make(chan *Held, 1)
	go func() {
		h, _, err := Take(t.Context(), dir, Request{Locks: []Lock{{Name: "path-dra", Mode: Shared}}, Any: nodes, AnyMode: Exclusive})
		if err != nil {
			t.Error(err)
		}
		done <- h
	}()
	time.Sleep(300 * time.Millisecond)
	var waiter *entry
	if err := update(dir, func(tb *table) bool {
		for i := range tb.Entries {
			if len(tb.Entries[i].Any) > 0 {
				waiter = &tb.Entries[i]
			}
		}
		return false
	}); err != nil || waiter == nil {
		t.Fatalf("the lease waiter is not in the table: %v", err)
	}
	if waiter.Held {
		t.Fatalf("the lease waiter holds its locks while every node is leased: %+v", waiter)
	}
	if m, ok := waiter.reserves("path-dra"); !ok || m != Shared {
		t.Errorf("the lease waiter reserved %v; want path-dra shared (a later gang does not go first)", waiter.Reserved)
	}
	if r, err := tryHold(t, dir, []string{"path-dra"}, Shared, time.Second); err != nil {
		t.Fatalf("a shared holder of the path waited for the lease waiter: %v", err)
	} else {
		r()
	}
	stop2()
	select {
	case h := <-done:
		if h == nil || h.Chosen() != nodes[1] {
			t.Fatalf("after n2's holder let go: %+v", h)
		}
		h.Release()
	case <-time.After(5 * time.Second):
		t.Fatal("the lease did not take n2 after its holder let go")
	}
	stop1()
}

// A name asked in several modes is taken in the strongest.
func TestModesMergeToTheStrongest(t *testing.T) {
	if Shared >= Exclusive {
		t.Fatalf("mode order: shared %d, exclusive %d", Shared, Exclusive)
	}
	dir := t.TempDir()
	release, _, err := HoldLocks(t.Context(), dir, []Lock{{Name: "p", Mode: Shared}, {Name: "p", Mode: Shared}, {Name: "q", Mode: Exclusive}, {Name: "q", Mode: Shared}})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	stop := holder(t, dir, "p", Shared) // p is held shared: a shared holder joins
	stop()
	if _, err := tryHold(t, dir, []string{"q"}, Shared, 300*time.Millisecond); err == nil {
		t.Error("q was taken shared although one of its asks was exclusive")
	}
}

// The upgrade rehearsal lets the known-good nodes and the faults lock go once it has compared the
// known-good pool, and keeps the canary's until its rollback: Drop lets exactly the named locks go, and
// Release the rest, once however often it is called.
func TestDropLetsTheNamedLocksGoAndKeepsTheOthers(t *testing.T) {
	dir := t.TempDir()
	h, _, err := HoldSet(t.Context(), dir, []Lock{{Name: "node-unhealthy-devices", Mode: Exclusive}, {Name: "path-dp@good", Mode: Exclusive}, {Name: "path-dp@canary", Mode: Exclusive}, {Name: "path-dp", Mode: Shared}})
	if err != nil {
		t.Fatal(err)
	}
	h.Drop("node-unhealthy-devices", "path-dp@good", "not-held")
	for _, free := range []string{"node-unhealthy-devices", "path-dp@good"} {
		if h.Holds(free) {
			t.Errorf("%s is still held after Drop", free)
		}
		if r, err := tryHold(t, dir, []string{free}, Exclusive, time.Second); err != nil {
			t.Errorf("%s was not free after Drop: %v", free, err)
		} else {
			r()
		}
	}
	if !h.Holds("path-dp@canary") {
		t.Error("Drop let go of path-dp@canary, which it was not given")
	}
	if _, err := tryHold(t, dir, []string{"path-dp@canary"}, Shared, 300*time.Millisecond); err == nil {
		t.Error("path-dp@canary was taken beside its exclusive holder after another lock was dropped")
	}
	if r, err := tryHold(t, dir, []string{"path-dp"}, Shared, time.Second); err != nil {
		t.Errorf("the path held shared could not be shared: %v", err)
	} else {
		r()
	}
	h.Release()
	h.Release()
	h.Drop("path-dp@canary")
	if r, err := tryHold(t, dir, []string{"path-dp@canary", "path-dp"}, Exclusive, time.Second); err != nil {
		t.Errorf("the locks were not free after the release: %v", err)
	} else {
		r()
	}
}

// A waiter says which holder or reservation keeps it waiting, by the holder's name (Who), in its trace
// (Trace) and in its error when it gives up.
func TestAWaiterSaysWhoKeepsItWaiting(t *testing.T) {
	dir := t.TempDir()
	defer func() { Who, Trace = nil, nil }()
	Who = func() string { return "gang A" }
	h, _, err := HoldLocks(t.Context(), dir, []Lock{{Name: "path-x", Mode: Exclusive}})
	if err != nil {
		t.Fatal(err)
	}
	defer h()
	var lines []string
	Who, Trace = func() string { return "spec B" }, func(l string) { lines = append(lines, l) }
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, _, err = Take(ctx, dir, Request{Locks: []Lock{{Name: "path-x", Mode: Shared}}})
	const want = `path-x (held exclusive by "gang A")`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the waiter's error is %v; want it to name %s", err, want)
	}
	if len(lines) != 1 || !strings.HasSuffix(lines[0], "s: "+want) {
		t.Errorf("the waiter traced %q; want one line ending in %q (it waited for one holder all along)", lines, want)
	}
}

// A waiter reserves its Ahead locks only once it is next in line for every other lock it asks for: a
// kubelet restart next in line for the stops lock, whose path a gang queued before it asks for alone,
// does not idle its node meanwhile (the gang goes first on the path, and the node's holders could run
// until then); once the gang has had the path, it does.
func TestAheadLocksWaitForTheTurnOfEveryOtherLock(t *testing.T) {
	tb := table{Entries: []entry{
		{ID: 1, Held: true, Locks: []Lock{{Name: "node-stops", Mode: Exclusive}, {Name: "path-dp", Mode: Shared}}}, // the stopper now running
		{ID: 2, Held: true, Locks: []Lock{{Name: "path-dp", Mode: Shared}, {Name: "path-dp@b", Mode: Exclusive}}},  // a node holder
		{ID: 3, Locks: []Lock{{Name: "path-dp", Mode: Exclusive}}},                                                 // a gang
		{ID: 4, Locks: []Lock{{Name: "node-stops", Mode: Exclusive}, {Name: "path-dp", Mode: Shared}, {Name: "path-dp@b", Mode: Exclusive, Ahead: true}}},
	}}
	reservesNode := func(e entry) bool {
		return slices.ContainsFunc(e.Reserved, func(l Lock) bool { return l.Name == "path-dp@b" && l.Mode == Exclusive })
	}
	tb.schedule()
	if reservesNode(tb.Entries[3]) {
		t.Errorf("the kubelet restart reserved its node while a gang queued before it asks for its path: %v", tb.Entries[3].Reserved)
	}
	tb.Entries = slices.Delete(tb.Entries, 1, 3) // the node holder and the gang are done
	tb.schedule()
	if !reservesNode(tb.Entries[1]) {
		t.Errorf("the kubelet restart, next in line for every lock, did not reserve its node: %v", tb.Entries[1].Reserved)
	}
}
