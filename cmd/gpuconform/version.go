package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"gpuconform.io/gpuconform/framework/config"
)

// version is set at link time by the release build (make images: -X main.version=…); a plain go build
// says "devel" and the VCS stamp tells the commit.
var version = "devel"

// versionCommand prints what this binary was built from: its version and commit, the Go toolchain, the
// libraries that decide what the suite can talk to, and the default workload image.
func versionCommand(stdout io.Writer) int {
	fmt.Fprintf(stdout, "gpuconform %s\n", version)
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintf(stdout, "go: %s %s/%s (no build information)\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		dirty := ""
		if settings["vcs.modified"] == "true" {
			dirty = " (with uncommitted changes)"
		}
		fmt.Fprintf(stdout, "commit: %s%s, %s\n", rev, dirty, settings["vcs.time"])
	} else if revision != "" {
		fmt.Fprintf(stdout, "commit: %s\n", revision)
	}
	fmt.Fprintf(stdout, "go: %s %s/%s\n", info.GoVersion, runtime.GOOS, runtime.GOARCH)
	for _, d := range info.Deps {
		switch d.Path {
		case "k8s.io/client-go", "sigs.k8s.io/kueue", "k8s.io/dynamic-resource-allocation", "github.com/onsi/ginkgo/v2", "sigs.k8s.io/e2e-framework":
			v := d.Version
			if d.Replace != nil {
				v += " => " + d.Replace.Path + " " + d.Replace.Version
			}
			fmt.Fprintf(stdout, "%s: %s\n", d.Path, v)
		}
	}
	fmt.Fprintf(stdout, "default workload image: %s\n", config.Default().Image)
	return 0
}

// revision is set at link time (make build: -X main.revision=…), where the build has no VCS stamp (GOFLAGS=-buildvcs=false, an exported tree).
var revision = ""
