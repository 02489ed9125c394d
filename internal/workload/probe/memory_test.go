package probe

import (
	"reflect"
	"strings"
	"testing"
)

// memoryQuery is the argument line of the memory query as the fake tool logs it.
var memoryQuery = strings.Join(argsMemoryQuery, " ")

func TestGPUMemoryFromNvidiaSMI(t *testing.T) {
	f := newFixture(t).fakeTool(map[string]smiReply{
		"-L":        {out: "GPU 0: NVIDIA H200 (UUID: GPU-aaaa)\nGPU 1: NVIDIA H200 (UUID: GPU-bbbb)"},
		memoryQuery: {out: "GPU-aaaa, 143771\nGPU-bbbb, 143771"},
	})
	r := f.gather()
	want := []GPUMemory{{UUID: "GPU-aaaa", MemoryMiB: 143771}, {UUID: "GPU-bbbb", MemoryMiB: 143771}}
	if !reflect.DeepEqual(r.GPUs, want) || r.GPUsError != "" {
		t.Errorf("gpus = %+v (error %q), want %+v", r.GPUs, r.GPUsError, want)
	}
	if mem, ok := r.MemoryOf("GPU-bbbb"); !ok || mem != 143771 {
		t.Errorf("MemoryOf(GPU-bbbb) = %d, %v", mem, ok)
	}
	if _, ok := r.MemoryOf("GPU-cccc"); ok {
		t.Error("MemoryOf a GPU the container does not see is ok")
	}
}

func TestGPUMemoryWithoutAGPUOrATool(t *testing.T) {
	noGPU := smiReply{out: "No devices were found", code: 6}
	r := newFixture(t).fakeTool(map[string]smiReply{"-L": noGPU, memoryQuery: noGPU}).gather()
	if r.GPUs == nil || len(r.GPUs) != 0 || r.GPUsError != "" {
		t.Errorf("no GPU: gpus = %#v (error %q), want an empty list", r.GPUs, r.GPUsError)
	}
	// Not installed: nothing, and nothing said.
	r = newFixture(t).gather()
	if r.GPUs != nil || r.GPUsError != "" {
		t.Errorf("no nvidia-smi: gpus = %#v (error %q), want null", r.GPUs, r.GPUsError)
	}
	// The list failed: the memory is not asked for.
	f := newFixture(t).fakeTool(map[string]smiReply{"-L": {stderr: "driver not loaded", code: 9}, memoryQuery: {out: "GPU-aaaa, 1"}})
	if r := f.gather(); r.GPUs != nil {
		t.Errorf("list failed: gpus = %+v", r.GPUs)
	}
}

func TestGPUMemoryFailuresAreReportedAndNothingIsMadeUp(t *testing.T) {
	for out, want := range map[string]string{
		"GPU-aaaa, lots": "is not a number of MiB",
		"81559":          "is not \"<uuid>, <memory MiB>\"",
	} {
		r := newFixture(t).fakeTool(map[string]smiReply{"-L": {out: listOneGPU}, memoryQuery: {out: out}}).gather()
		if r.GPUs != nil || !strings.Contains(r.GPUsError, want) {
			t.Errorf("%q: gpus = %+v (error %q), want none and %q", out, r.GPUs, r.GPUsError, want)
		}
	}
	r := newFixture(t).fakeTool(map[string]smiReply{"-L": {out: listOneGPU}}).gather()
	if r.GPUs != nil || !strings.Contains(r.GPUsError, "--query-gpu=uuid,memory.total") {
		t.Errorf("query refused: gpus = %+v (error %q)", r.GPUs, r.GPUsError)
	}
	// A memory the tool cannot tell is left out, with units or without.
	got, err := ParseMemoryQuery("GPU-aaaa, [N/A]\nGPU-bbbb, 81559 MiB\n")
	if err != nil || !reflect.DeepEqual(got, []GPUMemory{{UUID: "GPU-bbbb", MemoryMiB: 81559}}) {
		t.Errorf("ParseMemoryQuery = %+v, %v", got, err)
	}
}
