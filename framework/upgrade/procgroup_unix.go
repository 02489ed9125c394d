//go:build unix

package upgrade

import (
	"os/exec"
	"syscall"
)

// killGroup starts the command in a process group of its own and makes its cancellation kill the whole
// group, so that a script's children (kubectl, helm, sleep) do not outlive it.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
