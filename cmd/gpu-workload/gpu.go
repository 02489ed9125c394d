package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"gpuconform.io/gpuconform/internal/cuda"
	"gpuconform.io/gpuconform/internal/workload/gpuwork"
	"gpuconform.io/gpuconform/internal/workload/probe"
	"gpuconform.io/gpuconform/internal/workload/train"
)

// cudaLibraryFlag is every GPU command's --cuda-library: the driver library to open (tests give the
// libcuda double; empty: libcuda.so.1 wherever the container's loader finds it).
func cudaLibraryFlag(fs *flag.FlagSet) *string {
	return fs.String("cuda-library", "", "CUDA driver library to open (default: libcuda.so.1 as NVIDIA's runtime injects it)")
}

// withGPU makes train's steps real GPU work where the container has a CUDA driver, and says what it
// runs on (or that it is a stand-in) in the "gpu" line; stop releases the device.
func withGPU(cfg *train.Config, lib string) (stop func(), err error) {
	w, standIn, err := gpuwork.Start(lib)
	if err != nil {
		return nil, fmt.Errorf("the CUDA driver failed: %w", err)
	}
	if w == nil {
		cfg.GPUInfo = map[string]any{"mode": "stand-in", "stand_in": standIn + ": each step waits its duration; no GPU work is measured"}
		return func() {}, nil
	}
	s, err := w.NewStepper(cfg.StepDuration)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("preparing the GPU work: %w", err)
	}
	cfg.GPUInfo = w.Describe()
	cfg.GPU = func(ctx context.Context, d time.Duration) (map[string]any, error) {
		m, err := s.Step(ctx, d)
		return map[string]any{"gflops": round(m.GFLOPS), "gbps": round(m.GBps)}, err
	}
	return func() { s.Close(); w.Close() }, nil
}

// round keeps one decimal, as the step lines print throughput.
func round(f float64) float64 { return math.Round(f*10) / 10 }

// noisyRoleEnv is config.NoisyNeighbourRoleEnv (the suite sets it on each noisy-neighbour pod).
const noisyRoleEnv = "GPUCONFORM_NOISY_ROLE"

// runNoisy plays one role of the noisy-neighbour measurement. The probe's last line is
// {"p50_ms":…,"p99_ms":…}; without a CUDA driver it prints {"stand_in":…} and exits 0, measuring nothing.
func runNoisy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("noisy", "[--role ROLE] [--samples N]", stderr)
	role := fs.String("role", os.Getenv(noisyRoleEnv), "probe, memory-heavy or compute-heavy (default $"+noisyRoleEnv+")")
	samples := fs.Int("samples", 400, "probe: kernel launches measured")
	cudaLib := cudaLibraryFlag(fs)
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	switch {
	case *role != gpuwork.RoleProbe && *role != gpuwork.RoleMemory && *role != gpuwork.RoleCompute:
		return usageError(fs, stderr, fmt.Sprintf("--role must be probe, memory-heavy or compute-heavy, got %q", *role))
	case *samples < 10:
		return usageError(fs, stderr, fmt.Sprintf("--samples must be >= 10, got %d", *samples))
	}
	enc := json.NewEncoder(stdout)
	w, standIn, err := gpuwork.Start(*cudaLib)
	if err != nil {
		fmt.Fprintf(stderr, "gpu-workload noisy: the CUDA driver failed: %v\n", err)
		return exitFail
	}
	if w == nil {
		_ = enc.Encode(map[string]string{"role": *role, "stand_in": standIn + ": nothing measured"})
		if *role != gpuwork.RoleProbe {
			<-ctx.Done() // a neighbour holds its replica until it is deleted
		}
		return exitOK
	}
	defer w.Close()
	_ = enc.Encode(map[string]any{"role": *role, "gpu": w.Describe()})
	if *role == gpuwork.RoleProbe {
		l, err := w.ProbeLatency(ctx, *samples)
		if err != nil {
			fmt.Fprintf(stderr, "gpu-workload noisy: %v\n", err)
			return exitFail
		}
		_ = enc.Encode(l)
		return exitOK
	}
	err = w.Neighbour(ctx, *role, func(m gpuwork.Measure) { _ = enc.Encode(m) })
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "gpu-workload noisy: %v\n", err)
		return exitFail
	}
	return exitOK
}

// overLimit is how far above the daemon's pinned memory limit the MPS check allocates.
const overLimit = 64 << 20

// mpsCUDAView runs a CUDA program under the container's MPS: the SMs its context may use
// (cuCtxGetExecAffinity) beside the device's, the memory it sees, and whether an allocation above the
// pinned limit the daemon answered fails. Without libcuda it says it is a stand-in.
func mpsCUDAView(lib string) func(*probe.MPS) *probe.MPSContext {
	return func(daemon *probe.MPS) *probe.MPSContext {
		w, standIn, err := gpuwork.Start(lib)
		switch {
		case err != nil:
			return &probe.MPSContext{Error: err.Error()}
		case w == nil:
			return &probe.MPSContext{StandIn: standIn + ": the limits were read from the MPS control daemon only"}
		}
		defer w.Close()
		out := &probe.MPSContext{DeviceSMCount: w.Device.SMs}
		limits, _ := probe.ParsePinnedMemLimit(daemon.PinnedDeviceMemLimit)
		err = w.Do(func(c *cuda.Context) error {
			n, ok, err := c.SMCount()
			if err != nil {
				return err
			}
			if !ok {
				n = w.Device.SMs // a driver before CUDA 11.4: no per-context affinity to read
			}
			out.SMCount = n
			_, total, err := c.MemInfo()
			if err != nil {
				return err
			}
			out.MemoryLimitBytes = total
			limitMiB := int64(0)
			for _, v := range limits {
				limitMiB = v // one GPU per container here: its limit
			}
			if limitMiB <= 0 {
				return nil
			}
			err = c.TryAlloc(uint64(limitMiB)<<20 + overLimit)
			out.OverLimitAllocationFailed = cuda.IsCode(err, cuda.ErrorOutOfMemory)
			if err != nil && !out.OverLimitAllocationFailed {
				return err
			}
			return nil
		})
		if err != nil {
			out.Error = err.Error()
		}
		return out
	}
}
