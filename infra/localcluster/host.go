package localcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// capSysResource is the capability number of CAP_SYS_RESOURCE (linux/capability.h).
const capSysResource = 24

// HostQuirks are the properties of the host that the local cluster has to work around. Every workaround in
// this package is keyed on one of these fields, and each is detected here and nowhere else.
type HostQuirks struct {
	// MissingCapSysResource: the capability bounding set lacks CAP_SYS_RESOURCE (seen on Firecracker VMs).
	// Docker grants it to privileged containers and privileged execs, and runc then fails with
	// "unable to apply caps: operation not permitted". Workarounds: the project's dockerd runs containers
	// through gpuconform-runc, which strips it; containerd inside the nodes uses restrict_oom_score_adj
	// (lowering oom_score_adj needs the capability) and its unit loses OOMScoreAdjust.
	MissingCapSysResource bool `json:"missingCapSysResource"`
	// CgroupV1: the host mounts cgroup v1 (or hybrid). Kubelets >= 1.35 refuse to start on v1 unless the
	// KubeletConfiguration sets failCgroupV1: false; the node rootfs stays on Debian bookworm because
	// systemd >= 256 (trixie) no longer boots on v1.
	CgroupV1 bool `json:"cgroupV1"`
}

// String lists the quirks in a stable form, for logs and cache keys.
func (q HostQuirks) String() string {
	var parts []string
	if q.MissingCapSysResource {
		parts = append(parts, "missing-CAP_SYS_RESOURCE")
	}
	if q.CgroupV1 {
		parts = append(parts, "cgroup-v1")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// ParseBoundingSet reads the CapBnd mask from the text of /proc/self/status.
func ParseBoundingSet(status string) (uint64, error) {
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapBnd line in process status")
}

// IsCgroupV1 reports whether the cgroup mount is v1 or hybrid, given the filesystem magic of /sys/fs/cgroup
// and whether /sys/fs/cgroup/cgroup.controllers exists (it exists only on a unified v2 mount).
func IsCgroupV1(fsMagic int64, hasControllersFile bool) bool {
	const cgroup2SuperMagic = 0x63677270
	return fsMagic != cgroup2SuperMagic || !hasControllersFile
}

// DetectQuirks inspects this host.
func DetectQuirks() (HostQuirks, error) {
	var q HostQuirks
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return q, err
	}
	bnd, err := ParseBoundingSet(string(status))
	if err != nil {
		return q, err
	}
	q.MissingCapSysResource = bnd&(1<<capSysResource) == 0
	var st syscall.Statfs_t
	if err := syscall.Statfs("/sys/fs/cgroup", &st); err != nil {
		return q, fmt.Errorf("statfs /sys/fs/cgroup: %w", err)
	}
	_, ctrlErr := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	q.CgroupV1 = IsCgroupV1(int64(st.Type), ctrlErr == nil) //nolint:unconvert // Statfs_t.Type is not an int64 on every platform
	return q, nil
}

// dockerAnswers reports whether a Docker engine answers on the default socket.
func dockerAnswers(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").Run() == nil
}

// DaemonConfig is the dockerd configuration the project writes for a daemon it owns.
func DaemonConfig(q HostQuirks, runtimePath string) map[string]any {
	cfg := map[string]any{
		// The project's daemon never touches a registry: nothing may be pulled by accident.
		"registry-mirrors": []string{},
		"log-driver":       "json-file",
		"log-opts":         map[string]string{"max-size": "10m", "max-file": "2"},
	}
	if q.MissingCapSysResource {
		cfg["runtimes"] = map[string]any{"gpuconform-runc": map[string]any{"path": runtimePath}}
		cfg["default-runtime"] = "gpuconform-runc"
	}
	return cfg
}

// ensureDocker makes a Docker engine answer. A working engine is used as it is, and nothing of it is
// changed. Otherwise Debian's docker.io is installed when missing and a daemon owned by the project is
// started with its own configuration file, pid file and log under stateDir.
func (c *Cluster) ensureDocker(ctx context.Context) error {
	if dockerAnswers(ctx) {
		if c.quirks.MissingCapSysResource {
			// A daemon we do not own must already cope with the missing capability: we never change it.
			out, _ := exec.CommandContext(ctx, "docker", "info", "--format", "{{.DefaultRuntime}}").Output()
			if rt := strings.TrimSpace(string(out)); rt != "gpuconform-runc" {
				c.logf("note: this host lacks CAP_SYS_RESOURCE and the running Docker engine uses runtime %q; "+
					"if kind's privileged containers fail with 'unable to apply caps', stop that engine and let gpuconform start its own", rt)
			}
		}
		return nil
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		if _, err := exec.LookPath("apt-get"); err != nil {
			return errors.New("no Docker engine answers and apt-get is missing: install and start Docker, then rerun")
		}
		if os.Geteuid() != 0 {
			return errors.New("no Docker engine answers: run as root so gpuconform can install Debian's docker.io, or start Docker yourself")
		}
		if err := c.run(ctx, "apt-get update", "apt-get", "update", "-qq"); err != nil {
			return err
		}
		if err := c.run(ctx, "apt-get install docker.io", "env", "DEBIAN_FRONTEND=noninteractive",
			"apt-get", "install", "-y", "-qq", "--no-install-recommends", "docker.io", "iptables", "runc", "containerd"); err != nil {
			return err
		}
	}
	return c.startOwnDockerd(ctx)
}

// startOwnDockerd starts dockerd in its own session with the project's configuration, so that it outlives
// this process (the cluster needs it) but never inherits a user's daemon settings.
func (c *Cluster) startOwnDockerd(ctx context.Context) error {
	dir := filepath.Join(c.opts.CacheDir, "dockerd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	runtimePath := ""
	if c.quirks.MissingCapSysResource {
		p, err := c.buildRuntimeWrapper(ctx)
		if err != nil {
			return err
		}
		runtimePath = p
	}
	cfg, _ := json.MarshalIndent(DaemonConfig(c.quirks, runtimePath), "", "  ")
	cfgPath := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "dockerd.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// A previous daemon of ours that died leaves a pid file behind; dockerd refuses to start over it.
	pidPath := filepath.Join(dir, "dockerd.pid")
	_ = os.Remove(pidPath)
	cmd := exec.Command("dockerd", "--config-file", cfgPath, "--pidfile", pidPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start dockerd: %w (log: %s)", err, logPath)
	}
	_ = cmd.Process.Release()
	c.logf("started the project's dockerd (config %s, log %s, quirks %s)", cfgPath, logPath, c.quirks)
	err = wait.PollUntilContextTimeout(ctx, time.Second, 60*time.Second, true, func(context.Context) (bool, error) {
		return dockerAnswers(ctx), nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("dockerd did not answer within 60s; see %s", logPath)
	}
	return err
}
