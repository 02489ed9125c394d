package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpuconform.io/gpuconform/framework/poollock"
	"gpuconform.io/gpuconform/internal/syncbuf"
	"gpuconform.io/gpuconform/reports"
)

// envKilledHolder asks each process of a test's parallel run to take a pool lock as a spec does, write
// the lock directory to the file it names, and die of SIGKILL holding it: nothing of the suite's removes
// the locks of a process that dies so.
const envKilledHolder = "GPUCONFORM_TEST_KILLED_HOLDER"

// TestMain lets this test binary be the processes of a parallel run, as the shipped binary is: Ginkgo's
// CLI starts it through a link named gpuconform.test, the test binary's own name.
func TestMain(m *testing.M) {
	if isWorker(os.Args[0]) {
		if note := os.Getenv(envKilledHolder); note != "" {
			holdAPoolLockAndDie(note)
		}
		os.Exit(workerMain(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

func holdAPoolLockAndDie(note string) {
	dir := poollock.Dir(os.Getenv(envRunID))
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

func TestProcsFlagTakesEveryFormAndRefusesNonsense(t *testing.T) {
	for _, args := range [][]string{{"--procs=3", "--disruptive"}, {"-procs=3", "--disruptive"}, {"--procs", "3", "--disruptive"}, {"--disruptive", "-procs", "3"}} {
		rest, n, err := procsFlag(args)
		if err != nil || n != 3 || !slices.Equal(rest, []string{"--disruptive"}) {
			t.Errorf("procsFlag(%q) = %q, %d, %v; want [--disruptive], 3, nil", args, rest, n, err)
		}
	}
	if rest, n, err := procsFlag([]string{"--kubeconfig=k"}); err != nil || n != 1 || !slices.Equal(rest, []string{"--kubeconfig=k"}) {
		t.Errorf("without --procs: %q, %d, %v; want the arguments, 1, nil", rest, n, err)
	}
	for _, bad := range [][]string{{"--procs=0"}, {"--procs=-2"}, {"--procs=two"}, {"--procs"}} {
		if _, _, err := procsFlag(bad); err == nil {
			t.Errorf("procsFlag(%q) took it", bad)
		}
	}
}

func TestGoTestFlagsAreDroppedForTheProcesses(t *testing.T) {
	got := withoutGoTestFlags([]string{"--test.timeout=0", "-test.v", "--ginkgo.parallel.process=2", "--kubeconfig=k"})
	if want := []string{"--ginkgo.parallel.process=2", "--kubeconfig=k"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// parsedSuiteFlags is a flag set with the flags cliArgs asks about, args parsed into it as runCommand
// parses them into flag.CommandLine (which a test should not parse: what it sets stays set).
func parsedSuiteFlags(t *testing.T, args ...string) *flag.FlagSet {
	t.Helper()
	fs := flag.NewFlagSet("gpuconform run", flag.ContinueOnError)
	fs.Bool("disruptive", false, "")
	fs.Bool("ginkgo.silence-skips", false, "")
	fs.Int64("ginkgo.seed", 0, "")
	fs.String("ginkgo.focus", "", "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestCLIArgsCarryTheCountAndTheReportersSettingsThenTheLink(t *testing.T) {
	got := cliArgs(2, "/tmp/x/gpuconform.test", parsedSuiteFlags(t, "--disruptive"), false)
	if got[0] != "--procs=2" || got[len(got)-1] != "/tmp/x/gpuconform.test" {
		t.Errorf("got %q: the count first, the link last", got)
	}
	for _, want := range []string{"--no-color", "--silence-skips"} {
		if !slices.Contains(got, want) {
			t.Errorf("got %q: %s missing (output to a pipe; skips silent unless asked, as in a serial run)", got, want)
		}
	}
	if got := cliArgs(2, "l", parsedSuiteFlags(t, "--ginkgo.silence-skips=false"), true); slices.Contains(got, "--silence-skips") || slices.Contains(got, "--no-color") {
		t.Errorf("got %q: a terminal gets colour, and skips shown when the user asked", got)
	}
}

func TestCLIArgsPassTheSeedOnlyWhenItWasGiven(t *testing.T) {
	hasSeed := func(args []string) bool {
		return slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--seed=") })
	}
	if got := cliArgs(2, "l", parsedSuiteFlags(t, "-ginkgo.seed", "7"), false); !hasSeed(got) {
		t.Errorf("got %q: --ginkgo.seed was given, so the CLI must use that seed rather than its own", got)
	}
	// A value that reads like the flag's name is not the flag.
	if got := cliArgs(2, "l", parsedSuiteFlags(t, "--ginkgo.focus", "ginkgo.seed"), false); hasSeed(got) {
		t.Errorf("got %q: no --ginkgo.seed was given, so the CLI picks the seed", got)
	}
}

func TestFollowCopiesLinesAsTheyAreAppended(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lines")
	if err := os.WriteFile(path, []byte("[gpuconform] PASSED one\n[gpuconform] PA"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); follow(ctx, path, &out) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "one\n") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // more than one poll: the half-written line must still wait
	if got := out.String(); got != "[gpuconform] PASSED one\n" {
		t.Fatalf("followed %q before the second line was finished; want only the first line", got)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("SSED two\n")
	_ = f.Close()
	for !strings.Contains(out.String(), "two\n") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if got, want := out.String(), "[gpuconform] PASSED one\n[gpuconform] PASSED two\n"; got != want {
		t.Errorf("followed %q, want %q", got, want)
	}
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
	for _, k := range []string{envSpecLines, envWorkDir} {
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
