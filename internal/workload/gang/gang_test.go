package gang

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gpuconform.io/gpuconform/internal/syncbuf"
	"gpuconform.io/gpuconform/internal/workload/train"
)

// instant is a step that takes no time but still honours cancellation.
func instant(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// interruptAt returns a sleep that cancels the attempt when step n begins, as a SIGTERM arriving
// during that step would, without any timing dependence.
func interruptAt(n int, cancel context.CancelFunc) func(context.Context, time.Duration) error {
	calls := 0
	return func(ctx context.Context, _ time.Duration) error {
		calls++
		if calls == n {
			cancel()
		}
		return ctx.Err()
	}
}

// localListener is a listener on a free loopback port, standing in for rank 0's :port.
func localListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// gangConfigs returns the configs of a gang of workers on ln; rank 0 serves on ln.
func gangConfigs(ln net.Listener, dir string, workers, steps int) []Config {
	cfgs := make([]Config, workers)
	for r := range cfgs {
		cfgs[r] = Config{
			Workers: workers, Rank: r, Coordinator: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port,
			Steps: steps, CheckpointEvery: 5, CheckpointDir: dir, WorkID: "w1",
			RendezvousTimeout: 10 * time.Second, PeerTimeout: time.Minute,
			sleep: instant, retryEvery: 10 * time.Millisecond,
		}
	}
	cfgs[0].listen = func(string) (net.Listener, error) { return ln, nil }
	return cfgs
}

type result struct {
	sum Summary
	err error
	out bytes.Buffer
}

// events decodes the JSON lines a worker printed.
func (r *result) events(t *testing.T) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(r.out.String()), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("progress line %q is not JSON: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// event returns the first event named name, failing when there is none.
func (r *result) event(t *testing.T, name string) map[string]any {
	t.Helper()
	for _, ev := range r.events(t) {
		if ev["event"] == name {
			return ev
		}
	}
	t.Fatalf("rank %d printed no %s event:\n%s", r.sum.Rank, name, r.out.String())
	return nil
}

// runGang runs one worker per config, each in its own goroutine, and waits for all of them.
func runGang(t *testing.T, ctxs []context.Context, cfgs []Config) []*result {
	t.Helper()
	results := make([]*result, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		results[i] = &result{}
		ctx := t.Context()
		if ctxs != nil {
			ctx = ctxs[i]
		}
		wg.Go(func() { results[i].sum, results[i].err = Run(ctx, cfg, &results[i].out) })
	}
	wg.Wait()
	return results
}

func steps(t *testing.T, dir string, rank int) []int {
	t.Helper()
	states, _, err := (&train.Store{Dir: RankDir(dir, rank)}).Checkpoints("w1")
	if err != nil {
		t.Fatal(err)
	}
	var s []int
	for _, st := range states {
		s = append(s, st.Step)
	}
	return s
}

func TestGangCompletesInLockStep(t *testing.T) {
	dir := t.TempDir()
	results := runGang(t, nil, gangConfigs(localListener(t), dir, 3, 12))
	want := Digest("w1", 3, 12)
	for r, res := range results {
		if res.err != nil {
			t.Fatalf("rank %d: %v", r, res.err)
		}
		s := res.sum
		if s.Status != StatusCompleted || s.Rank != r || s.CompletedSteps != 12 || s.Attempt != 1 || s.Resumed || s.StateDigest != want {
			t.Errorf("rank %d summary = %+v, want completed 12 steps in attempt 1 with digest %s", r, s, want)
		}
		for _, ev := range res.events(t) {
			if ev["rank"] != float64(r) {
				t.Errorf("rank %d event without its rank: %v", r, ev)
			}
		}
		if ev := res.event(t, "rendezvous"); ev["peers"] != float64(3) {
			t.Errorf("rank %d rendezvous = %v", r, ev)
		}
		if ev := res.event(t, "done"); ev["state_digest"] != want || ev["attempt"] != float64(1) {
			t.Errorf("rank %d done = %v", r, ev)
		}
		if got := steps(t, dir, r); !slices.Equal(got, []int{12, 10, 5}) {
			t.Errorf("rank %d checkpoints = %v, want [12 10 5]", r, got)
		}
	}
	if Digest("w1", 2, 12) == want || Digest("w2", 3, 12) == want || Digest("w1", 3, 11) == want {
		t.Error("Digest does not depend on the world size, the work and the steps")
	}
}

func TestSingleWorkerNeedsNoNetwork(t *testing.T) {
	cfg := Config{Workers: 1, Steps: 7, CheckpointEvery: 5, CheckpointDir: t.TempDir(), WorkID: "w1", sleep: instant,
		listen: func(string) (net.Listener, error) { return nil, errors.New("a gang of one must not listen") }}
	var out bytes.Buffer
	sum, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Status != StatusCompleted || sum.CompletedSteps != 7 || sum.StateDigest != Digest("w1", 1, 7) {
		t.Errorf("summary = %+v", sum)
	}
}

// fake is a worker the test drives by hand through the protocol, so it can die at an exact step.
type fake struct {
	k      *conn
	start  message
	digest string
	rank   int
}

func joinFake(t *testing.T, ln net.Listener, hello message) (*fake, error) {
	t.Helper()
	hello.Type, hello.Version = msgHello, protocolVersion
	p := joinParams{addr: ln.Addr().String(), deadline: time.Now().Add(10 * time.Second), retryEvery: 10 * time.Millisecond,
		timeout: 10 * time.Second, warnf: func(string, ...any) {}}
	k, start, err := join(t.Context(), p, hello)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { k.Close() })
	return &fake{k: k, start: start, digest: initialDigest(hello.WorkID, hello.Workers), rank: hello.Rank}, nil
}

// step plays one step honestly.
func (f *fake) step(t *testing.T, step int) {
	t.Helper()
	m := &member{k: f.k, peerTimeout: 10 * time.Second}
	combined, err := m.exchange(t.Context(), step, contribution(f.digest, step, f.rank))
	if err != nil {
		t.Fatalf("fake rank %d, step %d: %v", f.rank, step, err)
	}
	f.digest = nextDigest(f.digest, combined)
}

func TestLostWorkerStopsTheGangAtOnce(t *testing.T) {
	dir := t.TempDir()
	ln := localListener(t)
	cfgs := gangConfigs(ln, dir, 3, 100)[:2] // rank 2 is the fake below
	began := time.Now()
	var results []*result
	done := make(chan struct{})
	go func() { results = runGang(t, nil, cfgs); close(done) }()

	f, err := joinFake(t, ln, message{Rank: 2, Workers: 3, Steps: 100, WorkID: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= 6; s++ {
		f.step(t, s)
	}
	f.k.Close() // dies during step 7 without a word

	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the survivors did not stop; they must not wait out their minute of peer timeout")
	}
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("the gang took %s to notice the lost worker", took)
	}
	for r, res := range results {
		if res.err != nil {
			t.Fatalf("rank %d: %v", r, res.err)
		}
		if res.sum.Status != StatusPeerLost || res.sum.CompletedSteps != 6 || res.sum.StateDigest != Digest("w1", 3, 6) {
			t.Errorf("rank %d summary = %+v, want peer_lost after step 6", r, res.sum)
		}
		ev := res.event(t, "peer_lost")
		if ev["step"] != float64(7) || !strings.Contains(ev["reason"].(string), "lost rank 2") {
			t.Errorf("rank %d peer_lost = %v, want step 7 and rank 2 named", r, ev)
		}
		// The last completed step is saved; nothing past it.
		if got := steps(t, dir, r); !slices.Equal(got, []int{6, 5}) {
			t.Errorf("rank %d checkpoints = %v, want [6 5]", r, got)
		}
	}
}

func TestWorkerGivesUpWhenNoResultComes(t *testing.T) {
	ln := localListener(t)
	go func() { // a coordinator that starts the gang and then goes silent
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		k := newConn(nc)
		defer k.Close()
		<-k.Messages() // hello
		_ = k.send(message{Type: msgStart, Attempt: 1}, time.Second)
		for range k.Messages() {
		}
	}()
	cfg := gangConfigs(ln, t.TempDir(), 2, 10)[1]
	cfg.PeerTimeout = 100 * time.Millisecond
	var out bytes.Buffer
	sum, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Status != StatusPeerLost || sum.CompletedSteps != 0 || !strings.Contains(sum.Reason, "no result for step 1") {
		t.Errorf("summary = %+v, want peer_lost waiting for step 1", sum)
	}
}

func TestCoordinatorAbortsAStepThatDoesNotComplete(t *testing.T) {
	ln := localListener(t)
	cfg := gangConfigs(ln, t.TempDir(), 2, 10)[0]
	cfg.PeerTimeout = 200 * time.Millisecond
	var out bytes.Buffer
	type ran struct {
		sum Summary
		err error
	}
	done := make(chan ran, 1)
	go func() {
		sum, err := Run(t.Context(), cfg, &out)
		done <- ran{sum, err}
	}()
	f, err := joinFake(t, ln, message{Rank: 1, Workers: 2, Steps: 10, WorkID: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	f.step(t, 1)
	// ... and then never hands in step 2, though its connection stays up.
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.sum.Status != StatusPeerLost || got.sum.CompletedSteps != 1 || !strings.Contains(got.sum.Reason, "no contribution from rank [1]") {
		t.Errorf("rank 0 summary = %+v, want peer_lost naming rank 1", got.sum)
	}
	// The silent worker is told why before its connection is closed.
	for m := range f.k.Messages() {
		if m.Type == msgAbort && strings.Contains(m.Reason, "step 2") {
			return
		}
	}
	t.Error("the silent worker got no abort naming step 2")
}

func TestSIGTERMThenResumeFromTheNewestCommonCheckpoint(t *testing.T) {
	dir := t.TempDir()
	want := Digest("w1", 3, 20)

	// Attempt 1: every worker is terminated during step 8, as a preempted Job's pods are.
	cfgs := gangConfigs(localListener(t), dir, 3, 20)
	ctxs := make([]context.Context, len(cfgs))
	cancels := make([]context.CancelFunc, len(cfgs))
	for r := range cfgs {
		ctxs[r], cancels[r] = context.WithCancel(t.Context()) //nolint:fatcontext // one context per worker, each from t.Context(); none nests in another
		defer cancels[r]()
		cfgs[r].sleep = interruptAt(8, cancels[r])
	}
	for r, res := range runGang(t, ctxs, cfgs) {
		if res.err != nil {
			t.Fatalf("rank %d: %v", r, res.err)
		}
		if res.sum.Status != StatusInterrupted || res.sum.CompletedSteps != 7 || res.sum.LastCheckpointStep != 7 {
			t.Errorf("rank %d summary = %+v, want interrupted after step 7 with its checkpoint", r, res.sum)
		}
		if ev := res.event(t, "sigterm"); ev["step"] != float64(7) {
			t.Errorf("rank %d sigterm = %v", r, ev)
		}
	}
	// Ranks 0 and 2 lost their newest checkpoint (killed while writing it), so only rank 1 holds
	// step 7; the step all three hold is 5.
	for _, r := range []int{0, 2} {
		if err := os.Remove(filepath.Join(RankDir(dir, r), train.FileName(7))); err != nil {
			t.Fatal(err)
		}
	}

	// Attempt 2 resumes every rank from step 5 and ends where an uninterrupted gang does, at the resumed
	// pace (--resumed-step-duration) where attempt 1 stepped at --step-duration (0 here). Ranks 0 and 1
	// also have --resumed-min-duration: their 15 steps are slowed to fill its 150ms.
	fast, filled := 3*time.Millisecond, 10*time.Millisecond
	resumedCfgs := gangConfigs(localListener(t), dir, 3, 20)
	paces := make([][]time.Duration, len(resumedCfgs))
	for r := range resumedCfgs {
		resumedCfgs[r].ResumedStepDuration = &fast
		if r < 2 {
			resumedCfgs[r].ResumedMinDuration = 15 * filled
		}
		resumedCfgs[r].sleep = func(_ context.Context, d time.Duration) error { paces[r] = append(paces[r], d); return nil }
	}
	for r, res := range runGang(t, nil, resumedCfgs) {
		pace := fast
		if r < 2 {
			pace = filled
		}
		if len(paces[r]) != 15 || slices.ContainsFunc(paces[r], func(d time.Duration) bool { return d != pace }) {
			t.Errorf("rank %d slept %v in its resumed attempt, want 15 steps of %v", r, paces[r], pace)
		}
		if res.err != nil {
			t.Fatalf("rank %d: %v", r, res.err)
		}
		s := res.sum
		if s.Status != StatusCompleted || !s.Resumed || s.ResumedFrom != 5 || s.Attempt != 2 || s.Restarts != 1 || s.StepsRunThisAttempt != 15 || s.StateDigest != want {
			t.Errorf("rank %d summary = %+v, want attempt 2 resumed from 5 ending with %s", r, s, want)
		}
		if ev := res.event(t, "start"); ev["resumed_from"] != float64(5) || ev["attempt"] != float64(2) || ev["workers"] != float64(3) {
			t.Errorf("rank %d start = %v", r, ev)
		}
	}
	// Rank 1's step 7, from the abandoned attempt, made way for the resumed run's checkpoints.
	if got := steps(t, dir, 1); !slices.Equal(got, []int{20, 15, 10, 5}) {
		t.Errorf("rank 1 checkpoints = %v", got)
	}

	// A third attempt of the finished work resumes at the end and does nothing.
	for r, res := range runGang(t, nil, gangConfigs(localListener(t), dir, 3, 20)) {
		if res.err != nil || res.sum.ResumedFrom != 20 || res.sum.StepsRunThisAttempt != 0 || res.sum.Attempt != 3 || res.sum.StateDigest != want {
			t.Errorf("rank %d rerun = %+v, %v", r, res.sum, res.err)
		}
	}
}

func TestCoordinatorRejectsMisfits(t *testing.T) {
	ln := localListener(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg0 := gangConfigs(ln, t.TempDir(), 3, 10)[0]
	log := &watch{}
	cfg0.Warnings = log
	var out bytes.Buffer
	type ran struct {
		sum Summary
		err error
	}
	done := make(chan ran, 1)
	go func() {
		sum, err := Run(ctx, cfg0, &out)
		done <- ran{sum, err}
	}()
	if err := joinFakeAsync(t, ln, log, message{Rank: 1, Workers: 3, Steps: 10, WorkID: "w1"}); err != nil {
		t.Fatal(err)
	}

	cases := map[string]struct {
		mutate func(*Config)
		want   string
	}{
		"duplicate rank":   {func(c *Config) { c.Rank = 1 }, "duplicate rank 1"},
		"wrong world size": {func(c *Config) { c.Workers, c.Rank = 4, 2 }, "wrong world size"},
		"another work":     {func(c *Config) { c.Rank, c.WorkID = 2, "w2" }, "wrong work"},
		"other steps":      {func(c *Config) { c.Rank, c.Steps = 2, 11 }, "--steps 11"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := gangConfigs(ln, t.TempDir(), 3, 10)[1]
			tc.mutate(&cfg)
			_, err := Run(t.Context(), cfg, &bytes.Buffer{})
			var rejected *RejectedError
			if !errors.As(err, &rejected) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want a rejection containing %q", err, tc.want)
			}
		})
	}

	// SIGTERM during the rendezvous: interrupted, nothing to save.
	cancel()
	got := <-done
	if got.err != nil || got.sum.Status != StatusInterrupted {
		t.Errorf("rank 0 = %+v, %v; want interrupted", got.sum, got.err)
	}
}

// joinFakeAsync introduces a fake worker without waiting for the start, which a gang that never
// completes does not send, and waits until the coordinator has admitted it.
func joinFakeAsync(t *testing.T, ln net.Listener, log *watch, hello message) error {
	t.Helper()
	hello.Type, hello.Version = msgHello, protocolVersion
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	k := newConn(nc)
	t.Cleanup(func() { k.Close() })
	if err := k.send(hello, time.Second); err != nil {
		return err
	}
	return log.waitFor(fmt.Sprintf("rank %d joined", hello.Rank))
}

// watch collects what a worker logs, so a test can wait for a line instead of sleeping.
type watch struct{ syncbuf.Buffer }

func (w *watch) waitFor(s string) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if strings.Contains(w.String(), s) {
			return nil
		}
	}
	return fmt.Errorf("no %q in the log:\n%s", s, w.String())
}

func TestPlanStart(t *testing.T) {
	held := func(steps ...int) message {
		m := message{}
		for _, s := range steps {
			m.Checkpoints = append(m.Checkpoints, heldCheckpoint{Step: s, Restarts: s / 10})
		}
		return m
	}
	cases := []struct {
		name        string
		hellos      []message
		wantStep    int
		wantResumed bool
		wantAttempt int
	}{
		{"fresh gang", []message{held(), held(), held()}, 0, false, 1},
		{"one rank without checkpoints", []message{held(5, 10), held(), held(5)}, 0, false, 1},
		{"newest common", []message{held(5, 10, 15), held(10, 15, 20), held(10, 15)}, 15, true, 3},
		{"all hold step 0", []message{held(0), held(0)}, 0, true, 2},
		{"nothing in common", []message{held(5), held(10)}, 0, false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := planStart(tc.hellos)
			if got.Type != msgStart || got.ResumeStep != tc.wantStep || got.Resumed != tc.wantResumed || got.Attempt != tc.wantAttempt {
				t.Errorf("planStart = %+v, want step %d resumed %v attempt %d", got, tc.wantStep, tc.wantResumed, tc.wantAttempt)
			}
		})
	}
	// The attempt follows the highest restart count at the resume step across ranks.
	a := message{Checkpoints: []heldCheckpoint{{Step: 5, Restarts: 1}}}
	b := message{Checkpoints: []heldCheckpoint{{Step: 5, Restarts: 4}}}
	if got := planStart([]message{a, b}); got.Attempt != 6 {
		t.Errorf("attempt = %d, want 6 (restarts 4 → this is the fifth restart)", got.Attempt)
	}
}

func TestValidate(t *testing.T) {
	ok := Config{Workers: 3, Rank: 2, Coordinator: "job-0.job", Steps: 1, CheckpointEvery: 1, CheckpointDir: "/x"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(*Config){
		"--workers":     func(c *Config) { c.Workers = 0 },
		"--rank":        func(c *Config) { c.Rank = 3 },
		"--coordinator": func(c *Config) { c.Coordinator = "" },
		"--port":        func(c *Config) { c.Port = 70000 },
		"--steps":       func(c *Config) { c.Steps = 0 },
		"--checkpoint-every": func(c *Config) {
			c.CheckpointEvery = 0
		},
		"--peer-timeout": func(c *Config) { c.PeerTimeout = -time.Second },
		"--resumed-step-duration": func(c *Config) {
			d := -time.Millisecond
			c.ResumedStepDuration = &d
		},
		"--resumed-min-duration": func(c *Config) { c.ResumedMinDuration = -time.Millisecond },
	}
	for flag, mutate := range cases {
		c := ok
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: Validate = %v", flag, err)
		}
	}
	alone := Config{Workers: 1, Steps: 1, CheckpointEvery: 1, CheckpointDir: "/x"}
	if err := alone.Validate(); err != nil {
		t.Errorf("a gang of one needs no coordinator: %v", err)
	}
}
