package probe

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// GPUMemory is one GPU nvidia-smi shows the container, with its total memory: what a driver that
// publishes the GPU's memory as a capacity (DRA consumable capacity) must not exceed.
type GPUMemory struct {
	// UUID is the GPU's UUID as nvidia-smi prints it ("GPU-…").
	UUID string `json:"uuid"`
	// MemoryMiB is its total memory (`memory.total`), in MiB.
	MemoryMiB int64 `json:"memory_mib"`
}

// argsMemoryQuery asks nvidia-smi for each GPU's UUID and total memory, without header or units.
var argsMemoryQuery = []string{"--query-gpu=uuid,memory.total", "--format=csv,noheader,nounits"}

// queryMemory asks nvidia-smi (bin, "" when not installed) for the total memory of the container's GPUs.
// It returns nil without a word when nvidia-smi is not installed, or when `nvidia-smi -L` already failed
// (listFailed: the driver did not answer, and asking again could wait out the timeout again), an empty list
// when the container has no GPU, and a problem when the tool failed or printed what it cannot read.
func queryMemory(ctx context.Context, bin string, timeout time.Duration, listFailed bool) ([]GPUMemory, string) {
	if bin == "" || listFailed {
		return nil, ""
	}
	out, code, err := runTool(ctx, bin, timeout, argsMemoryQuery...)
	switch {
	case code == nvidiaSMINoDevices:
		return []GPUMemory{}, ""
	case err != nil:
		return nil, err.Error()
	}
	gpus, err := ParseMemoryQuery(out)
	if err != nil {
		return nil, fmt.Sprintf("%s %s: %v", bin, strings.Join(argsMemoryQuery, " "), err)
	}
	return gpus, ""
}

// ParseMemoryQuery reads the output of `nvidia-smi --query-gpu=uuid,memory.total
// --format=csv,noheader,nounits`: one line per GPU, "GPU-…, 81559". A memory nvidia-smi cannot tell
// ("[N/A]") leaves the GPU out: nothing is made up.
func ParseMemoryQuery(out string) ([]GPUMemory, error) {
	gpus := []GPUMemory{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		uuid, mem, ok := strings.Cut(line, ",")
		uuid, mem = strings.TrimSpace(uuid), strings.TrimSpace(mem)
		if !ok || !strings.HasPrefix(uuid, "GPU-") {
			return nil, fmt.Errorf("line %q is not \"<uuid>, <memory MiB>\"", line)
		}
		if strings.HasPrefix(mem, "[") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(mem, " MiB"), 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("line %q: memory %q is not a number of MiB", line, mem)
		}
		gpus = append(gpus, GPUMemory{UUID: uuid, MemoryMiB: n})
	}
	return gpus, nil
}

// MemoryOf is the total memory the report shows for GPU uuid, ok false when nvidia-smi did not show it.
func (r Report) MemoryOf(uuid string) (int64, bool) {
	for _, g := range r.GPUs {
		if g.UUID == uuid {
			return g.MemoryMiB, true
		}
	}
	return 0, false
}
