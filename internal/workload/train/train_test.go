package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// events decodes the JSON lines Run printed, failing the test on any line that is not JSON.
func events(t *testing.T, out *bytes.Buffer) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("progress line %q is not JSON: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// find returns the events named name.
func find(evs []map[string]any, name string) []map[string]any {
	var out []map[string]any
	for _, ev := range evs {
		if ev["event"] == name {
			out = append(out, ev)
		}
	}
	return out
}

// checkpointFiles lists the finished checkpoint names in dir, sorted.
func checkpointFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if checkpointName.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

// instant is a step that takes no time but still honours cancellation.
func instant(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// interruptAt returns a sleep that cancels the attempt while step n is in progress, which is what a
// SIGTERM arriving mid-step does, without any timing dependence.
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

func baseConfig(dir string) Config {
	return Config{Steps: 20, StepDuration: time.Millisecond, CheckpointDir: dir, CheckpointEvery: 5, WorkID: "w1", sleep: instant}
}

func saveSteps(t *testing.T, s *Store, workID string, steps ...int) {
	t.Helper()
	for _, step := range steps {
		if _, err := s.Save(State{Version: checkpointVersion, WorkID: workID, Step: step, Digest: "d"}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSaveIsAtomic(t *testing.T) {
	dir := t.TempDir()
	s := &Store{Dir: dir}
	renameSeen := false
	s.beforeRename = func(tmpPath, finalPath string) {
		renameSeen = true
		if _, err := os.Stat(finalPath); !os.IsNotExist(err) {
			t.Errorf("%s is visible before the data is complete", finalPath)
		}
		if checkpointName.MatchString(filepath.Base(tmpPath)) {
			t.Errorf("temporary name %s looks like a finished checkpoint", tmpPath)
		}
		// Everything is already on disk under the temporary name.
		st, reason, _ := readCheckpoint(checkpointEntry{step: 7, path: tmpPath}, "w1")
		if reason != "" || st.Step != 7 {
			t.Errorf("temporary file is not a complete checkpoint: %s", reason)
		}
	}
	path, err := s.Save(State{Version: checkpointVersion, WorkID: "w1", Step: 7})
	if err != nil {
		t.Fatal(err)
	}
	if !renameSeen {
		t.Fatal("Save did not go through a rename")
	}
	if filepath.Base(path) != "ckpt-000000000007.json" {
		t.Errorf("path = %s", path)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}
}

// failingFile accepts only part of a write, as a full disk would.
type failingFile struct{ *os.File }

func (f failingFile) Write(p []byte) (int, error) {
	n, _ := f.File.Write(p[:len(p)/2])
	return n, errors.New("no space left on device")
}

func TestFailedSaveLeavesNoPartialCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := &Store{Dir: dir}
	saveSteps(t, s, "w1", 5)
	s.createTemp = func(dir, pattern string) (syncFile, error) {
		f, err := os.CreateTemp(dir, pattern)
		return failingFile{f}, err
	}
	if _, err := s.Save(State{Version: checkpointVersion, WorkID: "w1", Step: 10}); err == nil {
		t.Fatal("Save succeeded although the write failed")
	}
	if got, want := checkpointFiles(t, dir), []string{FileName(5)}; !reflect.DeepEqual(got, want) {
		t.Errorf("checkpoints = %v, want only %v", got, want)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(leftovers) != 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}
	st, _, _, err := (&Store{Dir: dir}).Load("w1")
	if err != nil || st == nil || st.Step != 5 {
		t.Fatalf("Load after failed save = %+v, %v; want step 5", st, err)
	}
}

func TestLoadNewestValid(t *testing.T) {
	dir := t.TempDir()
	s := &Store{Dir: dir}
	saveSteps(t, s, "w1", 5, 10, 9)
	st, path, skipped, err := s.Load("w1")
	if err != nil || st == nil {
		t.Fatalf("Load = %v, %v", st, err)
	}
	if st.Step != 10 || filepath.Base(path) != FileName(10) || len(skipped) != 0 {
		t.Errorf("Load = step %d from %s, skipped %v; want step 10, nothing skipped", st.Step, path, skipped)
	}
	if st, _, _, _ := (&Store{Dir: filepath.Join(dir, "missing")}).Load("w1"); st != nil {
		t.Errorf("Load from a missing dir = %+v, want nil", st)
	}
}

// damage rewrites the checkpoint for step in dir.
func damage(t *testing.T, dir string, step int, f func([]byte) []byte) string {
	t.Helper()
	path := filepath.Join(dir, FileName(step))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadSkipsDamagedCheckpoints(t *testing.T) {
	cases := []struct {
		name       string
		damage     func(t *testing.T, dir string) string
		wantReason string
		quarantine bool
	}{
		{"checksum mismatch", func(t *testing.T, dir string) string {
			return damage(t, dir, 15, func(b []byte) []byte { return bytes.Replace(b, []byte(`"step":15`), []byte(`"step":16`), 1) })
		}, "checksum mismatch", true},
		{"truncated", func(t *testing.T, dir string) string {
			return damage(t, dir, 15, func(b []byte) []byte { return b[:len(b)/2] })
		}, "unparseable", true},
		{"empty", func(t *testing.T, dir string) string {
			return damage(t, dir, 15, func([]byte) []byte { return nil })
		}, "unparseable", true},
		{"garbage", func(t *testing.T, dir string) string {
			return damage(t, dir, 15, func([]byte) []byte { return []byte("\x00\x01not json") })
		}, "unparseable", true},
		{"wrong step for its name", func(t *testing.T, dir string) string {
			data, _ := os.ReadFile(filepath.Join(dir, FileName(10)))
			path := filepath.Join(dir, FileName(15))
			_ = os.WriteFile(path, data, 0o644)
			return path
		}, "file name says step 15", true},
		{"other work", func(t *testing.T, dir string) string {
			saveSteps(t, &Store{Dir: dir}, "someone-else", 15)
			return filepath.Join(dir, FileName(15))
		}, "belongs to work", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := &Store{Dir: dir}
			saveSteps(t, s, "w1", 5, 10, 15)
			bad := tc.damage(t, dir)

			st, path, skipped, err := s.Load("w1")
			if err != nil || st == nil {
				t.Fatalf("Load = %v, %v; want the previous checkpoint", st, err)
			}
			if st.Step != 10 || filepath.Base(path) != FileName(10) {
				t.Errorf("resumed from step %d (%s), want 10", st.Step, path)
			}
			if len(skipped) != 1 || skipped[0].File != bad || !strings.Contains(skipped[0].Reason, tc.wantReason) {
				t.Fatalf("skipped = %+v, want %s with reason containing %q", skipped, bad, tc.wantReason)
			}
			_, errBad := os.Stat(bad)
			_, errQuarantined := os.Stat(bad + quarantineSuffix)
			if tc.quarantine && (errBad == nil || errQuarantined != nil) {
				t.Errorf("damaged file not moved aside to %s", bad+quarantineSuffix)
			}
			if !tc.quarantine && (errBad != nil || errQuarantined == nil) {
				t.Errorf("another work's checkpoint must be left in place")
			}
		})
	}
}

func TestLoadRemovesStaleTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".ckpt-123.tmp")
	if err := os.WriteFile(stale, []byte(`{"payload":`), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, _, _, err := (&Store{Dir: dir}).Load("w1"); st != nil || err != nil {
		t.Fatalf("Load = %v, %v; want nothing", st, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temporary file %s survived", stale)
	}
}

func TestKeepsNewestThree(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(dir)
	cfg.CheckpointEvery = 2
	var out bytes.Buffer
	if _, err := Run(t.Context(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	want := []string{FileName(16), FileName(18), FileName(20)}
	if got := checkpointFiles(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("checkpoints = %v, want %v", got, want)
	}
	var steps []float64
	for _, ev := range find(events(t, &out), "checkpoint") {
		steps = append(steps, ev["step"].(float64))
	}
	if want := []float64{2, 4, 6, 8, 10, 12, 14, 16, 18, 20}; !reflect.DeepEqual(steps, want) {
		t.Errorf("checkpoint events at %v, want %v", steps, want)
	}
}

func TestFreshRunCompletes(t *testing.T) {
	dir := t.TempDir()
	termLog := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(termLog, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(dir)
	cfg.TerminationLogPath = termLog
	var out bytes.Buffer
	sum, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, &out)
	if evs[0]["event"] != "start" || evs[0]["resumed_from"] != float64(0) || evs[0]["restarts"] != float64(0) || evs[0]["resumed"] != false {
		t.Errorf("first event = %v, want a fresh start", evs[0])
	}
	done := find(evs, "done")
	if len(done) != 1 || done[0]["steps"] != float64(20) || evs[len(evs)-1]["event"] != "done" {
		t.Fatalf("done events = %v, want one final done with steps 20", done)
	}
	if sum.Status != StatusCompleted || sum.CompletedSteps != 20 || sum.StepsRunThisAttempt != 20 || sum.Restarts != 0 {
		t.Errorf("summary = %+v", sum)
	}

	var fromLog map[string]any
	data, _ := os.ReadFile(termLog)
	if err := json.Unmarshal(data, &fromLog); err != nil {
		t.Fatalf("termination message %q: %v", data, err)
	}
	for key, want := range map[string]any{"completed_steps": float64(20), "resumed_from": float64(0), "restarts": float64(0), "steps_run_this_attempt": float64(20), "status": "completed"} {
		if fromLog[key] != want {
			t.Errorf("termination message %s = %v, want %v", key, fromLog[key], want)
		}
	}
	if _, err := time.Parse(time.RFC3339, fromLog["first_start"].(string)); err != nil {
		t.Errorf("first_start %v is not RFC3339: %v", fromLog["first_start"], err)
	}
}

func TestInterruptMidStepCheckpointsAndResumes(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg := baseConfig(dir)
	cfg.sleep = interruptAt(7, cancel) // step 7 is in progress when the signal lands

	var out bytes.Buffer
	sum, err := Run(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("interrupted run returned %v; SIGTERM is not a failure", err)
	}
	if sum.Status != StatusInterrupted || sum.CompletedSteps != 6 || sum.LastCheckpointStep != 6 {
		t.Errorf("summary = %+v, want interrupted after step 6 with a checkpoint at 6", sum)
	}
	evs := events(t, &out)
	sig := find(evs, "sigterm")
	if len(sig) != 1 || sig[0]["step"] != float64(6) || evs[len(evs)-1]["event"] != "sigterm" {
		t.Fatalf("sigterm events = %v, want one, last, at step 6", sig)
	}
	if len(find(evs, "done")) != 0 {
		t.Errorf("an interrupted run printed done")
	}
	if got := checkpointFiles(t, dir); !reflect.DeepEqual(got, []string{FileName(5), FileName(6)}) {
		t.Errorf("checkpoints = %v, want interval 5 and final 6", got)
	}

	out.Reset()
	cfg.sleep = instant
	resumed, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	start := find(events(t, &out), "start")[0]
	if start["resumed_from"] != float64(6) || start["restarts"] != float64(1) || start["resumed"] != true {
		t.Errorf("start = %v, want resumed_from 6 restarts 1", start)
	}
	// One progress line per attempt marks its first useful step: the step after the checkpoint.
	if first := find(events(t, &out), "first_step"); len(first) != 1 || first[0]["step"] != float64(7) || first[0]["resumed"] != true {
		t.Errorf("first_step events = %v, want one at step 7, resumed", first)
	}
	if resumed.ResumedReason != "sigterm" {
		t.Errorf("resumed from a checkpoint written for %q, want sigterm", resumed.ResumedReason)
	}
	if resumed.CompletedSteps != 20 || resumed.StepsRunThisAttempt != 14 || resumed.FirstStart != sum.FirstStart {
		t.Errorf("resumed summary = %+v, want 14 steps run and first_start %s kept", resumed, sum.FirstStart)
	}

	// The simulated model must end where an uninterrupted run ends: no step lost or applied twice.
	straight, err := Run(t.Context(), baseConfig(t.TempDir()), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if resumed.StateDigest != straight.StateDigest || Digest("w1", 20) != straight.StateDigest {
		t.Errorf("digest after resume %s, uninterrupted %s, Digest() %s: all three must agree", resumed.StateDigest, straight.StateDigest, Digest("w1", 20))
	}
}

// A resumed attempt steps at --resumed-step-duration when it is given, a fresh one at --step-duration
// always, and the work ends in the state of an uninterrupted run either way.
func TestAResumedAttemptStepsAtItsOwnPace(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(dir)
	fast := 100 * time.Microsecond
	cfg.ResumedStepDuration = &fast
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var paces []time.Duration
	stopAt := interruptAt(7, cancel)
	cfg.sleep = func(ctx context.Context, d time.Duration) error { paces = append(paces, d); return stopAt(ctx, d) }
	var out bytes.Buffer
	if _, err := Run(ctx, cfg, &out); err != nil {
		t.Fatal(err)
	}
	for _, d := range paces {
		if d != time.Millisecond {
			t.Fatalf("a fresh attempt stepped at %v, want --step-duration's 1ms: %v", d, paces)
		}
	}
	if start := find(events(t, &out), "start")[0]; start["step_duration"] != "1ms" {
		t.Errorf("fresh start = %v, want step_duration 1ms", start)
	}
	paces, out = nil, bytes.Buffer{}
	cfg.sleep = func(_ context.Context, d time.Duration) error { paces = append(paces, d); return nil }
	sum, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(paces) != 14 || slices.ContainsFunc(paces, func(d time.Duration) bool { return d != fast }) {
		t.Errorf("the resumed attempt slept %v, want 14 steps of %v", paces, fast)
	}
	if start := find(events(t, &out), "start")[0]; start["step_duration"] != fast.String() || start["resumed"] != true {
		t.Errorf("resumed start = %v, want step_duration %v", start, fast)
	}
	if sum.Status != StatusCompleted || sum.StateDigest != Digest("w1", 20) {
		t.Errorf("resumed summary = %+v, want completed with the uninterrupted digest %s", sum, Digest("w1", 20))
	}
}

// A slow checkpoint write takes its time before the checkpoint exists: the write time is spent for each
// checkpoint, the SIGTERM one included.
func TestCheckpointWriteTimeIsSpentPerCheckpoint(t *testing.T) {
	cfg := baseConfig(t.TempDir())
	cfg.CheckpointWriteTime = 3 * time.Second
	var slept time.Duration
	cfg.sleep = func(ctx context.Context, d time.Duration) error { slept += d; return nil }
	sum, err := Run(t.Context(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	// 20 steps of 1ms, checkpoints at 5, 10, 15 and the final one.
	if want := 20*time.Millisecond + 4*3*time.Second; slept != want || sum.Status != StatusCompleted {
		t.Errorf("slept %s, want %s (4 checkpoints of 3s)", slept, want)
	}
}

func TestInterruptBeforeFirstStepStillCountsRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	cfg := baseConfig(dir)
	sum, err := Run(ctx, cfg, &bytes.Buffer{})
	if err != nil || sum.CompletedSteps != 0 || sum.Status != StatusInterrupted {
		t.Fatalf("Run = %+v, %v", sum, err)
	}
	next, err := Run(t.Context(), cfg, &bytes.Buffer{})
	if err != nil || !next.Resumed || next.ResumedFrom != 0 || next.Restarts != 1 {
		t.Errorf("second attempt = %+v, %v; want resumed from 0 with restarts 1", next, err)
	}
}

func TestRestartCounterIncrementsOnEveryResume(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(dir)
	var firstStart string
	for attempt, stopAt := range []int{4, 3, 6} {
		ctx, cancel := context.WithCancel(t.Context())
		cfg.sleep = interruptAt(stopAt, cancel)
		sum, err := Run(ctx, cfg, &bytes.Buffer{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if sum.Restarts != attempt {
			t.Errorf("attempt %d: restarts = %d", attempt, sum.Restarts)
		}
		if attempt == 0 {
			firstStart = sum.FirstStart
		} else if sum.FirstStart != firstStart {
			t.Errorf("attempt %d: first_start %s changed from %s", attempt, sum.FirstStart, firstStart)
		}
	}
	// 3 + 2 + 5 completed steps across the three attempts.
	cfg.sleep = instant
	sum, err := Run(t.Context(), cfg, &bytes.Buffer{})
	if err != nil || sum.ResumedFrom != 10 || sum.Restarts != 3 {
		t.Errorf("final attempt = %+v, %v; want resumed from 10 with restarts 3", sum, err)
	}
}

func TestRerunAfterCompletionDoesNoWork(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(dir)
	if _, err := Run(t.Context(), cfg, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	sum, err := Run(t.Context(), cfg, &bytes.Buffer{})
	if err != nil || sum.Status != StatusCompleted || sum.StepsRunThisAttempt != 0 || sum.CompletedSteps != 20 || sum.Restarts != 1 {
		t.Errorf("rerun = %+v, %v", sum, err)
	}
}

func TestRunFallsBackPastCorruptNewest(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	cfg := baseConfig(dir)
	cfg.CheckpointEvery = 3
	cfg.sleep = interruptAt(11, cancel) // checkpoints at 3, 6, 9 and final 10
	if _, err := Run(ctx, cfg, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	damage(t, dir, 10, func(b []byte) []byte { return b[:len(b)-20] })

	var out, warnings bytes.Buffer
	cfg.sleep = instant
	cfg.Warnings = &warnings
	sum, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ResumedFrom != 9 {
		t.Errorf("resumed from %d, want 9 (the newest valid checkpoint)", sum.ResumedFrom)
	}
	if !strings.Contains(warnings.String(), FileName(10)) {
		t.Errorf("warnings = %q, want one naming %s", warnings.String(), FileName(10))
	}
	if skipped := find(events(t, &out), "checkpoint_skipped"); len(skipped) != 1 {
		t.Errorf("checkpoint_skipped events = %v, want 1", skipped)
	}
}

func TestValidate(t *testing.T) {
	ok := baseConfig("/tmp/x")
	cases := map[string]func(*Config){
		"--steps must be > 0":            func(c *Config) { c.Steps = 0 },
		"--step-duration must be >= 0":   func(c *Config) { c.StepDuration = -time.Second },
		"--checkpoint-dir is required":   func(c *Config) { c.CheckpointDir = "" },
		"--checkpoint-every must be > 0": func(c *Config) { c.CheckpointEvery = -1 },
		"--resumed-step-duration must be >= 0": func(c *Config) {
			d := -time.Second
			c.ResumedStepDuration = &d
		},
		"--resumed-min-duration must be >= 0": func(c *Config) { c.ResumedMinDuration = -time.Second },
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	for want, mutate := range cases {
		c := ok
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
		if _, err := Run(t.Context(), c, &bytes.Buffer{}); err == nil {
			t.Errorf("Run accepted an invalid config (%s)", want)
		}
	}
}

// An attempt that resumes late in the work still runs --resumed-min-duration: its remaining steps are slowed
// evenly to fill it. One that resumes early, whose steps already take longer, keeps its pace, and a fresh
// attempt is never slowed.
func TestAResumedAttemptRunsAtLeastItsMinimum(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(dir)
	fast := time.Millisecond
	cfg.ResumedStepDuration = &fast
	cfg.ResumedMinDuration = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var paces []time.Duration
	stopAt := interruptAt(16, cancel)
	cfg.sleep = func(ctx context.Context, d time.Duration) error { paces = append(paces, d); return stopAt(ctx, d) }
	if _, err := Run(ctx, cfg, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(paces, func(d time.Duration) bool { return d != time.Millisecond }) {
		t.Fatalf("a fresh attempt stepped at %v, want --step-duration's 1ms throughout", paces)
	}
	paces = nil
	var out bytes.Buffer
	cfg.sleep = func(_ context.Context, d time.Duration) error { paces = append(paces, d); return nil }
	sum, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	left := 20 - sum.ResumedFrom
	want := cfg.ResumedMinDuration / time.Duration(left)
	if len(paces) != left || slices.ContainsFunc(paces, func(d time.Duration) bool { return d != want }) {
		t.Errorf("resumed from step %d: slept %v, want %d steps of %v (100ms over the steps left)", sum.ResumedFrom, paces, left, want)
	}
	if start := find(events(t, &out), "start")[0]; start["step_duration"] != want.String() {
		t.Errorf("resumed start = %v, want step_duration %v", start, want)
	}
	if sum.Status != StatusCompleted || sum.StateDigest != Digest("w1", 20) {
		t.Errorf("summary = %+v, want completed with the uninterrupted digest", sum)
	}

	// Resumed with many steps left, the attempt's own pace already fills the minimum.
	dir = t.TempDir()
	cfg = baseConfig(dir)
	cfg.ResumedMinDuration = 5 * time.Millisecond
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	stopAt = interruptAt(2, cancel)
	cfg.sleep = func(ctx context.Context, d time.Duration) error { return stopAt(ctx, d) }
	if _, err := Run(ctx, cfg, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	paces = nil
	cfg.sleep = func(_ context.Context, d time.Duration) error { paces = append(paces, d); return nil }
	if _, err := Run(t.Context(), cfg, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if len(paces) == 0 || slices.ContainsFunc(paces, func(d time.Duration) bool { return d != time.Millisecond }) {
		t.Errorf("resumed early: slept %v, want --step-duration's 1ms throughout", paces)
	}
}

func TestSleepCtxReturnsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- Sleep(ctx, time.Hour) }()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Sleep = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sleep ignored cancellation")
	}
	if err := Sleep(t.Context(), 0); err != nil {
		t.Errorf("zero sleep = %v", err)
	}
}

func TestCheckpointsListsEveryValidOneNewestFirst(t *testing.T) {
	dir := t.TempDir()
	s := &Store{Dir: dir}
	saveSteps(t, s, "w1", 5, 10, 15)
	bad := damage(t, dir, 10, func(b []byte) []byte { return b[:len(b)/2] })
	states, skipped, err := s.Checkpoints("w1")
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, st := range states {
		steps = append(steps, st.Step)
	}
	if !reflect.DeepEqual(steps, []int{15, 5}) {
		t.Errorf("steps = %v, want [15 5]", steps)
	}
	if len(skipped) != 1 || skipped[0].File != bad {
		t.Errorf("skipped = %+v, want %s", skipped, bad)
	}
	if _, err := os.Stat(bad + quarantineSuffix); err != nil {
		t.Errorf("damaged checkpoint not moved aside: %v", err)
	}
	if states, _, err := (&Store{Dir: filepath.Join(dir, "missing")}).Checkpoints("w1"); err != nil || len(states) != 0 {
		t.Errorf("Checkpoints of a missing dir = %v, %v; want none", states, err)
	}
}

func TestLoadStepLoadsExactlyThatStep(t *testing.T) {
	dir := t.TempDir()
	s := &Store{Dir: dir}
	saveSteps(t, s, "w1", 5, 10)
	st, path, err := s.LoadStep("w1", 5)
	if err != nil || st.Step != 5 || filepath.Base(path) != FileName(5) {
		t.Fatalf("LoadStep(5) = %+v, %s, %v", st, path, err)
	}
	if _, _, err := s.LoadStep("w1", 7); err == nil {
		t.Error("LoadStep of a missing step succeeded")
	}
	if _, _, err := s.LoadStep("other", 10); err == nil || !strings.Contains(err.Error(), "belongs to work") {
		t.Errorf("LoadStep of another work = %v", err)
	}
}

func TestRemoveAfter(t *testing.T) {
	dir := t.TempDir()
	s := &Store{Dir: dir}
	saveSteps(t, s, "w1", 5, 10, 15)
	removed, err := s.RemoveAfter(5)
	if err != nil || len(removed) != 2 {
		t.Fatalf("RemoveAfter(5) = %v, %v; want two files", removed, err)
	}
	if got, want := checkpointFiles(t, dir), []string{FileName(5)}; !reflect.DeepEqual(got, want) {
		t.Errorf("checkpoints = %v, want %v", got, want)
	}
}
