// Command gpuconform-runc is the OCI runtime that the project's own dockerd uses on hosts whose capability
// bounding set lacks capabilities that Docker grants to privileged containers (see infra/runcwrap). It strips
// the capabilities named in GPUCONFORM_DROP_CAPS (default CAP_SYS_RESOURCE) from the spec, then executes the
// real runc (GPUCONFORM_RUNC, default the first runc on PATH) with the same arguments.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"gpuconform.io/gpuconform/infra/runcwrap"
)

func main() {
	drop := map[string]bool{}
	names := os.Getenv("GPUCONFORM_DROP_CAPS")
	if names == "" {
		names = "CAP_SYS_RESOURCE"
	}
	for n := range strings.SplitSeq(names, ",") {
		drop[strings.TrimSpace(n)] = true
	}
	if err := runcwrap.Prepare(os.Args[1:], drop); err != nil {
		fmt.Fprintf(os.Stderr, "gpuconform-runc: %v\n", err)
		os.Exit(1)
	}
	runc := os.Getenv("GPUCONFORM_RUNC")
	if runc == "" {
		var err error
		if runc, err = exec.LookPath("runc"); err != nil {
			fmt.Fprintln(os.Stderr, "gpuconform-runc: runc not found on PATH")
			os.Exit(1)
		}
	}
	err := syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "gpuconform-runc: exec %s: %v\n", runc, err)
	os.Exit(1)
}
