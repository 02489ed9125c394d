package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gpuconform.io/gpuconform/internal/workload/train"
)

func TestUsageErrorsExitTwo(t *testing.T) {
	cases := map[string][]string{
		"no command":            nil,
		"unknown command":       {"frobnicate"},
		"unknown probe flag":    {"probe", "--nope"},
		"negative expect":       {"probe", "--expect", "-1"},
		"non-integer expect":    {"probe", "--expect", "two"},
		"stray argument":        {"probe", "extra"},
		"train without steps":   {"train", "--checkpoint-dir", "/tmp/x", "--checkpoint-every", "1"},
		"train without dir":     {"train", "--steps", "3", "--checkpoint-every", "1"},
		"train zero interval":   {"train", "--steps", "3", "--checkpoint-dir", "/tmp/x", "--checkpoint-every", "0"},
		"train negative sleep":  {"train", "--steps", "3", "--checkpoint-dir", "/tmp/x", "--checkpoint-every", "1", "--step-duration", "-1s"},
		"podresources bad flag": {"podresources", "--sock", "x"},
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

func TestTrainValidationMessageNamesTheFlag(t *testing.T) {
	var stderr bytes.Buffer
	run(t.Context(), []string{"train", "--steps", "3", "--checkpoint-every", "1"}, &bytes.Buffer{}, &stderr)
	if !strings.Contains(stderr.String(), "--checkpoint-dir is required") {
		t.Errorf("stderr = %q", stderr.String())
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

	// The next attempt resumes from the SIGTERM checkpoint and finishes.
	total := stoppedAt + 3
	resume := exec.Command(bin, append(args, "--steps", strconv.Itoa(total), "--step-duration", "0s")...)
	resume.Env = hermeticEnv()
	out, err := resume.Output()
	if err != nil {
		t.Fatalf("resumed train failed: %v\n%s", err, out)
	}
	evLines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var start, done map[string]any
	_ = json.Unmarshal([]byte(evLines[0]), &start)
	_ = json.Unmarshal([]byte(evLines[len(evLines)-1]), &done)
	if start["event"] != "start" || start["resumed_from"] != float64(stoppedAt) || start["restarts"] != float64(1) {
		t.Errorf("start = %v, want resumed_from %d restarts 1", start, stoppedAt)
	}
	if done["event"] != "done" || done["steps"] != float64(total) || done["steps_run_this_attempt"] != float64(3) {
		t.Errorf("done = %v, want steps %d with 3 run this attempt", done, total)
	}
}
