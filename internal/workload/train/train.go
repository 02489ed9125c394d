// Package train is a restartable training loop for preemption and checkpoint-recovery scenarios.
//
// Where the container has a CUDA driver each step runs GPU work (Config.GPU: an FMA load and a copy, timed
// with CUDA events) and the checkpoint lines carry its GFLOP/s and GB/s; elsewhere each step only waits.
// The "model" is a hash chained over completed steps.
// What it does for real is what a well-behaved training job must do when the scheduler preempts it:
// checkpoint atomically, stop promptly on SIGTERM after saving the last completed step, and resume
// from the newest checkpoint it can trust. The suite reads its JSON-line events from the pod log and
// its summary from the termination message.
package train

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"gpuconform.io/gpuconform/internal/workload/termlog"
)

// DefaultWorkID is used when --work-id is not given. Every attempt of a job must use the same ID,
// so a pod-specific default (like the pod name, which changes on rescheduling) would break resume.
const DefaultWorkID = "default"

// Config describes one training attempt.
type Config struct {
	// Steps is the total number of steps the work needs (> 0).
	Steps int
	// StepDuration is the simulated work per step (>= 0).
	StepDuration time.Duration
	// ResumedStepDuration, when set (>= 0), is the simulated work per step of an attempt that resumed from
	// a checkpoint, instead of StepDuration: a test needs its work to outlast the fault it injects, not to
	// run as long again once it has resumed (only that it completes with an uninterrupted run's state).
	ResumedStepDuration *time.Duration
	// ResumedMinDuration, when > 0, is the least time an attempt that resumed from a checkpoint spends on
	// its remaining steps: they are slowed evenly to fill it when their pace would finish sooner. The
	// attempt's devices are then still held when a test reads them from the kubelet, which lists active
	// pods only, however late the fault landed in the work before it (a fault at step 25 of 30 left the
	// replacement 5 s).
	ResumedMinDuration time.Duration
	// CheckpointDir holds this work's checkpoints; it must outlive the pod (a PVC or hostPath).
	CheckpointDir string
	// CheckpointEvery is the checkpoint interval in steps (> 0).
	CheckpointEvery int
	// WorkID guards against resuming another work's checkpoints; empty means DefaultWorkID.
	WorkID string
	// Keep is how many checkpoints to retain; zero means DefaultKeep.
	Keep int
	// CheckpointWriteTime simulates a large model's checkpoint: each write takes this long before it is
	// committed (a SIGKILL during it loses that checkpoint, as it would a real one).
	CheckpointWriteTime time.Duration
	// TerminationLogPath receives the summary; empty disables it.
	TerminationLogPath string
	// Warnings receives human-readable warnings (skipped checkpoints); nil discards them.
	Warnings io.Writer

	// GPU does one step's GPU work in about d and returns what it measured (gflops, gbps), which the next
	// checkpoint line carries; it returns ctx's error when ctx ends. nil: a step only waits d, and
	// GPUInfo says why (the stand-in without a CUDA driver).
	GPU func(ctx context.Context, d time.Duration) (map[string]any, error)
	// GPUInfo are the fields of the "gpu" line printed after "start": the device, or the stand-in.
	GPUInfo map[string]any

	// sleep simulates one step and returns early with ctx's error when ctx ends; tests replace it to
	// interrupt at an exact step without timing races.
	sleep func(ctx context.Context, d time.Duration) error
	// now is the clock; tests may pin it.
	now func() time.Time
}

// Validate reports the first invalid field in terms of the command-line flags.
func (c Config) Validate() error {
	switch {
	case c.Steps <= 0:
		return fmt.Errorf("--steps must be > 0, got %d", c.Steps)
	case c.StepDuration < 0:
		return fmt.Errorf("--step-duration must be >= 0, got %s", c.StepDuration)
	case c.ResumedStepDuration != nil && *c.ResumedStepDuration < 0:
		return fmt.Errorf("--resumed-step-duration must be >= 0, got %s", *c.ResumedStepDuration)
	case c.ResumedMinDuration < 0:
		return fmt.Errorf("--resumed-min-duration must be >= 0, got %s", c.ResumedMinDuration)
	case c.CheckpointDir == "":
		return errors.New("--checkpoint-dir is required")
	case c.CheckpointEvery <= 0:
		return fmt.Errorf("--checkpoint-every must be > 0, got %d", c.CheckpointEvery)
	case c.Keep < 0:
		return fmt.Errorf("keep must be >= 0, got %d", c.Keep)
	}
	return nil
}

// Status values of Summary.Status.
const (
	StatusCompleted   = "completed"
	StatusInterrupted = "interrupted"
)

// Summary describes one attempt; it is also the termination message.
type Summary struct {
	// Status is StatusCompleted or StatusInterrupted (SIGTERM before the last step).
	Status string `json:"status"`
	// WorkID is the work this attempt belongs to.
	WorkID string `json:"work_id"`
	// CompletedSteps is the last completed step at the end of this attempt.
	CompletedSteps int `json:"completed_steps"`
	// TotalSteps is --steps.
	TotalSteps int `json:"total_steps"`
	// ResumedFrom is the step of the checkpoint this attempt started from; 0 on a fresh start.
	ResumedFrom int `json:"resumed_from"`
	// Resumed is true when a checkpoint was found, which ResumedFrom 0 alone cannot tell.
	Resumed bool `json:"resumed"`
	// ResumedReason is why the checkpoint this attempt started from was written (State.Reason).
	ResumedReason string `json:"resumed_reason,omitempty"`
	// Restarts is how many attempts of this work resumed from a checkpoint, including this one.
	Restarts int `json:"restarts"`
	// StepsRunThisAttempt is CompletedSteps - ResumedFrom.
	StepsRunThisAttempt int `json:"steps_run_this_attempt"`
	// FirstStart is when the first attempt of this work began, carried in every checkpoint.
	FirstStart string `json:"first_start"`
	// LastCheckpointStep is the step of the last checkpoint written by this attempt.
	LastCheckpointStep int `json:"last_checkpoint_step"`
	// StateDigest is the simulated model state after CompletedSteps.
	StateDigest string `json:"state_digest"`
}

// ResumedPace is the step duration of an attempt that resumed from a checkpoint with left steps to run:
// resumedStep (step when nil), slowed evenly so the steps fill minimum where they would end sooner. A gang's
// ranks pace their resumed attempts the same way.
func ResumedPace(step time.Duration, resumedStep *time.Duration, minimum time.Duration, left int) time.Duration {
	if resumedStep != nil {
		step = *resumedStep
	}
	if minimum > 0 && left > 0 {
		step = max(step, minimum/time.Duration(left))
	}
	return step
}

// Run executes one attempt: resume, train until Steps or until ctx ends, checkpoint, report. Ending
// ctx (SIGTERM in the binary) is not an error: the attempt stops within the current step, saves the
// last completed step and returns a Summary with StatusInterrupted.
func Run(ctx context.Context, cfg Config, stdout io.Writer) (Summary, error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	if cfg.WorkID == "" {
		cfg.WorkID = DefaultWorkID
	}
	if cfg.sleep == nil {
		cfg.sleep = Sleep
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	ev := &eventWriter{w: stdout, now: cfg.now}
	store := &Store{Dir: cfg.CheckpointDir, Keep: cfg.Keep}

	resumed, resumedPath, skipped, err := store.Load(cfg.WorkID)
	if err != nil {
		return Summary{}, err
	}
	for _, s := range skipped {
		if cfg.Warnings != nil {
			fmt.Fprintf(cfg.Warnings, "warning: not resuming from %s: %s\n", s.File, s.Reason)
		}
		ev.emit(map[string]any{"event": "checkpoint_skipped", "file": s.File, "reason": s.Reason})
	}

	state := State{Version: checkpointVersion, WorkID: cfg.WorkID, FirstStart: cfg.now().UTC(), Digest: initialDigest(cfg.WorkID)}
	if resumed != nil {
		state = *resumed
		state.Restarts++
	}
	sum := Summary{
		WorkID:      cfg.WorkID,
		TotalSteps:  cfg.Steps,
		ResumedFrom: state.Step,
		Resumed:     resumed != nil,
		ResumedReason: func() string {
			if resumed != nil {
				return resumed.Reason
			}
			return ""
		}(),
		Restarts:   state.Restarts,
		FirstStart: state.FirstStart.Format(time.RFC3339),
	}
	stepDuration := cfg.StepDuration
	if resumed != nil {
		stepDuration = ResumedPace(cfg.StepDuration, cfg.ResumedStepDuration, cfg.ResumedMinDuration, cfg.Steps-state.Step)
	}
	ev.emit(map[string]any{
		"event": "start", "work_id": cfg.WorkID, "resumed": resumed != nil, "resumed_from": state.Step,
		"resumed_file": resumedPath, "restarts": state.Restarts, "steps": cfg.Steps,
		"checkpoint_every": cfg.CheckpointEvery, "step_duration": stepDuration.String(),
		"first_start": sum.FirstStart,
	})

	if cfg.GPUInfo != nil {
		ev.emit(mergeFields(map[string]any{"event": "gpu"}, cfg.GPUInfo))
	}
	var measured map[string]any

	save := func(reason string) error {
		if cfg.CheckpointWriteTime > 0 {
			// Not cancellable: a real write does not stop for SIGTERM either.
			_ = cfg.sleep(context.Background(), cfg.CheckpointWriteTime)
		}
		state.WrittenAt = cfg.now().UTC()
		state.Reason = reason
		path, err := store.Save(state)
		if err != nil {
			return fmt.Errorf("checkpoint at step %d: %w", state.Step, err)
		}
		sum.LastCheckpointStep = state.Step
		ev.emit(mergeFields(map[string]any{"event": "checkpoint", "step": state.Step, "reason": reason, "file": path}, measured))
		return nil
	}

	interrupted := false
	for step := state.Step + 1; step <= cfg.Steps; step++ {
		if cfg.GPU != nil {
			m, err := cfg.GPU(ctx, stepDuration)
			if ctx.Err() != nil {
				interrupted = true
				break
			}
			if err != nil {
				return sum, fmt.Errorf("GPU work of step %d: %w", step, err)
			}
			measured = m
		} else if err := cfg.sleep(ctx, stepDuration); err != nil {
			interrupted = true
			break
		}
		state.Step = step
		state.Digest = nextDigest(state.Digest, step)
		if step == sum.ResumedFrom+1 {
			// The attempt's first useful step: timelines measure start-up and idle reservation up to it.
			ev.emit(map[string]any{"event": "first_step", "step": step, "resumed": resumed != nil})
		}
		if step%cfg.CheckpointEvery == 0 && step < cfg.Steps {
			if err := save("interval"); err != nil {
				return sum, err
			}
		}
	}

	// Always end an attempt with a checkpoint: on SIGTERM it preserves the last completed step, and
	// on completion it records the final state and the restart counter, so a Job that reruns a
	// finished pod resumes at the end instead of training again.
	reason := "final"
	if interrupted {
		reason = "sigterm"
	}
	if err := save(reason); err != nil {
		return sum, err
	}

	sum.CompletedSteps = state.Step
	sum.StepsRunThisAttempt = state.Step - sum.ResumedFrom
	sum.StateDigest = state.Digest
	if interrupted {
		sum.Status = StatusInterrupted
		ev.emit(map[string]any{"event": "sigterm", "step": state.Step, "checkpoint_step": sum.LastCheckpointStep,
			"steps_run_this_attempt": sum.StepsRunThisAttempt, "restarts": state.Restarts})
	} else {
		sum.Status = StatusCompleted
		ev.emit(map[string]any{"event": "done", "steps": state.Step, "resumed_from": sum.ResumedFrom,
			"restarts": state.Restarts, "steps_run_this_attempt": sum.StepsRunThisAttempt, "state_digest": state.Digest})
	}
	if ev.err != nil {
		return sum, fmt.Errorf("writing progress: %w", ev.err)
	}

	msg, err := json.Marshal(sum)
	if err != nil {
		return sum, err
	}
	if _, err := termlog.Write(cfg.TerminationLogPath, msg); err != nil {
		return sum, fmt.Errorf("writing termination message: %w", err)
	}
	return sum, nil
}

// mergeFields adds extra's fields to fields (fields win) and returns fields.
func mergeFields(fields, extra map[string]any) map[string]any {
	for k, v := range extra {
		if _, ok := fields[k]; !ok {
			fields[k] = v
		}
	}
	return fields
}

// Sleep waits d or until ctx ends, whichever is first: a step of simulated work, here and in the gang. A
// done ctx wins even when d is zero, so a loop with no simulated work still stops on SIGTERM.
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func initialDigest(workID string) string {
	sum := sha256.Sum256([]byte("gpu-workload/train/" + workID))
	return hex.EncodeToString(sum[:])
}

// nextDigest advances the simulated model by one step.
func nextDigest(prev string, step int) string {
	sum := sha256.Sum256([]byte(prev + "/" + strconv.Itoa(step)))
	return hex.EncodeToString(sum[:])
}

// eventWriter prints progress events as JSON lines. It keeps the first write error instead of
// failing the step: losing a log line must not cost a checkpoint, but Run reports it at the end.
type eventWriter struct {
	w   io.Writer
	now func() time.Time
	err error
}

func (e *eventWriter) emit(fields map[string]any) {
	fields["time"] = e.now().UTC().Format(time.RFC3339Nano)
	line, err := json.Marshal(fields)
	if err == nil {
		_, err = fmt.Fprintf(e.w, "%s\n", line)
	}
	if err != nil && e.err == nil {
		e.err = err
	}
}

// Digest is the state digest an uninterrupted run of work workID ends with after the given number of
// steps: a run that was interrupted and resumed must end with the same one.
func Digest(workID string, steps int) string {
	d := initialDigest(workID)
	for s := 1; s <= steps; s++ {
		d = nextDigest(d, s)
	}
	return d
}
