package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"gpuconform.io/gpuconform/framework/cli"
	"gpuconform.io/gpuconform/framework/runner"
	"gpuconform.io/gpuconform/infra/localcluster"
	"gpuconform.io/gpuconform/infra/ociarchive"
)

// Image names in the archives `make images` writes; users push them under their registry's names.
const (
	WorkloadImageRepo = "gpuconform.local/gpu-workload"
	RunnerImageRepo   = "gpuconform.local/gpuconform"
)

// imagesCommand writes the workload image and the runner image as OCI archives from binaries already
// built (make images builds them static): no Docker, no registry.
func imagesCommand(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cli.FlagSet("images", stderr)
	bin := fs.String("bin", "_output/images/bin", "directory holding the static binaries (gpuconform, gpu-workload, fake-device-plugin, gpuconform-net, nvidia-smi)")
	out := fs.String("out", "_output/images", "directory to write the archives into")
	tag := fs.String("tag", "dev", "tag of both images")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	b := func(name string) string { return filepath.Join(*bin, name) }
	workload := ociarchive.Spec{Ref: WorkloadImageRepo + ":" + *tag, Dirs: []string{"tmp"}, Files: map[string]string{},
		Labels: map[string]string{"org.opencontainers.image.title": "gpuconform workload", "org.opencontainers.image.version": *tag}}
	for _, name := range []string{"fake-device-plugin", "gpu-workload", "gpuconform-net"} {
		workload.Files["usr/local/bin/"+name] = b(name)
	}
	// The workload binary opens libcuda through the C library's loader, which the image must carry.
	crt, err := localcluster.CRuntimeFiles(b("gpu-workload"))
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform images: %v\n", err)
		return 1
	}
	maps.Copy(workload.Files, crt)
	// As in the local cluster's image: the fake nvidia-smi off PATH, installed on nodes by the fake agent.
	workload.Files[strings.TrimPrefix(localcluster.FakeNvidiaSMIInImage, "/")] = b("nvidia-smi")
	runner := ociarchive.Spec{Ref: RunnerImageRepo + ":" + *tag, Dirs: []string{"tmp", "artifacts"}, Files: map[string]string{runner.Binary: b("gpuconform")},
		Entrypoint: []string{runner.Binary}, User: runner.ImageUser, WorkingDir: "/tmp", Env: []string{"HOME=/tmp"},
		Labels: map[string]string{"org.opencontainers.image.title": "gpuconform runner", "org.opencontainers.image.version": *tag}}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(stderr, "gpuconform images: %v\n", err)
		return 1
	}
	for _, im := range []struct {
		spec ociarchive.Spec
		file string
	}{{workload, "gpu-workload.oci.tar"}, {runner, "gpuconform.oci.tar"}} {
		path := filepath.Join(*out, im.file)
		digest, err := ociarchive.Write(im.spec, path)
		if err != nil {
			fmt.Fprintf(stderr, "gpuconform images: %v\n", err)
			return 1
		}
		st, _ := os.Stat(path)
		fmt.Fprintf(stdout, "%s  %s  %s  %d MiB\n", path, im.spec.Ref, digest, st.Size()>>20)
	}
	return 0
}
