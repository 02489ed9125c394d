// Package cli holds what gpuconform's commands share in reading a command line: flag sets that report
// errors instead of exiting, kubectl-style flags after the arguments, and a KIND/NAME target.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"gpuconform.io/gpuconform/framework/diagnose"
)

// FlagSet makes a flag set that reports errors to output instead of exiting.
func FlagSet(name string, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(output)
	return fs
}

// Given reports whether the flag name was set when fs was parsed, even to its default: a --ginkgo.* flag
// given false overrides a default this program would otherwise choose. Only flags count, not a value that
// happens to look like one (--ginkgo.focus ginkgo.seed).
func Given(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// ParseInterspersed parses args on fs and returns the positional arguments. Go's flag package stops at
// the first of them; kubectl users put flags after the target, so parsing resumes after each one.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return positional, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// ParseTarget reads a workload named as "KIND/NAME" or as "KIND NAME" (kubectl's kinds and plurals) in
// namespace.
func ParseTarget(positional []string, namespace string) (diagnose.Target, error) {
	var kind, name string
	switch len(positional) {
	case 1:
		var ok bool
		kind, name, ok = strings.Cut(positional[0], "/")
		if !ok {
			return diagnose.Target{}, fmt.Errorf("target %q: want KIND/NAME, e.g. job/train", positional[0])
		}
	case 2:
		kind, name = positional[0], positional[1]
	case 0:
		return diagnose.Target{}, errors.New("missing target KIND/NAME, e.g. job/train")
	default:
		return diagnose.Target{}, fmt.Errorf("too many arguments %q: want one KIND/NAME", positional)
	}
	k, err := diagnose.ParseKind(kind)
	if err != nil {
		return diagnose.Target{}, err
	}
	if name == "" || strings.Contains(name, "/") {
		return diagnose.Target{}, fmt.Errorf("target %s/%s: the name is empty or contains a slash", kind, name)
	}
	if namespace == "" {
		return diagnose.Target{}, errors.New("-n/--namespace is empty")
	}
	return diagnose.Target{Kind: k, Namespace: namespace, Name: name}, nil
}

// IsTerminal reports whether w is a terminal (colour codes only there).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
