package probe

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// h100MIG is `nvidia-smi -L` in a container given two MIG devices of GPU 2 and the whole GPU 3, in
// NVIDIA's format: the parent's line, then each MIG device indented two spaces,
// `MIG %-11s Device %2d: (UUID: %s)`.
var h100MIG = strings.Join([]string{
	"GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-8f4a7c2e-1b3d-4e5f-9a6b-7c8d9e0f1a2b)",
	fmt.Sprintf("  MIG %-11s Device %2d: (UUID: %s)", "3g.40gb", 0, "MIG-0a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d"),
	fmt.Sprintf("  MIG %-11s Device %2d: (UUID: %s)", "1g.10gb", 1, "MIG-11223344-5566-5778-8899-aabbccddeeff"),
	"GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-3c2b1a09-8f7e-4d6c-b5a4-938271605f4e)",
}, "\n")

// a100Legacy is the shape drivers before R470 print: the MIG UUID names its parent, GPU and compute
// instance, and the profile column is not padded.
const a100Legacy = "GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n" +
	"  MIG 1g.5gb Device 0: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0)\n" +
	"  MIG 1g.5gb Device 1: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/8/0)\r\n"

func TestParseNvidiaSMIMIG(t *testing.T) {
	got := ParseNvidiaSMIMIG(h100MIG)
	want := []MIGDevice{
		{UUID: "MIG-0a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d", Parent: "GPU-8f4a7c2e-1b3d-4e5f-9a6b-7c8d9e0f1a2b", Profile: "3g.40gb", GPUIndex: 2, Device: 0},
		{UUID: "MIG-11223344-5566-5778-8899-aabbccddeeff", Parent: "GPU-8f4a7c2e-1b3d-4e5f-9a6b-7c8d9e0f1a2b", Profile: "1g.10gb", GPUIndex: 2, Device: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseNvidiaSMIMIG = %+v, want %+v", got, want)
	}
	legacy := ParseNvidiaSMIMIG(a100Legacy)
	if len(legacy) != 2 || legacy[1].UUID != "MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/8/0" || legacy[1].Profile != "1g.5gb" || legacy[1].Device != 1 || legacy[1].Parent != "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77" {
		t.Errorf("legacy = %+v", legacy)
	}
	if got := ParseNvidiaSMIMIG("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\n"); got == nil || len(got) != 0 {
		t.Errorf("whole GPUs only = %#v, want empty non-nil", got)
	}
}

// A container given MIG devices reports them with their parents, and counts the MIG devices (not their
// parent) as its devices.
func TestGatherMIGDevices(t *testing.T) {
	r := newFixture(t, "NVIDIA_VISIBLE_DEVICES=MIG-0a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d,MIG-11223344-5566-5778-8899-aabbccddeeff,GPU-3c2b1a09-8f7e-4d6c-b5a4-938271605f4e").
		fakeNvidiaSMI(h100MIG, 0).gather()
	if len(r.MIGDevices) != 2 || r.MIGDevices[0].Profile != "3g.40gb" || r.MIGDevices[1].Parent != "GPU-8f4a7c2e-1b3d-4e5f-9a6b-7c8d9e0f1a2b" {
		t.Errorf("mig_devices = %+v", r.MIGDevices)
	}
	want := []string{"GPU-3c2b1a09-8f7e-4d6c-b5a4-938271605f4e", "MIG-0a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d", "MIG-11223344-5566-5778-8899-aabbccddeeff"}
	if !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("devices = %q, want %q", r.Devices, want)
	}
	if r.MPS != nil {
		t.Errorf("mps = %+v, want null without CUDA_MPS_* variables", r.MPS)
	}
	// Absent nvidia-smi: null, not empty.
	if r := newFixture(t).gather(); r.MIGDevices != nil {
		t.Errorf("mig_devices without nvidia-smi = %#v, want null", r.MIGDevices)
	}
	if r := newFixture(t).fakeNvidiaSMI("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)", 0).gather(); r.MIGDevices == nil || len(r.MIGDevices) != 0 {
		t.Errorf("mig_devices of whole GPUs = %#v, want empty", r.MIGDevices)
	}
}

// The MPS variables NVIDIA's plugin sets are reported as set, and the JSON names are the contract.
func TestGatherMPS(t *testing.T) {
	r := newFixture(t, "NVIDIA_VISIBLE_DEVICES=GPU-a", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40960M").gather()
	want := &MPS{PipeDirectory: "/tmp/nvidia-mps", ActiveThreadPercentage: "50", PinnedDeviceMemLimit: "0=40960M", LimitsFrom: "env"}
	if !reflect.DeepEqual(r.MPS, want) {
		t.Fatalf("mps = %+v, want %+v", r.MPS, want)
	}
	line, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"mps":{"pipe_directory":"/tmp/nvidia-mps","active_thread_percentage":"50","pinned_device_mem_limit":"0=40960M","limits_from":"env"}`, `"mig_devices":null`} {
		if !strings.Contains(string(line), field) {
			t.Errorf("report JSON %s lacks %s", line, field)
		}
	}
	// The mps-no-limits fault: the pipe directory without the limits still reads as MPS, limits empty.
	r = newFixture(t, "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps").gather()
	if r.MPS == nil || r.MPS.ActiveThreadPercentage != "" || r.MPS.PinnedDeviceMemLimit != "" {
		t.Errorf("mps without limits = %+v", r.MPS)
	}
}

func TestParsePinnedMemLimit(t *testing.T) {
	got, err := ParsePinnedMemLimit("0=40960M, 1=20G,2=1048576")
	if want := map[int]int64{0: 40960, 1: 20480, 2: 1}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParsePinnedMemLimit = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"40960M", "x=1M", "0=", "0=lotsM", "-1=1M"} {
		if _, err := ParsePinnedMemLimit(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParsePinnedMemLimit(%q) = %v, want an error naming it", bad, err)
		}
	}
}

// Limits the environment lacks come from the MPS control daemon's defaults, as NVIDIA's MPS daemon sets
// them; what the environment sets is kept, and a daemon that does not answer leaves the limit missing.
func TestFillMPSFromDaemon(t *testing.T) {
	daemon := func(answers map[string]string) mpsControlQuery {
		return func(cmd string) (string, error) {
			if a, ok := answers[cmd]; ok {
				return a, nil
			}
			return "", fmt.Errorf("unknown command %q", cmd)
		}
	}
	m := &MPS{PipeDirectory: "/mps/nvidia.com/gpu/pipe"}
	fillMPSFromDaemon(m, 1, daemon(map[string]string{
		"get_default_active_thread_percentage":  "50.0",
		"get_default_device_pinned_mem_limit 0": "40960M",
	}))
	if m.ActiveThreadPercentage != "50" || m.PinnedDeviceMemLimit != "0=40960M" || m.LimitsFrom != MPSControl {
		t.Errorf("from the daemon: %+v", m)
	}

	env := &MPS{PipeDirectory: "/tmp/nvidia-mps", ActiveThreadPercentage: "25", PinnedDeviceMemLimit: "0=20G"}
	fillMPSFromDaemon(env, 1, daemon(map[string]string{"get_default_active_thread_percentage": "50.0"}))
	if env.ActiveThreadPercentage != "25" || env.PinnedDeviceMemLimit != "0=20G" || env.LimitsFrom != "env" {
		t.Errorf("the environment's limits must stand: %+v", env)
	}

	silent := &MPS{PipeDirectory: "/tmp/nvidia-mps"}
	fillMPSFromDaemon(silent, 1, daemon(nil))
	if silent.ActiveThreadPercentage != "" || silent.PinnedDeviceMemLimit != "" || silent.LimitsFrom != "" {
		t.Errorf("a daemon that does not answer gives no limits: %+v", silent)
	}
	fillMPSFromDaemon(nil, 1, daemon(nil)) // no MPS share: nothing to fill
}
