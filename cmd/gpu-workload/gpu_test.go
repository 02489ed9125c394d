package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/internal/cuda/cudatest"
	"gpuconform.io/gpuconform/internal/workload/probe"
)

// jsonLines decodes every JSON-object line of out.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var ev map[string]any
		if json.Unmarshal([]byte(l), &ev) == nil {
			evs = append(evs, ev)
		}
	}
	return evs
}

// With a CUDA driver each training step runs the FMA and copy kernels, and the checkpoint lines carry
// what CUDA's events measured; the "gpu" line names the device.
func TestTrainRunsGPUWorkThroughCUDA(t *testing.T) {
	lib := cudatest.Build(t)
	var stdout, stderr bytes.Buffer
	args := []string{"train", "--steps", "4", "--step-duration", "10ms", "--checkpoint-every", "2", "--checkpoint-dir", t.TempDir(), "--cuda-library", lib}
	if code := run(t.Context(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	evs := jsonLines(t, stdout.String())
	var gpu, checkpoint map[string]any
	for _, ev := range evs {
		switch ev["event"] {
		case "gpu":
			gpu = ev
		case "checkpoint":
			checkpoint = ev
		}
	}
	if gpu["mode"] != "cuda" || gpu["device"] != "Double GPU 0" || gpu["uuid"] != "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f" {
		t.Errorf("gpu line %v", gpu)
	}
	if g, _ := checkpoint["gflops"].(float64); g <= 0 {
		t.Errorf("checkpoint line without gflops: %v", checkpoint)
	}
	if g, _ := checkpoint["gbps"].(float64); g <= 0 {
		t.Errorf("checkpoint line without gbps: %v", checkpoint)
	}
}

// Without a CUDA driver the loop says it is a stand-in, and measures nothing.
func TestTrainWithoutCUDAIsAStandIn(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"train", "--steps", "2", "--checkpoint-every", "1", "--checkpoint-dir", t.TempDir(), "--cuda-library", filepath.Join(t.TempDir(), "libcuda.so.1")}
	if code := run(t.Context(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, ev := range jsonLines(t, stdout.String()) {
		if ev["event"] == "gpu" && ev["mode"] == "stand-in" && strings.HasPrefix(ev["stand_in"].(string), "stand-in (no CUDA driver in the container)") {
			return
		}
		if _, ok := ev["gflops"]; ok {
			t.Errorf("a stand-in measured gflops: %v", ev)
		}
	}
	t.Errorf("no stand-in gpu line in %s", stdout.String())
}

// A GPU that fails mid-run ends the training with the CUDA error, not a silent sleep.
func TestTrainGPUFailureIsNamed(t *testing.T) {
	lib := cudatest.Build(t)
	t.Setenv("CUDA_DOUBLE_INIT", "100")
	var stdout, stderr bytes.Buffer
	args := []string{"train", "--steps", "2", "--checkpoint-every", "1", "--checkpoint-dir", t.TempDir(), "--cuda-library", lib}
	if code := run(t.Context(), args, &stdout, &stderr); code != exitFail || !strings.Contains(stderr.String(), "cuInit: CUDA_ERROR_NO_DEVICE (100)") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// The noisy-neighbour probe's last line is the latency the scenario reads.
func TestNoisyProbeMeasuresLatency(t *testing.T) {
	lib := cudatest.Build(t)
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"noisy", "--role", "probe", "--samples", "20", "--cuda-library", lib}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	evs := jsonLines(t, stdout.String())
	last := evs[len(evs)-1]
	p50, _ := last["p50_ms"].(float64)
	p99, _ := last["p99_ms"].(float64)
	if p50 <= 0 || p99 < p50 || last["samples"] != float64(20) {
		t.Errorf("probe line %v", last)
	}
	stdout.Reset()
	if code := run(t.Context(), []string{"noisy", "--role", "probe", "--cuda-library", filepath.Join(t.TempDir(), "none.so")}, &stdout, &stderr); code != exitOK ||
		!strings.Contains(stdout.String(), `"stand_in":"stand-in (no CUDA driver in the container)`) {
		t.Errorf("stand-in probe: exit %d, %s", code, stdout.String())
	}
	if code := run(t.Context(), []string{"noisy", "--role", "loud"}, &stdout, &stderr); code != exitUsage {
		t.Errorf("unknown role: exit %d", code)
	}
}

// A smoke test on a host without a CUDA driver fails: there is nothing to stand in for.
func TestSmokeWithoutCUDAFails(t *testing.T) {
	var stdout, stderr bytes.Buffer
	out := filepath.Join(t.TempDir(), "transcript.jsonl")
	code := run(t.Context(), []string{"smoke", "--out", out, "--cuda-library", filepath.Join(t.TempDir(), "none.so")}, &stdout, &stderr)
	transcript, _ := os.ReadFile(out)
	if code != exitFail || !strings.Contains(string(transcript), `"step":"device-test"`) {
		t.Errorf("exit %d, transcript %s", code, transcript)
	}
}

// Under MPS the probe's CUDA program reads the SMs its context may use and tries an allocation above the
// limit the daemon answered: the double enforces both.
func TestMPSCUDAView(t *testing.T) {
	lib := cudatest.Build(t)
	t.Setenv("CUDA_DOUBLE_SMS", "4")
	t.Setenv("CUDA_DOUBLE_MEM_LIMIT", strconv.Itoa(1<<30))
	got := mpsCUDAView(lib)(&probe.MPS{PinnedDeviceMemLimit: "0=1024M"})
	if got.Error != "" || got.StandIn != "" || got.SMCount != 4 || got.DeviceSMCount != 8 || got.MemoryLimitBytes != 1<<30 || !got.OverLimitAllocationFailed {
		t.Errorf("MPS view %+v", got)
	}
	// No limit enforced: the allocation above the daemon's answer succeeds, and the view says so.
	t.Setenv("CUDA_DOUBLE_MEM_LIMIT", strconv.Itoa(8<<30))
	if got := mpsCUDAView(lib)(&probe.MPS{PinnedDeviceMemLimit: "0=1024M"}); got.OverLimitAllocationFailed {
		t.Errorf("an unenforced limit read as enforced: %+v", got)
	}
	if got := mpsCUDAView(filepath.Join(t.TempDir(), "none.so"))(&probe.MPS{}); !strings.HasPrefix(got.StandIn, "stand-in (no CUDA driver") {
		t.Errorf("no libcuda: %+v", got)
	}
}
