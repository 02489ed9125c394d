package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"time"

	"gpuconform.io/gpuconform/internal/workload/devicetest"
	"gpuconform.io/gpuconform/internal/workload/gpuwork"
)

// runSmoke is `make gpu-smoke`'s check on a GPU host (nothing installed but the NVIDIA driver): the device
// test, a load of --load-duration, the latency probe alone and beside a compute-heavy neighbour (this
// binary started again in that role), as JSON lines on stdout and in --out. Without a CUDA driver it
// fails: a smoke test of real GPUs has nothing to stand in for.
func runSmoke(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("smoke", "[--load-duration D] [--out FILE]", stderr)
	loadFor := fs.Duration("load-duration", 30*time.Second, "how long the FMA/copy load runs")
	out := fs.String("out", "", "also write the transcript to this file")
	cudaLib := cudaLibraryFlag(fs)
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	if *loadFor < time.Second {
		return usageError(fs, stderr, fmt.Sprintf("--load-duration must be >= 1s, got %s", *loadFor))
	}
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintf(stderr, "gpu-workload smoke: %v\n", err)
			return exitFail
		}
		defer f.Close()
		w = io.MultiWriter(stdout, f)
	}
	enc := json.NewEncoder(w)
	emit := func(step string, v any) {
		_ = enc.Encode(map[string]any{"step": step, "at": time.Now().UTC().Format(time.RFC3339), "result": v})
	}
	fail := func(step string, err error) int {
		emit(step, map[string]string{"error": err.Error()})
		fmt.Fprintf(stderr, "gpu-workload smoke: %s: %v\n", step, err)
		return exitFail
	}

	dt := devicetest.Check(ctx, devicetest.Options{CUDALibrary: *cudaLib})
	emit("device-test", dt)
	switch {
	case !dt.OK:
		return fail("device-test", fmt.Errorf("%s", dt.Message))
	case dt.StandIn != "":
		return fail("device-test", fmt.Errorf("%s", dt.StandIn))
	}
	gw, standIn, err := gpuwork.Start(*cudaLib)
	switch {
	case err != nil:
		return fail("load", err)
	case gw == nil:
		return fail("load", errors.New(standIn))
	}
	defer gw.Close()
	dev := gw.Device
	emit("device", map[string]any{"gpu": gw.Describe(), "peak_fp32_gflops": dev.PeakGFLOPS(), "peak_gbps": dev.PeakGBps, "memory_bytes": dev.Memory})

	load, err := smokeLoad(ctx, gw, *loadFor)
	if err != nil {
		return fail("load", err)
	}
	if peak := dev.PeakGFLOPS(); peak > 0 {
		load["fraction_of_fp32_peak"] = round(load["gflops_median"]/peak*100) / 100
	}
	if dev.PeakGBps > 0 {
		load["fraction_of_bandwidth_peak"] = round(load["gbps_median"]/dev.PeakGBps*100) / 100
	}
	emit("load", load)

	alone, err := gw.ProbeLatency(ctx, 400)
	if err != nil {
		return fail("probe-alone", err)
	}
	emit("probe-alone", alone)
	beside, err := probeBeside(ctx, gw, *cudaLib, gpuwork.RoleCompute)
	if err != nil {
		return fail("probe-beside-compute", err)
	}
	emit("probe-beside-compute-heavy", beside)
	emit("done", map[string]string{"verdict": "passed"})
	return exitOK
}

// smokeLoad runs 100 ms training steps for d and returns the median and minimum GFLOP/s and GB/s.
func smokeLoad(ctx context.Context, w *gpuwork.Worker, d time.Duration) (map[string]float64, error) {
	s, err := w.NewStepper(100 * time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var flops, gbps []float64
	for end := time.Now().Add(d); time.Now().Before(end); {
		m, err := s.Step(ctx, 100*time.Millisecond)
		if err != nil {
			return nil, err
		}
		flops, gbps = append(flops, m.GFLOPS), append(gbps, m.GBps)
	}
	slices.Sort(flops)
	slices.Sort(gbps)
	return map[string]float64{"steps": float64(len(flops)), "gflops_median": round(flops[len(flops)/2]), "gflops_min": round(flops[0]),
		"gbps_median": round(gbps[len(gbps)/2]), "gbps_min": round(gbps[0])}, nil
}

// probeBeside starts this binary as a neighbour in role on the same GPU and measures the probe beside it.
func probeBeside(ctx context.Context, w *gpuwork.Worker, lib, role string) (gpuwork.Latency, error) {
	self, err := os.Executable()
	if err != nil {
		return gpuwork.Latency{}, err
	}
	nctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(nctx, self, "noisy", "--role", role, "--cuda-library", lib)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	if err := cmd.Start(); err != nil {
		return gpuwork.Latency{}, err
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	select { // let the neighbour open its context and start its kernels
	case <-ctx.Done():
		return gpuwork.Latency{}, ctx.Err()
	case <-time.After(3 * time.Second):
	}
	return w.ProbeLatency(ctx, 400)
}
