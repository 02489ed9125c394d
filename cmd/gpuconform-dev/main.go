// Command gpuconform-dev holds the maintainers' harnesses, kept out of the shipped binary: selfcheck and
// hardening run the shipped binary (make build's _output/bin/gpuconform) against the local cluster as a
// child process, so what they prove is that binary; scale measures the framework against a simulated
// cluster on a throwaway API server (envtest).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"gpuconform.io/gpuconform/framework/cli"
	"gpuconform.io/gpuconform/infra/localcluster"
	"gpuconform.io/gpuconform/reports"
)

const usage = `gpuconform-dev: the maintainers' harnesses of gpuconform

Usage:
  gpuconform-dev selfcheck [--faults F,…] [--gpuconform BIN]
                 on the local cluster: switch each fault of the fake GPU stack on and require the
                 specs that must catch it to fail
  gpuconform-dev hardening [--variants V,…] [--gpuconform BIN]
                 on the local cluster: taint the GPU nodes, enforce a restricted admission policy, or
                 run as a team in one namespace, and require GO (and NO-GO, found at once, for an
                 untolerated taint, Kueue's controller scaled to zero or the GPU agent scheduled
                 on no node)
  gpuconform-dev sharing [--modes M,…] [--gpuconform BIN]
                 on the local cluster: bring the fake GPUs into each sharing mode (time-slicing, MPS,
                 MIG single and mixed, DRA partitions) in turn, run the sharing scenario (and the
                 allocation scenario where the mode's row says) and require GO; ends exclusive
  gpuconform-dev scale [--nodes N]
                 preflight, discovery and diagnose against a simulated N-node GPU cluster (a
                 throwaway API server built here)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "selfcheck":
		return selfcheckCommand(ctx, args[1:], stdout, stderr)
	case "hardening":
		return hardeningCommand(ctx, args[1:], stdout, stderr)
	case "sharing":
		return sharingCommand(ctx, args[1:], stdout, stderr)
	case "scale":
		return scaleCommand(ctx, args[1:], stdout, stderr)
	case "align-modules":
		return alignModulesCommand(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stderr, usage)
		return 0
	}
	fmt.Fprintf(stderr, "gpuconform-dev: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// localCheckout finds the checkout the command runs in (the local cluster's commands need its sources and
// outputs) and fills the defaults of --kubeconfig (its _output/kubeconfig), --artifacts
// (_artifacts/<name>) and --gpuconform (_output/bin/gpuconform) when they were not given; any pointer
// may be nil.
func localCheckout(kubeconfig, artifacts, binary *string, name string) (string, error) {
	wd, _ := os.Getwd()
	root, err := localcluster.FindRepoRoot(wd)
	if err != nil {
		return "", err
	}
	fill := func(p *string, path ...string) {
		if p != nil && *p == "" {
			*p = filepath.Join(append([]string{root}, path...)...)
		}
	}
	fill(kubeconfig, "_output", "kubeconfig")
	fill(artifacts, "_artifacts", name)
	fill(binary, "_output", "bin", "gpuconform")
	if binary != nil {
		if _, err := os.Stat(*binary); err != nil {
			return root, fmt.Errorf("the shipped binary: %w (make build writes it)", err)
		}
	}
	return root, nil
}

// harness is what each maintainer harness runs with: the local cluster's kubeconfig, the rows it runs
// (comma-separated; all when empty), where their artifacts go, the binary it proves, and this checkout.
type harness struct {
	kubeconfig, only, artifacts, binary, root string
}

// parseHarness parses a harness's flags, its rows selected by --rowsFlag (each a row: "variation", "mode"),
// and fills what was not given from this checkout (localCheckout). It prints why it failed.
func parseHarness(name, rowsFlag, row, rowsUsage string, args []string, stderr io.Writer) (harness, bool) {
	var h harness
	fs := cli.FlagSet(name, stderr)
	fs.StringVar(&h.kubeconfig, "kubeconfig", "", "kubeconfig of the local cluster (default: _output/kubeconfig of this checkout)")
	fs.StringVar(&h.only, rowsFlag, "", rowsUsage)
	fs.StringVar(&h.artifacts, "artifacts", "", fmt.Sprintf("directory for each %s's run artifacts (default: _artifacts/%s)", row, name))
	fs.StringVar(&h.binary, "gpuconform", "", "the shipped binary to prove (default: _output/bin/gpuconform of this checkout)")
	if err := fs.Parse(args); err != nil {
		return h, false
	}
	root, err := localCheckout(&h.kubeconfig, &h.artifacts, &h.binary, name)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform %s: %v\n", name, err)
		return h, false
	}
	h.root = root
	return h, true
}

// shipped is the gpuconform binary under test.
type shipped string

// run runs `gpuconform run --cleanup-leftovers ARGS` (Ginkgo runs one suite per process), its output to
// log. The harnesses drive the fake stack of this checkout's own cluster: what an interrupted harness or
// run left there is deleted first, not a reason to refuse every run after it.
func (bin shipped) run(ctx context.Context, log io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, string(bin), append([]string{"run", "--cleanup-leftovers"}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	return cmd.Run()
}

// verdict is the signoff verdict of the run whose artifacts are in dir, as `gpuconform report DIR`
// decides it (its exit code).
func (bin shipped) verdict(ctx context.Context, dir string) string {
	err := exec.CommandContext(ctx, string(bin), "report", dir).Run()
	code := 0
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		code = exit.ExitCode()
	} else if err != nil {
		return "no report"
	}
	switch code {
	case reports.ExitGo:
		return string(reports.OutcomeGo)
	case reports.ExitNoGo:
		return string(reports.OutcomeNoGo)
	case reports.ExitIncomplete:
		return string(reports.OutcomeIncomplete)
	}
	return "no report"
}

// alignModulesCommand runs localcluster.AlignWrapperModules in the checkout.
func alignModulesCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "gpuconform-dev align-modules: takes no arguments, got %q\n", args)
		return 2
	}
	root, err := localcluster.FindRepoRoot(".")
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform-dev align-modules: %v (run it inside the checkout)\n", err)
		return 2
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	if err := localcluster.AlignWrapperModules(ctx, root, logf); err != nil {
		fmt.Fprintf(stderr, "gpuconform-dev align-modules: %v\n", err)
		return 1
	}
	return 0
}
