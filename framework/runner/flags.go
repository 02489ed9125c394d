package runner

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/config"
)

// Options are what one in-cluster run needs, from ParseArgs.
type Options struct {
	// Image is the runner image (the suite's workload image is --workload-image, passed on).
	Image string
	// Kubeconfig and Context are the client's: the pod uses its ServiceAccount.
	Kubeconfig, Context string
	// Artifacts is the local directory the pod's artifacts are copied into.
	Artifacts string
	// Namespace is the team namespace (team level), passed on; "" runs in a namespace of the runner's.
	Namespace string
	// Disruptive is the suite's --disruptive, passed on; it adds the disruptive role.
	Disruptive bool
	// CleanupLeftovers is the suite's --cleanup-leftovers, passed on: the runner too deletes what earlier
	// in-cluster runs left instead of refusing to start.
	CleanupLeftovers bool
	// LeaseNamespace is where the runner keeps its lease beside the suite's (config.Config.LeaseNamespace).
	LeaseNamespace string
	// Hold is how long the pod waits for its artifacts to be copied; Timeout bounds the suite's run.
	Hold, Timeout time.Duration
	// SuiteArgs are the flags passed on to `gpuconform run` in the pod.
	SuiteArgs []string
	// Procs is the number of Ginkgo processes the pod runs the suite in (--procs, passed on); it sizes the
	// pod's memory.
	Procs int
}

// Requested reports whether args ask for the in-cluster runner (--in-cluster, or =true).
func Requested(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		return strings.HasPrefix(a, "-") && name == "in-cluster" && (!hasValue || value == "true")
	})
}

// own reports whether a flag is the runner's: it stays here. Every other flag given is the suite's and
// goes to the pod.
func own(name string) bool {
	switch name {
	case "in-cluster", "image", "hold-artifacts", "kubeconfig", "context", "artifacts", "config", "product-metadata":
		return true
	}
	return false
}

// ParseArgs parses `gpuconform run --in-cluster …` once, on one FlagSet holding the runner's flags, the
// suite's (config.RegisterFlags) and Ginkgo's, so a misspelt flag fails here rather than in the pod. It
// returns flag.ErrHelp, after printing the usage to output, for --help.
func ParseArgs(args []string, output io.Writer) (Options, error) {
	o, suite, err := parse(args, output)
	if err != nil {
		return o, err
	}
	// The suite's configuration is checked here, before anything is created, and decides the runner's
	// level: --namespace or a --local-queue NS/NAME (team), --disruptive, the run's --timeout.
	cfg, err := suite.Config()
	if err != nil {
		return o, err
	}
	o.Namespace, o.Disruptive, o.CleanupLeftovers, o.LeaseNamespace = cfg.Namespace, cfg.Disruptive, cfg.CleanupLeftovers, cfg.LeaseNamespace()
	o.Timeout = cmp.Or(cfg.RunTimeout.Duration, 90*time.Minute)
	return o, nil
}

// parse parses args on the one FlagSet and collects the suite's flags to pass on; it does not check the
// suite's configuration (ParseArgs does).
func parse(args []string, output io.Writer) (Options, *config.Flags, error) {
	o := Options{Artifacts: cmp.Or(os.Getenv("ARTIFACTS"), "_artifacts"), Procs: 1}
	fs := flag.NewFlagSet("gpuconform run --in-cluster", flag.ContinueOnError)
	fs.Bool("in-cluster", true, "run the suite as a Job on the cluster")
	fs.StringVar(&o.Image, "image", "", "the runner image (make images writes it); the workload image is --workload-image")
	fs.DurationVar(&o.Hold, "hold-artifacts", 10*time.Minute, "how long the pod waits for its artifacts to be copied")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig of the client (the pod uses its ServiceAccount)")
	fs.StringVar(&o.Context, "context", "", "kubeconfig context")
	fs.StringVar(&o.Artifacts, "artifacts", o.Artifacts, "local directory the artifacts are copied into")
	fs.Func("config", "refused: the pod cannot read a local file", func(string) error {
		return errors.New("--config names a local file the pod cannot read: give its settings as flags")
	})
	// --procs is `gpuconform run`'s own flag (the suite does not know it): passed on to the pod, which runs
	// the specs in that many Ginkgo processes.
	fs.Func("procs", "run the specs in N Ginkgo processes in the pod (gpuconform run --procs); default 1", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("--procs=%s: the number of Ginkgo processes must be a whole number ≥ 1", v)
		}
		o.Procs = n
		return nil
	})
	// The runner's flags come first, so the flag table shares them instead of defining its own.
	suite := config.RegisterFlags(fs)
	if err := registerGinkgoFlags(fs); err != nil {
		return o, nil, err
	}
	var given []setting
	fs.VisitAll(func(f *flag.Flag) { f.Value = &recorder{Value: f.Value, name: f.Name, given: &given} })
	fs.SetOutput(io.Discard) // the caller prints the error once
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(output, "usage: gpuconform run --in-cluster --image IMG [--kubeconfig F] [--context C] [--artifacts DIR] [--hold-artifacts D] [--procs N] [suite flags]")
			fmt.Fprintln(output, "every flag but these is the suite's (gpuconform run --help lists them) and is passed on to the pod")
		}
		return o, nil, err
	}
	if fs.NArg() > 0 {
		return o, nil, fmt.Errorf("unexpected argument %q: the suite takes only flags", fs.Arg(0))
	}
	if o.Image == "" {
		return o, nil, errors.New("--in-cluster needs --image REGISTRY/gpuconform:TAG, the runner image `make images` writes (push it where the cluster pulls from); the workload image is --workload-image")
	}
	for _, g := range given {
		if g.name == "product-metadata" {
			return o, nil, errors.New("--product-metadata names a local file the pod cannot read: run without it, then give it to `gpuconform report --product-metadata FILE ARTIFACTS_DIR`")
		}
	}
	if o.Procs > 1 {
		for _, g := range given {
			if strings.HasPrefix(g.name, "ginkgo.parallel.") {
				return o, nil, fmt.Errorf("--%s with --procs: the pod's processes are numbered by Ginkgo's CLI; give one or the other", g.name)
			}
		}
	}
	o.SuiteArgs = forward(given)
	return o, suite, nil
}

// registerGinkgoFlags adds Ginkgo's suite, parallel and reporter flags (--ginkgo.*) to fs as the pod's
// binary has them, less the deprecated ones that set nothing.
func registerGinkgoFlags(fs *flag.FlagSet) error {
	all := types.SuiteConfigFlags.CopyAppend(types.ParallelConfigFlags...).CopyAppend(types.ReporterConfigFlags...)
	var live types.GinkgoFlags
	for _, f := range all {
		if !strings.HasPrefix(f.KeyPath, "D.") {
			live = append(live, f)
		}
	}
	suite, reporter := types.NewDefaultSuiteConfig(), types.NewDefaultReporterConfig()
	_, err := types.NewAttachedGinkgoFlagSet(fs, live.WithPrefix("ginkgo"), map[string]any{"S": &suite, "R": &reporter},
		types.FlagSections, types.GinkgoFlagSection{})
	return err
}

// setting is one flag as given on the command line.
type setting struct {
	name, value string
	isBool      bool
}

// recorder records every value its flag is set to, in order. fs.Visit tells which flags were set but not
// their values: a flag.Func keeps none, and a repeated flag (--toleration) has several.
type recorder struct {
	flag.Value
	name  string
	given *[]setting
}

// Set sets the flag and records the value.
func (r *recorder) Set(v string) error {
	if err := r.Value.Set(v); err != nil {
		return err
	}
	*r.given = append(*r.given, setting{name: r.name, value: v, isBool: r.IsBoolFlag()})
	return nil
}

// String is the flag's value; the zero recorder (flag.PrintDefaults makes one) has none.
func (r *recorder) String() string {
	if r == nil || r.Value == nil {
		return ""
	}
	return r.Value.String()
}

// IsBoolFlag lets a boolean flag go without a value, as the flag it records does.
func (r *recorder) IsBoolFlag() bool {
	b, ok := r.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// forward returns the suite's flags that were given, in order, as the pod's command line.
func forward(given []setting) []string {
	var args []string
	for _, s := range given {
		switch {
		case own(s.name):
		case s.isBool && s.value == "true":
			args = append(args, "--"+s.name)
		default:
			args = append(args, "--"+s.name+"="+s.value)
		}
	}
	return args
}
