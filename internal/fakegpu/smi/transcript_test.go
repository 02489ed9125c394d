package smi

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// transcriptRecord is one invocation of the real nvidia-smi as testdata recorded it.
type transcriptRecord struct {
	name           string
	args           []string
	code           int
	stdout, stderr string
}

// readTranscript parses the recorded file: "### name", "args: …", "rc: N", then "--- stdout" and
// "--- stderr" sections whose lines end in '$' (cat -A).
func readTranscript(t *testing.T, path string) []transcriptRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []transcriptRecord
	var cur *transcriptRecord
	var section *string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "### "):
			continue // the file's own comments
		case strings.HasPrefix(line, "### "):
			recs = append(recs, transcriptRecord{name: strings.TrimPrefix(line, "### ")})
			cur, section = &recs[len(recs)-1], nil
		case cur == nil:
			t.Fatalf("%s: line outside a record: %q", path, line)
		case strings.HasPrefix(line, "args: ") && section == nil:
			cur.args = splitRecordedArgs(strings.TrimPrefix(line, "args: "))
		case strings.HasPrefix(line, "rc: ") && section == nil:
			if cur.code, err = strconv.Atoi(strings.TrimPrefix(line, "rc: ")); err != nil {
				t.Fatal(err)
			}
		case line == "--- stdout":
			section = &cur.stdout
		case line == "--- stderr":
			section = &cur.stderr
		case section != nil && strings.HasSuffix(line, "$"):
			*section += strings.TrimSuffix(line, "$") + "\n"
		default:
			t.Fatalf("%s: record %q: unexpected line %q", path, cur.name, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return recs
}

// splitRecordedArgs undoes the shell's "$*": words are split on spaces, except that a word following
// one that ends in a comma belongs to it ("--format=csv, noheader" was one argument).
func splitRecordedArgs(s string) []string {
	var out []string
	for w := range strings.FieldsSeq(s) {
		if n := len(out); n > 0 && strings.HasSuffix(out[n-1], ",") {
			out[n-1] += " " + w
			continue
		}
		out = append(out, w)
	}
	return out
}

// notReproduced names the recorded invocations the fake deliberately does not answer like the real
// tool, and why; for these the test requires the fake's refusal of an unknown field instead.
var notReproduced = map[string]string{
	"field pci.bus": "the fake serves pci.bus_id, not the bus number alone",
}

// TestRealTranscript replays every invocation recorded from a real H200 against the fake, given the
// same GPU, and requires the same exit code, stdout and stderr, byte for byte.
func TestRealTranscript(t *testing.T) {
	const path = "testdata/real-h200-580.159.04.txt"
	recs := readTranscript(t, path)
	if len(recs) < 10 {
		t.Fatalf("%s: %d records; the transcript is truncated", path, len(recs))
	}
	var uuid string
	for _, r := range recs {
		if m := regexp.MustCompile(`\(UUID: (GPU-[0-9a-f-]+)\)`).FindStringSubmatch(r.stdout); r.name == "L" && m != nil {
			uuid = m[1]
		}
	}
	if uuid == "" {
		t.Fatalf("%s: no -L record with the GPU's UUID", path)
	}
	h200 := fakegpu.Inventory{
		Node: "vm", DriverVersion: "580.159.04", CUDAVersion: "13.0",
		GPUs: []fakegpu.GPU{{Minor: 0, UUID: uuid, Product: "NVIDIA H200", MemoryMiB: 143771, PCIBusID: "00000000:00:06.0"}},
	}
	saved := inventory
	inventory = h200
	t.Cleanup(func() { inventory = saved })
	nodes := map[string]dev{"nvidiactl": {195, 255}, "nvidia0": {195, 0},
		"nvidia-uvm": {fakegpu.NvidiaUVMMajor, fakegpu.NvidiaUVMMinor}}

	for _, r := range recs {
		t.Run(r.name, func(t *testing.T) {
			code, stdout, stderr := run(setup(t, nodes), r.args...)
			if why, skip := notReproduced[r.name]; skip {
				if code != ExitBadArgs || !strings.Contains(stdout, "is not a valid field to query") {
					t.Errorf("args %q: the fake does not reproduce this (%s) and must refuse it; exit %d, stdout %q", r.args, why, code, stdout)
				}
				return
			}
			if code != r.code {
				t.Errorf("args %q: exit %d, the real tool's %d", r.args, code, r.code)
			}
			if stdout != r.stdout {
				t.Errorf("args %q: stdout\n%q\nthe real tool's\n%q", r.args, stdout, r.stdout)
			}
			if stderr != r.stderr {
				t.Errorf("args %q: stderr\n%q\nthe real tool's\n%q", r.args, stderr, r.stderr)
			}
		})
	}
}
