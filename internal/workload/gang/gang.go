// Package gang is the multi-worker version of package train: W workers (the pods of a Kubernetes
// Indexed Job) that make progress only together, as data-parallel training does.
//
// Rank 0 also runs a small coordinator. Every worker, rank 0 included, dials it over TCP, and once
// all W have joined the coordinator tells them the newest step for which every one of them holds a
// valid checkpoint, so the whole gang resumes from the same state. Each step then stands in for an
// all-reduce: every worker hands in a contribution and waits for the coordinator's checksum over all
// of them, so no worker can complete a step without every other one. A lost worker therefore stops
// the gang: the survivors report peer_lost and exit instead of training on alone, which is what the
// suite's gang-scheduling and recovery scenarios look for.
package gang

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"time"
	"unicode/utf8"

	"gpuconform.io/gpuconform/internal/workload/termlog"
	"gpuconform.io/gpuconform/internal/workload/train"
)

// Defaults of the command-line flags.
const (
	DefaultPort              = 29500
	DefaultRendezvousTimeout = 5 * time.Minute
	DefaultPeerTimeout       = 20 * time.Second
	// DefaultKeep is one more checkpoint per rank than train keeps: ranks may stand an interval
	// apart when the gang breaks (one died writing its checkpoint), and the step they share must
	// survive the pruning of the ones that got further.
	DefaultKeep = train.DefaultKeep + 1
	// RankEnv is the variable an Indexed Job sets to the pod's completion index.
	RankEnv = "JOB_COMPLETION_INDEX"
)

// Config describes one worker's attempt.
type Config struct {
	// Workers is the world size W (>= 1).
	Workers int
	// Rank is this worker's index, 0 <= Rank < Workers; rank 0 runs the coordinator.
	Rank int
	// Coordinator is rank 0's host name, e.g. "job-0.job" (<job>-<index>.<headless service>);
	// required when Workers > 1.
	Coordinator string
	// Port is the coordinator's TCP port; zero means DefaultPort.
	Port int
	// Steps, StepDuration, ResumedStepDuration, CheckpointEvery and WorkID mean what they mean to train
	// (a gang resumes from the checkpoint every rank holds).
	Steps               int
	StepDuration        time.Duration
	ResumedStepDuration *time.Duration
	CheckpointEvery     int
	WorkID              string
	// ResumedMinDuration means what it means to train: the least a resumed attempt spends on its steps.
	ResumedMinDuration time.Duration
	// CheckpointDir holds one directory per rank, rank-<R>; it must outlive the pod.
	CheckpointDir string
	// RendezvousTimeout bounds the wait for all Workers to join; zero means DefaultRendezvousTimeout.
	RendezvousTimeout time.Duration
	// PeerTimeout bounds how long a step may wait for the other workers; zero means DefaultPeerTimeout.
	PeerTimeout time.Duration
	// Keep is how many checkpoints each rank retains; zero means DefaultKeep.
	Keep int
	// TerminationLogPath receives the summary; empty disables it.
	TerminationLogPath string
	// Warnings receives human-readable diagnostics (dial retries, the coordinator's decisions); nil
	// discards them.
	Warnings io.Writer

	// Test seams: sleep simulates a step (returning ctx's error when ctx ends), now is the clock,
	// listen opens rank 0's listener, retryEvery paces the dialling during the rendezvous.
	sleep      func(ctx context.Context, d time.Duration) error
	now        func() time.Time
	listen     func(addr string) (net.Listener, error)
	retryEvery time.Duration
}

// Validate reports the first invalid field in terms of the command-line flags.
func (c Config) Validate() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("--workers must be >= 1, got %d", c.Workers)
	case c.Rank < 0 || c.Rank >= c.Workers:
		return fmt.Errorf("--rank must be in [0, %d), got %d", c.Workers, c.Rank)
	case c.Workers > 1 && c.Coordinator == "":
		return errors.New("--coordinator is required when --workers > 1")
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("--port must be in [1, 65535], got %d", c.Port)
	}
	// The steps, their pace and the checkpoints mean what they mean to train, and are checked as train checks them.
	steps := train.Config{Steps: c.Steps, StepDuration: c.StepDuration, ResumedStepDuration: c.ResumedStepDuration, ResumedMinDuration: c.ResumedMinDuration,
		CheckpointDir: c.CheckpointDir, CheckpointEvery: c.CheckpointEvery, Keep: c.Keep}
	if err := steps.Validate(); err != nil {
		return err
	}
	switch {
	case c.RendezvousTimeout < 0:
		return fmt.Errorf("--rendezvous-timeout must be > 0, got %s", c.RendezvousTimeout)
	case c.PeerTimeout < 0:
		return fmt.Errorf("--peer-timeout must be > 0, got %s", c.PeerTimeout)
	}
	return nil
}

// RankDir is the checkpoint directory of rank under dir.
func RankDir(dir string, rank int) string { return filepath.Join(dir, "rank-"+strconv.Itoa(rank)) }

// Status values of Summary.Status.
const (
	StatusCompleted   = train.StatusCompleted
	StatusInterrupted = train.StatusInterrupted
	// StatusPeerLost: the gang lost a worker or its coordinator, so this worker stopped.
	StatusPeerLost = "peer_lost"
)

// maxReasonBytes keeps the summary far below the termination message's limit.
const maxReasonBytes = 300

// Summary describes one worker's attempt; it is also the termination message.
type Summary struct {
	// Status is StatusCompleted, StatusInterrupted (SIGTERM) or StatusPeerLost.
	Status  string `json:"status"`
	Rank    int    `json:"rank"`
	Workers int    `json:"workers"`
	WorkID  string `json:"work_id"`
	// CompletedSteps is the last step this worker completed with the gang.
	CompletedSteps int `json:"completed_steps"`
	// TotalSteps is --steps.
	TotalSteps int `json:"total_steps"`
	// ResumedFrom is the step the gang resumed from; 0 on a fresh start.
	ResumedFrom int `json:"resumed_from"`
	// Resumed is true when the gang resumed from a checkpoint every rank held.
	Resumed bool `json:"resumed"`
	// Attempt numbers the gang's attempts: 1 for a fresh start, then Restarts+1.
	Attempt int `json:"attempt"`
	// Restarts is how many attempts of this work resumed from a checkpoint, including this one.
	Restarts int `json:"restarts"`
	// StepsRunThisAttempt is CompletedSteps - ResumedFrom.
	StepsRunThisAttempt int `json:"steps_run_this_attempt"`
	// LastCheckpointStep is the step of the last checkpoint this attempt wrote.
	LastCheckpointStep int `json:"last_checkpoint_step"`
	// StateDigest is the simulated model after CompletedSteps; the same on every rank.
	StateDigest string `json:"state_digest"`
	// FirstStart is when the first attempt of this work began on this rank.
	FirstStart string `json:"first_start"`
	// Reason says why the gang was lost (StatusPeerLost only), shortened.
	Reason string `json:"reason,omitempty"`
}

// Run executes one worker's attempt: rendezvous, resume from the step every rank holds, train in
// lock step until Steps, checkpoint, report. Ending ctx (SIGTERM) stops within the current step and
// saves the last completed one (StatusInterrupted); losing the gang saves it too and returns
// StatusPeerLost. Both are results, not errors: an error means the attempt could not run at all
// (rejected by the coordinator, no rendezvous in time, a checkpoint that cannot be written).
func Run(ctx context.Context, cfg Config, stdout io.Writer) (Summary, error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	cfg.defaults()
	warnings := &lockedWriter{w: cfg.Warnings}
	warnf := func(format string, args ...any) {
		if cfg.Warnings != nil {
			fmt.Fprintf(warnings, "gang rank %d: %s\n", cfg.Rank, fmt.Sprintf(format, args...))
		}
	}
	ev := &eventWriter{w: stdout, now: cfg.now, rank: cfg.Rank}
	store := &train.Store{Dir: RankDir(cfg.CheckpointDir, cfg.Rank), Keep: cfg.Keep}

	held, skipped, err := store.Checkpoints(cfg.WorkID)
	if err != nil {
		return Summary{}, err
	}
	for _, s := range skipped {
		warnf("not resuming from %s: %s", s.File, s.Reason)
		ev.emit(map[string]any{"event": "checkpoint_skipped", "file": s.File, "reason": s.Reason})
	}
	hello := message{Type: msgHello, Version: protocolVersion, Rank: cfg.Rank, Workers: cfg.Workers, Steps: cfg.Steps, WorkID: cfg.WorkID}
	for _, st := range held {
		hello.Checkpoints = append(hello.Checkpoints, heldCheckpoint{Step: st.Step, Restarts: st.Restarts})
	}

	began := cfg.now()
	g, start, err := cfg.rendezvous(ctx, hello, warnf)
	if err != nil {
		if ctx.Err() != nil {
			// SIGTERM before the gang started: nothing was resumed, so nothing needs saving.
			sum := Summary{Status: StatusInterrupted, Rank: cfg.Rank, Workers: cfg.Workers, WorkID: cfg.WorkID, TotalSteps: cfg.Steps}
			ev.emit(map[string]any{"event": "sigterm", "step": 0, "during": "rendezvous"})
			return sum, finish(cfg, ev, sum)
		}
		return Summary{}, err
	}
	defer g.stop()
	ev.emit(map[string]any{"event": "rendezvous", "peers": cfg.Workers, "took_ms": cfg.now().Sub(began).Milliseconds(),
		"resume_step": start.ResumeStep, "attempt": start.Attempt})

	state := train.State{Version: train.CheckpointVersion, WorkID: cfg.WorkID, FirstStart: cfg.now().UTC(), Digest: initialDigest(cfg.WorkID, cfg.Workers)}
	resumedFile := ""
	if start.Resumed {
		st, path, err := store.LoadStep(cfg.WorkID, start.ResumeStep)
		if err != nil {
			return Summary{}, fmt.Errorf("resuming the gang at step %d: %w", start.ResumeStep, err)
		}
		state, resumedFile = *st, path
	}
	state.Restarts = start.Attempt - 1
	after := -1 // a fresh gang shares no checkpoint
	if start.Resumed {
		after = start.ResumeStep
	}
	discarded, err := store.RemoveAfter(after)
	if err != nil {
		return Summary{}, err
	}
	if len(discarded) > 0 {
		ev.emit(map[string]any{"event": "checkpoints_discarded", "files": discarded, "reason": "newer than the step every rank holds"})
	}

	sum := Summary{
		Rank: cfg.Rank, Workers: cfg.Workers, WorkID: cfg.WorkID, TotalSteps: cfg.Steps,
		ResumedFrom: state.Step, Resumed: start.Resumed, Attempt: start.Attempt, Restarts: state.Restarts,
		FirstStart: state.FirstStart.Format(time.RFC3339),
	}
	stepDuration := cfg.StepDuration
	if start.Resumed {
		stepDuration = train.ResumedPace(cfg.StepDuration, cfg.ResumedStepDuration, cfg.ResumedMinDuration, cfg.Steps-state.Step)
	}
	ev.emit(map[string]any{
		"event": "start", "workers": cfg.Workers, "work_id": cfg.WorkID, "resumed": start.Resumed,
		"resumed_from": state.Step, "resumed_file": resumedFile, "attempt": start.Attempt, "restarts": state.Restarts,
		"steps": cfg.Steps, "checkpoint_every": cfg.CheckpointEvery, "step_duration": stepDuration.String(),
		"first_start": sum.FirstStart,
	})

	save := func(reason string) error {
		state.WrittenAt = cfg.now().UTC()
		state.Reason = reason
		path, err := store.Save(state)
		if err != nil {
			return fmt.Errorf("checkpoint at step %d: %w", state.Step, err)
		}
		sum.LastCheckpointStep = state.Step
		ev.emit(map[string]any{"event": "checkpoint", "step": state.Step, "reason": reason, "file": path})
		return nil
	}

	var stopErr error // why the loop ended early: ctx's error or a *PeerLostError
	for step := state.Step + 1; step <= cfg.Steps; step++ {
		if stopErr = cfg.sleep(ctx, stepDuration); stopErr != nil {
			break
		}
		combined, err := g.ex.exchange(ctx, step, contribution(state.Digest, step, cfg.Rank))
		if err != nil {
			stopErr = err
			break
		}
		state.Step = step
		state.Digest = nextDigest(state.Digest, combined)
		if step == sum.ResumedFrom+1 {
			ev.emit(map[string]any{"event": "first_step", "step": step, "resumed": start.Resumed})
		}
		ev.emit(map[string]any{"event": "step", "step": step})
		if step%cfg.CheckpointEvery == 0 && step < cfg.Steps {
			if err := save("interval"); err != nil {
				return sum, err
			}
		}
	}

	// As train does, every attempt ends with a checkpoint of its last completed step: on SIGTERM and
	// on a lost peer it is the furthest point this rank can offer the next rendezvous (a step the
	// gang completed, since it needed every rank's contribution), and at the end it records the
	// final state, so a rerun of a finished gang resumes at the end.
	if stopErr != nil && ctx.Err() != nil {
		// SIGTERM, even when the coordinator's abort (its own SIGTERM) came in first.
		stopErr = ctx.Err()
	}
	var lost *PeerLostError
	reason := "final"
	switch {
	case errors.As(stopErr, &lost):
		reason = "peer_lost"
	case stopErr != nil:
		reason = "sigterm"
	}
	if err := save(reason); err != nil {
		return sum, err
	}

	sum.CompletedSteps = state.Step
	g.graceful = stopErr == nil
	sum.StepsRunThisAttempt = state.Step - sum.ResumedFrom
	sum.StateDigest = state.Digest
	switch {
	case lost != nil:
		sum.Status = StatusPeerLost
		sum.Reason = shorten(lost.Reason, maxReasonBytes)
		ev.emit(map[string]any{"event": "peer_lost", "step": state.Step + 1, "completed_step": state.Step,
			"reason": lost.Reason, "checkpoint_step": sum.LastCheckpointStep})
	case stopErr != nil:
		sum.Status = StatusInterrupted
		ev.emit(map[string]any{"event": "sigterm", "step": state.Step, "checkpoint_step": sum.LastCheckpointStep,
			"steps_run_this_attempt": sum.StepsRunThisAttempt, "restarts": state.Restarts})
	default:
		sum.Status = StatusCompleted
		ev.emit(map[string]any{"event": "done", "steps": state.Step, "resumed_from": sum.ResumedFrom,
			"attempt": sum.Attempt, "restarts": state.Restarts, "steps_run_this_attempt": sum.StepsRunThisAttempt,
			"state_digest": state.Digest})
	}
	return sum, finish(cfg, ev, sum)
}

func (c *Config) defaults() {
	if c.WorkID == "" {
		c.WorkID = train.DefaultWorkID
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.RendezvousTimeout == 0 {
		c.RendezvousTimeout = DefaultRendezvousTimeout
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = DefaultPeerTimeout
	}
	if c.Keep == 0 {
		c.Keep = DefaultKeep
	}
	if c.sleep == nil {
		c.sleep = train.Sleep
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.listen == nil {
		c.listen = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	if c.retryEvery == 0 {
		c.retryEvery = 500 * time.Millisecond
	}
}

// started is a worker's part in a gang that has started.
type started struct {
	ex exchanger
	// stopCoordinator, on rank 0, waits for the coordinator to finish (cancelling it first unless
	// the gang completed) and returns its error.
	stopCoordinator func(graceful bool) error
	graceful        bool
}

// stop closes this worker's connection and, on rank 0, ends the coordinator.
func (s *started) stop() {
	s.ex.close()
	if s.stopCoordinator != nil {
		_ = s.stopCoordinator(s.graceful)
	}
}

// rendezvous joins the gang and returns it with the coordinator's start message.
func (c *Config) rendezvous(ctx context.Context, hello message, warnf func(string, ...any)) (*started, message, error) {
	if c.Workers == 1 {
		return &started{ex: alone{}}, planStart([]message{hello}), nil
	}
	p := joinParams{
		addr:     net.JoinHostPort(c.Coordinator, strconv.Itoa(c.Port)),
		deadline: c.now().Add(c.RendezvousTimeout), retryEvery: c.retryEvery, timeout: c.RendezvousTimeout, warnf: warnf,
	}
	joinCtx := ctx
	var stopCoordinator func(bool) error
	if c.Rank == 0 {
		ln, err := c.listen(":" + strconv.Itoa(c.Port))
		if err != nil {
			return nil, message{}, fmt.Errorf("coordinator: %w", err)
		}
		// Rank 0 joins through its own listener like every other rank, over the loopback.
		p.addr = loopback(ln.Addr(), c.Port)
		coordCtx, cancelCoord := context.WithCancel(ctx)
		var cancelJoin context.CancelFunc
		joinCtx, cancelJoin = context.WithCancel(ctx)
		var coordErr error
		coordDone := make(chan struct{})
		go func() {
			coordErr = newCoordinator(ln, *c, warnf).run(coordCtx)
			cancelJoin() // a coordinator that gave up will not start the gang
			close(coordDone)
		}()
		stopCoordinator = func(graceful bool) error {
			if !graceful {
				cancelCoord()
			}
			<-coordDone
			cancelCoord()
			return coordErr
		}
		// The own join failing for any reason but SIGTERM is reported with the coordinator's error,
		// which says more (who never joined).
		k, start, err := join(joinCtx, p, hello)
		if err != nil {
			cerr := stopCoordinator(false)
			if ctx.Err() == nil && cerr != nil {
				err = cerr
			}
			return nil, message{}, err
		}
		g := &started{ex: &member{k: k, peerTimeout: c.PeerTimeout}, stopCoordinator: stopCoordinator}
		return g, start, nil
	}
	k, start, err := join(joinCtx, p, hello)
	if err != nil {
		return nil, message{}, err
	}
	return &started{ex: &member{k: k, peerTimeout: c.PeerTimeout}}, start, nil
}

// loopback is the address rank 0 dials to reach its own listener.
func loopback(addr net.Addr, port int) string {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		if !tcp.IP.IsUnspecified() && tcp.IP != nil {
			return tcp.String()
		}
		return net.JoinHostPort("localhost", strconv.Itoa(tcp.Port))
	}
	return net.JoinHostPort("localhost", strconv.Itoa(port))
}

// finish checks the event stream and writes the summary to the termination message.
func finish(cfg Config, ev *eventWriter, sum Summary) error {
	if ev.err != nil {
		return fmt.Errorf("writing progress: %w", ev.err)
	}
	msg, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	short := sum
	short.Reason = ""
	fallback, err := json.Marshal(short)
	if err != nil {
		return err
	}
	if _, err := termlog.Write(cfg.TerminationLogPath, msg, fallback); err != nil {
		return fmt.Errorf("writing termination message: %w", err)
	}
	return nil
}

// shorten cuts s to at most n bytes without splitting a character.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
