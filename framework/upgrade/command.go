package upgrade

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Exit statuses the command contract gives a meaning to; any other non-zero status is a failure.
const (
	// ExitUsage is the script's answer to arguments or an environment it does not accept.
	ExitUsage = 2
	// ExitUnsupported is the script's answer when it cannot make this change on this cluster (a release
	// that spans nodes outside the pool, an operator whose upgrade controller is off): nothing was changed.
	ExitUnsupported = 3
)

// DefaultCommandTimeout bounds one call of the script when Command.Timeout is zero: long enough for a
// driver container to drain its node, unload and load the kernel modules on a small canary pool.
const DefaultCommandTimeout = 20 * time.Minute

// Errors a failed call wraps, so that a caller can tell a broken hook from a broken upgrade.
var (
	// ErrScriptUsage: the script exited ExitUsage.
	ErrScriptUsage = errors.New("usage error from the script")
	// ErrScriptUnsupported: the script exited ExitUnsupported.
	ErrScriptUnsupported = errors.New("the script cannot make this change on this cluster")
	// ErrScriptTimeout: the script ran past its timeout and was killed with its process group.
	ErrScriptTimeout = errors.New("the script timed out")
)

// tailLines is how much of the script's output a failure quotes; the whole of it is in the log.
const tailLines = 20

// Command is the provider that runs the user's script:
//
//	SCRIPT upgrade VERSION NODE...   move exactly these nodes to driver VERSION
//	SCRIPT rollback VERSION NODE...  move them back to VERSION, the version before the upgrade
//
// with KUBECONFIG (when Kubeconfig is set), GPUCONFORM_KUBE_CONTEXT, GPUCONFORM_RUN_ID,
// GPUCONFORM_UPGRADE_FROM (the pool's version before the upgrade: read from the nodes' VersionLabel on
// upgrade, the version given on rollback) and GPUCONFORM_UPGRADE_TIMEOUT (seconds the script has) in its
// environment. Exit 0: the change was issued or is done; ExitUsage and ExitUnsupported as their comments
// say; anything else failed. The suite's readiness check runs after the script returns, whatever it waited
// for. fixtures/upgrade holds examples.
type Command struct {
	// Path is the script.
	Path string
	// RunID is the run's ID, for scripts that label what they create.
	RunID string
	// Kubeconfig is the suite's kubeconfig, passed as KUBECONFIG; empty leaves the environment's.
	Kubeconfig string
	// KubeContext is the suite's kubeconfig context (GPUCONFORM_KUBE_CONTEXT); empty: the current one.
	KubeContext string
	// Timeout bounds one call; zero means DefaultCommandTimeout.
	Timeout time.Duration
	// LogPath is the file each call's output is appended to, after a header line
	// `$ SCRIPT ACTION VERSION NODE... (exit N, D)`; empty: no log.
	LogPath string
	// Kube and VersionLabel read the pool's version before an upgrade (GPUCONFORM_UPGRADE_FROM); without
	// them it is empty on upgrade.
	Kube         kubernetes.Interface
	VersionLabel string
}

// Name implements Provider.
func (c *Command) Name() string { return "command (" + c.Path + ")" }

// Apply implements Provider.
func (c *Command) Apply(ctx context.Context, nodes []string, target string) error {
	return c.run(ctx, "upgrade", target, c.currentVersion(ctx, nodes), nodes)
}

// Rollback implements Provider.
func (c *Command) Rollback(ctx context.Context, nodes []string, from string) error {
	return c.run(ctx, "rollback", from, from, nodes)
}

// currentVersion is the version every one of the nodes reports, "" when they disagree or it cannot be
// read: the script is told nothing rather than something wrong.
func (c *Command) currentVersion(ctx context.Context, nodes []string) string {
	if c.Kube == nil || c.VersionLabel == "" {
		return ""
	}
	version := ""
	for i, n := range nodes {
		node, err := c.Kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		v := node.Labels[c.VersionLabel]
		if i > 0 && v != version {
			return ""
		}
		version = v
	}
	return version
}

func (c *Command) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultCommandTimeout
}

func (c *Command) run(ctx context.Context, action, version, from string, nodes []string) error {
	args := append([]string{action, version}, nodes...)
	call := "$ " + c.Path + " " + strings.Join(args, " ")
	// Opened before the script runs: an artifacts directory that cannot be written fails the call before
	// anything on the cluster changed.
	var log *os.File
	if c.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(c.LogPath), 0o755); err != nil {
			return fmt.Errorf("upgrade command log: %w", err)
		}
		f, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("upgrade command log: %w", err)
		}
		defer f.Close()
		log = f
	}

	timeout := c.timeout()
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, c.Path, args...)
	cmd.Env = append(os.Environ(),
		"GPUCONFORM_RUN_ID="+c.RunID,
		"GPUCONFORM_UPGRADE_FROM="+from,
		"GPUCONFORM_UPGRADE_TIMEOUT="+strconv.Itoa(int(timeout.Seconds())),
		"GPUCONFORM_KUBE_CONTEXT="+c.KubeContext)
	if c.Kubeconfig != "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+c.Kubeconfig)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The script's kubectl and helm children go with it: kill the whole process group, and stop waiting
	// for output a straggler still holds open.
	killGroup(cmd)
	cmd.WaitDelay = 2 * time.Second

	start := time.Now()
	err := cmd.Run()
	took := time.Since(start).Round(time.Millisecond)

	var status string
	var runErr error
	var exit *exec.ExitError
	switch {
	case runCtx.Err() != nil && ctx.Err() == nil:
		status = fmt.Sprintf("timed out after %s, killed", timeout)
		runErr = fmt.Errorf("%w after %s (killed with its process group)", ErrScriptTimeout, timeout)
	case ctx.Err() != nil:
		status = fmt.Sprintf("interrupted after %s", took)
		runErr = fmt.Errorf("interrupted after %s: %w", took, ctx.Err())
	case errors.As(err, &exit):
		code := exit.ExitCode()
		status = fmt.Sprintf("exit %d, %s", code, took)
		switch code {
		case ExitUsage:
			runErr = fmt.Errorf("%w (exit %d)", ErrScriptUsage, code)
		case ExitUnsupported:
			runErr = fmt.Errorf("%w (exit %d)", ErrScriptUnsupported, code)
		default:
			runErr = fmt.Errorf("exit %d after %s", code, took)
		}
	case errors.Is(err, exec.ErrWaitDelay):
		// The script exited 0 and left a process behind that still holds its output: the change was issued.
		status = fmt.Sprintf("exit 0, %s; a process it left running still held its output", took)
	case err != nil:
		status = "not run"
		runErr = err
	default:
		status = fmt.Sprintf("exit 0, %s", took)
	}

	var logErr error
	if log != nil {
		_, logErr = fmt.Fprintf(log, "%s (%s)\n%s", call, status, out.String())
		if out.Len() > 0 && !bytes.HasSuffix(out.Bytes(), []byte("\n")) {
			_, _ = log.WriteString("\n")
		}
	}
	if runErr == nil {
		return nil
	}
	var more string
	if t := tail(out.String(), tailLines); t != "" {
		more = "; last lines of its output:\n" + t
	}
	if log != nil {
		more += "\n(its whole output: " + c.LogPath + ")"
	}
	if logErr != nil {
		more += fmt.Sprintf("\n(writing %s failed: %v)", c.LogPath, logErr)
	}
	return fmt.Errorf("%s: %w%s", call[2:], runErr, more)
}

// tail returns the last n lines of s without its trailing newlines, saying how many lines came before.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return ""
	}
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[… %d earlier lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
