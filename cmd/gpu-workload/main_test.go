package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gpuconform.io/gpuconform/internal/workload/devicetest"
	"gpuconform.io/gpuconform/internal/workload/gang"
	"gpuconform.io/gpuconform/internal/workload/train"
)

func TestUsageErrorsExitTwo(t *testing.T) {
	cases := map[string][]string{
		"no command":             nil,
		"unknown command":        {"frobnicate"},
		"unknown probe flag":     {"probe", "--nope"},
		"negative expect":        {"probe", "--expect", "-1"},
		"non-integer expect":     {"probe", "--expect", "two"},
		"stray argument":         {"probe", "extra"},
		"train without steps":    {"train", "--checkpoint-dir", "/tmp/x", "--checkpoint-every", "1"},
		"train without dir":      {"train", "--steps", "3", "--checkpoint-every", "1"},
		"train zero interval":    {"train", "--steps", "3", "--checkpoint-dir", "/tmp/x", "--checkpoint-every", "0"},
		"train negative sleep":   {"train", "--steps", "3", "--checkpoint-dir", "/tmp/x", "--checkpoint-every", "1", "--step-duration", "-1s"},
		"train negative resumed": {"train", "--steps", "3", "--checkpoint-dir", "/tmp/x", "--checkpoint-every", "1", "--resumed-step-duration", "-1s"},
		"train resumed no unit":  {"train", "--steps", "3", "--checkpoint-dir", "/tmp/x", "--checkpoint-every", "1", "--resumed-step-duration", "5"},
		"train negative minimum": {"train", "--steps", "3", "--checkpoint-dir", "/tmp/x", "--checkpoint-every", "1", "--resumed-min-duration", "-1s"},
		"podresources bad flag":  {"podresources", "--sock", "x"},
		"device-test argument":   {"device-test", "vectorAdd"},
		"device-test timeout":    {"device-test", "--nvidia-smi-timeout", "0s"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(t.Context(), args, &stdout, &stderr); code != exitUsage {
				t.Errorf("exit %d, want %d; stderr: %s", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), "usage: gpu-workload") {
				t.Errorf("stderr lacks usage: %q", stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("usage errors must not print on stdout, got %q", stdout.String())
			}
		})
	}
}

// The device test's verdict is its exit code, its JSON line and, on a pass only, "Test PASSED" last; a
// failure says on stderr what is missing. Whatever this machine has (a GPU or none), the three agree.
func TestDeviceTestExitCodeAgreesWithItsReport(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"device-test"}, &stdout, &stderr)
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	var r devicetest.Report
	if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
		t.Fatalf("first line is not the report: %q: %v", lines[0], err)
	}
	passed := lines[len(lines)-1] == devicetest.Passed
	switch {
	case code == exitOK && r.OK && passed:
	case code == exitFail && !r.OK && !passed && len(lines) == 1 && strings.Contains(stderr.String(), r.Message):
	default:
		t.Errorf("exit %d, report ok=%v, last line %q, stderr %q", code, r.OK, lines[len(lines)-1], stderr.String())
	}
}

func TestTrainValidationMessageNamesTheFlag(t *testing.T) {
	var stderr bytes.Buffer
	run(t.Context(), []string{"train", "--steps", "3", "--checkpoint-every", "1"}, &bytes.Buffer{}, &stderr)
	if !strings.Contains(stderr.String(), "--checkpoint-dir is required") {
		t.Errorf("stderr = %q", stderr.String())
	}
}

func TestGangUsageErrorsExitTwo(t *testing.T) {
	t.Setenv(gang.RankEnv, "") // an Indexed Job running these tests must not lend its index
	base := []string{"gang", "--steps", "3", "--checkpoint-dir", "/tmp/x", "--checkpoint-every", "1"}
	cases := map[string]struct {
		args []string
		env  string
		want string
	}{
		"no workers":            {[]string{"--rank", "0"}, "", "--workers must be >= 1"},
		"no rank, no index":     {[]string{"--workers", "1"}, "", "--rank is required when $JOB_COMPLETION_INDEX is not set"},
		"bad index":             {[]string{"--workers", "1"}, "one", "$JOB_COMPLETION_INDEX is not an integer"},
		"rank out of range":     {[]string{"--workers", "2", "--rank", "2", "--coordinator", "j-0.j"}, "", "--rank must be in [0, 2)"},
		"index out of range":    {[]string{"--workers", "2", "--coordinator", "j-0.j"}, "5", "--rank must be in [0, 2), got 5"},
		"no coordinator":        {[]string{"--workers", "2", "--rank", "1"}, "", "--coordinator is required"},
		"port zero":             {[]string{"--workers", "1", "--rank", "0", "--port", "0"}, "", "--port must be in [1, 65535]"},
		"zero peer timeout":     {[]string{"--workers", "1", "--rank", "0", "--peer-timeout", "0s"}, "", "--peer-timeout must be > 0"},
		"zero rendezvous":       {[]string{"--workers", "1", "--rank", "0", "--rendezvous-timeout", "0s"}, "", "--rendezvous-timeout and --peer-timeout must be > 0"},
		"negative step":         {[]string{"--workers", "1", "--rank", "0", "--step-duration", "-1s"}, "", "--step-duration must be >= 0"},
		"negative resumed step": {[]string{"--workers", "1", "--rank", "0", "--resumed-step-duration", "-1s"}, "", "--resumed-step-duration must be >= 0"},
		"non-integer rank flag": {[]string{"--workers", "1", "--rank", "x"}, "", "not an integer"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv(gang.RankEnv, tc.env)
			var stdout, stderr bytes.Buffer
			if code := run(t.Context(), append(slices.Clone(base), tc.args...), &stdout, &stderr); code != exitUsage {
				t.Errorf("exit %d, want %d; stderr: %s", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), "usage: gpu-workload gang") {
				t.Errorf("stderr = %q, want %q and the usage", stderr.String(), tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("usage errors must not print on stdout, got %q", stdout.String())
			}
		})
	}
}

func TestGangOfOneTakesItsRankFromTheIndex(t *testing.T) {
	t.Setenv(gang.RankEnv, "0")
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"gang", "--workers", "1", "--steps", "4", "--checkpoint-dir", dir, "--checkpoint-every", "2", "--work-id", "g"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var done map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &done); err != nil {
		t.Fatal(err)
	}
	if done["event"] != "done" || done["rank"] != float64(0) || done["state_digest"] != gang.Digest("g", 1, 4) {
		t.Errorf("last event = %v", done)
	}
	if _, err := os.Stat(filepath.Join(gang.RankDir(dir, 0), train.FileName(4))); err != nil {
		t.Errorf("no final checkpoint: %v", err)
	}
}

func TestGangRejectedWorkerExitsOne(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // a coordinator that turns everyone away
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = bufio.NewReader(c).ReadString('\n')
		_, _ = c.Write([]byte(`{"type":"reject","rank":0,"reason":"duplicate rank 1"}` + "\n"))
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"gang", "--workers", "2", "--rank", "1", "--coordinator", "127.0.0.1", "--port", port,
		"--steps", "4", "--checkpoint-dir", t.TempDir(), "--checkpoint-every", "2", "--rendezvous-timeout", "10s"}, &stdout, &stderr)
	if code != exitFail || !strings.Contains(stderr.String(), "rejected by the coordinator: duplicate rank 1") {
		t.Errorf("exit %d, stderr %q; want 1 and the reason", code, stderr.String())
	}
}

func TestPodResourcesUnreachablePrintsErrorJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	socket := filepath.Join(t.TempDir(), "none.sock")
	code := run(t.Context(), []string{"podresources", "--socket", socket, "--timeout", "200ms"}, &stdout, &stderr)
	if code != exitFail {
		t.Errorf("exit %d, want %d", code, exitFail)
	}
	var report map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("stdout %q is not one JSON line: %v", stdout.String(), err)
	}
	if report["error"] == nil || report["pods"] == nil {
		t.Errorf("report = %v, want an error and an empty pods list", report)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildOut  []byte
)

// buildBinary compiles the command once per test run, the way the image build does (static, no cgo).
func buildBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH; cannot build the binary")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpu-workload-bin") //nolint:usetesting // shared by every test and removed in TestMain, not one test's t.TempDir
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "gpu-workload")
		cmd := exec.Command(goTool, "build", "-o", binPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("building gpu-workload: %v\n%s", buildErr, buildOut)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// hermeticEnv is an environment without GPU variables or nvidia-smi, so the host running the tests
// cannot change what the binary reports.
func hermeticEnv(extra ...string) []string {
	return append([]string{"PATH=", "NODE_NAME=test-node"}, extra...)
}

func TestBinaryProbeFailsWithJSONOnMismatch(t *testing.T) {
	bin := buildBinary(t)
	cmd := exec.Command(bin, "probe", "--expect", "1000", "--expect-ids", "gpu-0,gpu-9")
	cmd.Env = hermeticEnv("GPU_DEVICE_0=gpu-0", "GPU_DEVICE_0_RESOURCE_CLAIM=uid")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if exitErr, ok := errors.AsType[*exec.ExitError](err); !ok || exitErr.ExitCode() != 1 {
		t.Fatalf("probe exited with %v, want exit status 1; stderr: %s", err, stderr.String())
	}
	var report struct {
		OK        bool     `json:"ok"`
		Node      string   `json:"node"`
		ExpectIDs []string `json:"expect_ids"`
		Message   string   `json:"message"`
	}
	if strings.Count(stdout.String(), "\n") != 1 {
		t.Fatalf("stdout = %q, want exactly one line", stdout.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("stdout is not JSON: %v", err)
	}
	if report.OK || report.Node != "test-node" || !strings.Contains(report.Message, "missing [gpu-9]") {
		t.Errorf("report = %+v", report)
	}
}

// lineReader delivers the subprocess's stdout lines on a channel, so the test can wait for an event
// with a deadline instead of sleeping.
func lineReader(t *testing.T, cmd *exec.Cmd) <-chan string {
	t.Helper()
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

// waitEvent returns the first event for which match is true, failing after timeout.
func waitEvent(t *testing.T, lines <-chan string, timeout time.Duration, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("process ended before the expected event")
			}
			var ev map[string]any
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("stdout line %q is not JSON: %v", line, err)
			}
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no matching event within %s", timeout)
		}
	}
}

func TestBinaryTrainSIGTERMThenResume(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	args := []string{"train", "--step-duration", "50ms", "--checkpoint-dir", dir, "--checkpoint-every", "5", "--work-id", "sub"}

	cmd := exec.Command(bin, append(args, "--steps", "100000")...)
	cmd.Env = hermeticEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	lines := lineReader(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	waitEvent(t, lines, 60*time.Second, func(ev map[string]any) bool {
		return ev["event"] == "checkpoint" && ev["step"].(float64) >= 5
	})
	signalled := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sig := waitEvent(t, lines, 20*time.Second, func(ev map[string]any) bool { return ev["event"] == "sigterm" })
	for range lines { // drain until the pipe closes, so Wait cannot race the reader
	}
	err := cmd.Wait()
	if exitErr, ok := errors.AsType[*exec.ExitError](err); !ok || exitErr.ExitCode() != exitInterrupted {
		t.Fatalf("train exited with %v after SIGTERM, want exit status %d (interrupted, not completed); stderr: %s", err, exitInterrupted, stderr.String())
	}
	// A step is 50ms; anything near the 30s grace period means the signal was not honoured mid-step.
	if took := time.Since(signalled); took > 10*time.Second {
		t.Errorf("train took %s to exit after SIGTERM", took)
	}
	stoppedAt := int(sig["step"].(float64))
	if stoppedAt < 5 {
		t.Fatalf("sigterm event at step %d, want >= 5", stoppedAt)
	}
	if _, err := os.Stat(filepath.Join(dir, train.FileName(stoppedAt))); err != nil {
		t.Fatalf("no final checkpoint for step %d: %v", stoppedAt, err)
	}

	// The next attempt resumes from the SIGTERM checkpoint and finishes, at --resumed-step-duration.
	total := stoppedAt + 3
	resume := exec.Command(bin, append(args, "--steps", strconv.Itoa(total), "--resumed-step-duration", "1ms")...)
	resume.Env = hermeticEnv()
	out, err := resume.Output()
	if err != nil {
		t.Fatalf("resumed train failed: %v\n%s", err, out)
	}
	evLines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var start, done map[string]any
	_ = json.Unmarshal([]byte(evLines[0]), &start)
	_ = json.Unmarshal([]byte(evLines[len(evLines)-1]), &done)
	if start["event"] != "start" || start["resumed_from"] != float64(stoppedAt) || start["restarts"] != float64(1) || start["step_duration"] != "1ms" {
		t.Errorf("start = %v, want resumed_from %d restarts 1 step_duration 1ms", start, stoppedAt)
	}
	if done["event"] != "done" || done["steps"] != float64(total) || done["steps_run_this_attempt"] != float64(3) {
		t.Errorf("done = %v, want steps %d with 3 run this attempt", done, total)
	}
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func TestBinaryGangStopsWhenAWorkerIsKilledThenResumes(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	port := freePort(t)
	gangCmd := func(rank int, steps string, stepDuration string) *exec.Cmd {
		cmd := exec.Command(bin, "gang", "--workers", "3", "--coordinator", "127.0.0.1", "--port", port,
			"--steps", steps, "--step-duration", stepDuration, "--checkpoint-dir", dir, "--checkpoint-every", "5",
			"--work-id", "g", "--rendezvous-timeout", "30s", "--peer-timeout", "60s")
		cmd.Env = hermeticEnv(gang.RankEnv + "=" + strconv.Itoa(rank))
		return cmd
	}

	// Attempt 1: the gang runs until rank 2 is killed without warning.
	cmds := make([]*exec.Cmd, 3)
	lines := make([]<-chan string, 3)
	for r := range cmds {
		cmds[r] = gangCmd(r, "100000", "20ms")
		lines[r] = lineReader(t, cmds[r])
		if err := cmds[r].Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmds[r].Process.Kill() })
	}
	waitEvent(t, lines[2], 60*time.Second, func(ev map[string]any) bool {
		return ev["event"] == "checkpoint" && ev["step"].(float64) >= 5
	})
	killed := time.Now()
	if err := cmds[2].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for range lines[2] {
	}
	_ = cmds[2].Wait()
	for r := range 2 {
		lost := waitEvent(t, lines[r], 30*time.Second, func(ev map[string]any) bool { return ev["event"] == "peer_lost" })
		for range lines[r] {
		}
		err := cmds[r].Wait()
		if exitErr, ok := errors.AsType[*exec.ExitError](err); !ok || exitErr.ExitCode() != exitFail {
			t.Errorf("rank %d exited with %v after losing rank 2, want exit status 1", r, err)
		}
		if !strings.Contains(lost["reason"].(string), "rank 2") {
			t.Errorf("rank %d peer_lost = %v, want rank 2 named", r, lost)
		}
	}
	// The peer timeout is a minute; the coordinator must have ended the gang long before.
	if took := time.Since(killed); took > 20*time.Second {
		t.Errorf("the survivors took %s to stop", took)
	}

	// Attempt 2 resumes the whole gang and ends with the digest of an uninterrupted run.
	const total = 40
	results := make([][]byte, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() { results[r], errs[r] = gangCmd(r, strconv.Itoa(total), "0s").Output() })
	}
	wg.Wait()
	for r := range 3 {
		if errs[r] != nil {
			t.Fatalf("rank %d of the resumed gang: %v\n%s", r, errs[r], results[r])
		}
		evLines := strings.Split(strings.TrimSpace(string(results[r])), "\n")
		var done map[string]any
		_ = json.Unmarshal([]byte(evLines[len(evLines)-1]), &done)
		if done["event"] != "done" || done["state_digest"] != gang.Digest("g", 3, total) || done["attempt"] != float64(2) || done["resumed_from"].(float64) < 5 {
			t.Errorf("rank %d done = %v, want attempt 2 resumed from >= 5 with the uninterrupted digest", r, done)
		}
	}
}
