// Command gpu-workload is the test workload image of the gpuconform suite: one static binary whose
// subcommands play the workloads the suite schedules.
//
//	gpu-workload probe [--expect N] [--expect-ids id1,id2] [--hold D]
//	gpu-workload train --steps S --step-duration D [--resumed-step-duration D] [--resumed-min-duration D] --checkpoint-dir DIR
//	                   --checkpoint-every K [--work-id ID]
//	gpu-workload gang --workers W [--rank R] [--coordinator HOST] [--port P] --steps S --step-duration D
//	                  [--resumed-step-duration D] [--resumed-min-duration D] --checkpoint-dir DIR --checkpoint-every K [--work-id ID]
//	gpu-workload podresources [--socket PATH] [--namespace NS] [--pod NAME] [--timeout D]
//	gpu-workload device-test [--nvidia-smi-timeout D]
//	gpu-workload noisy [--role probe|memory-heavy|compute-heavy] [--samples N]
//	gpu-workload smoke [--load-duration D] [--out FILE]
//	gpu-workload serve --nonce N [--port P] [--interval D]
//	gpu-workload ask --url URL [--requests N] [--header 'Name: value'] [--ready-within D]
//
// Every subcommand prints JSON lines on stdout. Exit codes: 0 success, 1 failed check or runtime error,
// 2 usage error, 143 (128+SIGTERM) train or gang interrupted by SIGTERM after it saved its final
// checkpoint: an interrupted attempt is not a completed one, so a Job counts it as a failed pod and
// replaces it. A gang worker that lost a peer exits 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gpuconform.io/gpuconform/internal/workload/devicetest"
	"gpuconform.io/gpuconform/internal/workload/gang"
	"gpuconform.io/gpuconform/internal/workload/hostproc"
	"gpuconform.io/gpuconform/internal/workload/podresources"
	"gpuconform.io/gpuconform/internal/workload/probe"
	"gpuconform.io/gpuconform/internal/workload/termlog"
	"gpuconform.io/gpuconform/internal/workload/train"
)

const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
	// exitInterrupted is the shell's code for a process ended by SIGTERM.
	exitInterrupted = 143
)

const usage = `usage: gpu-workload <command> [flags]

commands:
  probe         report the devices this container sees; fail if they differ from --expect/--expect-ids
  train         restartable training loop that checkpoints and resumes (preemption scenarios)
  gang          train's multi-worker version: the pods of an Indexed Job step in lock step and stop
                together when one is lost (gang scheduling scenarios)
  podresources  ask the kubelet which devices it allocated to pods
  device-test   the GPU vendor's device test (CUDA vectorAdd): fail unless this container has a GPU
                device node, /dev/nvidiactl and an nvidia-smi that lists as many GPUs, and vectorAdd
                through libcuda gives every element right on every device; without libcuda the
                layers only (a stand-in, said so); print "Test PASSED" last when it passes
  noisy         the noisy-neighbour workload: its role from $GPUCONFORM_NOISY_ROLE or --role (probe:
                a short kernel's latency p50/p99; memory-heavy, compute-heavy: keep the GPU busy)
  smoke         run on a GPU host: device test, a load, the latency probe; one JSON transcript
  serve         a model server's stand-in: answers /v1/infer, sends itself a request every --interval
                and exposes what it served on /metrics (Prometheus text format)
  ask           a client of model servers behind a gateway: send requests (and as many with --header)
                and tally which server answered each
  host-signal   freeze (SIGSTOP, then SIGCONT) or signal a host process by name (needs hostPID; the
                kubelet-stop fault provider)

Run 'gpu-workload <command> -h' for the flags of a command.
`

func main() {
	// SIGTERM is how Kubernetes preempts or evicts; cancelling the context lets train save its last
	// completed step. SIGINT does the same for someone running the binary by hand.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "probe":
		return runProbe(ctx, args[1:], stdout, stderr)
	case "train":
		return runTrain(ctx, args[1:], stdout, stderr)
	case "gang":
		return runGang(ctx, args[1:], stdout, stderr)
	case "podresources":
		return runPodResources(ctx, args[1:], stdout, stderr)
	case "host-signal":
		return runHostSignal(ctx, args[1:], stdout, stderr)
	case "device-test":
		return runDeviceTest(ctx, args[1:], stdout, stderr)
	case "noisy":
		return runNoisy(ctx, args[1:], stdout, stderr)
	case "smoke":
		return runSmoke(ctx, args[1:], stdout, stderr)
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "ask":
		return runAsk(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "gpu-workload: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}

// newFlagSet returns a flag set that reports errors instead of exiting, so run stays testable.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: gpu-workload %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and returns the exit code to use when parsing ended the command.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (exit int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, true
		}
		return exitUsage, true // flag has already printed the error and the usage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpu-workload %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return exitUsage, true
	}
	return 0, false
}

// usageError prints msg and the subcommand's usage.
func usageError(fs *flag.FlagSet, stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "gpu-workload %s: %s\n", fs.Name(), msg)
	fs.Usage()
	return exitUsage
}

// optionalInt is an int flag that remembers whether it was given, because --expect 0 ("must see no
// device") is different from no --expect at all.
type optionalInt struct{ value *int }

func (o *optionalInt) String() string {
	if o.value == nil {
		return ""
	}
	return strconv.Itoa(*o.value)
}

func (o *optionalInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("not an integer: %q", s)
	}
	o.value = &n
	return nil
}

// optionalDuration is a duration flag that tells whether it was given.
type optionalDuration struct{ value *time.Duration }

func (o *optionalDuration) String() string {
	if o.value == nil {
		return ""
	}
	return o.value.String()
}

func (o *optionalDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a duration: %q", s)
	}
	o.value = &d
	return nil
}

// resumedStepUsage is the --resumed-step-duration flag's help, train's and gang's.
const resumedStepUsage = "simulated work per step once the attempt resumed from a checkpoint (default --step-duration): a test's work must outlast its fault, not run as long again after the resume"

// resumedMinUsage is the --resumed-min-duration flag's help, train's and gang's.
const resumedMinUsage = "least time an attempt that resumed from a checkpoint spends on its remaining steps (slowed evenly to fill it), so that a test can still read its devices from the kubelet while it runs"

func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("probe", "[--expect N] [--expect-ids id1,id2]", stderr)
	var expect optionalInt
	fs.Var(&expect, "expect", "exact number of devices the container must see (0: none)")
	expectIDs := fs.String("expect-ids", "", "comma-separated device IDs the container must see, no more, no fewer")
	cudaLib := cudaLibraryFlag(fs)
	hold := fs.Duration("hold", 0, "after reporting, keep the container (and its devices) for this long or until SIGTERM, so the kubelet's and the claim's view can be read while the pod is active")
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}

	var e probe.Expectation
	if expect.value != nil {
		if *expect.value < 0 {
			return usageError(fs, stderr, fmt.Sprintf("--expect must be >= 0, got %d", *expect.value))
		}
		e.Count = expect.value
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "expect-ids" {
			// Given but empty means "expect no devices", hence a non-nil empty list.
			e.IDs = []string{}
			for id := range strings.SplitSeq(*expectIDs, ",") {
				if id = strings.TrimSpace(id); id != "" {
					e.IDs = append(e.IDs, id)
				}
			}
		}
	})

	report, err := probe.Run(ctx, probe.Options{MPSCUDA: mpsCUDAView(*cudaLib)}, e, stdout, termlog.DefaultPath)
	if err != nil {
		fmt.Fprintf(stderr, "gpu-workload probe: %v\n", err)
		return exitFail
	}
	if *hold > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(*hold):
		}
	}
	if !report.OK {
		fmt.Fprintf(stderr, "gpu-workload probe: %s\n", report.Message)
		return exitFail
	}
	return exitOK
}

func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("train", "--steps S --step-duration D --checkpoint-dir DIR --checkpoint-every K [--work-id ID]", stderr)
	cfg := train.Config{TerminationLogPath: termlog.DefaultPath, Warnings: stderr}
	fs.IntVar(&cfg.Steps, "steps", 0, "total steps of the work (required, > 0)")
	fs.DurationVar(&cfg.StepDuration, "step-duration", 0, "simulated work per step, e.g. 500ms (>= 0)")
	fs.StringVar(&cfg.CheckpointDir, "checkpoint-dir", "", "directory for checkpoints; must survive the pod (required)")
	fs.IntVar(&cfg.CheckpointEvery, "checkpoint-every", 0, "checkpoint every K steps (required, > 0)")
	fs.StringVar(&cfg.WorkID, "work-id", train.DefaultWorkID, "identity of the work; checkpoints of another work are never resumed")
	fs.DurationVar(&cfg.CheckpointWriteTime, "checkpoint-write-time", 0, "simulated time each checkpoint write takes (a large model)")
	var resumedStep optionalDuration
	fs.Var(&resumedStep, "resumed-step-duration", resumedStepUsage)
	fs.DurationVar(&cfg.ResumedMinDuration, "resumed-min-duration", 0, resumedMinUsage)
	cudaLib := cudaLibraryFlag(fs)
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	cfg.ResumedStepDuration = resumedStep.value
	if err := cfg.Validate(); err != nil {
		return usageError(fs, stderr, err.Error())
	}
	stop, err := withGPU(&cfg, *cudaLib)
	if err != nil {
		fmt.Fprintf(stderr, "gpu-workload train: %v\n", err)
		return exitFail
	}
	defer stop()
	sum, err := train.Run(ctx, cfg, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "gpu-workload train: %v\n", err)
		return exitFail
	}
	if sum.Status == train.StatusInterrupted {
		return exitInterrupted
	}
	return exitOK
}

func runGang(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("gang", "--workers W [--rank R] [--coordinator HOST] [--port P] --steps S --step-duration D --checkpoint-dir DIR --checkpoint-every K [--work-id ID]", stderr)
	cfg := gang.Config{TerminationLogPath: termlog.DefaultPath, Warnings: stderr}
	fs.IntVar(&cfg.Workers, "workers", 0, "world size: how many workers make up the gang (required, >= 1)")
	var rank optionalInt
	fs.Var(&rank, "rank", "this worker's rank in [0, workers) (default $"+gang.RankEnv+", which an Indexed Job sets)")
	fs.StringVar(&cfg.Coordinator, "coordinator", "", "host name of rank 0, e.g. job-0.job (<job>-<index>.<headless service>); required when --workers > 1")
	fs.IntVar(&cfg.Port, "port", gang.DefaultPort, "TCP port rank 0 listens on (all interfaces) and every rank dials")
	fs.IntVar(&cfg.Steps, "steps", 0, "total steps of the work (required, > 0)")
	fs.DurationVar(&cfg.StepDuration, "step-duration", 0, "simulated work per step, e.g. 500ms (>= 0)")
	fs.StringVar(&cfg.CheckpointDir, "checkpoint-dir", "", "directory for checkpoints, one rank-<R> directory per rank; must survive the pod (required)")
	fs.IntVar(&cfg.CheckpointEvery, "checkpoint-every", 0, "checkpoint every K steps (required, > 0)")
	fs.StringVar(&cfg.WorkID, "work-id", train.DefaultWorkID, "identity of the work; checkpoints of another work are never resumed, workers of another work never admitted")
	fs.DurationVar(&cfg.RendezvousTimeout, "rendezvous-timeout", gang.DefaultRendezvousTimeout, "how long to wait for all workers to join (> 0)")
	var resumedStep optionalDuration
	fs.Var(&resumedStep, "resumed-step-duration", resumedStepUsage)
	fs.DurationVar(&cfg.ResumedMinDuration, "resumed-min-duration", 0, resumedMinUsage)
	fs.DurationVar(&cfg.PeerTimeout, "peer-timeout", gang.DefaultPeerTimeout, "how long a step may wait for the other workers' contributions before the coordinator declares a peer lost and stops the gang; a worker that hears nothing gives up 10% (at least 1s) later (> 0)")
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	cfg.ResumedStepDuration = resumedStep.value
	switch {
	case rank.value != nil:
		cfg.Rank = *rank.value
	case os.Getenv(gang.RankEnv) != "":
		n, err := strconv.Atoi(os.Getenv(gang.RankEnv))
		if err != nil {
			return usageError(fs, stderr, fmt.Sprintf("$%s is not an integer: %q", gang.RankEnv, os.Getenv(gang.RankEnv)))
		}
		cfg.Rank = n
	default:
		return usageError(fs, stderr, "--rank is required when $"+gang.RankEnv+" is not set")
	}
	if cfg.RendezvousTimeout <= 0 || cfg.PeerTimeout <= 0 {
		return usageError(fs, stderr, fmt.Sprintf("--rendezvous-timeout and --peer-timeout must be > 0, got %s and %s", cfg.RendezvousTimeout, cfg.PeerTimeout))
	}
	if cfg.Port == 0 {
		return usageError(fs, stderr, "--port must be in [1, 65535], got 0")
	}
	if err := cfg.Validate(); err != nil {
		return usageError(fs, stderr, err.Error())
	}
	sum, err := gang.Run(ctx, cfg, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "gpu-workload gang: %v\n", err)
		return exitFail
	}
	switch sum.Status {
	case gang.StatusInterrupted:
		return exitInterrupted
	case gang.StatusPeerLost:
		fmt.Fprintf(stderr, "gpu-workload gang: rank %d stopped after step %d: %s\n", sum.Rank, sum.CompletedSteps, sum.Reason)
		return exitFail
	}
	return exitOK
}

func runPodResources(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("podresources", "[--socket PATH] [--namespace NS] [--pod NAME] [--timeout D]", stderr)
	socket := fs.String("socket", podresources.DefaultSocket, "kubelet PodResources unix socket")
	var filter podresources.Filter
	fs.StringVar(&filter.Namespace, "namespace", "", "only pods in this namespace")
	fs.StringVar(&filter.Pod, "pod", "", "only pods with this name")
	timeout := fs.Duration("timeout", podresources.DefaultTimeout, "deadline for connecting and listing")
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	if *timeout <= 0 {
		return usageError(fs, stderr, fmt.Sprintf("--timeout must be > 0, got %s", *timeout))
	}

	report, err := podresources.Query(ctx, *socket, filter, *timeout)
	code := exitOK
	if err != nil {
		// The JSON line still goes out, so the suite's log reader sees the reason too.
		report.Error = err.Error()
		fmt.Fprintf(stderr, "gpu-workload podresources: %v\n", err)
		code = exitFail
	}
	line, err := json.Marshal(report)
	if err != nil {
		fmt.Fprintf(stderr, "gpu-workload podresources: encoding report: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%s\n", line)
	return code
}

// runDeviceTest runs the device test in this container: its JSON line on stdout, "Test PASSED" after it
// on a pass, exit 1 with what is missing on stderr too otherwise.
func runDeviceTest(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("device-test", "[--nvidia-smi-timeout D]", stderr)
	timeout := fs.Duration("nvidia-smi-timeout", 15*time.Second, "bound on each nvidia-smi call (a wedged driver can hang it)")
	cudaLib := cudaLibraryFlag(fs)
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	if *timeout <= 0 {
		return usageError(fs, stderr, fmt.Sprintf("--nvidia-smi-timeout must be > 0, got %s", *timeout))
	}
	r, err := devicetest.Run(ctx, devicetest.Options{NvidiaSMITimeout: *timeout, CUDALibrary: *cudaLib}, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "gpu-workload device-test: %v\n", err)
		return exitFail
	}
	if !r.OK {
		fmt.Fprintf(stderr, "gpu-workload device-test: %s\n", r.Message)
		return exitFail
	}
	return exitOK
}

// runHostSignal freezes a host process for a while (--stop-for) or sends it one signal (--signal).
func runHostSignal(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("host-signal", "--process NAME (--stop-for D | --signal TERM)", stderr)
	name := fs.String("process", "kubelet", "command name of the host process (/proc/PID/comm)")
	stopFor := fs.Duration("stop-for", 0, "stop the process for this long, then continue it (also when terminated early)")
	sig := fs.String("signal", "", "send this signal once instead: TERM, KILL or HUP")
	procRoot := fs.String("proc", "/proc", "the proc filesystem to search")
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	logf := func(s string) {
		fmt.Fprintf(stdout, "{\"time\":%q,\"msg\":%q}\n", time.Now().UTC().Format(time.RFC3339Nano), s)
	}
	switch {
	case *stopFor > 0 && *sig == "":
		if err := hostproc.Freeze(ctx, *procRoot, *name, *stopFor, logf); err != nil {
			fmt.Fprintf(stderr, "gpu-workload host-signal: %v\n", err)
			return exitFail
		}
		return exitOK
	case *sig != "" && *stopFor == 0:
		s, ok := map[string]syscall.Signal{"TERM": syscall.SIGTERM, "KILL": syscall.SIGKILL, "HUP": syscall.SIGHUP}[strings.ToUpper(*sig)]
		if !ok {
			return usageError(fs, stderr, "--signal must be TERM, KILL or HUP")
		}
		pids, err := hostproc.Signal(*procRoot, *name, s)
		if err != nil {
			fmt.Fprintf(stderr, "gpu-workload host-signal: %v\n", err)
			return exitFail
		}
		logf(fmt.Sprintf("sent %s to %s (pids %v)", *sig, *name, pids))
		return exitOK
	default:
		return usageError(fs, stderr, "give exactly one of --stop-for and --signal")
	}
}
