package devicetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/internal/cuda/cudatest"
)

// container is a fake container root: device files under dev/ and, when given, an nvidia-smi in usr/bin
// that answers -L with a fixed output and status.
type container struct {
	t    *testing.T
	root string
	env  []string
}

func newContainer(t *testing.T, devices ...string) *container {
	t.Helper()
	c := &container{t: t, root: t.TempDir(), env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "NODE_NAME=node-a", "POD_NAME=devtest-0"}}
	if err := os.MkdirAll(filepath.Join(c.root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range devices {
		if err := os.WriteFile(filepath.Join(c.root, "dev", d), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// nvidiaSMI installs a fake nvidia-smi that prints list for -L and exits with code (stderr says why when
// code is not 0); it refuses every other question, which the test does not need answered.
func (c *container) nvidiaSMI(list string, code int) *container {
	c.t.Helper()
	bin := filepath.Join(c.root, "usr", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		c.t.Fatal(err)
	}
	script := "#!/bin/sh\nif [ \"$1\" = -L ]; then\ncat <<'OUT'\n" + list + "\nOUT\n"
	if code != 0 {
		script += "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2\n"
	}
	script += "exit " + strconv.Itoa(code) + "\nfi\necho \"unexpected: $*\" >&2\nexit 2\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(script), 0o755); err != nil {
		c.t.Fatal(err)
	}
	return c
}

// check runs the test in the container; cudaLib is the driver library (the libcuda double), or none: a
// path that does not exist, so a machine's own libcuda never answers.
func (c *container) check(cudaLib ...string) Report {
	lib := filepath.Join(c.root, "no-libcuda.so.1")
	if len(cudaLib) > 0 {
		lib = cudaLib[0]
	}
	return Check(c.t.Context(), Options{Root: c.root, Environ: c.env, CUDALibrary: lib, Elements: 5000})
}

const oneGPU = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)"

func TestPassesWithADeviceNodeTheControlDeviceAndNvidiaSMI(t *testing.T) {
	r := newContainer(t, "nvidia0", "nvidiactl", "nvidia-uvm").nvidiaSMI(oneGPU, 0).check()
	if !r.OK || len(r.Missing) != 0 {
		t.Fatalf("failed: %s", r.Message)
	}
	if !slices.Equal(r.DeviceNodes, []string{"/dev/nvidia0"}) || !r.ControlDevice || !slices.Equal(r.NvidiaSMI, []string{"GPU-aaaa"}) {
		t.Errorf("report = %+v", r)
	}
	if r.Node != "node-a" || r.Pod != "devtest-0" {
		t.Errorf("node %q pod %q, want the downward API's", r.Node, r.Pod)
	}
}

// Each missing layer is named, all of them at once, in the order the stack builds up.
func TestNamesWhatIsMissing(t *testing.T) {
	for name, tc := range map[string]struct {
		c    *container
		want []string
	}{
		"no GPU device node": {newContainer(t, "nvidiactl").nvidiaSMI("No devices were found", 6),
			[]string{"no GPU device node (/dev/nvidia[0-9]*) in the container"}},
		"no control device": {newContainer(t, "nvidia0").nvidiaSMI("", 9),
			[]string{"no /dev/nvidiactl in the container", "nvidia-smi failed: ", "could not communicate with the NVIDIA driver"}},
		"no nvidia-smi": {newContainer(t, "nvidia0", "nvidiactl"),
			[]string{"nvidia-smi is not on PATH (PATH=/usr/local/bin:/usr/bin:/bin): the driver's user-space tools were not injected"}},
		"fewer GPUs listed than device nodes": {newContainer(t, "nvidia0", "nvidia1", "nvidiactl").nvidiaSMI(oneGPU, 0),
			[]string{"nvidia-smi -L lists 1 GPU(s) [GPU-aaaa] but the container has 2 GPU device node(s) [/dev/nvidia0 /dev/nvidia1]"}},
		"nothing at all": {newContainer(t),
			[]string{"no GPU device node", "no /dev/nvidiactl", "nvidia-smi is not on PATH"}},
	} {
		t.Run(name, func(t *testing.T) {
			r := tc.c.check()
			if r.OK {
				t.Fatalf("passed: %+v", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Message, w) {
					t.Errorf("message %q does not say %q", r.Message, w)
				}
			}
			// The layers are reported in order, each once.
			if !slices.IsSortedFunc(r.Missing, func(a, b string) int { return rank(a) - rank(b) }) {
				t.Errorf("missing out of order: %q", r.Missing)
			}
		})
	}
}

// rank orders a Missing sentence by the layer it is about.
func rank(s string) int {
	for i, p := range []string{"no GPU device node", "no /dev/nvidiactl", "nvidia-smi"} {
		if strings.HasPrefix(s, p) {
			return i
		}
	}
	return 99
}

// A container given one MIG device has its GPU's device node, and nvidia-smi lists the GPU with the MIG
// device under it: one GPU, one node.
func TestCountsAGPUSplitIntoMIGDevicesOnce(t *testing.T) {
	list := "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n  MIG 1g.5gb      Device  0: (UUID: MIG-1111)\n  MIG 1g.5gb      Device  1: (UUID: MIG-2222)"
	r := newContainer(t, "nvidia0", "nvidiactl").nvidiaSMI(list, 0).check()
	if !r.OK || !slices.Equal(r.NvidiaSMI, []string{"GPU-aaaa"}) {
		t.Errorf("report = %+v", r)
	}
}

// Below a root of its own the test never finds a tool of the machine it runs on: without PATH it finds none.
func TestWithoutPATHBelowARootFindsNoTool(t *testing.T) {
	c := newContainer(t, "nvidia0", "nvidiactl").nvidiaSMI(oneGPU, 0)
	c.env = []string{"NODE_NAME=node-a"}
	r := c.check()
	if r.OK || !strings.Contains(r.Message, "nvidia-smi is not on PATH (PATH unset") {
		t.Errorf("report = %+v", r)
	}
}

// The JSON line comes first, whatever the verdict; Passed is the last line only of a pass.
func TestRunPrintsTheReportThenPassed(t *testing.T) {
	for _, tc := range []struct {
		c    *container
		pass bool
	}{
		{newContainer(t, "nvidia0", "nvidiactl").nvidiaSMI(oneGPU, 0), true},
		{newContainer(t, "nvidia0", "nvidiactl"), false},
	} {
		var out strings.Builder
		r, err := Run(t.Context(), Options{Root: tc.c.root, Environ: tc.c.env}, &out)
		if err != nil || r.OK != tc.pass {
			t.Fatalf("Run = %+v, %v", r, err)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		var printed Report
		if err := json.Unmarshal([]byte(lines[0]), &printed); err != nil || printed.OK != tc.pass || printed.Message != r.Message {
			t.Errorf("first line %q: %v", lines[0], err)
		}
		if last := lines[len(lines)-1]; (last == Passed) != tc.pass || len(lines) != map[bool]int{true: 2, false: 1}[tc.pass] {
			t.Errorf("pass=%v: output %q", tc.pass, out.String())
		}
		if !tc.pass && !strings.Contains(lines[0], `"missing":["nvidia-smi is not on PATH`) {
			t.Errorf("the JSON line does not say what is missing: %s", lines[0])
		}
	}
}

// doubleGPU is what nvidia-smi -L prints for the libcuda double's device 0.
const doubleGPU = "GPU 0: Double GPU 0 (UUID: GPU-00010203-0405-0607-0809-0a0b0c0d0e0f)"

func TestVectorAddThroughCUDA(t *testing.T) {
	lib := cudatest.Build(t)
	r := newContainer(t, "nvidia0", "nvidiactl").nvidiaSMI(doubleGPU, 0).check(lib)
	if !r.OK || r.StandIn != "" || r.CUDA == nil {
		t.Fatalf("failed: %s (stand-in %q)", r.Message, r.StandIn)
	}
	d := r.CUDA.Devices[0]
	if r.CUDA.DriverVersion != "12.4" || d.UUID != "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f" || d.VectorAdd.Elements != 5000 || d.VectorAdd.Mismatches != 0 {
		t.Errorf("cuda report %+v", r.CUDA)
	}
	if !strings.Contains(r.Message, "CUDA 12.4: vectorAdd verified on 1 device(s)") {
		t.Errorf("message %q", r.Message)
	}
}

// The double adds element 7 wrong: the test reads every element back, so it fails naming it.
func TestWrongSumFails(t *testing.T) {
	lib := cudatest.Build(t)
	t.Setenv("CUDA_DOUBLE_WRONG_SUM", "1")
	r := newContainer(t, "nvidia0", "nvidiactl").nvidiaSMI(doubleGPU, 0).check(lib)
	want := "CUDA device 0 (GPU-00010203-0405-0607-0809-0a0b0c0d0e0f): vectorAdd gave 1 wrong element(s) of 5000, first element 7: 7 + 15 gave 23"
	if r.OK || !slices.Equal(r.Missing, []string{want}) {
		t.Errorf("missing %q, want %q", r.Missing, want)
	}
}

// cuInit's CUresult is the failure, by name: nothing to wait for.
func TestCUDAInitFailureIsNamed(t *testing.T) {
	lib := cudatest.Build(t)
	t.Setenv("CUDA_DOUBLE_INIT", "803")
	r := newContainer(t, "nvidia0", "nvidiactl").nvidiaSMI(doubleGPU, 0).check(lib)
	if r.OK || !slices.Equal(r.Missing, []string{"CUDA failed: cuInit: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)"}) {
		t.Errorf("missing %q", r.Missing)
	}
}

// A device CUDA runs on must be one nvidia-smi lists.
func TestCUDADeviceNotListedByNvidiaSMI(t *testing.T) {
	lib := cudatest.Build(t)
	r := newContainer(t, "nvidia0", "nvidiactl").nvidiaSMI(oneGPU, 0).check(lib)
	if r.OK || len(r.Missing) != 1 || !strings.Contains(r.Missing[0], "which nvidia-smi -L does not list") {
		t.Errorf("missing %q", r.Missing)
	}
}

// Without libcuda the test is a named stand-in that still checks the layers.
func TestStandInWithoutLibcuda(t *testing.T) {
	r := newContainer(t, "nvidia0", "nvidiactl").nvidiaSMI(oneGPU, 0).check()
	if !r.OK || r.CUDA != nil || !strings.HasPrefix(r.StandIn, StandInReason+": checked the device nodes") {
		t.Errorf("report %+v", r)
	}
}
