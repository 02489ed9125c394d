package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeBinary is a stand-in for the shipped gpuconform: it records its arguments and exits with code.
func fakeBinary(t *testing.T, code int) (shipped, string) {
	t.Helper()
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	bin := filepath.Join(dir, "gpuconform")
	script := fmt.Sprintf("#!/bin/sh\necho \"$@\" >> %s\nexit %d\n", args, code)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return shipped(bin), args
}

// The harnesses run the shipped binary, clearing earlier runs' leftovers, and its report's exit code is
// the verdict.
func TestShippedBinary(t *testing.T) {
	ctx := t.Context()
	for code, want := range map[int]string{0: "GO", 1: "NO-GO", 3: "INCOMPLETE", 2: "no report"} {
		bin, args := fakeBinary(t, code)
		if got := bin.verdict(ctx, "/arts"); got != want {
			t.Errorf("exit %d: verdict %q, want %q", code, got, want)
		}
		if err := bin.run(ctx, io.Discard, "--kubeconfig=k", "--ginkgo.no-color"); (err == nil) != (code == 0) {
			t.Errorf("exit %d: run error %v", code, err)
		}
		b, _ := os.ReadFile(args)
		if got := string(b); got != "report /arts\nrun --cleanup-leftovers --kubeconfig=k --ginkgo.no-color\n" {
			t.Errorf("arguments given:\n%s", got)
		}
	}
	if got := shipped(filepath.Join(t.TempDir(), "missing")).verdict(ctx, "/arts"); got != "no report" {
		t.Errorf("missing binary: %q", got)
	}
}

func TestLocalCheckoutNeedsTheShippedBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gpuconform")
	if _, err := localCheckout(nil, nil, &bin, "x"); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("missing binary: %v", err)
	}
	var kubeconfig, artifacts string
	root, err := localCheckout(&kubeconfig, &artifacts, nil, "selfcheck")
	if err != nil || kubeconfig != filepath.Join(root, "_output", "kubeconfig") || artifacts != filepath.Join(root, "_artifacts", "selfcheck") {
		t.Errorf("defaults: %q %q %q %v", root, kubeconfig, artifacts, err)
	}
}

// A row's Signoff words are looked for in the run's signoff.md; each missing one is named.
func TestSignoffLacks(t *testing.T) {
	md := filepath.Join(t.TempDir(), "signoff.md")
	if err := os.WriteFile(md, []byte("## Notes\n\n- device plugin on gpuconform-worker re-registered 3s after the run started\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string
		want  []string
	}{
		{words: nil},
		{words: []string{"re-registered", "gpuconform-worker"}},
		{words: []string{"re-registered", "judged as it stood"}, want: []string{`signoff.md lacks "judged as it stood"`}},
	} {
		if got := signoffLacks(md, tc.words); !slices.Equal(got, tc.want) {
			t.Errorf("signoffLacks(%q) = %q, want %q", tc.words, got, tc.want)
		}
	}
	if got := signoffLacks(filepath.Join(t.TempDir(), "signoff.md"), []string{"re-registered"}); len(got) != 1 || !strings.Contains(got[0], "no signoff report") {
		t.Errorf("missing report: %q", got)
	}
}
