package localcluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestStepTimesMissingFile(t *testing.T) {
	times, err := loadStepTimes(filepath.Join(t.TempDir(), "none", stepTimesFile))
	if err != nil {
		t.Fatalf("a missing store is an error: %v", err)
	}
	if _, ok := times.estimate("build kubernetes", modeRun); ok {
		t.Error("an empty store gave an estimate")
	}
}

func TestStepTimesRecordAndEstimate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", stepTimesFile) // the directory is created
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	must(t, recordStepTime(path, "build kubernetes", modeRun, 12*time.Minute+41*time.Second, at))
	must(t, recordStepTime(path, "build kubernetes", modeCached, 800*time.Millisecond, at))
	must(t, recordStepTime(path, "kueue", modeRun, 40*time.Second, at))
	// The last run counts, not an older one.
	must(t, recordStepTime(path, "kueue", modeRun, 35*time.Second, at))

	times, err := loadStepTimes(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, mode string
		want       time.Duration
	}{
		{"build kubernetes", modeRun, 12*time.Minute + 41*time.Second},
		{"build kubernetes", modeCached, 800 * time.Millisecond},
		{"kueue", modeRun, 35 * time.Second},
	} {
		if got, ok := times.estimate(c.name, c.mode); !ok || got != c.want {
			t.Errorf("estimate(%s, %s) = %v, %v; want %v", c.name, c.mode, got, ok, c.want)
		}
	}
	if _, ok := times.estimate("kueue", modeCached); ok {
		t.Error("a cached estimate came from a real run")
	}
	// The file is plain JSON keyed by step and mode, and no temporary file is left beside it.
	b, _ := os.ReadFile(path)
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil || !strings.Contains(string(b), `"build kubernetes"`) || !strings.Contains(string(b), `"cached"`) {
		t.Errorf("store content:\n%s", b)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("files beside the store: %v", entries)
	}
}

func TestStepTimesCorruptFileIsReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), stepTimesFile)
	must(t, os.WriteFile(path, []byte(`{"version": 1, "steps": {"kueue": `), 0o644))
	times, err := loadStepTimes(path)
	if err == nil {
		t.Error("a corrupt store was read without an error")
	}
	if _, ok := times.estimate("kueue", modeRun); ok {
		t.Error("a corrupt store gave an estimate")
	}
	must(t, recordStepTime(path, "kueue", modeRun, time.Second, time.Now()))
	times, err = loadStepTimes(path)
	if err != nil {
		t.Fatalf("the store was not rewritten: %v", err)
	}
	if d, ok := times.estimate("kueue", modeRun); !ok || d != time.Second {
		t.Errorf("estimate after rewrite = %v, %v", d, ok)
	}
}

func TestStepTimesOtherVersionIsEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), stepTimesFile)
	must(t, os.WriteFile(path, []byte(`{"version": 99, "steps": {"kueue": {"run": {"seconds": 3}}}}`), 0o644))
	times, err := loadStepTimes(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := times.estimate("kueue", modeRun); ok {
		t.Error("a store of another version gave an estimate")
	}
}

func TestFmtDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                   "0s",
		4230 * time.Millisecond:             "4.2s",
		59 * time.Second:                    "59s",
		3 * time.Minute:                     "3m",
		12*time.Minute + 41*time.Second:     "12m41s",
		12*time.Minute + 40*time.Second + 6: "12m40s",
		time.Hour + 2*time.Minute:           "1h2m",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestStartNote(t *testing.T) {
	est := 12*time.Minute + 41*time.Second
	for _, c := range []struct {
		mode, key string
		est       time.Duration
		known     bool
		want      string
	}{
		{modeRun, "", est, true, "expected ~12m41s, from the last run on this machine"},
		{modeRun, "abc123", 0, false, "first run on this machine: no estimate"},
		{modeCached, "abc123", 2 * time.Second, true, "cached, key abc123; expected ~2s, from the last run on this machine"},
		{modeCached, "abc123", 0, false, "cached, key abc123"},
	} {
		if got := startNote(c.mode, c.key, c.est, c.known); got != c.want {
			t.Errorf("startNote(%s, %s, %v, %v) = %q, want %q", c.mode, c.key, c.est, c.known, got, c.want)
		}
	}
}

func TestHeartbeatLine(t *testing.T) {
	est := 13 * time.Minute
	for _, c := range []struct {
		elapsed time.Duration
		known   bool
		log     string
		want    string
	}{
		{3 * time.Minute, true, "", "  … build kubernetes: 3m elapsed of ~13m"},
		{13 * time.Minute, true, "", "  … build kubernetes: 13m elapsed of ~13m"},
		{14 * time.Minute, true, "", "  … build kubernetes: 14m elapsed, over the ~13m expected"},
		{time.Minute, false, "/o/logs/go-build-kubernetes.log", "  … build kubernetes: 1m elapsed (no estimate) (log: /o/logs/go-build-kubernetes.log)"},
	} {
		got := heartbeatLine("build kubernetes", c.elapsed, est, c.known, c.log)
		if got != c.want {
			t.Errorf("heartbeatLine(%v, %v) = %q, want %q", c.elapsed, c.known, got, c.want)
		}
		if strings.ContainsAny(got, "\r\x1b") {
			t.Errorf("heartbeat %q has a carriage return or an escape", got)
		}
	}
}

// fakeProgress is a stepRunner with a hand-moved clock, a hand-fed ticker and captured lines.
type fakeProgress struct {
	mu    sync.Mutex
	lines []string
	now   time.Time
	ticks chan time.Time
	log   string
}

func newFakeProgress(store string) (*fakeProgress, *stepRunner) {
	f := &fakeProgress{now: time.Date(2025, 1, 2, 12, 0, 0, 0, time.UTC), ticks: make(chan time.Time)}
	r := &stepRunner{
		logf: func(format string, args ...any) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.lines = append(f.lines, fmt.Sprintf(format, args...))
		},
		now:       func() time.Time { return f.now }, // read by the step's goroutine only
		ticker:    func() (<-chan time.Time, func()) { return f.ticks, func() {} },
		store:     store,
		activeLog: func() string { return f.log },
	}
	return f, r
}

func (f *fakeProgress) output() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.lines, "\n")
}

func TestStepRunnerLinesAndTimings(t *testing.T) {
	store := filepath.Join(t.TempDir(), stepTimesFile)
	f, r := newFakeProgress(store)
	start := f.now
	f.log = "/o/logs/go-build-kubernetes.log"
	err := r.run(stepSpec{Name: "build kubernetes", What: "go build of kubelet", Run: func() error {
		f.ticks <- start.Add(time.Minute) // taken by the heartbeat before the send returns
		f.ticks <- start.Add(2 * time.Minute)
		f.now = start.Add(12*time.Minute + 41*time.Second)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"▶ build kubernetes: go build of kubelet (first run on this machine: no estimate)",
		"  … build kubernetes: 1m elapsed (no estimate) (log: /o/logs/go-build-kubernetes.log)",
		"  … build kubernetes: 2m elapsed (no estimate) (log: /o/logs/go-build-kubernetes.log)",
		"✓ build kubernetes in 12m41s",
	}, "\n")
	if got := f.output(); got != want {
		t.Errorf("first run:\n%s\nwant:\n%s", got, want)
	}

	// The next run knows what to expect.
	f, r = newFakeProgress(store)
	start = f.now
	err = r.run(stepSpec{Name: "build kubernetes", What: "go build of kubelet", Run: func() error {
		f.ticks <- start.Add(3 * time.Minute)
		f.ticks <- start.Add(13 * time.Minute)
		f.now = start.Add(13*time.Minute + 2*time.Second)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	want = strings.Join([]string{
		"▶ build kubernetes: go build of kubelet (expected ~12m41s, from the last run on this machine)",
		"  … build kubernetes: 3m elapsed of ~12m41s",
		"  … build kubernetes: 13m elapsed, over the ~12m41s expected",
		"✓ build kubernetes in 13m2s",
	}, "\n")
	if got := f.output(); got != want {
		t.Errorf("second run:\n%s\nwant:\n%s", got, want)
	}
	times, _ := loadStepTimes(store)
	if d, _ := times.estimate("build kubernetes", modeRun); d != 13*time.Minute+2*time.Second {
		t.Errorf("recorded %v, want the last run's 13m2s", d)
	}
}

func TestStepRunnerCachedStep(t *testing.T) {
	store := filepath.Join(t.TempDir(), stepTimesFile)
	must(t, recordStepTime(store, "node image", modeRun, 4*time.Minute, time.Now()))
	f, r := newFakeProgress(store)
	start := f.now
	err := r.run(stepSpec{Name: "node image", What: "assemble the node image",
		Cache: func() (string, bool, error) { return "abc123", true, nil },
		Run:   func() error { f.now = start.Add(1500 * time.Millisecond); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	want := "▶ node image: assemble the node image (cached, key abc123)\n✓ node image in 1.5s"
	if got := f.output(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	times, _ := loadStepTimes(store)
	if d, _ := times.estimate("node image", modeCached); d != 1500*time.Millisecond {
		t.Errorf("cached run recorded as %v", d)
	}
	if d, _ := times.estimate("node image", modeRun); d != 4*time.Minute {
		t.Errorf("a cached run replaced the real build's time (%v)", d)
	}
}

func TestStepRunnerFailures(t *testing.T) {
	store := filepath.Join(t.TempDir(), stepTimesFile)
	f, r := newFakeProgress(store)
	start := f.now
	boom := errors.New("boom")
	err := r.run(stepSpec{Name: "kueue", What: "install Kueue", Run: func() error {
		f.now = start.Add(90 * time.Second)
		return boom
	}})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `step "kueue"`) {
		t.Errorf("error = %v", err)
	}
	if got := f.output(); !strings.HasSuffix(got, "\n✗ kueue failed after 1m30s") {
		t.Errorf("output:\n%s", got)
	}
	err = r.run(stepSpec{Name: "node image", What: "assemble",
		Cache: func() (string, bool, error) { return "", false, boom },
		Run:   func() error { t.Error("ran after its probe failed"); return nil }})
	if !errors.Is(err, boom) {
		t.Errorf("probe error = %v", err)
	}
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Error("a failed step was recorded")
	}
}

func TestStepRunnerCorruptStoreWarnsAndHeals(t *testing.T) {
	store := filepath.Join(t.TempDir(), stepTimesFile)
	must(t, os.WriteFile(store, []byte("not json"), 0o644))
	f, r := newFakeProgress(store)
	if err := r.run(stepSpec{Name: "kueue", What: "install Kueue", Run: func() error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if got := f.output(); !strings.Contains(got, "note: ignoring the step timings") || !strings.Contains(got, "first run on this machine") {
		t.Errorf("output:\n%s", got)
	}
	if _, err := loadStepTimes(store); err != nil {
		t.Errorf("store still corrupt: %v", err)
	}
}

// The Cluster's steps write through its logger and keep their timings in the cache directory.
func TestClusterStepUsesCacheDir(t *testing.T) {
	var buf bytes.Buffer
	c := &Cluster{opts: Options{CacheDir: t.TempDir(), Log: &buf}}
	if err := c.step("nodes Ready", "wait for every node", func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "▶ nodes Ready: wait for every node (first run on this machine: no estimate)") ||
		!strings.Contains(buf.String(), "✓ nodes Ready in ") {
		t.Errorf("output:\n%s", buf.String())
	}
	times, err := loadStepTimes(filepath.Join(c.opts.CacheDir, stepTimesFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := times.estimate("nodes Ready", modeRun); !ok {
		t.Error("step not recorded in the cache directory")
	}
}

func TestGoComponentWhat(t *testing.T) {
	if got, want := compEtcd.what(), "go build of etcd (infra/modules/etcd)"; got != want {
		t.Errorf("what = %q, want %q", got, want)
	}
	if got := compKubernetes.what(); !strings.HasPrefix(got, "go build of kube-apiserver, kube-controller-manager,") {
		t.Errorf("what = %q", got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
