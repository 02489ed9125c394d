package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/internal/workload/probe"
)

// The binary answers as nvidia-cuda-mps-control under that name, and the workload probe reads the fake
// daemon's defaults through it as it reads a real daemon's: the protocol both sides agree on.
func TestMultiCallAnswersAsMPSControl(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH; cannot build the binary")
	}
	bin := t.TempDir()
	build := exec.Command(goTool, "build", "-o", filepath.Join(bin, "nvidia-cuda-mps-control"), ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pipe, dev := t.TempDir(), t.TempDir()
	pct := 50
	raw, err := fakegpu.MPSDaemon{Resource: "nvidia.com/gpu", DefaultActiveThreadPercentage: &pct,
		DefaultPinnedDeviceMemLimitMiB: map[string]int{"2": 40779}}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pipe, fakegpu.MPSDaemonFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "nvidia2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	gather := func(pipe string) *probe.MPS {
		return probe.Gather(t.Context(), probe.Options{DevDir: dev, Environ: []string{"PATH=" + bin, fakegpu.EnvMPSPipeDirectory + "=" + pipe}}).MPS
	}
	if m := gather(pipe); m == nil || m.Control != probe.MPSControlAnswered || m.ActiveThreadPercentage != "50" || m.PinnedDeviceMemLimit != "2=40779M" {
		t.Errorf("through the fake client: %+v", m)
	}
	if m := gather(t.TempDir()); m == nil || m.Control != probe.MPSControlNoAnswer || len(m.Asked) != 1 || m.Asked[0].Answer != "Cannot find MPS control daemon process" {
		t.Errorf("without a daemon: %+v", m)
	}
}
