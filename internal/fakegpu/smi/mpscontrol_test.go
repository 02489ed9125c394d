package smi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// runMPS runs the fake client against the daemon behind pipe with commands on stdin.
func runMPS(t *testing.T, pipe, commands string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut strings.Builder
	code = MPSControlMain(args, MPSEnv{PipeDirectory: pipe}, strings.NewReader(commands), &out, &errOut)
	return out.String(), errOut.String(), code
}

func writeDaemon(t *testing.T, d fakegpu.MPSDaemon) string {
	t.Helper()
	pipe := t.TempDir()
	raw, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pipe, fakegpu.MPSDaemonFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return pipe
}

// The defaults NVIDIA's plugin sets come back as the real daemon prints them: the percentage with one
// decimal, the limit in the unit it was set in; a command without its newline (as the plugin writes it)
// is read too, and several commands are answered in order.
func TestMPSControlAnswersDefaults(t *testing.T) {
	pct := 33
	pipe := writeDaemon(t, fakegpu.MPSDaemon{Resource: "nvidia.com/gpu", DefaultActiveThreadPercentage: &pct,
		DefaultPinnedDeviceMemLimitMiB: map[string]int{"0": 27186, "3": 27186}})
	for commands, want := range map[string]string{
		"get_default_active_thread_percentage":                                          "33.0\n",
		"get_default_active_thread_percentage\n":                                        "33.0\n",
		"get_default_device_pinned_mem_limit 3\n":                                       "27186M\n",
		"get_default_active_thread_percentage\nget_default_device_pinned_mem_limit 0\n": "33.0\n27186M\n",
		"get_default_device_pinned_mem_limit 1":                                         "0\n", // not set for that device
		"get_server_list":                                                               "",
	} {
		if out, errOut, code := runMPS(t, pipe, commands); out != want || code != MPSExitOK {
			t.Errorf("%q: %q (stderr %q), exit %d; want %q, exit 0", commands, out, errOut, code, want)
		}
	}
}

// A daemon nothing configured answers the built-in defaults: 100 percent, no memory limit.
func TestMPSControlUnconfiguredDaemon(t *testing.T) {
	pipe := writeDaemon(t, fakegpu.MPSDaemon{Resource: "nvidia.com/gpu"})
	if out, _, code := runMPS(t, pipe, "get_default_active_thread_percentage\nget_default_device_pinned_mem_limit 0\n"); out != "100.0\n0\n" || code != MPSExitOK {
		t.Errorf("unconfigured daemon: %q, exit %d", out, code)
	}
}

// No daemon behind the pipe directory, a command the fake does not answer, an option: each fails.
func TestMPSControlFailures(t *testing.T) {
	if out, _, code := runMPS(t, t.TempDir(), "get_default_active_thread_percentage"); strings.TrimSpace(out) != MPSNoDaemon || code != MPSExitNoDaemon {
		t.Errorf("no daemon: %q, exit %d", out, code)
	}
	pipe := writeDaemon(t, fakegpu.MPSDaemon{Resource: "nvidia.com/gpu"})
	if _, errOut, code := runMPS(t, pipe, "set_default_active_thread_percentage 10"); code == MPSExitOK || !strings.Contains(errOut, "not answered by the fake MPS daemon") {
		t.Errorf("set command: %q, exit %d", errOut, code)
	}
	if _, errOut, code := runMPS(t, pipe, "get_default_device_pinned_mem_limit GPU-a"); code == MPSExitOK || !strings.Contains(errOut, "not a device index") {
		t.Errorf("device by UUID: %q, exit %d", errOut, code)
	}
	if _, errOut, code := runMPS(t, pipe, "", "-d"); code == MPSExitOK || !strings.Contains(errOut, "-d is not supported") {
		t.Errorf("-d: %q, exit %d", errOut, code)
	}
}
