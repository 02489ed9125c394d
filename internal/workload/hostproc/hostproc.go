// Package hostproc signals host processes by name from a pod that shares the host's PID namespace
// (hostPID, privileged): the kubelet-stop fault provider freezes a node's kubelet with it (SIGSTOP, then
// SIGCONT when the outage is over) or restarts it (SIGTERM; systemd starts it again).
package hostproc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Find returns the PIDs whose command name (/proc/PID/comm) is name, read from procRoot ("/proc").
func Find(procRoot, name string) ([]int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "comm"))
		if err != nil {
			continue // gone, or not ours to read
		}
		if strings.TrimSpace(string(comm)) == name {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// Signal sends sig to every process named name and returns their PIDs; none found is an error (without
// hostPID the pod sees only its own processes).
func Signal(procRoot, name string, sig syscall.Signal) ([]int, error) {
	pids, err := Find(procRoot, name)
	if err != nil {
		return nil, err
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("no process named %q in %s (does the pod share the host's PID namespace?)", name, procRoot)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil {
			return pids, fmt.Errorf("signal %v to %s (pid %d): %w", sig, name, pid, err)
		}
	}
	return pids, nil
}

// Freeze stops every process named name for d, or until ctx ends (SIGTERM to the pod), and always
// continues them before it returns: an interrupted freeze never leaves the process stopped. log receives
// one line when frozen and one when thawed.
func Freeze(ctx context.Context, procRoot, name string, d time.Duration, log func(string)) error {
	pids, err := Signal(procRoot, name, syscall.SIGSTOP)
	defer func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		log(fmt.Sprintf("thawed %s (pids %v)", name, pids))
	}()
	if err != nil {
		return err
	}
	log(fmt.Sprintf("froze %s (pids %v) for %s", name, pids, d))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return nil
}
