package runner

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"gpuconform.io/gpuconform/fixtures/rbac"
	"gpuconform.io/gpuconform/framework/config"

	_ "github.com/onsi/ginkgo/v2" // its flags, as the pod's binary has them
)

func TestParseArgs(t *testing.T) {
	o, err := ParseArgs([]string{"--in-cluster", "--image", "reg/gpuconform:v1", "--kubeconfig=/k", "--context", "c",
		"--artifacts=/out", "--disruptive", "--ginkgo.label-filter=scenario:allocation", "--workload-image=reg/w:v1", "--timeout=2h"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Image != "reg/gpuconform:v1" || o.Kubeconfig != "/k" || o.Context != "c" || o.Artifacts != "/out" || !o.Disruptive || o.Timeout != 2*time.Hour || o.Hold != 10*time.Minute {
		t.Errorf("runner options: %+v", o)
	}
	// The client's connection and artifacts flags stay here; the suite's go to the pod.
	want := []string{"--disruptive", "--ginkgo.label-filter=scenario:allocation", "--workload-image=reg/w:v1", "--timeout=2h"}
	if !slices.Equal(o.SuiteArgs, want) {
		t.Errorf("suite args %q, want %q", o.SuiteArgs, want)
	}
	if !slices.Equal(o.Levels(), []string{rbac.LevelNonDisruptive, rbac.LevelDisruptive}) {
		t.Errorf("levels %v", o.Levels())
	}
	team, err := ParseArgs([]string{"--in-cluster", "--image=x", "--namespace", "team-a"}, io.Discard)
	if err != nil || !slices.Equal(team.Levels(), []string{rbac.LevelTeam}) || !slices.Contains(team.SuiteArgs, "--namespace=team-a") || team.Timeout != 90*time.Minute {
		t.Errorf("team level: %+v %v", team, err)
	}
	for _, bad := range [][]string{{"--in-cluster"}, {"--in-cluster", "--image=x", "--config=local.yaml"}, {"--in-cluster", "--image=x", "--product-metadata=fixtures/conformance/local-product.yaml"}, {"--in-cluster", "--image=x", "stray"},
		{"--image=x", "--no-such-flag"}, {"--image=x", "--ginkgo.no-such-flag"}, {"--image=x", "--timeout=soon"}, {"--image=x", "--disruptive=maybe"}} {
		if _, err := ParseArgs(bad, io.Discard); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	var help strings.Builder
	if _, err := ParseArgs([]string{"--in-cluster", "--help"}, &help); !errors.Is(err, flag.ErrHelp) || !strings.Contains(help.String(), "--image IMG") {
		t.Errorf("--help: %v, %q", err, help.String())
	}
}

// make incluster's command line: exactly the suite's flags reach the pod, in order, repeated ones as
// often as given, Ginkgo's booleans bare.
func TestParseArgsForwardsWhatWasGiven(t *testing.T) {
	o, err := ParseArgs([]string{"--in-cluster", "--image=reg/gpuconform:v1", "--kubeconfig=/k", "--artifacts=/a", "--require=scenario:allocation",
		"--ginkgo.label-filter=scenario:allocation", "--ginkgo.fail-on-empty", "--toleration", "a:NoSchedule", "--toleration=b=c:NoExecute",
		"--hold-artifacts=1m", "--disruptive=false", "--ginkgo.focus=x", "--ginkgo.focus=y"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--require=scenario:allocation", "--ginkgo.label-filter=scenario:allocation", "--ginkgo.fail-on-empty",
		"--toleration=a:NoSchedule", "--toleration=b=c:NoExecute", "--disruptive=false", "--ginkgo.focus=x", "--ginkgo.focus=y"}
	if !slices.Equal(o.SuiteArgs, want) || o.Hold != time.Minute || o.Disruptive {
		t.Errorf("suite args %q, want %q (hold %s, disruptive %v)", o.SuiteArgs, want, o.Hold, o.Disruptive)
	}
}

// Every flag of the suite's flag table but the runner's own is passed on (whether its value makes a valid
// configuration is ParseArgs's next step, tested below).
func TestParseArgsForwardsEverySuiteFlag(t *testing.T) {
	table := flag.NewFlagSet("suite", flag.ContinueOnError)
	config.RegisterFlags(table)
	n := 0
	table.VisitAll(func(f *flag.Flag) {
		if own(f.Name) {
			return
		}
		n++
		arg := "--" + f.Name + "=1h"
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			arg = "--" + f.Name + "=true"
		}
		o, _, err := parse([]string{"--image=x", arg}, io.Discard)
		if err != nil || len(o.SuiteArgs) != 1 || !strings.HasPrefix(o.SuiteArgs[0], "--"+f.Name) {
			t.Errorf("%s: forwarded %q, %v", arg, o.SuiteArgs, err)
		}
	})
	if n < 30 {
		t.Errorf("only %d suite flags in the table", n)
	}
}

// The runner knows every Ginkgo flag the pod's binary has (Ginkgo registers them on the command line's
// FlagSet when it is linked in), except the deprecated ones that set nothing.
func TestParseArgsKnowsGinkgosFlags(t *testing.T) {
	n := 0
	flag.CommandLine.VisitAll(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Name, "ginkgo.") || strings.HasPrefix(f.Usage, "[DEPRECATED]") {
			return
		}
		n++
		arg := "--" + f.Name + "=" + f.DefValue
		if _, err := ParseArgs([]string{"--image=x", arg}, io.Discard); err != nil {
			t.Errorf("%s: %v", arg, err)
		}
	})
	if n < 30 {
		t.Errorf("only %d Ginkgo flags on the command line", n)
	}
}

func TestRequested(t *testing.T) {
	for args, want := range map[string]bool{"--in-cluster": true, "-in-cluster=true": true, "--in-cluster=false": false, "--image=x": false, "in-cluster": false} {
		if got := Requested(strings.Fields(args)); got != want {
			t.Errorf("%q: %v, want %v", args, got, want)
		}
	}
}

// The suite's configuration is checked before anything is created, and its namespace decides the level:
// a --local-queue NS/NAME runs at the team level in NS.
func TestParseArgsChecksTheSuitesConfiguration(t *testing.T) {
	if _, err := ParseArgs([]string{"--image=x", "--local-queue=team-lq"}, io.Discard); !errors.As(err, new(*config.UsageError)) {
		t.Errorf("a bare --local-queue without a namespace: %v, want a usage error", err)
	}
	o, err := ParseArgs([]string{"--image=x", "--local-queue=team-a/gpus", "--timeout=2h"}, io.Discard)
	if err != nil || o.Namespace != "team-a" || o.Timeout != 2*time.Hour {
		t.Errorf("--local-queue=team-a/gpus: namespace %q, timeout %s, %v", o.Namespace, o.Timeout, err)
	}
}

// --procs goes to the pod as given and sizes it; a count below one, or Ginkgo's own process numbering
// beside it, is a usage error before anything is created.
func TestParseArgsProcs(t *testing.T) {
	o, err := ParseArgs([]string{"--in-cluster", "--image=x", "--procs", "3", "--ginkgo.label-filter=scenario:allocation"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"--procs=3", "--ginkgo.label-filter=scenario:allocation"}; o.Procs != 3 || !slices.Equal(o.SuiteArgs, want) {
		t.Errorf("procs %d, suite args %q; want 3 and %q", o.Procs, o.SuiteArgs, want)
	}
	if o, err := ParseArgs([]string{"--image=x"}, io.Discard); err != nil || o.Procs != 1 {
		t.Errorf("without --procs: procs %d, err %v; want 1", o.Procs, err)
	}
	for _, bad := range [][]string{{"--image=x", "--procs=0"}, {"--image=x", "--procs=two"}, {"--image=x", "--procs=2", "--ginkgo.parallel.process=1"}} {
		if _, err := ParseArgs(bad, io.Discard); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// --cleanup-leftovers reaches the runner from the suite's flags.
func TestParseArgsCleanupLeftovers(t *testing.T) {
	for args, want := range map[string]bool{"--image=x": false, "--image=x --cleanup-leftovers": true} {
		o, err := ParseArgs(strings.Fields(args), io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		if o.CleanupLeftovers != want {
			t.Errorf("%s: CleanupLeftovers = %v, want %v", args, o.CleanupLeftovers, want)
		}
	}
}
