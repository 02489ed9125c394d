package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/timeline"
	"gpuconform.io/gpuconform/reports"
)

// reportCommand re-renders the signoff report from a run's artifacts, offline.
func reportCommand(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "--history" {
		if len(args) < 2 {
			fmt.Fprintln(stderr, "usage: gpuconform report --history ARTIFACTS_DIR...")
			return 2
		}
		runs, err := reports.History(args[1:])
		if err != nil {
			fmt.Fprintf(stderr, "gpuconform report --history: %v\n", err)
			return 1
		}
		fmt.Fprint(stdout, reports.RenderHistory(runs))
		return 0
	}
	if len(args) > 0 && args[0] == "--check-product" {
		return checkProduct(args[1:], stdout, stderr)
	}
	// --product-metadata FILE: the AI Conformance metadata a run could not be given (an in-cluster run, or
	// one run before the participant had it), recorded and written into PRODUCT.yaml.
	var metadata string
	if len(args) > 0 && args[0] == "--product-metadata" {
		if len(args) < 2 {
			fmt.Fprintln(stderr, "usage: gpuconform report --product-metadata FILE [ARTIFACTS_DIR]")
			return 2
		}
		metadata, args = args[1], args[2:]
	}
	dir, code, done := artifactsDirArg("report", args, stdout, stderr)
	if done {
		return code
	}
	rec, err := reports.ReadRecord(filepath.Join(dir, reports.RecordFile))
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform report: %v (is %s the artifacts directory of a run?)\n", err, dir)
		return reports.ExitNoGo
	}
	if metadata != "" {
		if rec.Signoff.Conformance.Product, err = config.LoadProductMetadata(metadata); err != nil {
			fmt.Fprintf(stderr, "gpuconform report: %v\n", err)
			return 2
		}
		if _, err := rec.Write(dir); err != nil {
			fmt.Fprintf(stderr, "gpuconform report: recording the product metadata: %v\n", err)
			return 1
		}
	}
	suites, err := reports.ReadGinkgoJSON(filepath.Join(dir, "gpuconform-report.json"))
	switch {
	case err != nil && rec.SetupFailure == "":
		fmt.Fprintf(stderr, "gpuconform report: %v (is %s the artifacts directory of a run?)\n", err, dir)
		return reports.ExitNoGo
	case err != nil:
		suites = nil // the run stopped before its specs: the record alone says why
	case reports.ReportRunID(suites) != "" && reports.ReportRunID(suites) != rec.RunID:
		fmt.Fprintf(stderr, "gpuconform report: %s holds the Ginkgo report of run %s but the record of run %s; refusing to mix runs\n",
			dir, reports.ReportRunID(suites), rec.RunID)
		return reports.ExitNoGo
	}
	if rec.Timelines, err = timeline.ReadAll(dir); err != nil {
		fmt.Fprintf(stderr, "gpuconform report: reading the timelines: %v\n", err)
	}
	md := reports.RenderMarkdown(suites, rec)
	if err := os.WriteFile(filepath.Join(dir, "signoff.md"), []byte(md), 0o644); err != nil {
		fmt.Fprintf(stderr, "gpuconform report: %v\n", err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(dir, reports.HTMLFile), []byte(reports.RenderHTML(suites, rec)), 0o644); err != nil {
		fmt.Fprintf(stderr, "gpuconform report: %v\n", err)
		return 1
	}
	if ev := reports.ConformanceEvidence(suites, rec); ev.HasClaims() {
		if err := reports.WriteEvidence(dir, ev, rec); err != nil {
			fmt.Fprintf(stderr, "gpuconform report: writing the conformance evidence: %v\n", err)
			return 1
		}
	}
	fmt.Fprint(stdout, md)
	// One closing line in the form CI runners recognise.
	passed, failed, skipped := reports.Count(suites)
	v := reports.Decide(suites, rec)
	fmt.Fprintf(stderr, "signoff report: %s (and %s)\n", filepath.Join(dir, "signoff.md"), filepath.Join(dir, reports.HTMLFile))
	// The reasons too, on the stream that make e2e and CI keep (they send the report's own text
	// elsewhere): a NO-GO whose reasons are only in a file of a CI machine that is gone says nothing.
	if !v.Go() {
		for _, r := range v.Reasons() {
			fmt.Fprintf(stderr, "  %s: %s\n", v.Outcome, strings.ReplaceAll(r, "\n", "\n    "))
		}
	}
	fmt.Fprintf(stderr, "verdict: %s (exit code %d)\n", v.Outcome, v.ExitCode())
	fmt.Fprintf(stderr, "signoff: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	return v.ExitCode()
}

// checkProduct checks a PRODUCT.yaml against the AI Conformance program's rules: exit 0 when it is fit
// to submit, 1 when it is not (each problem on its own line), 2 on a usage error.
func checkProduct(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "usage: gpuconform report --check-product PRODUCT.yaml")
		return 2
	}
	c, err := reports.CheckProduct(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform report --check-product: %v\n", err)
		return 1
	}
	for _, n := range c.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	for _, p := range c.Problems {
		fmt.Fprintf(stdout, "problem: %s\n", p)
	}
	if len(c.Problems) > 0 {
		fmt.Fprintf(stderr, "%s: not fit to submit (checklist v%s): %d problem(s)\n", args[0], c.Version, len(c.Problems))
		return 1
	}
	fmt.Fprintf(stderr, "%s: fit to submit (checklist v%s)\n", args[0], c.Version)
	return 0
}
