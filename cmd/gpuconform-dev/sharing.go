package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/reports"
)

// sharingMode is one way the fake GPU agent shares its GPUs, as `gpuconform cluster up --sharing` sets it.
type sharingMode struct {
	Mode     string
	Replicas int
	// Renamed advertises the replicas as nvidia.com/gpu.shared (NVIDIA's renameByDefault).
	Renamed bool
}

// String is the mode as rows and flags name it: "time-slicing:2", "time-slicing:2:renamed", "mig-mixed".
func (m sharingMode) String() string {
	s := m.Mode
	if m.Replicas > 1 {
		s += ":" + strconv.Itoa(m.Replicas)
	}
	if m.Renamed {
		s += ":renamed"
	}
	return s
}

// exclusive is the local cluster's default: whole GPUs, the mode every harness leaves behind.
var exclusive = sharingMode{Mode: fakegpu.SharingNone, Replicas: 1}

// switchSharing brings the local cluster's fake GPU agent into mode with the shipped binary's
// `cluster up` (warm: it rolls only the agent and waits for every GPU node's devices).
func (bin shipped) switchSharing(ctx context.Context, log io.Writer, m sharingMode) error {
	args := []string{"cluster", "up", "--sharing=" + m.Mode, "--replicas=" + strconv.Itoa(max(m.Replicas, 1)), "--rename-shared=" + strconv.FormatBool(m.Renamed)}
	cmd := exec.CommandContext(ctx, string(bin), args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("gpuconform %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// sharingRow is one mode of the sharing matrix and the scenarios run in it. Every row must be GO (or
// INCOMPLETE only because the run is filtered to the row's scenarios, see onlyFiltered): the
// sharing scenario green in the mode, and, where Scenarios name it, the allocation scenario too (the
// suite's single-pod checks must hold on replica IDs and on a node whose GPUs are partly MIG).
type sharingRow struct {
	Mode      sharingMode
	Scenarios []string
	// Specs are the specs the mode exists to exercise, each a part of its text: each must have passed. A
	// scenario label with some spec passed is not enough (the mode's own spec could be skipped).
	Specs []string
}

// The specs each mode must pass (their texts in scenarios/sharing.go and prioritized.go).
const (
	specReplicas   = "replica of a full node to one physical GPU"
	specMIGFill    = "node with MIG devices, never beside its whole parent GPU"
	specMIGOrWhole = "allocates a MIG partition first, and a whole GPU once"
)

func sharingTable() []sharingRow {
	both := []string{"sharing", "allocation"}
	// A time-sliced or MPS GPU also has neighbours to measure.
	replicated := []string{"sharing", "noisy-neighbours"}
	return []sharingRow{
		{Mode: sharingMode{Mode: fakegpu.SharingTimeSlicing, Replicas: 2}, Scenarios: append(slices.Clone(both), "noisy-neighbours"), Specs: []string{specReplicas}},
		{Mode: sharingMode{Mode: fakegpu.SharingMPS, Replicas: 2}, Scenarios: replicated, Specs: []string{specReplicas}},
		{Mode: sharingMode{Mode: fakegpu.SharingMIGSingle, Replicas: 1}, Scenarios: []string{"sharing"}, Specs: []string{specMIGFill}},
		// The DRA path's GPUs are published whole and as partitions: the prioritized list's MIG-else-whole
		// claim has what it needs.
		{Mode: sharingMode{Mode: fakegpu.SharingMIGMixed, Replicas: 1}, Scenarios: append(slices.Clone(both), "prioritized"), Specs: []string{specMIGFill, specMIGOrWhole}},
		// NVIDIA's renameByDefault: the replicas as nvidia.com/gpu.shared, nvidia.com/gpu at 0, the product
		// without -SHARED; discovery must read the mode from the renamed resource.
		{Mode: sharingMode{Mode: fakegpu.SharingTimeSlicing, Replicas: 2, Renamed: true}, Scenarios: append(slices.Clone(both), "noisy-neighbours"), Specs: []string{specReplicas}},
	}
}

// unpassed are the row's required specs (parts of a spec's text) that no passed spec of the run carries.
func unpassed(row sharingRow, suites []types.Report) []string {
	var out []string
	for _, want := range row.Specs {
		found := false
		for _, s := range suites {
			for _, sp := range s.SpecReports {
				if sp.LeafNodeType == types.NodeTypeIt && reports.SpecResult(sp) == reports.ResultPassed && strings.Contains(sp.FullText(), want) {
					found = true
				}
			}
		}
		if !found {
			out = append(out, strconv.Quote(want))
		}
	}
	return out
}

// sharingResult is one row's outcome: the run's verdict and its specs per path and scenario.
type sharingResult struct {
	Row     sharingRow
	Verdict string
	// Counts are "path scenario" → passed, failed.
	Counts map[string][2]int
	Wall   time.Duration
	// OK: the run failed nothing and covered what the row requires.
	OK   bool
	Note string
}

// sharingCommand brings the local cluster into each sharing mode of the fake GPU stack in turn, runs the
// sharing scenario (and the allocation scenario where the row says) and requires GO; it leaves the
// cluster in its exclusive default.
func sharingCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	h, ok := parseHarness("sharing", "modes", "mode", "comma-separated subset of modes (default: all): "+strings.Join(sharingRows().names(), ", "), args, stderr)
	if !ok {
		return 2
	}
	rows, err := sharingRows().selected(splitNonEmpty(h.only), "mode")
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform sharing: %v\n", err)
		return 2
	}
	bin := shipped(h.binary)
	defer func() {
		// A fresh context: the cluster goes back to whole GPUs even when ctx was cancelled.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		fmt.Fprintf(stderr, "sharing: back to %s\n", exclusive)
		if err := bin.switchSharing(cctx, stderr, exclusive); err != nil {
			fmt.Fprintf(stderr, "sharing: %v\n", err)
		}
	}()
	return runRows(rows, func(row sharingRow) sharingResult {
		fmt.Fprintf(stderr, "sharing: %s, running %s\n", row.Mode, strings.Join(row.Scenarios, ", "))
		res := runSharingRow(ctx, bin, h.kubeconfig, filepath.Join(h.artifacts, strings.ReplaceAll(row.Mode.String(), ":", "-")), row)
		fmt.Fprintf(stderr, "sharing: %s → %s (%s)\n", row.Mode, res.Verdict, res.Wall.Round(time.Second))
		return res
	}, func(rs []sharingResult) { printSharing(stdout, rs) }, func(r sharingResult) bool { return r.OK })
}

// sharingRows is sharingTable as a harness table, its rows named by mode.
func sharingRows() table[sharingRow, sharingResult] {
	return table[sharingRow, sharingResult]{rows: sharingTable(), name: func(r sharingRow) string { return r.Mode.String() }}
}

// runSharingRow switches the cluster into the row's mode and runs its scenarios.
func runSharingRow(ctx context.Context, bin shipped, kubeconfig, dir string, row sharingRow) sharingResult {
	res := sharingResult{Row: row, Verdict: "-", Counts: map[string][2]int{}}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.Note = err.Error()
		return res
	}
	log, err := os.Create(dir + ".log")
	if err != nil {
		res.Note = err.Error()
		return res
	}
	defer log.Close()
	if err := bin.switchSharing(ctx, log, row.Mode); err != nil {
		res.Note = err.Error() + " (log " + dir + ".log)"
		return res
	}
	filter := make([]string, len(row.Scenarios))
	for i, s := range row.Scenarios {
		filter[i] = labels.ScenarioPrefix + s
	}
	// The run requires what it filters for, on both paths: the row's scenarios each with a passed spec,
	// and each path exercised (the default policy would call the other scenarios missing: INCOMPLETE).
	require := append(slices.Clone(filter), labels.ForPath("device-plugin"), labels.ForPath("dra"))
	start := time.Now()
	_ = bin.run(ctx, log, "--timeout=30m", "--kubeconfig="+kubeconfig, "--artifacts="+dir, "--ginkgo.no-color",
		"--ginkgo.label-filter="+strings.Join(filter, " || "), "--require="+strings.Join(require, ","))
	res.Wall = time.Since(start)
	res.Verdict = bin.verdict(ctx, dir)
	suites, err := reports.ReadGinkgoJSON(filepath.Join(dir, "gpuconform-report.json"))
	if err != nil {
		res.Note = fmt.Sprintf("no Ginkgo report: %v (log %s.log)", err, dir)
		return res
	}
	countSharing(&res, suites)
	rec, err := reports.ReadRecord(filepath.Join(dir, reports.RecordFile))
	if err != nil {
		res.Note = fmt.Sprintf("no record: %v", err)
		return res
	}
	res.OK = onlyFiltered(reports.Decide(suites, rec))
	if !res.OK {
		res.Note = "want GO, or INCOMPLETE for the label filter alone (see " + dir + "/signoff.md)"
	}
	if missing := unpassed(row, suites); len(missing) > 0 {
		res.OK = false
		res.Note = strings.TrimPrefix(res.Note+"; ", "; ") + "the mode's own spec did not pass (skipped, failed or not registered): " + strings.Join(missing, ", ")
	}
	return res
}

// onlyFiltered accepts a run that failed nothing and is incomplete only because it was filtered: what
// the row requires (its scenarios, both paths) passed, and nothing else was asked of it.
func onlyFiltered(v reports.Verdict) bool {
	switch v.Outcome {
	case reports.OutcomeGo:
		return true
	case reports.OutcomeIncomplete:
		for _, why := range v.Incomplete {
			if !strings.HasPrefix(why, "filtered run") {
				return false
			}
		}
		return true
	}
	return false
}

// countSharing counts the run's specs per path and scenario label.
func countSharing(res *sharingResult, suites []types.Report) {
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			if sp.LeafNodeType != types.NodeTypeIt {
				continue
			}
			path, scenario := "-", "-"
			for _, l := range sp.Labels() {
				if p, ok := strings.CutPrefix(l, pathLabelPrefix); ok {
					path = p
				}
				if sc, ok := strings.CutPrefix(l, labels.ScenarioPrefix); ok {
					scenario = sc
				}
			}
			key := path + " " + scenario
			c := res.Counts[key]
			switch reports.SpecResult(sp) {
			case reports.ResultPassed:
				c[0]++
			case reports.ResultFailed:
				c[1]++
			default:
				continue
			}
			res.Counts[key] = c
		}
	}
}

// printSharing prints a row per mode, path and scenario: what passed and failed, and the mode's verdict.
func printSharing(w io.Writer, results []sharingResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tPATH\tSCENARIO\tPASSED\tFAILED\tVERDICT\tNOTE")
	good := 0
	for _, r := range results {
		if r.OK {
			good++
		}
		verdict := r.Verdict
		if r.OK && verdict == string(reports.OutcomeIncomplete) {
			verdict += " (filter only)"
		}
		keys := make([]string, 0, len(r.Counts))
		for k := range r.Counts {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if len(keys) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t0\t0\t%s\t%s\n", r.Row.Mode, verdict, orDash(r.Note))
		}
		for _, k := range keys {
			path, scenario, _ := strings.Cut(k, " ")
			c := r.Counts[k]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Row.Mode, path, scenario, c[0], c[1], verdict, orDash(r.Note))
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "sharing: %d passed, %d failed\n", good, len(results)-good)
}

// pathLabelPrefix starts a path's label (labels.ForPath).
var pathLabelPrefix = strings.TrimSuffix(labels.ForPath("x"), "x")

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
