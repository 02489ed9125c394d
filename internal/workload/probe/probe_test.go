package probe

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/internal/workload/termlog"
)

// fixture builds Options for an isolated container: its own /dev and an environment with an empty
// PATH, so nothing from the machine running the tests leaks into the report.
type fixture struct {
	t      *testing.T
	devDir string
	env    []string
	calls  string // the fake nvidia-smi's log of its argument lines
}

func newFixture(t *testing.T, env ...string) *fixture {
	t.Helper()
	f := &fixture{t: t, devDir: t.TempDir(), env: append([]string{"PATH=", "NODE_NAME=node-a", "POD_NAME=pod-a"}, env...)}
	return f
}

func (f *fixture) devFiles(names ...string) *fixture {
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(f.devDir, n), nil, 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	return f
}

// fakeNvidiaSMI installs a fake nvidia-smi that prints output for -L and fails any other arguments.
func (f *fixture) fakeNvidiaSMI(output string, exitCode int) *fixture {
	f.t.Helper()
	reply := smiReply{out: output, code: exitCode}
	if exitCode != 0 {
		reply.stderr = "driver not loaded"
	}
	return f.fakeTool(map[string]smiReply{"-L": reply})
}

// smiReply is what the fake nvidia-smi prints for one argument line, and its exit status.
type smiReply struct {
	out, stderr string
	code        int
}

// fakeTool installs a shell script named nvidia-smi that answers each argument line of replies (the
// arguments joined by spaces) and fails any other with exit status 9, puts its directory on the
// fixture's PATH, and logs every argument line it is run with in f.calls.
func (f *fixture) fakeTool(replies map[string]smiReply) *fixture {
	f.t.Helper()
	dir := f.t.TempDir()
	f.calls = filepath.Join(dir, "calls")
	var script strings.Builder
	script.WriteString("#!/bin/sh\necho \"$*\" >> '" + f.calls + "'\ncase \"$*\" in\n")
	for args, r := range replies {
		script.WriteString("'" + args + "')\ncat <<'OUT'\n" + r.out + "\nOUT\n")
		if r.stderr != "" {
			script.WriteString("echo '" + r.stderr + "' >&2\n")
		}
		script.WriteString("exit " + strconv.Itoa(r.code) + ";;\n")
	}
	script.WriteString("*) echo \"unexpected args: $*\" >&2; exit 9;;\nesac\n")
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script.String()), 0o755); err != nil {
		f.t.Fatal(err)
	}
	f.env = append(f.env, "PATH="+dir)
	return f
}

// toolCalls returns the argument lines the fake nvidia-smi was run with, in order.
func (f *fixture) toolCalls() []string {
	f.t.Helper()
	raw, err := os.ReadFile(f.calls)
	if err != nil {
		f.t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
}

func (f *fixture) opts() Options { return Options{Environ: f.env, DevDir: f.devDir} }

func (f *fixture) gather() Report { return Gather(context.Background(), f.opts()) }

func intPtr(n int) *int { return &n }

func TestNvidiaVisibleDevicesSpecificList(t *testing.T) {
	r := newFixture(t, "NVIDIA_VISIBLE_DEVICES=GPU-b, GPU-a").gather()
	if want := []string{"GPU-b", "GPU-a"}; !reflect.DeepEqual(r.Sources.NvidiaVisibleDevices, want) {
		t.Errorf("sources.nvidia_visible_devices = %q, want %q (verbatim order)", r.Sources.NvidiaVisibleDevices, want)
	}
	if want := []string{"GPU-a", "GPU-b"}; !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("devices = %q, want sorted %q", r.Devices, want)
	}
	if want := []string{SourceNvidiaVisibleDevices}; !reflect.DeepEqual(r.CountedFrom, want) {
		t.Errorf("counted_from = %q, want %q", r.CountedFrom, want)
	}
}

func TestNvidiaVisibleDevicesAllCountsAsEveryGPU(t *testing.T) {
	// Under the NVIDIA runtime "all" exposes every GPU of the node: without a primary source it must never
	// read as "no device".
	for _, value := range []string{"all", "ALL"} {
		r := newFixture(t, "NVIDIA_VISIBLE_DEVICES="+value).gather()
		if want := []string{AllDevices}; !reflect.DeepEqual(r.Devices, want) {
			t.Errorf("%s: devices = %q, want %q", value, r.Devices, want)
		}
		if Check(&r, Expectation{Count: intPtr(0)}) {
			t.Errorf("%s: expect 0 passed", value)
		}
	}
	// With nvidia-smi present, it says which GPUs "all" turned out to be.
	r := newFixture(t, "NVIDIA_VISIBLE_DEVICES=all").fakeNvidiaSMI("GPU 0: NVIDIA H100 (UUID: GPU-aaaa)\nGPU 1: NVIDIA H100 (UUID: GPU-bbbb)", 0).gather()
	if want := []string{"GPU-aaaa", "GPU-bbbb"}; !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("devices = %q, want %q", r.Devices, want)
	}
}

func TestNvidiaVisibleDevicesNonSpecificValues(t *testing.T) {
	for _, value := range []string{"none", "void", ""} {
		t.Run("value="+value, func(t *testing.T) {
			r := newFixture(t, "NVIDIA_VISIBLE_DEVICES="+value).gather()
			if want := []string{value}; !reflect.DeepEqual(r.Sources.NvidiaVisibleDevices, want) {
				t.Errorf("sources.nvidia_visible_devices = %q, want %q recorded as-is", r.Sources.NvidiaVisibleDevices, want)
			}
			if len(r.Devices) != 0 {
				t.Errorf("devices = %q, want none: %q names no specific device", r.Devices, value)
			}
		})
	}
}

func TestUnsetSourcesAreNull(t *testing.T) {
	r := newFixture(t).gather()
	s := r.Sources
	if s.NvidiaVisibleDevices != nil || s.DRAEnv != nil || s.GPUConformVisibleDevices != nil || s.DevFiles != nil || s.NvidiaSMI != nil {
		t.Errorf("absent sources must be null, got %+v", s)
	}
	if r.Devices == nil || len(r.Devices) != 0 {
		t.Errorf("devices = %#v, want an empty non-nil list", r.Devices)
	}
	if r.DriverVersion != "" || r.CUDAVersion != "" || r.VersionError != "" {
		t.Errorf("versions = %q/%q (error %q), want empty without nvidia-smi", r.DriverVersion, r.CUDAVersion, r.VersionError)
	}
	if r.Node != "node-a" || r.Pod != "pod-a" {
		t.Errorf("node/pod = %q/%q, want node-a/pod-a from NODE_NAME/POD_NAME", r.Node, r.Pod)
	}
}

func TestNodeFallsBackToHostname(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip("no hostname:", err)
	}
	r := Gather(t.Context(), Options{Environ: []string{"PATH="}, DevDir: t.TempDir()})
	if r.Node != host {
		t.Errorf("node = %q, want hostname %q when NODE_NAME is unset", r.Node, host)
	}
}

func TestDRAEnvKeepsSuffixedKeysButCountsOnlyDeviceNames(t *testing.T) {
	r := newFixture(t,
		"GPU_DEVICE_0=gpu-0",
		"GPU_DEVICE_1=gpu-3",
		"GPU_DEVICE_0_RESOURCE_CLAIM=claim-uid-1",
		"GPU_DEVICE_0_SHARING_STRATEGY=TimeSlicing",
		"GPU_DEVICE_0_TIMESLICE_INTERVAL=Default",
		"GPU_DEVICEX=not-ours",
	).gather()
	wantEnv := map[string]string{
		"GPU_DEVICE_0":                    "gpu-0",
		"GPU_DEVICE_1":                    "gpu-3",
		"GPU_DEVICE_0_RESOURCE_CLAIM":     "claim-uid-1",
		"GPU_DEVICE_0_SHARING_STRATEGY":   "TimeSlicing",
		"GPU_DEVICE_0_TIMESLICE_INTERVAL": "Default",
	}
	if !reflect.DeepEqual(r.Sources.DRAEnv, wantEnv) {
		t.Errorf("sources.dra_env = %v, want %v", r.Sources.DRAEnv, wantEnv)
	}
	if want := []string{"gpu-0", "gpu-3"}; !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("devices = %q, want %q (suffixed keys describe, not name, a device)", r.Devices, want)
	}
}

func TestGPUConformVisibleDevices(t *testing.T) {
	r := newFixture(t, "GPUCONFORM_VISIBLE_DEVICES=fake-1,,fake-0 ,fake-1").gather()
	if want := []string{"fake-1", "fake-0", "fake-1"}; !reflect.DeepEqual(r.Sources.GPUConformVisibleDevices, want) {
		t.Errorf("sources.gpuconform_visible_devices = %q, want %q", r.Sources.GPUConformVisibleDevices, want)
	}
	if want := []string{"fake-0", "fake-1"}; !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("devices = %q, want deduplicated %q", r.Devices, want)
	}
}

func TestDevFilesCountedOnlyWithoutIdentities(t *testing.T) {
	t.Run("alone", func(t *testing.T) {
		f := newFixture(t).devFiles("nvidia10", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-caps")
		r := f.gather()
		want := []string{filepath.Join(f.devDir, "nvidia2"), filepath.Join(f.devDir, "nvidia10")}
		if !reflect.DeepEqual(r.Sources.DevFiles, want) {
			t.Errorf("sources.dev_files = %q, want numeric order %q without control nodes", r.Sources.DevFiles, want)
		}
		if len(r.Devices) != 2 || !reflect.DeepEqual(r.CountedFrom, []string{SourceDevFiles}) {
			t.Errorf("devices = %q counted_from = %q, want the 2 device files counted", r.Devices, r.CountedFrom)
		}
	})
	t.Run("with UUIDs", func(t *testing.T) {
		f := newFixture(t, "NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b").devFiles("nvidia0", "nvidia1")
		r := f.gather()
		if len(r.Sources.DevFiles) != 2 {
			t.Errorf("sources.dev_files = %q, want both recorded", r.Sources.DevFiles)
		}
		if want := []string{"GPU-a", "GPU-b"}; !reflect.DeepEqual(r.Devices, want) {
			t.Errorf("devices = %q, want %q: device files must not be counted twice", r.Devices, want)
		}
	})
}

func TestParseNvidiaSMIList(t *testing.T) {
	out := strings.Join([]string{
		"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-11111111-2222-3333-4444-555555555555)",
		"GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)",
		"  MIG 1g.5gb      Device  0: (UUID: MIG-bbbb)",
		"  MIG 1g.5gb      Device  1: (UUID: MIG-cccc)",
		"GPU 2: Tesla T4 (UUID: GPU-dddd)\r",
		"No devices were found",
		"",
	}, "\n")
	want := []string{"GPU-11111111-2222-3333-4444-555555555555", "MIG-bbbb", "MIG-cccc", "GPU-dddd"}
	if got := ParseNvidiaSMIList(out); !reflect.DeepEqual(got, want) {
		t.Errorf("ParseNvidiaSMIList = %q, want %q", got, want)
	}
	if got := ParseNvidiaSMIList("No devices were found\n"); got == nil || len(got) != 0 {
		t.Errorf("ParseNvidiaSMIList(no devices) = %#v, want empty non-nil", got)
	}
}

func TestNvidiaSMIFromPATHDedupsWithVisibleDevices(t *testing.T) {
	// A real NVIDIA container: the runtime sets UUIDs and nvidia-smi reports the same GPUs.
	r := newFixture(t, "NVIDIA_VISIBLE_DEVICES=GPU-bbbb,GPU-aaaa").
		fakeNvidiaSMI("GPU 0: NVIDIA H100 (UUID: GPU-aaaa)\nGPU 1: NVIDIA H100 (UUID: GPU-bbbb)", 0).
		devFiles("nvidia4", "nvidia5").gather()
	if want := []string{"GPU-aaaa", "GPU-bbbb"}; !reflect.DeepEqual(r.Sources.NvidiaSMI, want) {
		t.Fatalf("sources.nvidia_smi = %q, want %q", r.Sources.NvidiaSMI, want)
	}
	if want := []string{"GPU-aaaa", "GPU-bbbb"}; !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("devices = %q, want %q counted once each", r.Devices, want)
	}
	if want := []string{SourceNvidiaSMI}; !reflect.DeepEqual(r.CountedFrom, want) {
		t.Errorf("counted_from = %q, want %q: nvidia-smi is the truth when it answered", r.CountedFrom, want)
	}
}

func TestNvidiaSMIDropsIndexEntries(t *testing.T) {
	// Device plugin configured with index IDs: host index 3 is GPU 0 inside the container.
	r := newFixture(t, "NVIDIA_VISIBLE_DEVICES=3").
		fakeNvidiaSMI("GPU 0: NVIDIA H100 (UUID: GPU-aaaa)", 0).gather()
	if want := []string{"GPU-aaaa"}; !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("devices = %q, want %q: an index must not be counted next to the UUID nvidia-smi saw", r.Devices, want)
	}
	// Without nvidia-smi the index is the only identity there is.
	r = newFixture(t, "NVIDIA_VISIBLE_DEVICES=3").gather()
	if want := []string{"3"}; !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("devices = %q, want %q", r.Devices, want)
	}
}

func TestNvidiaSMIIsTheTruthOverTheEnvironment(t *testing.T) {
	// The runtime was told about GPU-bbbb but nvidia-smi cannot see it: the container does not have it (a
	// plugin that advertises a GPU that is not there), so a request for 2 must fail.
	r := newFixture(t, "NVIDIA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb").
		fakeNvidiaSMI("GPU 0: NVIDIA H100 (UUID: GPU-aaaa)", 0).gather()
	if want := []string{"GPU-aaaa"}; !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("devices = %q, want %q", r.Devices, want)
	}
	// "No devices were found" (exit 6) is an answer: none, whatever the environment says.
	r = newFixture(t, "NVIDIA_VISIBLE_DEVICES=GPU-aaaa").fakeNvidiaSMI("", 6).gather()
	if len(r.Devices) != 0 || r.Sources.NvidiaSMIError != "" {
		t.Errorf("devices = %q, error %q; want none and no error after nvidia-smi found no devices", r.Devices, r.Sources.NvidiaSMIError)
	}
}

func TestDeviceNodesCountWithoutNvidiaSMI(t *testing.T) {
	// Two device nodes and two identities: the identities name them.
	r := newFixture(t, "NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b").devFiles("nvidia0", "nvidia3").gather()
	if want := []string{"GPU-a", "GPU-b"}; !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("devices = %q, want %q", r.Devices, want)
	}
	// One device node but two identities: the device nodes are the truth.
	r = newFixture(t, "NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b").devFiles("nvidia0").gather()
	if len(r.Devices) != 1 || !strings.HasSuffix(r.Devices[0], "nvidia0") {
		t.Errorf("devices = %q, want the one device node", r.Devices)
	}
}

func TestNvidiaSMIFailureIsReported(t *testing.T) {
	r := newFixture(t).fakeNvidiaSMI("", 9).gather()
	if r.Sources.NvidiaSMI == nil || len(r.Sources.NvidiaSMI) != 0 {
		t.Errorf("sources.nvidia_smi = %#v, want empty non-nil (installed but failed)", r.Sources.NvidiaSMI)
	}
	if !strings.Contains(r.Sources.NvidiaSMIError, "driver not loaded") {
		t.Errorf("sources.nvidia_smi_error = %q, want the tool's stderr", r.Sources.NvidiaSMIError)
	}
}

func TestUnionAcrossSources(t *testing.T) {
	r := newFixture(t, "GPU_DEVICE_0=gpu-0", "GPUCONFORM_VISIBLE_DEVICES=gpu-0,fake-9", "NVIDIA_VISIBLE_DEVICES=none").gather()
	if want := []string{"fake-9", "gpu-0"}; !reflect.DeepEqual(r.Devices, want) {
		t.Errorf("devices = %q, want %q", r.Devices, want)
	}
}

func TestExpectCount(t *testing.T) {
	f := newFixture(t, "NVIDIA_VISIBLE_DEVICES=GPU-a")
	r := f.gather()
	if !Check(&r, Expectation{Count: intPtr(1)}) || !r.OK {
		t.Fatalf("expect 1 with one device: ok=false, message %q", r.Message)
	}
	if !strings.Contains(r.Message, "as expected") {
		t.Errorf("message = %q, want it to say the expectation held", r.Message)
	}

	r = f.gather()
	if Check(&r, Expectation{Count: intPtr(2)}) {
		t.Fatal("expect 2 with one device passed")
	}
	if want := "expected 2 devices, container sees 1: [GPU-a]"; r.Message != want {
		t.Errorf("message = %q, want %q", r.Message, want)
	}
}

func TestExpectZero(t *testing.T) {
	r := newFixture(t, "NVIDIA_VISIBLE_DEVICES=none").gather()
	if !Check(&r, Expectation{Count: intPtr(0)}) {
		t.Errorf("expect 0 with NVIDIA_VISIBLE_DEVICES=none failed: %q", r.Message)
	}
	r = newFixture(t).devFiles("nvidia0").gather()
	if Check(&r, Expectation{Count: intPtr(0)}) {
		t.Errorf("expect 0 passed although /dev/nvidia0 is present")
	}
	if !strings.HasPrefix(r.Message, "expected 0 devices, container sees 1: [") {
		t.Errorf("message = %q", r.Message)
	}
}

func TestExpectIDs(t *testing.T) {
	f := newFixture(t, "GPU_DEVICE_0=gpu-1", "GPU_DEVICE_1=gpu-2")
	r := f.gather()
	if !Check(&r, Expectation{IDs: []string{"gpu-2", "gpu-1", "gpu-1"}}) {
		t.Fatalf("matching id set failed: %q", r.Message)
	}
	if want := []string{"gpu-1", "gpu-2"}; !reflect.DeepEqual(r.ExpectIDs, want) {
		t.Errorf("expect_ids = %q, want %q", r.ExpectIDs, want)
	}

	r = f.gather()
	if Check(&r, Expectation{IDs: []string{"gpu-1", "gpu-7"}}) {
		t.Fatal("differing id set passed")
	}
	for _, part := range []string{"missing [gpu-7]", "unexpected [gpu-2]", "container sees 2: [gpu-1 gpu-2]"} {
		if !strings.Contains(r.Message, part) {
			t.Errorf("message %q lacks %q", r.Message, part)
		}
	}
}

func TestExpectCountAndIDsBothReported(t *testing.T) {
	r := newFixture(t, "GPU_DEVICE_0=gpu-1").gather()
	if Check(&r, Expectation{Count: intPtr(2), IDs: []string{"gpu-1", "gpu-2"}}) {
		t.Fatal("passed")
	}
	if !strings.Contains(r.Message, "expected 2 devices") || !strings.Contains(r.Message, "missing [gpu-2]") {
		t.Errorf("message = %q, want both failures", r.Message)
	}
}

func TestRunPrintsOneJSONLineAndTerminationMessage(t *testing.T) {
	f := newFixture(t, "NVIDIA_VISIBLE_DEVICES=GPU-a", "GPU_DEVICE_0=gpu-0")
	termLog := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(termLog, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	r, err := Run(t.Context(), f.opts(), Expectation{Count: intPtr(3)}, &out, termLog)
	if err != nil {
		t.Fatal(err)
	}
	if r.OK {
		t.Fatal("expect 3 with two devices reported ok")
	}
	if strings.Count(out.String(), "\n") != 1 || !strings.HasSuffix(out.String(), "\n") {
		t.Fatalf("stdout = %q, want exactly one line", out.String())
	}

	// Decode into a generic map so the test pins the JSON field names, not just the Go struct.
	var doc map[string]any
	if err := json.Unmarshal([]byte(out.String()), &doc); err != nil {
		t.Fatalf("stdout is not JSON: %v", err)
	}
	for _, key := range []string{"node", "pod", "devices", "sources", "expect", "expect_ids", "ok", "message", "driver_version", "cuda_version"} {
		if _, ok := doc[key]; !ok {
			t.Errorf("JSON lacks %q: %s", key, out.String())
		}
	}
	if doc["ok"] != false || doc["expect"] != float64(3) || doc["expect_ids"] != nil || doc["node"] != "node-a" {
		t.Errorf("ok/expect/expect_ids/node = %v/%v/%v/%v", doc["ok"], doc["expect"], doc["expect_ids"], doc["node"])
	}
	sources, _ := doc["sources"].(map[string]any)
	for _, key := range []string{"nvidia_visible_devices", "dra_env", "gpuconform_visible_devices", "dev_files", "nvidia_smi"} {
		if _, ok := sources[key]; !ok {
			t.Errorf("sources lacks %q", key)
		}
	}
	if dra, _ := sources["dra_env"].(map[string]any); dra["GPU_DEVICE_0"] != "gpu-0" {
		t.Errorf("sources.dra_env = %v", sources["dra_env"])
	}

	var decoded Report
	if err := json.Unmarshal([]byte(out.String()), &decoded); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(decoded, r) {
		t.Errorf("stdout decodes to %+v, want the returned report %+v", decoded, r)
	}
	written, _ := os.ReadFile(termLog)
	if strings.TrimSpace(string(written)) != strings.TrimSpace(out.String()) {
		t.Errorf("termination log = %q, want the stdout line", written)
	}
}

func TestRunCompactsOversizedTerminationMessage(t *testing.T) {
	// Enough DRA metadata to push the full report over the kubelet's limit.
	env := []string{"GPU_DEVICE_0=gpu-0"}
	for i := range 200 {
		env = append(env, "GPU_DEVICE_"+strconv.Itoa(i)+"_RESOURCE_CLAIM=claim-with-a-rather-long-uid-"+strconv.Itoa(i))
	}
	f := newFixture(t, env...)
	termLog := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(termLog, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if _, err := Run(t.Context(), f.opts(), Expectation{Count: intPtr(1)}, &out, termLog); err != nil {
		t.Fatal(err)
	}
	if len(out.String()) <= termlog.MaxBytes {
		t.Fatalf("fixture too small: stdout is %d bytes", len(out.String()))
	}
	written, _ := os.ReadFile(termLog)
	if len(written) > termlog.MaxBytes {
		t.Fatalf("termination log is %d bytes, over %d", len(written), termlog.MaxBytes)
	}
	var compact Report
	if err := json.Unmarshal(written, &compact); err != nil {
		t.Fatalf("compact termination message is not JSON: %v", err)
	}
	if !compact.Truncated || !compact.OK || !reflect.DeepEqual(compact.Devices, []string{"gpu-0"}) {
		t.Errorf("compact report = %+v, want truncated, ok, devices [gpu-0]", compact)
	}
}

func TestNvidiaSMIFailureOnStdoutIsReported(t *testing.T) {
	// The real tool prints its failures on stdout (recorded on a real H200 for bad arguments).
	f := newFixture(t)
	dir := t.TempDir()
	script := "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f.env = append(f.env, "PATH="+dir)
	r := f.gather()
	if !strings.Contains(r.Sources.NvidiaSMIError, "could not communicate") {
		t.Errorf("sources.nvidia_smi_error = %q, want the tool's stdout when its stderr is empty", r.Sources.NvidiaSMIError)
	}
}
