package scenarios

import (
	"slices"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/config"
)

// Without a configured image the pod runs the workload image's own test; a configured image runs with its
// command, or with its entrypoint when none is given.
func TestDeviceTestResolves(t *testing.T) {
	f := fixtures.NewFactory("run-1")
	f.Image = "registry.example/gpu-workload:1"
	const vectorAdd = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
	for _, tc := range []struct {
		cfg   config.DeviceTestConfig
		image string
		cmd   []string
	}{
		{config.DeviceTestConfig{}, f.Image, []string{fixtures.WorkloadBinary, "device-test"}},
		{config.DeviceTestConfig{Image: vectorAdd}, vectorAdd, nil},
		{config.DeviceTestConfig{Image: vectorAdd, Command: []string{"/cuda-samples/vectorAdd"}}, vectorAdd, []string{"/cuda-samples/vectorAdd"}},
	} {
		dt := deviceTestOf(tc.cfg)
		image, cmd := dt.resolve(f)
		if image != tc.image || !slices.Equal(cmd, tc.cmd) {
			t.Errorf("%+v: runs %s %q, want %s %q", tc.cfg, image, cmd, tc.image, tc.cmd)
		}
		// The pod the spec builds runs exactly that; no command at all is the image's entrypoint.
		c := f.GPUPod("device-test", "ns").Image(image).Command(cmd...).Obj().Spec.Containers[0]
		if c.Image != tc.image || !slices.Equal(c.Command, tc.cmd) || (tc.cmd == nil && c.Command != nil) {
			t.Errorf("%+v: pod runs %s %q", tc.cfg, c.Image, c.Command)
		}
	}
	// The spec's copy is its own: the configuration's slice is not shared.
	cfg := config.DeviceTestConfig{Image: vectorAdd, Command: []string{"/a"}}
	dt := deviceTestOf(cfg)
	cfg.Command[0] = "/b"
	if dt.Command[0] != "/a" {
		t.Error("the device test shares its command with the configuration")
	}
}

func TestDeviceTestRecordReads(t *testing.T) {
	r := DeviceTestRecord{Image: "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", Node: "w1", Path: "dra", Passed: true, LastLine: "Test PASSED"}
	if got, want := r.String(), `image nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0 (its entrypoint) on w1, dra path: passed, exit 0, "Test PASSED"`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	r = DeviceTestRecord{Image: "gpu-workload:1", Command: []string{"/usr/local/bin/gpu-workload", "device-test"}, Node: "w2", Path: "device-plugin", ExitCode: 1, LastLine: "{}"}
	if got, want := r.String(), `image gpu-workload:1 (command /usr/local/bin/gpu-workload device-test) on w2, device-plugin path: failed, exit 1, "{}"`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
}

func TestDeviceTestRecordReadsTheOwnTestsCUDALine(t *testing.T) {
	var r DeviceTestRecord
	v := r.readOwnDeviceTest([]string{`{"node":"w1","ok":true,"cuda":{"driver_version":"12.4","devices":[{"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-1"}]}}`, "Test PASSED"})
	if v != "12.4" || r.CUDA != "CUDA 12.4: vectorAdd verified on NVIDIA H100 80GB HBM3 GPU-1" || r.StandIn != "" {
		t.Errorf("cuda %q, record %+v", v, r)
	}
	r = DeviceTestRecord{Passed: true}
	if v := r.readOwnDeviceTest([]string{`{"ok":true,"stand_in":"stand-in (no CUDA driver in the container): checked the device nodes"}`, "Test PASSED"}); v != "" ||
		!strings.Contains(r.String(), "passed as a stand-in") || !strings.HasSuffix(r.String(), "checked the device nodes") {
		t.Errorf("stand-in record %q", r.String())
	}
}

func TestAdvertisedCUDA(t *testing.T) {
	for labels, want := range map[[3]string]string{{"12.4", "", ""}: "12.4", {"", "12", "2"}: "12.2", {"", "12", ""}: ""} {
		got, _ := advertisedCUDA(map[string]string{gfdRuntimeFull: labels[0], gfdRuntimeMajor: labels[1], gfdRuntimeMinor: labels[2]})
		if got != want {
			t.Errorf("%v: %q, want %q", labels, got, want)
		}
	}
}
