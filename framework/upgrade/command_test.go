//go:build unix

package upgrade

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// script writes an executable shell script into the test's directory.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "upgrade.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func versioned(name, version string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{DriverVersionLabel: version}}}
}

// The script gets the action, the version and the nodes as arguments, and the suite's kubeconfig, context,
// run, the pool's version before the upgrade and its time budget in the environment.
func TestCommandPassesArgumentsAndEnvironment(t *testing.T) {
	calls := filepath.Join(t.TempDir(), "calls")
	path := script(t, `echo "$* KUBECONFIG=$KUBECONFIG ctx=$GPUCONFORM_KUBE_CONTEXT run=$GPUCONFORM_RUN_ID from=$GPUCONFORM_UPGRADE_FROM budget=$GPUCONFORM_UPGRADE_TIMEOUT" >> `+calls+"\n")
	c := &Command{Path: path, RunID: "r1", Kubeconfig: "/k/config", KubeContext: "canary-ctx", Timeout: 90 * time.Second,
		Kube: fake.NewClientset(versioned("n1", "550.54.15"), versioned("n2", "550.54.15")), VersionLabel: DriverVersionLabel}
	if err := c.Apply(t.Context(), []string{"n1", "n2"}, "560.35.03"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rollback(t.Context(), []string{"n1", "n2"}, "550.54.15"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(calls)
	want := "upgrade 560.35.03 n1 n2 KUBECONFIG=/k/config ctx=canary-ctx run=r1 from=550.54.15 budget=90\n" +
		"rollback 550.54.15 n1 n2 KUBECONFIG=/k/config ctx=canary-ctx run=r1 from=550.54.15 budget=90\n"
	if string(got) != want {
		t.Errorf("calls:\n%s\nwant:\n%s", got, want)
	}

	// Nodes that disagree on their version: the script is told nothing rather than one of them.
	c.Kube = fake.NewClientset(versioned("n1", "550.54.15"), versioned("n2", "535.183.01"))
	_ = os.Remove(calls)
	if err := c.Apply(t.Context(), []string{"n1", "n2"}, "560.35.03"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(calls); !strings.Contains(string(got), " from= ") {
		t.Errorf("mixed versions: %s", got)
	}
}

// A failing script fails the call with its exit status and the tail of its output; the usage and
// "cannot do that" statuses are told apart.
func TestCommandFailureQuotesTheOutputsTail(t *testing.T) {
	path := script(t, `for i in $(seq 1 30); do echo "line $i"; done
echo 'helm: release not found' >&2
exit "${CODE:-1}"
`)
	c := &Command{Path: path}
	err := c.Apply(t.Context(), []string{"n1"}, "560.35.03")
	if err == nil {
		t.Fatal("a script that exits 1 must fail the call")
	}
	for _, want := range []string{path + " upgrade 560.35.03 n1", "exit 1 after", "helm: release not found", "line 30", "[… 11 earlier lines]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "line 5\n") {
		t.Errorf("error quotes more than the tail:\n%v", err)
	}
	if errors.Is(err, ErrScriptUsage) || errors.Is(err, ErrScriptUnsupported) || errors.Is(err, ErrScriptTimeout) {
		t.Errorf("exit 1 is a plain failure: %v", err)
	}

	t.Setenv("CODE", "2")
	err = c.Rollback(t.Context(), []string{"n1"}, "550.54.15")
	if !errors.Is(err, ErrScriptUsage) || !strings.Contains(err.Error(), "usage error from the script (exit 2)") {
		t.Errorf("exit 2: %v", err)
	}
	t.Setenv("CODE", "3")
	if err := c.Rollback(t.Context(), []string{"n1"}, "550.54.15"); !errors.Is(err, ErrScriptUnsupported) {
		t.Errorf("exit 3: %v", err)
	}
}

// A script past its timeout is killed with everything it started, and the error says so.
func TestCommandTimeoutKillsTheProcessGroup(t *testing.T) {
	late := filepath.Join(t.TempDir(), "late")
	// The background child holds the output open and would write the file after the timeout.
	path := script(t, `(sleep 1; echo late > `+late+`) &
echo started
sleep 30
`)
	c := &Command{Path: path, Timeout: 300 * time.Millisecond}
	start := time.Now()
	err := c.Apply(t.Context(), []string{"n1"}, "560.35.03")
	if !errors.Is(err, ErrScriptTimeout) || !strings.Contains(err.Error(), "timed out after 300ms") || !strings.Contains(err.Error(), "started") {
		t.Fatalf("want a timeout after 300ms quoting the output, got %v", err)
	}
	// Killing only the shell would leave the child holding the pipe until WaitDelay (2 s).
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("the call returned after %s: the script's children were not killed", took)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(late); err == nil {
		t.Error("a child of the script outlived the timeout")
	}
}

// Each call is appended to the log: a header with the call, its status and duration, then the output.
func TestCommandLogsEveryCall(t *testing.T) {
	log := filepath.Join(t.TempDir(), "artifacts", "upgrade-command.log")
	path := script(t, `echo "changing $3"
[ "$1" = rollback ] && { echo 'no such release' >&2; exit 1; }
exit 0
`)
	c := &Command{Path: path, LogPath: log}
	if err := c.Apply(t.Context(), []string{"n1", "n2"}, "560.35.03"); err != nil {
		t.Fatal(err)
	}
	err := c.Rollback(t.Context(), []string{"n1"}, "550.54.15")
	if err == nil || !strings.Contains(err.Error(), log) {
		t.Errorf("a failure names the log: %v", err)
	}
	got, _ := os.ReadFile(log)
	want := regexp.MustCompile(fmt.Sprintf(`^\$ %[1]s upgrade 560\.35\.03 n1 n2 \(exit 0, [0-9.]+m?s\)
changing n1
\$ %[1]s rollback 550\.54\.15 n1 \(exit 1, [0-9.]+m?s\)
changing n1
no such release
$`, regexp.QuoteMeta(path)))
	if !want.Match(got) {
		t.Errorf("log:\n%s", got)
	}
}

// A script that exits 0 leaving a process that holds its output has issued the change: the call succeeds
// once the wait for that output gives up.
func TestCommandSucceedsDespiteAStraggler(t *testing.T) {
	path := script(t, "sleep 5 &\necho issued\n")
	log := filepath.Join(t.TempDir(), "upgrade-command.log")
	if err := (&Command{Path: path, LogPath: log}).Apply(t.Context(), []string{"n1"}, "560.35.03"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(log); !strings.Contains(string(got), "still held its output)\nissued\n") {
		t.Errorf("log:\n%s", got)
	}
}
