package cli

import (
	"bytes"
	"io"
	"slices"
	"testing"

	"gpuconform.io/gpuconform/framework/diagnose"
)

func TestParseInterspersed(t *testing.T) {
	fs := FlagSet("t", io.Discard)
	ns := fs.String("n", "default", "")
	out := fs.String("o", "text", "")
	pos, err := ParseInterspersed(fs, []string{"job", "-n", "ml", "train", "-o", "json"})
	if err != nil || !slices.Equal(pos, []string{"job", "train"}) || *ns != "ml" || *out != "json" {
		t.Errorf("positional %q, n=%s o=%s, %v", pos, *ns, *out, err)
	}
	if _, err := ParseInterspersed(FlagSet("t", io.Discard), []string{"job/x", "--watch"}); err == nil {
		t.Error("an unknown flag after the target was accepted")
	}
}

func TestGivenCountsOnlyTheFlagsSetWhenParsed(t *testing.T) {
	fs := FlagSet("t", io.Discard)
	fs.Bool("silence-skips", false, "")
	fs.String("focus", "", "")
	fs.Int64("seed", 0, "")
	if err := fs.Parse([]string{"--silence-skips=false", "-focus", "seed"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"silence-skips": true, "focus": true, "seed": false, "missing": false} {
		if got := Given(fs, name); got != want {
			t.Errorf("Given(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestParseTarget(t *testing.T) {
	got, err := ParseTarget([]string{"jobs/train"}, "ml")
	if err != nil || got != (diagnose.Target{Kind: "Job", Namespace: "ml", Name: "train"}) {
		t.Errorf("jobs/train: %+v %v", got, err)
	}
	if got, err := ParseTarget([]string{"pod", "p-0"}, "ml"); err != nil || got.Kind != "Pod" || got.Name != "p-0" {
		t.Errorf("pod p-0: %+v %v", got, err)
	}
	for _, bad := range [][]string{{}, {"train"}, {"node/train"}, {"job/"}, {"job/a/b"}, {"job/a", "job/b", "job/c"}} {
		if _, err := ParseTarget(bad, "ml"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := ParseTarget([]string{"job/train"}, ""); err == nil {
		t.Error("empty namespace accepted")
	}
}

func TestIsTerminal(t *testing.T) {
	if IsTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is no terminal")
	}
}
