package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Progress of the bring-up. Every step announces what it does and how long it took on the last run on
// this machine, says every heartbeatEvery that it is still running, and reports its duration at the end.
// The lines are plain (no carriage returns, no colours): they end up in CI log files. The commands' own
// output stays in their log files under OutputDir/logs, as before.
//
//	[12:00:00] ▶ build kubernetes: go build of kube-apiserver, … (expected ~12m41s, from the last run on this machine)
//	[12:01:00]   … build kubernetes: 1m elapsed of ~12m41s (log: …/_output/logs/go-build-kubernetes.log)
//	[12:12:43] ✓ build kubernetes in 12m43s

// heartbeatEvery is how often a running step says it is still running.
const heartbeatEvery = 60 * time.Second

// stepTimesFile is the timing store, in the machine's cache directory (shared by every checkout, as the
// build outputs it times are).
const stepTimesFile = "step-durations.json"

// stepSpec describes one step.
type stepSpec struct {
	// Name names the step in the output and keys its timings: keep it stable.
	Name string
	// What says in a few words what the step does.
	What string
	// Cache, when set, says before the step runs whether its output is already cached (and under which
	// key); a cached run and a real one are timed apart. An error fails the step.
	Cache func() (key string, hit bool, err error)
	// Run does the work.
	Run func() error
}

// stepRunner runs steps with progress lines. Its clock, ticker and store are injectable for tests.
type stepRunner struct {
	// logf writes one line; it must be safe to call from two goroutines.
	logf func(format string, args ...any)
	// now is the clock of the start and end of a step.
	now func() time.Time
	// ticker starts the heartbeat ticker; heartbeats use the time each tick carries.
	ticker func() (ticks <-chan time.Time, stop func())
	// store is the path of the timing store; "" keeps no timings.
	store string
	// activeLog, when set, names the log file the step is writing now (shown in heartbeats).
	activeLog func() string
}

func realTicker(every time.Duration) func() (<-chan time.Time, func()) {
	return func() (<-chan time.Time, func()) {
		t := time.NewTicker(every)
		return t.C, t.Stop
	}
}

// run runs one step: the start line, heartbeats while it runs, the end line, and its timing on success.
func (r *stepRunner) run(s stepSpec) error {
	mode := modeRun
	key := ""
	if s.Cache != nil {
		k, hit, err := s.Cache()
		if err != nil {
			r.logf("▶ %s: %s", s.Name, s.What)
			r.logf("✗ %s failed: %v", s.Name, err)
			return fmt.Errorf("step %q: %w", s.Name, err)
		}
		key = k
		if hit {
			mode = modeCached
		}
	}
	var est time.Duration
	known := false
	if r.store != "" {
		times, err := loadStepTimes(r.store)
		if err != nil {
			r.logf("  note: ignoring the step timings in %s (%v); they are rewritten after this step", r.store, err)
		}
		est, known = times.estimate(s.Name, mode)
	}
	r.logf("▶ %s: %s (%s)", s.Name, s.What, startNote(mode, key, est, known))

	start := r.now()
	ticks, stopTicker := r.ticker()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case t, ok := <-ticks:
				if !ok {
					ticks = nil
					continue
				}
				log := ""
				if r.activeLog != nil {
					log = r.activeLog()
				}
				r.logf("%s", heartbeatLine(s.Name, t.Sub(start), est, known, log))
			}
		}
	}()
	err := func() (err error) {
		defer func() {
			stopTicker()
			close(stop)
			<-done
		}()
		return s.Run()
	}()
	took := r.now().Sub(start)
	if err != nil {
		r.logf("✗ %s failed after %s", s.Name, fmtDuration(took))
		return fmt.Errorf("step %q: %w", s.Name, err)
	}
	r.logf("✓ %s in %s", s.Name, fmtDuration(took))
	if r.store != "" {
		if err := recordStepTime(r.store, s.Name, mode, took, r.now()); err != nil {
			r.logf("  note: could not record the step's duration: %v", err)
		}
	}
	return nil
}

// startNote is the parenthesis of a step's start line.
func startNote(mode, key string, est time.Duration, known bool) string {
	var parts []string
	if mode == modeCached {
		parts = append(parts, "cached, key "+key)
	}
	switch {
	case known:
		parts = append(parts, fmt.Sprintf("expected ~%s, from the last run on this machine", fmtDuration(est)))
	case mode != modeCached:
		parts = append(parts, "first run on this machine: no estimate")
	}
	return strings.Join(parts, "; ")
}

// heartbeatLine says that a step is still running, how long it has run, against what it is expected to
// take, and which log it is writing.
func heartbeatLine(name string, elapsed, est time.Duration, known bool, log string) string {
	line := fmt.Sprintf("  … %s: %s elapsed", name, fmtDuration(elapsed))
	switch {
	case !known:
		line += " (no estimate)"
	case elapsed <= est:
		line += " of ~" + fmtDuration(est)
	default:
		line += ", over the ~" + fmtDuration(est) + " expected"
	}
	if log != "" {
		line += " (log: " + log + ")"
	}
	return line
}

// fmtDuration rounds a duration for reading: tenths of a second below a minute, seconds above, and no
// trailing "0s" on whole minutes ("13m", "12m41s", "1h2m", "4.2s").
func fmtDuration(d time.Duration) string {
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	return s
}

// The two ways a step is timed: modeRun did its work, modeCached found its output in the cache.
const (
	modeRun    = "run"
	modeCached = "cached"
)

// stepTimes is the timing store: the last successful duration of each step, by step name and mode.
//
//	{"version": 1, "steps": {"build kubernetes": {"run": {"seconds": 761.2, "at": "…"}, "cached": {…}}}}
type stepTimes struct {
	Version int                            `json:"version"`
	Steps   map[string]map[string]stepTime `json:"steps"`
}

type stepTime struct {
	Seconds float64   `json:"seconds"`
	At      time.Time `json:"at"`
}

const stepTimesVersion = 1

// loadStepTimes reads the store. A missing file is an empty store; an unreadable or corrupt one is an
// empty store and an error (the caller goes on without estimates). A store of another version is empty.
func loadStepTimes(path string) (*stepTimes, error) {
	empty := &stepTimes{Version: stepTimesVersion, Steps: map[string]map[string]stepTime{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return empty, nil
	}
	if err != nil {
		return empty, err
	}
	var t stepTimes
	if err := json.Unmarshal(b, &t); err != nil {
		return empty, fmt.Errorf("corrupt: %w", err)
	}
	if t.Version != stepTimesVersion || t.Steps == nil {
		return empty, nil
	}
	return &t, nil
}

// estimate returns the last successful duration of the step in that mode.
func (t *stepTimes) estimate(name, mode string) (time.Duration, bool) {
	st, ok := t.Steps[name][mode]
	if !ok || st.Seconds < 0 {
		return 0, false
	}
	return time.Duration(st.Seconds * float64(time.Second)), true
}

// recordStepTime stores one step's duration. It rereads the file first (another checkout may have
// written since) and replaces it atomically; a corrupt file is replaced. Two processes recording at the
// same instant may lose one entry, never the file.
func recordStepTime(path, name, mode string, d time.Duration, at time.Time) error {
	stepTimesMu.Lock() // two steps of one bring-up may end together; processes each write whole files
	defer stepTimesMu.Unlock()
	t, _ := loadStepTimes(path)
	if t.Steps[name] == nil {
		t.Steps[name] = map[string]stepTime{}
	}
	t.Steps[name][mode] = stepTime{Seconds: d.Round(time.Millisecond).Seconds(), At: at.UTC().Round(time.Second)}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'), 0o644)
}

// stepTimesMu keeps the steps of one bring-up that run side by side from losing each other's timing.
var stepTimesMu sync.Mutex

// writeFileAtomic writes a file through a temporary file in the same directory and a rename, so a reader
// sees the old content or the new, never a part.
func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp, mode)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// Cluster side: its steps run through a stepRunner writing to Options.Log, with the store in CacheDir.

// progressState is the part of a Cluster that the heartbeat goroutine shares with the step.
type progressState struct {
	mu        sync.Mutex
	activeLog string
	// running counts the steps running now: while two run side by side (up.go's background steps) the
	// active log could be either's, and heartbeats name none.
	running int
}

func (c *Cluster) setActiveLog(path string) {
	c.progress.mu.Lock()
	c.progress.activeLog = path
	c.progress.mu.Unlock()
}

func (c *Cluster) currentLog() string {
	c.progress.mu.Lock()
	defer c.progress.mu.Unlock()
	if c.progress.running > 1 {
		return ""
	}
	return c.progress.activeLog
}

func (c *Cluster) runner() *stepRunner {
	r := &stepRunner{logf: c.logf, now: time.Now, ticker: realTicker(heartbeatEvery), activeLog: c.currentLog}
	if c.opts.CacheDir != "" {
		r.store = filepath.Join(c.opts.CacheDir, stepTimesFile)
	}
	return r
}

// step runs one named step with progress and timing, and names the step on failure.
func (c *Cluster) step(name, what string, fn func() error) error {
	return c.runStep(stepSpec{Name: name, What: what, Run: fn})
}

// cachedStep is step for a step whose output is cached: probe says, before it runs, whether it is.
func (c *Cluster) cachedStep(name, what string, probe func() (string, bool, error), fn func() error) error {
	return c.runStep(stepSpec{Name: name, What: what, Cache: probe, Run: fn})
}

func (c *Cluster) runStep(s stepSpec) error {
	c.progress.mu.Lock()
	c.progress.running++
	c.progress.activeLog = ""
	c.progress.mu.Unlock()
	defer func() {
		c.progress.mu.Lock()
		c.progress.running--
		c.progress.activeLog = ""
		c.progress.mu.Unlock()
	}()
	return c.runner().run(s)
}
