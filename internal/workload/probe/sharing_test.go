package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
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

// fakeMPSControl installs an nvidia-cuda-mps-control on the fixture's PATH that reads one command from
// stdin and prints answers[command] (nothing for a command it does not know), exiting with code; with
// hang it never answers.
func (f *fixture) fakeMPSControl(answers map[string]string, code int, hang bool) *fixture {
	f.t.Helper()
	dir := f.t.TempDir()
	var script strings.Builder
	script.WriteString("#!/bin/sh\n")
	if hang {
		script.WriteString("while :; do :; done\n")
	}
	script.WriteString("read -r cmd\ncase \"$cmd\" in\n")
	for cmd, answer := range answers {
		script.WriteString("'" + cmd + "') echo '" + answer + "';;\n")
	}
	script.WriteString("esac\nexit " + strconv.Itoa(code) + "\n")
	if err := os.WriteFile(filepath.Join(dir, MPSControl), []byte(script.String()), 0o755); err != nil {
		f.t.Fatal(err)
	}
	path := ""
	for _, kv := range f.env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	f.env = append(f.env, "PATH="+strings.Trim(path+":"+dir, ":"))
	return f
}

// daemon50 answers as the MPS daemon of NVIDIA's plugin on a GPU with index 3 shared two ways.
var daemon50 = map[string]string{
	"get_default_active_thread_percentage":  "50.0",
	"get_default_device_pinned_mem_limit 3": "40779M",
}

// The MPS limits are what the control daemon behind the pipe directory answers through
// nvidia-cuda-mps-control, asked for the container's GPU by its node index; limit variables a user set
// are kept apart, and the JSON names are the contract.
func TestGatherMPS(t *testing.T) {
	r := newFixture(t, "NVIDIA_VISIBLE_DEVICES=GPU-a", "CUDA_MPS_PIPE_DIRECTORY=/mps/nvidia.com/gpu/pipe", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25").
		devFiles("nvidia3", "nvidiactl").fakeMPSControl(daemon50, 0, false).gather()
	want := &MPS{PipeDirectory: "/mps/nvidia.com/gpu/pipe", ActiveThreadPercentage: "50", PinnedDeviceMemLimit: "3=40779M",
		LimitsFrom: MPSControl, Control: MPSControlAnswered,
		Asked: []MPSAnswer{{Command: "get_default_active_thread_percentage", Answer: "50.0"}, {Command: "get_default_device_pinned_mem_limit 3", Answer: "40779M"}},
		Env:   &MPSEnv{ActiveThreadPercentage: "25"}}
	if !reflect.DeepEqual(r.MPS, want) {
		t.Fatalf("mps = %+v, want %+v", r.MPS, want)
	}
	line, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"mps":{"pipe_directory":"/mps/nvidia.com/gpu/pipe","active_thread_percentage":"50","pinned_device_mem_limit":"3=40779M","limits_from":"nvidia-cuda-mps-control","control":"answered",` +
		`"asked":[{"command":"get_default_active_thread_percentage","answer":"50.0"},{"command":"get_default_device_pinned_mem_limit 3","answer":"40779M"}],"env":{"active_thread_percentage":"25"}}`, `"mig_devices":null`} {
		if !strings.Contains(string(line), field) {
			t.Errorf("report JSON %s lacks %s", line, field)
		}
	}
	// The variables alone give no limit: without an answering daemon the limits stay empty.
	r = newFixture(t, "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40960M").gather()
	if r.MPS == nil || r.MPS.ActiveThreadPercentage != "" || r.MPS.PinnedDeviceMemLimit != "" || r.MPS.LimitsFrom != "" || r.MPS.Env == nil || r.MPS.Env.PinnedDeviceMemLimit != "0=40960M" {
		t.Errorf("mps from variables only = %+v", r.MPS)
	}
	if r := newFixture(t).gather(); r.MPS != nil {
		t.Errorf("mps without any CUDA_MPS_* variable = %+v, want null", r.MPS)
	}
}

// A missing client, a daemon that does not answer (the real client's words when none listens), one that
// never answers, and an empty answer are each reported as the container showed them.
func TestGatherMPSControlFailures(t *testing.T) {
	pipe := "CUDA_MPS_PIPE_DIRECTORY=/mps/nvidia.com/gpu/pipe"
	for name, c := range map[string]struct {
		f       *fixture
		control string
		says    []string
	}{
		"not installed": {newFixture(t, pipe), MPSControlNotInstalled, []string{"nvidia-cuda-mps-control is not on the container's PATH (PATH=)"}},
		"no daemon": {newFixture(t, pipe).fakeMPSControl(map[string]string{"get_default_active_thread_percentage": "Cannot find MPS control daemon process"}, 1, false),
			MPSControlNoAnswer, []string{`asked "get_default_active_thread_percentage" with CUDA_MPS_PIPE_DIRECTORY /mps/nvidia.com/gpu/pipe, did not answer: exit status 1: Cannot find MPS control daemon process`}},
		"hangs": {newFixture(t, pipe).fakeMPSControl(nil, 0, true), MPSControlNoAnswer, []string{"did not answer: no answer within 200ms"}},
		"empty": {newFixture(t, pipe).fakeMPSControl(nil, 0, false), MPSControlEmpty, []string{`asked "get_default_active_thread_percentage"`, "answered nothing"}},
		"empty limit": {newFixture(t, pipe).fakeMPSControl(map[string]string{"get_default_active_thread_percentage": "50.0"}, 0, false),
			MPSControlEmpty, []string{`asked "get_default_device_pinned_mem_limit 0"`, "answered nothing"}},
	} {
		opts := c.f.opts()
		opts.MPSControlTimeout = 200 * time.Millisecond
		m := Gather(t.Context(), opts).MPS
		if m == nil || m.Control != c.control || m.ActiveThreadPercentage != "" || m.PinnedDeviceMemLimit != "" || m.LimitsFrom != "" {
			t.Errorf("%s: mps = %+v, want control %s and no limits", name, m, c.control)
			continue
		}
		for _, say := range c.says {
			if !strings.Contains(m.ControlError, say) {
				t.Errorf("%s: control_error %q lacks %q", name, m.ControlError, say)
			}
		}
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

// readMPSDaemon asks the percentage once and the pinned memory limit per GPU index, and stops at the first
// command that gets no answer.
func TestReadMPSDaemon(t *testing.T) {
	var asked []string
	daemon := func(answers map[string]string) mpsControlQuery {
		return func(cmd string) (string, error) {
			asked = append(asked, cmd)
			if a, ok := answers[cmd]; ok {
				return a, nil
			}
			return "Cannot find MPS control daemon process", errors.New("exit status 1")
		}
	}
	m := &MPS{PipeDirectory: "/mps/nvidia.com/gpu/pipe"}
	readMPSDaemon(m, []int{1, 2}, daemon(map[string]string{
		"get_default_active_thread_percentage":  "33.0",
		"get_default_device_pinned_mem_limit 1": "27186M",
		"get_default_device_pinned_mem_limit 2": "27186M",
	}), "/usr/bin")
	if m.ActiveThreadPercentage != "33" || m.PinnedDeviceMemLimit != "1=27186M,2=27186M" || m.LimitsFrom != MPSControl || m.Control != MPSControlAnswered || len(m.Asked) != 3 {
		t.Errorf("two GPUs: %+v", m)
	}

	asked = nil
	silent := &MPS{PipeDirectory: "/tmp/nvidia-mps"}
	readMPSDaemon(silent, nil, daemon(nil), "/usr/bin")
	if silent.ActiveThreadPercentage != "" || silent.PinnedDeviceMemLimit != "" || silent.Control != MPSControlNoAnswer || len(asked) != 1 ||
		silent.Asked[0].Answer != "Cannot find MPS control daemon process" || silent.Asked[0].Error != "exit status 1" {
		t.Errorf("a daemon that does not answer gives no limits and is asked once: %+v (asked %q)", silent, asked)
	}
	readMPSDaemon(nil, nil, daemon(nil), "") // no MPS share: nothing to ask
}
