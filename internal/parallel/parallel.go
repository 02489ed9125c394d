// Package parallel runs the suite in N Ginkgo processes (`gpuconform run --procs=N`). Ginkgo's parallel
// protocol (the server the processes take their next spec from, the report it aggregates for the
// ReportAfterSuite nodes on process 1) is internal to its CLI, so the binary hands the run to the CLI's
// own `run` command (github.com/onsi/ginkgo/v2/ginkgo/run) as a precompiled suite: a link named
// gpuconform.test to this executable. Started under that name, the binary is one of those processes
// (IsWorker; StartWorker prepares it, and the binary's main runs the suite). The parent decides the
// verdict from the artifacts, as a serial run does.
package parallel

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/formatter"
	"github.com/onsi/ginkgo/v2/ginkgo/command"
	ginkgorun "github.com/onsi/ginkgo/v2/ginkgo/run"

	"gpuconform.io/gpuconform/framework/cli"
	"gpuconform.io/gpuconform/framework/poollock"
	"gpuconform.io/gpuconform/framework/run"
)

const (
	// WorkerName is the link's name: Ginkgo's CLI runs a precompiled suite only from a file named *.test.
	WorkerName = "gpuconform.test"
	// EnvWorkDir is the parent's working directory: the CLI starts each process in the link's directory,
	// and relative paths on the command line (--kubeconfig, --artifacts, --config, …) are the parent's.
	EnvWorkDir = "GPUCONFORM_WORKDIR"
	// EnvSpecLines is the file the processes append their per-spec lines to. Ginkgo buffers a parallel
	// process's stdout (it shows it only for a process that fails), so the parent follows this file instead
	// and the lines still come as each spec finishes.
	EnvSpecLines = "GPUCONFORM_SPEC_LINES"
	// EnvRunID makes every process label what it creates with one run ID (suite.Prepare reads it).
	EnvRunID = "GPUCONFORM_RUN_ID"
)

// IsWorker says whether this process was started by Ginkgo's CLI as one of a parallel run's processes:
// under the link's name, with the parent's spec-line file in its environment.
func IsWorker(argv0 string) bool {
	return filepath.Base(argv0) == WorkerName && os.Getenv(EnvSpecLines) != ""
}

// StartWorker prepares one process of a parallel run before it runs the suite: it moves to the parent's
// working directory, parses args (less the go test flags) into flag.CommandLine, and returns where the
// process writes its per-spec lines (the parent's file) and what closes it.
func StartWorker(args []string, stderr io.Writer) (specOut io.Writer, done func(), err error) {
	if wd := os.Getenv(EnvWorkDir); wd != "" {
		if err := os.Chdir(wd); err != nil {
			return nil, nil, err
		}
	}
	fs := flag.CommandLine
	fs.Init(WorkerName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(withoutGoTestFlags(args)); err != nil {
		return nil, nil, err
	}
	p := os.Getenv(EnvSpecLines)
	if p == "" {
		return os.Stdout, func() {}, nil
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { _ = f.Close() }, nil
}

// withoutGoTestFlags drops the `go test` flags the CLI passes every precompiled suite (--test.timeout=0,
// and --test.* profiles it is not asked for here): the binary's flag set does not define them.
func withoutGoTestFlags(args []string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if strings.HasPrefix(a, "-test.") || strings.HasPrefix(a, "--test.") {
			continue
		}
		out = append(out, a)
	}
	return out
}

// ProcsFlag takes --procs out of the arguments (every form the flag package accepts: -procs=N,
// --procs=N, -procs N, --procs N). procs is 1 when it is absent: a serial run, as --procs=1 is.
func ProcsFlag(args []string) (rest []string, procs int, err error) {
	procs = 1
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "procs" {
			rest = append(rest, a)
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, 0, errors.New("--procs needs a value: the number of Ginkgo processes, e.g. --procs=2")
			}
			i++
			value = args[i]
		}
		procs, err = strconv.Atoi(value)
		if err != nil || procs < 1 {
			return nil, 0, fmt.Errorf("--procs=%s: the number of Ginkgo processes must be a whole number ≥ 1", value)
		}
	}
	return rest, procs, nil
}

// UsageError says why the flags cannot make a parallel run (before anything is created), or "".
func UsageError(suiteArgs []string) string {
	for _, a := range suiteArgs {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(name, "ginkgo.parallel.") {
			return fmt.Sprintf("%s with --procs: the processes are numbered by Ginkgo's CLI; give one or the other", a)
		}
	}
	return ""
}

// cliArgs are the flags for Ginkgo's `run` command: the process count, and how its reporter (the one that
// prints the specs of every process) shows them, from the --ginkgo.* flags already parsed into parsed
// (flag.CommandLine, which Ginkgo's configuration is read from too). Everything else goes to the
// processes unchanged, after the link.
func cliArgs(procs int, link string, parsed *flag.FlagSet, terminal bool) []string {
	_, rep := ginkgo.GinkgoConfiguration()
	out := []string{"--procs=" + strconv.Itoa(procs)}
	if rep.NoColor || !terminal {
		out = append(out, "--no-color")
	}
	switch {
	case rep.VeryVerbose:
		out = append(out, "--vv")
	case rep.Verbose:
		out = append(out, "-v")
	case rep.Succinct:
		out = append(out, "--succinct")
	}
	// As in a serial run (conformance.Run): the per-spec lines say what ran, so skips are silent unless asked.
	if rep.SilenceSkips || !cli.Given(parsed, "ginkgo.silence-skips") {
		out = append(out, "--silence-skips")
	}
	if rep.ShowNodeEvents {
		out = append(out, "--show-node-events")
	}
	if cli.Given(parsed, "ginkgo.seed") {
		suite, _ := ginkgo.GinkgoConfiguration()
		out = append(out, "--seed="+strconv.FormatInt(suite.RandomSeed, 10))
	}
	return append(out, link)
}

// Run runs the suite in procs processes through Ginkgo's CLI and copies their per-spec lines to
// stdout as they come. failed reports Ginkgo's verdict on the specs (a process that failed or crashed).
func Run(ctx context.Context, procs int, suiteArgs []string, stdout, stderr io.Writer, terminal bool) (failed bool, err error) {
	exe, err := os.Executable()
	if err != nil {
		return false, fmt.Errorf("--procs: cannot find this executable to start the processes: %w", err)
	}
	// dir holds the link, the spec-line file and the run's pool locks, and goes when the run ends. SIGINT
	// and SIGTERM do not end this process first: main and the CLI's interrupt handler both catch them, and
	// the CLI returns once its processes have ended (a terminal's Ctrl-C reaches them too).
	dir, err := os.MkdirTemp("", "gpuconform-procs-")
	if err != nil {
		return false, fmt.Errorf("--procs: the processes need a writable temporary directory ($TMPDIR): %w", err)
	}
	defer os.RemoveAll(dir)
	link := filepath.Join(dir, WorkerName)
	if err := os.Symlink(exe, link); err != nil {
		return false, fmt.Errorf("--procs: %w", err)
	}
	lines := filepath.Join(dir, "spec-lines")
	if err := os.WriteFile(lines, nil, 0o644); err != nil {
		return false, fmt.Errorf("--procs: %w", err)
	}
	wd, _ := os.Getwd()
	env := map[string]string{
		EnvWorkDir: wd, EnvSpecLines: lines, EnvRunID: cmp.Or(os.Getenv(EnvRunID), run.NewID(time.Now())),
		// The locks here, not under the run ID in $TMPDIR: a process killed before the suite's end would
		// leave those behind.
		poollock.EnvDir: filepath.Join(dir, "locks"),
	}
	for k, v := range env {
		prev, had := os.LookupEnv(k)
		_ = os.Setenv(k, v)
		defer func() {
			if had {
				_ = os.Setenv(k, prev)
			} else {
				_ = os.Unsetenv(k)
			}
		}()
	}

	followCtx, stopFollowing := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		follow(followCtx, lines, stdout)
	}()
	// runCommand parsed suiteArgs into flag.CommandLine; the processes parse them again.
	code := runGinkgoCLI(cliArgs(procs, link, flag.CommandLine, terminal), suiteArgs, stderr)
	stopFollowing()
	<-followed
	return code != 0, nil
}

// runGinkgoCLI runs Ginkgo's `run` command and returns its exit code: the command ends by panicking with
// its exit details (command.Abort), which its own main recovers.
func runGinkgoCLI(args, additional []string, stderr io.Writer) (code int) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		details, ok := r.(command.AbortDetails)
		if !ok {
			panic(r)
		}
		if details.Error != nil {
			fmt.Fprintln(stderr, details.Error)
		}
		code = details.ExitCode
	}()
	if slices.Contains(args, "--no-color") { // the CLI's own messages (a process that crashed, …) too
		formatter.SingletonFormatter.ColorMode = formatter.ColorModeNone
	}
	ginkgorun.BuildRunCommand().Run(args, additional)
	return 0
}

// follow copies what is appended to path to out, a line at a time, until ctx ends; then what is left.
func follow(ctx context.Context, path string, out io.Writer) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var partial string
	drain := func() {
		for {
			s, err := r.ReadString('\n')
			partial += s
			if err != nil {
				return // io.EOF: the rest of the line has not been written yet
			}
			_, _ = io.WriteString(out, partial)
			partial = ""
		}
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		drain()
		select {
		case <-ctx.Done():
			drain()
			if partial != "" {
				_, _ = io.WriteString(out, partial+"\n")
			}
			return
		case <-tick.C:
		}
	}
}
