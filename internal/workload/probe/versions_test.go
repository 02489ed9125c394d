package probe

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// realTranscript is nvidia-smi recorded on a real H200 (driver 580.159.04, CUDA 13.0); the fake
// nvidia-smi's own tests replay it against the fake.
const realTranscript = "../../fakegpu/smi/testdata/real-h200-580.159.04.txt"

// recordedStdout returns the stdout of the transcript's record "### name" (its lines end in '$').
func recordedStdout(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(realTranscript)
	if err != nil {
		t.Fatal(err)
	}
	_, rec, ok := strings.Cut(string(raw), "\n### "+name+"\n")
	if !ok {
		t.Fatalf("%s has no record %q", realTranscript, name)
	}
	rec, _, _ = strings.Cut(rec, "\n###")
	_, stdout, _ := strings.Cut(rec, "--- stdout\n")
	stdout, _, _ = strings.Cut(stdout, "--- stderr")
	var lines []string
	for l := range strings.SplitSeq(strings.TrimSuffix(stdout, "\n"), "\n") {
		lines = append(lines, strings.TrimSuffix(l, "$"))
	}
	return strings.Join(lines, "\n")
}

const (
	argsDriverQuery = "--query-gpu=driver_version --format=csv,noheader"
	argsVersion     = "--version"
	listOneGPU      = "GPU 0: NVIDIA H200 (UUID: GPU-aaaa)"
	// summaryHeader is the head of the plain `nvidia-smi` table of a driver of the 535 branch.
	summaryHeader = "+---------------------------------------------------------------------------------------+\n" +
		"| NVIDIA-SMI 535.183.01             Driver Version: 535.183.01   CUDA Version: 12.2     |\n" +
		"|-----------------------------------------+----------------------+----------------------+"
)

func TestVersionsFromTheRealToolsFormats(t *testing.T) {
	version := recordedStdout(t, "version")
	if !strings.Contains(version, "CUDA Version") {
		t.Fatalf("recorded --version = %q", version)
	}
	f := newFixture(t).fakeTool(map[string]smiReply{
		"-L":            {out: listOneGPU},
		argsDriverQuery: {out: "580.159.04"},
		argsVersion:     {out: version},
	})
	r := f.gather()
	if r.DriverVersion != "580.159.04" || r.CUDAVersion != "13.0" || r.VersionError != "" {
		t.Errorf("driver/cuda = %q/%q (error %q), want 580.159.04/13.0", r.DriverVersion, r.CUDAVersion, r.VersionError)
	}
	if want := []string{"-L", argsDriverQuery, argsVersion, memoryQuery}; !slices.Equal(f.toolCalls(), want) {
		t.Errorf("nvidia-smi ran with %q, want %q", f.toolCalls(), want)
	}
}

func TestDriverVersionIsOnePerNode(t *testing.T) {
	// Every GPU prints the same driver: one version.
	r := newFixture(t).fakeTool(map[string]smiReply{
		"-L":            {out: listOneGPU + "\nGPU 1: NVIDIA H200 (UUID: GPU-bbbb)"},
		argsDriverQuery: {out: "550.54.15\n550.54.15"},
		argsVersion:     {out: "DRIVER version      : 550.54.15\nCUDA Version        : 12.4"},
	}).gather()
	if r.DriverVersion != "550.54.15" || r.CUDAVersion != "12.4" || r.VersionError != "" {
		t.Errorf("driver/cuda = %q/%q (error %q)", r.DriverVersion, r.CUDAVersion, r.VersionError)
	}
	// Anything else is reported, never resolved by picking one.
	for out, want := range map[string]string{
		"550.54.15\n560.35.03": "different driver versions",
		"[N/A]":                `"[N/A]" is not a driver version`,
		"":                     "printed no driver version",
	} {
		r := newFixture(t).fakeTool(map[string]smiReply{
			"-L":            {out: listOneGPU},
			argsDriverQuery: {out: out},
			argsVersion:     {out: "CUDA Version        : 12.4"},
		}).gather()
		if r.DriverVersion != "" || !strings.Contains(r.VersionError, want) {
			t.Errorf("query printing %q: driver %q, error %q; want none and an error with %q", out, r.DriverVersion, r.VersionError, want)
		}
		if r.CUDAVersion != "12.4" {
			t.Errorf("query printing %q: cuda %q, want 12.4 from --version all the same", out, r.CUDAVersion)
		}
	}
}

func TestCUDAVersionFromTheSummaryWhenTheToolLacksVersion(t *testing.T) {
	f := newFixture(t).fakeTool(map[string]smiReply{
		"-L":            {out: listOneGPU},
		argsDriverQuery: {out: "535.183.01"},
		// Shaped like the recorded answer to an unknown option (--bogus).
		argsVersion: {out: "ERROR: Option --version is not recognized. Please run 'nvidia-smi -h'.\n", code: 255},
		"":          {out: summaryHeader},
	})
	r := f.gather()
	if r.DriverVersion != "535.183.01" || r.CUDAVersion != "12.2" || r.VersionError != "" {
		t.Errorf("driver/cuda = %q/%q (error %q), want 535.183.01/12.2", r.DriverVersion, r.CUDAVersion, r.VersionError)
	}
	if want := []string{"-L", argsDriverQuery, argsVersion, "", memoryQuery}; !slices.Equal(f.toolCalls(), want) {
		t.Errorf("nvidia-smi ran with %q, want %q", f.toolCalls(), want)
	}
}

func TestVersionsWithoutAGPUComeFromVersion(t *testing.T) {
	// The driver answers, the container has no GPU: the query finds none, --version still names the driver.
	noGPU := smiReply{out: "No devices were found", code: 6}
	r := newFixture(t).fakeTool(map[string]smiReply{
		"-L":            noGPU,
		argsDriverQuery: noGPU,
		argsVersion:     {out: recordedStdout(t, "version")},
	}).gather()
	if r.DriverVersion != "580.159.04" || r.CUDAVersion != "13.0" || r.VersionError != "" {
		t.Errorf("driver/cuda = %q/%q (error %q), want 580.159.04/13.0", r.DriverVersion, r.CUDAVersion, r.VersionError)
	}
}

func TestVersionsAreNotQueriedWhenTheListFailed(t *testing.T) {
	f := newFixture(t).fakeTool(map[string]smiReply{
		"-L":            {stderr: "driver not loaded", code: 9},
		argsDriverQuery: {out: "550.54.15"},
		argsVersion:     {out: "CUDA Version        : 12.4"},
	})
	r := f.gather()
	if r.DriverVersion != "" || r.CUDAVersion != "" || !strings.Contains(r.VersionError, "not queried") {
		t.Errorf("driver/cuda = %q/%q (error %q), want none, not queried", r.DriverVersion, r.CUDAVersion, r.VersionError)
	}
	if want := []string{"-L"}; !slices.Equal(f.toolCalls(), want) {
		t.Errorf("nvidia-smi ran with %q, want only %q", f.toolCalls(), want)
	}
}

func TestVersionFailuresAreReportedAndNothingIsMadeUp(t *testing.T) {
	r := newFixture(t).fakeTool(map[string]smiReply{
		"-L":            {out: listOneGPU},
		argsDriverQuery: {out: `Field "driver_version" is not a valid field to query.`, code: 2},
		argsVersion:     {out: "NVIDIA-SMI version  : 580.159.04"},
	}).gather()
	if r.DriverVersion != "" || r.CUDAVersion != "" {
		t.Errorf("driver/cuda = %q/%q, want none", r.DriverVersion, r.CUDAVersion)
	}
	for _, want := range []string{"not a valid field", "printed no CUDA version"} {
		if !strings.Contains(r.VersionError, want) {
			t.Errorf("version_error = %q, want it to say %q", r.VersionError, want)
		}
	}
	// The device list is unaffected: the versions are reported beside it.
	if r.Sources.NvidiaSMIError != "" || !slices.Equal(r.Devices, []string{"GPU-aaaa"}) {
		t.Errorf("devices %q (nvidia_smi_error %q), want GPU-aaaa", r.Devices, r.Sources.NvidiaSMIError)
	}
}
