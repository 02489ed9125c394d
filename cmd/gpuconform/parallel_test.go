package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"gpuconform.io/gpuconform/framework/poollock"
	"gpuconform.io/gpuconform/internal/parallel"
	"gpuconform.io/gpuconform/reports"
)

// envKilledHolder asks each process of a test's parallel run to take a pool lock as a spec does, write
// the lock directory to the file it names, and die of SIGKILL holding it: nothing of the suite's removes
// the locks of a process that dies so.
const envKilledHolder = "GPUCONFORM_TEST_KILLED_HOLDER"

// TestMain lets this test binary be the processes of a parallel run, as the shipped binary is: Ginkgo's
// CLI starts it through a link named gpuconform.test, the test binary's own name.
func TestMain(m *testing.M) {
	if parallel.IsWorker(os.Args[0]) {
		if note := os.Getenv(envKilledHolder); note != "" {
			holdAPoolLockAndDie(note)
		}
		os.Exit(workerMain(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

func holdAPoolLockAndDie(note string) {
	dir := poollock.Dir(os.Getenv(parallel.EnvRunID))
	if _, _, err := poollock.Hold(context.Background(), dir, []string{"path-dra"}, poollock.Shared); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	f, err := os.OpenFile(note, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_, _ = fmt.Fprintln(f, dir)
	_ = f.Close()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
}

// TestParallelRunStartsItsProcessesThroughGinkgosCLI runs `gpuconform run --procs=2` for real against a
// kubeconfig that does not exist: Ginkgo's CLI starts two processes of this binary, each stops at the
// kubeconfig, the first records why, and the verdict is decided from that record as in a serial run.
func TestParallelRunStartsItsProcessesThroughGinkgosCLI(t *testing.T) {
	arts := t.TempDir()
	if err := os.WriteFile(filepath.Join(arts, "signoff.md"), []byte("a previous run's"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := runCommand(t.Context(), []string{"--procs=2", "--kubeconfig=" + filepath.Join(arts, "missing"), "--artifacts=" + arts}, &out, &errb)
	if code != reports.ExitNoGo {
		t.Fatalf("exit %d, want %d (NO-GO); stdout %s stderr %s", code, reports.ExitNoGo, out.String(), errb.String())
	}
	rec, err := reports.ReadRecord(filepath.Join(arts, reports.RecordFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rec.SetupFailure, "cannot load kubeconfig") {
		t.Errorf("the record's setup failure is %q; want the first process's reason (the kubeconfig)", rec.SetupFailure)
	}
	if b, _ := os.ReadFile(filepath.Join(arts, "signoff.md")); strings.Contains(string(b), "a previous run's") {
		t.Error("the previous run's signoff was left as this run's")
	}
	for _, k := range []string{parallel.EnvSpecLines, parallel.EnvWorkDir} {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("%s=%q was left in the parent's environment", k, v)
		}
	}
}

// TestParallelRunsPoolLocksGoWithItsTempDir runs `gpuconform run --procs=2` whose processes each take a
// pool lock and are killed holding it: the locks were in the parent's temporary directory, and nothing is
// left in $TMPDIR after the run.
func TestParallelRunsPoolLocksGoWithItsTempDir(t *testing.T) {
	arts, tmp := t.TempDir(), t.TempDir()
	note := filepath.Join(arts, "lock-dirs")
	t.Setenv("TMPDIR", tmp)
	t.Setenv(envKilledHolder, note)
	var out, errb bytes.Buffer
	_ = runCommand(t.Context(), []string{"--procs=2", "--kubeconfig=" + filepath.Join(arts, "missing"), "--artifacts=" + arts}, &out, &errb)
	b, err := os.ReadFile(note)
	if err != nil {
		t.Fatalf("no process took a lock: %v; stderr %s", err, errb.String())
	}
	dirs := strings.Fields(string(b))
	if len(dirs) != 2 {
		t.Errorf("lock directories %q; want one from each of the 2 processes", dirs)
	}
	for _, d := range dirs {
		if rel, err := filepath.Rel(tmp, d); err != nil || !strings.HasPrefix(rel, "gpuconform-procs-") || filepath.Dir(filepath.Dir(rel)) != "." {
			t.Errorf("a process's lock directory is %s; want one inside the parent's %s/gpuconform-procs-*", d, tmp)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the run left %v in $TMPDIR", left)
	}
	if v, ok := os.LookupEnv(poollock.EnvDir); ok {
		t.Errorf("%s=%q was left in the parent's environment", poollock.EnvDir, v)
	}
}

func TestParallelUsageErrorsComeBeforeAnythingStarts(t *testing.T) {
	arts := filepath.Join(t.TempDir(), "arts")
	for _, args := range [][]string{{"--procs=0"}, {"--procs=2", "--ginkgo.parallel.process=1"}, {"--procs=2", "--no-such-flag"}} {
		var out, errb bytes.Buffer
		if code := runCommand(t.Context(), append(args, "--artifacts="+arts), &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage); stderr %s", args, code, errb.String())
		}
		if _, err := os.Stat(arts); err == nil {
			t.Errorf("%q: the artifacts directory was created", args)
		}
	}
}
