package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/faults"
	"gpuconform.io/gpuconform/framework/upgrade"
	"gpuconform.io/gpuconform/reports"
)

// The rows below drive runs themselves (Drive) instead of one run under a variation: two runs at once, a
// cleanup beside a live run, and a run interrupted during the upgrade rehearsal. Each judges what a team
// sharing the cluster would see: nobody's run fails for another's, nothing of a live run is deleted, an
// interruption is INCOMPLETE and the cluster is as it was found.

// allocationOnly filters a run to the allocation specs: short, and on every path.
var allocationOnly = []string{"--procs=3", "--ginkgo.label-filter=scenario:allocation"}

// rehearsalOnly filters a run to the upgrade rehearsal, in two Ginkgo processes as make e2e runs it (a
// terminal's Ctrl-C reaches the parent and both processes).
var rehearsalOnly = []string{"--procs=2", "--disruptive", "--ginkgo.label-filter=scenario:upgrade"}

// runProc is one `gpuconform …` process a row started, in a process group of its own (so a signal reaches
// the whole run, as a terminal's Ctrl-C does), its output in a log file.
type runProc struct {
	cmd *exec.Cmd
	log string
	// done is closed once the process has ended (its exit status is the verdict's, read from the report).
	done chan struct{}
}

// startRun starts `gpuconform run ARGS` against kubeconfig with its artifacts in dir (and its log beside).
func startRun(ctx context.Context, bin shipped, kubeconfig, dir string, args ...string) (*runProc, error) {
	_ = os.RemoveAll(dir)
	log, err := os.Create(dir + ".log")
	if err != nil {
		return nil, err
	}
	all := append([]string{"run", "--timeout=30m", "--kubeconfig=" + kubeconfig, "--artifacts=" + dir, "--ginkgo.no-color"}, args...)
	cmd := exec.CommandContext(ctx, string(bin), all...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	p := &runProc{cmd: cmd, log: dir + ".log", done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// signal sends sig to the run's process group.
func (p *runProc) signal(sig syscall.Signal) error { return syscall.Kill(-p.cmd.Process.Pid, sig) }

// wait waits for the run to end, at most within; past it the group is killed.
func (p *runProc) wait(within time.Duration) error {
	select {
	case <-p.done:
		return nil
	case <-time.After(within):
		_ = p.signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("still running after %s: killed", within)
	}
}

// output is what the run printed so far.
func (p *runProc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// gpuconformOutput runs `gpuconform ARGS` to its end and returns what it printed.
func gpuconformOutput(ctx context.Context, bin shipped, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, string(bin), args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// judgeRun counts the run's specs into res, and returns its verdict and its failed specs.
func judgeRun(ctx context.Context, bin shipped, dir string, res *hardeningResult) (string, []string) {
	verdict := bin.verdict(ctx, dir)
	suites, err := reports.ReadGinkgoJSON(filepath.Join(dir, "gpuconform-report.json"))
	if err != nil {
		return verdict, []string{fmt.Sprintf("no Ginkgo report in %s: %v", dir, err)}
	}
	passed, failed, _ := reports.Count(suites)
	res.Passed, res.Failed = res.Passed+passed, res.Failed+failed
	var bad []string
	if failed > 0 {
		bad = append(bad, fmt.Sprintf("%d spec(s) of %s failed", failed, filepath.Base(dir)))
	}
	return verdict, bad
}

// twoRuns starts two allocation runs 2 s apart: both must end without a failure, the later one saying
// whom it waited for (their specs fill nodes on both paths, so they may not run side by side).
func twoRuns(ctx context.Context, h hardeningEnv, kubeconfig string, res *hardeningResult) (string, []string) {
	first, err := startRun(ctx, h.bin, kubeconfig, filepath.Join(h.dir, "first"), allocationOnly...)
	if err != nil {
		return "-", []string{err.Error()}
	}
	time.Sleep(2 * time.Second)
	second, err := startRun(ctx, h.bin, kubeconfig, filepath.Join(h.dir, "second"), allocationOnly...)
	if err != nil {
		_ = first.wait(time.Minute)
		return "-", []string{err.Error()}
	}
	var bad []string
	for _, p := range []*runProc{first, second} {
		if err := p.wait(20 * time.Minute); err != nil {
			bad = append(bad, err.Error())
		}
	}
	v1, b1 := judgeRun(ctx, h.bin, filepath.Join(h.dir, "first"), res)
	v2, b2 := judgeRun(ctx, h.bin, filepath.Join(h.dir, "second"), res)
	bad = append(append(bad, b1...), b2...)
	if v1 != v2 {
		bad = append(bad, fmt.Sprintf("the runs' verdicts differ: %s and %s", v1, v2))
	}
	if !strings.Contains(second.output(), "waited ") || !strings.Contains(second.output(), "for other gpuconform runs") {
		bad = append(bad, "the later run does not say whom it waited for")
	}
	return v2, bad
}

// cleanupBesideLiveRun runs `gpuconform cleanup`, then a run with --cleanup-leftovers on the other path,
// while an allocation run on the device-plugin path has its namespaces: the cleanup must name the live
// run and delete none of its objects, the second run must run beside it (their paths do not conflict)
// and neither may fail.
func cleanupBesideLiveRun(ctx context.Context, h hardeningEnv, kubeconfig string, res *hardeningResult) (string, []string) {
	dir := filepath.Join(h.dir, "live")
	live, err := startRun(ctx, h.bin, kubeconfig, dir, "--procs=3", "--ginkgo.label-filter=scenario:allocation && path:device-plugin")
	if err != nil {
		return "-", []string{err.Error()}
	}
	var beside *runProc
	var bad []string
	var seen []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		nss, err := h.clients.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: fixtures.RunLabel})
		if err != nil {
			return false, nil //nolint:nilerr // the API server answering again is what the poll waits for too
		}
		seen = seen[:0]
		for _, ns := range nss.Items {
			if ns.DeletionTimestamp == nil {
				seen = append(seen, ns.Name)
			}
		}
		return len(seen) > 0, nil
	})
	if err != nil {
		bad = append(bad, "the live run never had a namespace to leave alone: "+err.Error())
	} else {
		out, cerr := gpuconformOutput(ctx, h.bin, "cleanup", "--kubeconfig="+kubeconfig)
		_ = os.WriteFile(filepath.Join(h.dir, "cleanup.log"), []byte(out), 0o644)
		if cerr != nil {
			bad = append(bad, fmt.Sprintf("gpuconform cleanup: %v: %s", cerr, firstLine(out)))
		}
		if !strings.Contains(out, "left alone") || strings.Contains(out, "deleted") {
			bad = append(bad, "gpuconform cleanup did not name the live run as left alone, or deleted something (see cleanup.log)")
		}
		beside, err = startRun(ctx, h.bin, kubeconfig, filepath.Join(h.dir, "beside"), "--procs=3", "--cleanup-leftovers",
			"--ginkgo.label-filter=scenario:allocation && path:dra")
		if err != nil {
			bad = append(bad, err.Error())
		}
		for _, ns := range seen {
			if !strings.Contains(out, "Namespace "+ns) {
				continue // the run may have finished with it meanwhile
			}
			got, err := h.clients.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err == nil && got.DeletionTimestamp != nil && !strings.Contains(live.output(), "PASSED") {
				bad = append(bad, "the live run's namespace "+ns+" is being deleted")
			}
		}
	}
	if err := live.wait(20 * time.Minute); err != nil {
		bad = append(bad, err.Error())
	}
	verdict, b := judgeRun(ctx, h.bin, dir, res)
	bad = append(bad, b...)
	if beside != nil {
		if err := beside.wait(20 * time.Minute); err != nil {
			bad = append(bad, err.Error())
		}
		if strings.Contains(beside.output(), "for other gpuconform runs") {
			bad = append(bad, "the run on the other path waited for the live one: their paths do not conflict")
		}
		v2, b2 := judgeRun(ctx, h.bin, filepath.Join(h.dir, "beside"), res)
		if v2 != verdict {
			bad = append(bad, fmt.Sprintf("the runs' verdicts differ: %s and %s", verdict, v2))
		}
		bad = append(bad, b2...)
	}
	return verdict, bad
}

// interruptRehearsal starts the upgrade rehearsal, waits until the canary is upgraded (its fault mark
// says upgraded-from=…) and sends sig to the run. SIGINT: the run must restore the canary and sign off
// INCOMPLETE for the interruption. SIGKILL: the next run must name what was left (once the killed run's
// lease has expired) and refuse, INCOMPLETE, and `gpuconform cleanup` must restore it.
func interruptRehearsal(sig syscall.Signal) func(ctx context.Context, h hardeningEnv, kubeconfig string, res *hardeningResult) (string, []string) {
	return func(ctx context.Context, h hardeningEnv, kubeconfig string, res *hardeningResult) (string, []string) {
		dir := filepath.Join(h.dir, "rehearsal")
		drivers, err := driverVersions(ctx, h)
		if err != nil {
			return "-", []string{err.Error()}
		}
		p, err := startRun(ctx, h.bin, kubeconfig, dir, rehearsalOnly...)
		if err != nil {
			return "-", []string{err.Error()}
		}
		canary, err := waitUpgraded(ctx, h)
		if err != nil {
			_ = p.signal(syscall.SIGKILL)
			_ = p.wait(time.Minute)
			return "-", []string{"the rehearsal never upgraded the canary: " + err.Error()}
		}
		start := time.Now()
		if err := p.signal(sig); err != nil {
			return "-", []string{err.Error()}
		}
		var bad []string
		if err := p.wait(10 * time.Minute); err != nil {
			bad = append(bad, err.Error())
		}
		res.Note = fmt.Sprintf("%s at the canary %s's upgrade; the run ended %s later", sig, canary, time.Since(start).Round(time.Second))
		if sig == syscall.SIGINT {
			verdict := h.bin.verdict(ctx, dir)
			bad = append(bad, signoffLacks(filepath.Join(dir, "signoff.md"), []string{"interrupted by a signal", "rolled back to driver"})...)
			return verdict, append(bad, clusterRestored(ctx, h, drivers)...)
		}
		// SIGKILL: nothing ran the cleanup; the next run waits for the lease to expire, then names the
		// canary's mark and refuses.
		next := filepath.Join(h.dir, "next")
		p2, err := startRun(ctx, h.bin, kubeconfig, next, rehearsalOnly...)
		if err != nil {
			return "-", append(bad, err.Error())
		}
		if err := p2.wait(15 * time.Minute); err != nil {
			bad = append(bad, err.Error())
		}
		verdict := h.bin.verdict(ctx, next)
		bad = append(bad, signoffLacks(filepath.Join(next, "signoff.md"), []string{"refused to start", "upgraded-from=", "gpuconform cleanup"})...)
		out, cerr := gpuconformOutput(ctx, h.bin, "cleanup", "--kubeconfig="+kubeconfig, "--disruptive")
		_ = os.WriteFile(filepath.Join(h.dir, "cleanup.log"), []byte(out), 0o644)
		if cerr != nil {
			bad = append(bad, fmt.Sprintf("gpuconform cleanup: %v: %s", cerr, firstLine(out)))
		}
		return verdict, append(bad, clusterRestored(ctx, h, drivers)...)
	}
}

// driverVersions are the nodes' driver versions (the label the rehearsal reads), by node.
func driverVersions(ctx context.Context, h hardeningEnv) (map[string]string, error) {
	nodes, err := h.clients.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = n.Labels[upgrade.DriverVersionLabel]
	}
	return out, nil
}

// waitUpgraded waits for a node carrying the rehearsal's upgraded-from mark and returns its name.
func waitUpgraded(ctx context.Context, h hardeningEnv) (string, error) {
	var node string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes, err := h.clients.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // a failed list is tried again until the rehearsal's mark shows
		}
		for _, n := range nodes.Items {
			if strings.Contains(n.Annotations[faults.FaultsAnnotation], "upgraded-from=") {
				node = n.Name
				return true, nil
			}
		}
		return false, nil
	})
	return node, err
}

// clusterRestored lists what is not as a run found it: a node on another driver than drivers says, still
// marked by a run or cordoned, and namespaces of a run.
func clusterRestored(ctx context.Context, h hardeningEnv, drivers map[string]string) []string {
	var bad []string
	nodes, err := h.clients.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{err.Error()}
	}
	for _, n := range nodes.Items {
		if v := n.Labels[upgrade.DriverVersionLabel]; v != drivers[n.Name] {
			bad = append(bad, fmt.Sprintf("node %s is on driver %q, was %q", n.Name, v, drivers[n.Name]))
		}
		if m := n.Annotations[faults.FaultsAnnotation]; m != "" {
			bad = append(bad, fmt.Sprintf("node %s still carries %s", n.Name, m))
		}
		if n.Spec.Unschedulable {
			bad = append(bad, fmt.Sprintf("node %s is still cordoned", n.Name))
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		nss, err := h.clients.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: fixtures.RunLabel})
		return err == nil && len(nss.Items) == 0, nil
	})
	if err != nil {
		bad = append(bad, "namespaces of a run are still there")
	}
	return bad
}
