package parallel

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gpuconform.io/gpuconform/internal/syncbuf"
)

func TestProcsFlagTakesEveryFormAndRefusesNonsense(t *testing.T) {
	for _, args := range [][]string{{"--procs=3", "--disruptive"}, {"-procs=3", "--disruptive"}, {"--procs", "3", "--disruptive"}, {"--disruptive", "-procs", "3"}} {
		rest, n, err := ProcsFlag(args)
		if err != nil || n != 3 || !slices.Equal(rest, []string{"--disruptive"}) {
			t.Errorf("ProcsFlag(%q) = %q, %d, %v; want [--disruptive], 3, nil", args, rest, n, err)
		}
	}
	if rest, n, err := ProcsFlag([]string{"--kubeconfig=k"}); err != nil || n != 1 || !slices.Equal(rest, []string{"--kubeconfig=k"}) {
		t.Errorf("without --procs: %q, %d, %v; want the arguments, 1, nil", rest, n, err)
	}
	for _, bad := range [][]string{{"--procs=0"}, {"--procs=-2"}, {"--procs=two"}, {"--procs"}} {
		if _, _, err := ProcsFlag(bad); err == nil {
			t.Errorf("ProcsFlag(%q) took it", bad)
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
