package hostproc

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFindMatchesTheCommandNameExactly(t *testing.T) {
	root := t.TempDir()
	for pid, comm := range map[string]string{"10": "kubelet\n", "11": "kubelet-helper\n", "12": "containerd\n", "self": "kubelet\n"} {
		_ = os.MkdirAll(filepath.Join(root, pid), 0o755)
		_ = os.WriteFile(filepath.Join(root, pid, "comm"), []byte(comm), 0o644)
	}
	got, err := Find(root, "kubelet")
	if err != nil || len(got) != 1 || got[0] != 10 {
		t.Fatalf("Find = %v, %v; want [10]", got, err)
	}
	if _, err := Signal(root, "absent", syscall.SIGCONT); err == nil || !strings.Contains(err.Error(), "PID namespace") {
		t.Fatalf("no process found must say why: %v", err)
	}
}

// A real process is stopped while frozen and runs again after, also when the freeze is cut short.
func TestFreezeStopsAndAlwaysContinues(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	// A private /proc with only this process, under a name nothing else has: never freeze anything else.
	root, name := t.TempDir(), "gpuconform-test-sleeper"
	_ = os.MkdirAll(filepath.Join(root, strconv.Itoa(cmd.Process.Pid)), 0o755)
	_ = os.WriteFile(filepath.Join(root, strconv.Itoa(cmd.Process.Pid), "comm"), []byte(name+"\n"), 0o644)
	state := func() string {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "stat"))
		f := strings.Fields(string(b))
		if len(f) < 3 {
			return ""
		}
		return f[2]
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	var lines []string
	go func() { done <- Freeze(ctx, root, name, time.Minute, func(s string) { lines = append(lines, s) }) }()
	deadline := time.Now().Add(5 * time.Second)
	for state() != "T" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if s := state(); s != "T" {
		t.Fatalf("process state %q while frozen, want T (stopped)", s)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := state(); s == "T" {
		t.Fatalf("process still stopped after the freeze ended")
	}
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "froze "+name) || !strings.HasPrefix(lines[1], "thawed "+name) {
		t.Errorf("log lines = %q", lines)
	}
}
