package reports

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"
	corev1 "k8s.io/api/core/v1"

	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/timeline"
	"gpuconform.io/gpuconform/framework/upgrade"
	"gpuconform.io/gpuconform/internal/textcut"
)

// ReadGinkgoJSON reads a report written by --json-report (an array of suite reports).
func ReadGinkgoJSON(path string) ([]types.Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reports []types.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("%s is not a Ginkgo JSON report: %w", path, err)
	}
	return reports, nil
}

// RenderMarkdown renders the signoff report, section by section in the order a reader needs them: the
// verdict and its reasons, the compatibility record, the results, the timings and evidence, what was not
// exercised, and the failures' evidence.
func RenderMarkdown(suites []types.Report, rec Record) string {
	var b strings.Builder
	v := Decide(suites, rec)
	renderVerdict(&b, v, rec)
	for _, u := range UpgradeVerdicts(suites) {
		fmt.Fprintf(&b, "**%s**\n\n", u)
	}
	renderRehearsals(&b, suites)
	renderRecord(&b, rec, suites)
	renderSharing(&b, rec, suites)
	renderFeatureGates(&b, rec.FeatureGates)
	renderParameters(&b, rec, Filters(suites))
	failures := renderResults(&b, suites)
	renderTimings(&b, rec.Timelines)
	renderSteps(&b, suites, rec.Signoff.Measured)
	renderEvidence(&b, ConformanceEvidence(suites, rec))
	renderNotExercised(&b, rec)
	renderLeakAudit(&b, rec.LeakAudit)
	renderFailures(&b, failures)
	return b.String()
}

// renderVerdict writes the title with the outcome, the run, the stand-ins, every reason, the required
// labels and the comparison with the baseline.
func renderVerdict(b *strings.Builder, v Verdict, rec Record) {
	fmt.Fprintf(b, "# GPU scheduling signoff: **%s**\n\n", v.Outcome)
	fmt.Fprintf(b, "Run `%s` against context `%s` (%s), %s. Exit code %d.\n\n", rec.RunID, rec.Context, rec.Server, rec.GeneratedAt.Format(time.RFC3339), v.ExitCode())
	if s := v.StandInSummary(); s != "" {
		fmt.Fprintf(b, "**%s:**\n\n", s)
		for _, l := range v.StandIns {
			fmt.Fprintf(b, "- stand-in: %s\n", l)
		}
		b.WriteString("\n")
	}
	allowed := ""
	if rec.Signoff.AllowIncomplete {
		allowed = " (allowed by the signoff policy)"
	}
	lines := slices.Clone(v.NoGo)
	for _, r := range v.Incomplete {
		lines = append(lines, "incomplete: "+r+allowed)
	}
	for _, r := range v.NotApplicable {
		lines = append(lines, "not applicable: "+r)
	}
	writeList(b, lines)
	if len(rec.Signoff.Require) > 0 {
		fmt.Fprintf(b, "Required: %s, and every discovered allocation path.\n\n", strings.Join(rec.Signoff.Require, ", "))
	}
	if bl := rec.Signoff.Baseline; bl != nil {
		fmt.Fprintf(b, "## Compared with baseline run `%s` (%s)\n\n", bl.RunID, bl.Source)
		if len(v.Baseline) == 0 {
			b.WriteString("Everything that passed in the baseline passes now.\n\n")
		}
		writeList(b, v.Baseline)
	}
}

// writeList writes lines as a list followed by a blank line (nothing for none).
func writeList(b *strings.Builder, lines []string) {
	for _, l := range lines {
		fmt.Fprintf(b, "- %s\n", l)
	}
	if len(lines) > 0 {
		b.WriteString("\n")
	}
}

// renderRecord writes the compatibility record: versions, paths, sharing, feature gates, and one row per node.
func renderRecord(b *strings.Builder, rec Record, suites []types.Report) {
	b.WriteString("## Compatibility record\n\n| | |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(b, "| %s | %s |\n", k, cell(v)) }
	// optional rows are written only when the record has them.
	optional := func(k, v string) {
		if v != "" {
			row(k, v)
		}
	}
	row("Kubernetes", rec.KubernetesVersion)
	kueue := "absent"
	if rec.Kueue.Present {
		kueue = rec.Kueue.Version
	}
	row("Kueue", kueue)
	optional("Kueue waitForPodsReady", rec.Kueue.WaitForPodsReady)
	optional("Kueue topology-aware scheduling", rec.Kueue.TAS)
	optional("Accelerator metrics", rec.AcceleratorMetrics)
	optional("Monitoring", rec.Monitoring)
	optional("Node monitor grace period", rec.NodeMonitorGracePeriod)
	for _, p := range rec.Paths {
		desc := p.Description
		if p.DriverVersion != "" {
			desc += ", driver " + p.DriverVersion
		}
		row("Path "+p.Name, desc)
	}
	row("Sharing", SharingText(rec, suites))
	if len(rec.FeatureGates) == 0 {
		row("Feature gates", "not recorded (see notes)")
	} else {
		row("Feature gates", "GPU-relevant gates below")
	}
	if len(rec.Nodes) > 0 {
		b.WriteString("\n| Node | Accelerator | Driver | OS | Kernel | Runtime | Kubelet | Devices (plugin/DRA) |\n|---|---|---|---|---|---|---|---|\n")
		for _, n := range rec.Nodes {
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %d/%d |\n", n.Name, cell(n.Accelerator), cell(n.Driver), cell(n.OSImage), cell(n.Kernel), cell(n.ContainerRuntime), cell(n.Kubelet), n.DevicePluginDevices, n.DRADevices)
		}
	}
}

// renderResults writes one row per spec (by path) and returns the failed nodes, specs and others.
func renderResults(b *strings.Builder, suites []types.Report) []types.SpecReport {
	b.WriteString("\n## Results\n\n| Path | Spec | Result | Time |\n|---|---|---|---|\n")
	var failures []types.SpecReport
	for _, s := range suites {
		specs := slices.Clone(s.SpecReports)
		slices.SortStableFunc(specs, func(a, b types.SpecReport) int { return cmp.Compare(pathOf(a), pathOf(b)) })
		for _, sp := range specs {
			if sp.State.Is(types.SpecStateFailureStates) {
				failures = append(failures, sp)
			}
			// Not a spec (a setup or cleanup node), or one that never came to run: no row.
			if sp.LeafNodeType != types.NodeTypeIt || sp.State == types.SpecStateSkipped && sp.Failure.Message == "" && len(sp.ContainerHierarchyTexts) == 0 {
				continue
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", cell(pathOf(sp)), cell(sp.FullText()), stateText(sp.State), sp.RunTime.Round(time.Second))
		}
	}
	return failures
}

// renderNotExercised writes what the run did not exercise and the notes of discovery.
func renderNotExercised(b *strings.Builder, rec Record) {
	b.WriteString("\n## Not exercised\n\n")
	if len(rec.NotExercised) == 0 {
		b.WriteString("Everything the suite knows how to check was exercised.\n")
	}
	for _, n := range rec.NotExercised {
		fmt.Fprintf(b, "- **%s**: %s\n", n.What, n.Why)
	}
	if len(rec.Notes) > 0 {
		b.WriteString("\n## Notes\n\nWhat discovery could not read or waited for, and why:\n\n")
		for _, n := range rec.Notes {
			fmt.Fprintf(b, "- %s\n", n)
		}
	}
}

// renderLeakAudit writes what the leak audit found (nothing when it did not run).
func renderLeakAudit(b *strings.Builder, leaks *audit.Result) {
	if leaks == nil {
		return
	}
	b.WriteString("\n## Leak audit\n\n")
	if leaks.Clean() {
		b.WriteString("Nothing labelled by this run is left on the cluster.\n")
	}
	for _, f := range leaks.Ours {
		fmt.Fprintf(b, "- left behind: %s\n", f)
	}
	for _, f := range leaks.Others {
		fmt.Fprintf(b, "- another run's object: %s\n", f)
	}
}

// renderFailures writes each failure's message, where it failed, and its report entries.
func renderFailures(b *strings.Builder, failures []types.SpecReport) {
	if len(failures) == 0 {
		return
	}
	b.WriteString("\n## Evidence for failures\n")
	for _, sp := range failures {
		name := cmp.Or(sp.FullText(), sp.LeafNodeType.String())
		fmt.Fprintf(b, "\n### %s\n\n", name)
		fmt.Fprintf(b, "At `%s`:\n\n```\n%s\n```\n", sp.Failure.Location, strings.TrimSpace(sp.Failure.Message))
		for _, e := range sp.ReportEntries {
			fmt.Fprintf(b, "- %s: %s\n", e.Name, e.StringRepresentation())
		}
	}
}

func pathOf(sp types.SpecReport) string {
	for _, l := range sp.Labels() {
		if after, ok := strings.CutPrefix(l, "path:"); ok {
			return after
		}
	}
	return "-"
}

func stateText(s types.SpecState) string {
	switch s {
	case types.SpecStatePassed:
		return "passed"
	case types.SpecStateSkipped:
		return "skipped"
	case types.SpecStatePending:
		return "pending"
	}
	return "**" + s.String() + "**"
}

func cell(s string) string {
	if s == "" {
		return "unknown"
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// firstLine is what a failure message says first (textcut.FirstLine): a setup failure's list shows its
// first item, not only its heading.
func firstLine(s string) string { return textcut.FirstLine(s) }

// Count tallies the leaf specs of the suites: passed, failed (any failure state) and skipped (skipped or
// pending; specs filtered out by labels are not counted).
func Count(suites []types.Report) (passed, failed, skipped int) {
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			switch SpecResult(sp) {
			case ResultPassed:
				passed++
			case ResultFailed:
				failed++
			case ResultSkipped, ResultInterrupted:
				skipped++
			}
		}
	}
	return passed, failed, skipped
}

// renderSharing writes the "Sharing per node" table, then names the nodes whose labels, evidence and
// pods disagree.
func renderSharing(b *strings.Builder, rec Record, suites []types.Report) {
	rows := SharingRows(rec, suites)
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n### Sharing per node\n\nThe mode from each node's evidence (advertised devices, MIG resources, DRA counters), and what a pod saw there.\n\n")
	b.WriteString("| Node | Path | Mode from evidence | Seen from a pod | Note |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		seen, note := "not recorded", "–"
		if r.Seen != "" {
			seen = cell(r.Seen)
		}
		if r.Note != "" {
			note = cell(r.Note)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", r.Node, r.Path, cell(r.Mode), seen, note)
	}
	if mismatches := SharingMismatches(rec, suites); len(mismatches) > 0 {
		b.WriteString("\nLabels, evidence and pods disagree on:\n\n")
		for _, m := range mismatches {
			fmt.Fprintf(b, "- **%s**\n", m)
		}
	}
}

// renderFeatureGates writes one row per gate and one column per component that reported it.
func renderFeatureGates(b *strings.Builder, gates []cluster.FeatureGate) {
	if len(gates) == 0 {
		return
	}
	var components, names []string
	stage := map[string]string{}
	state := map[[2]string]bool{}
	for _, g := range gates {
		if !slices.Contains(components, g.Component) {
			components = append(components, g.Component)
		}
		if _, seen := stage[g.Name]; !seen {
			names = append(names, g.Name)
		}
		stage[g.Name] = cmp.Or(g.Stage, "GA")
		state[[2]string{g.Name, g.Component}] = g.Enabled
	}
	slices.Sort(names)
	b.WriteString("\n| Feature gate | Stage | " + strings.Join(components, " | ") + " |\n|---|---|" + strings.Repeat("---|", len(components)) + "\n")
	for _, n := range names {
		fmt.Fprintf(b, "| %s | %s |", n, stage[n])
		for _, c := range components {
			on, ok := state[[2]string{n, c}]
			switch {
			case !ok:
				b.WriteString(" – |")
			case on:
				b.WriteString(" on |")
			default:
				b.WriteString(" off |")
			}
		}
		b.WriteString("\n")
	}
}

// renderParameters writes how the run was set up: timeout profile, namespace mode, pool, and the taints
// it tolerated or was kept off by.
func renderParameters(b *strings.Builder, rec Record, filters string) {
	p := rec.Parameters
	b.WriteString("\n## Run parameters\n\n| | |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(b, "| %s | %s |\n", k, cell(v)) }
	row("Filters", cmp.Or(filters, p.Filters, "none: every registered spec ran"))
	profile := p.TimeoutProfile
	if p.TimeoutProfileWhy != "" {
		profile += " (" + p.TimeoutProfileWhy + ")"
	}
	row("Timeout profile", cmp.Or(profile, "not recorded"))
	if p.Namespace != "" {
		row("Namespace", p.Namespace+" (team-namespace mode: no namespace or cluster-scoped object created)")
	} else {
		row("Namespace", "one per spec")
	}
	row("Queues", cmp.Or(p.LocalQueue, "own ResourceFlavor, ClusterQueue and LocalQueue per spec"))
	row("GPU pool", strings.Join(p.GPUPool, ", "))
	row("Dedication taints", taintList(rec.Taints.Dedication))
	row("Tolerated automatically", taintList(rec.Taints.Tolerated))
	row("Test pod tolerations", tolerationList(p.Tolerations))
	row("Checkpoint storage", cmp.Or(p.Checkpoints, "not recorded"))
	row("Fault providers", cmp.Or(p.Faults, "none: not a disruptive run"))
	for _, n := range slices.Sorted(maps.Keys(rec.Taints.Excluding)) {
		row("Left out: "+n, "untolerated "+taintList(rec.Taints.Excluding[n]))
	}
}

// taintList renders taints as kubectl does (key=value:Effect), "none" for none.
func taintList(ts []corev1.Taint) string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, cluster.FormatTaint(t))
	}
	return cmp.Or(strings.Join(out, ", "), "none")
}

// tolerationList renders tolerations as key[=value]:Effect ("*" for every effect), "none" for none.
func tolerationList(ts []corev1.Toleration) string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		s := t.Key
		if t.Value != "" {
			s += "=" + t.Value
		}
		out = append(out, s+":"+cmp.Or(string(t.Effect), "*"))
	}
	return cmp.Or(strings.Join(out, ", "), "none")
}

// renderTimings writes one row per workload of every spec that recorded a timeline: the timings the
// platform is judged by.
func renderTimings(b *strings.Builder, tls []timeline.Timeline) {
	if len(tls) == 0 {
		return
	}
	b.WriteString("\n## Timings\n\nPer workload, from the objects' own timestamps (`specs/<spec>/timeline.json`); — where it does not apply.\n\n")
	b.WriteString("| Spec | Workload | Admission wait | Pending | Start | Useful work | Idle reservation | Evictions | Recovery | Teardown |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, t := range tls {
		for _, w := range t.Workloads {
			d := w.Derived
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %d | %s | %s |\n", cell(t.Spec), cell(w.Name),
				d.AdmissionWait, d.Pending, d.Start, d.UsefulWork, d.IdleReservation, d.Evictions, d.Recovery, d.Teardown)
		}
	}
}

// UserFilters is how the user narrowed a run with Ginkgo configuration c beyond the profile's own filter,
// "" when not at all.
func UserFilters(c types.SuiteConfig, s Signoff) string { return userFilterOf(c, s) }

// Filters says how the run was narrowed (label filter, focus, skip), "" when it was not.
func Filters(suites []types.Report) string {
	var parts []string
	for _, s := range suites {
		if f := filterOf(s.SuiteConfig); f != "" && !slices.Contains(parts, f) {
			parts = append(parts, f)
		}
	}
	return strings.Join(parts, "; ")
}

// renderSteps lists what each passed spec of a scenario labelled measured recorded (fault →
// NotReady, preempted → re-admitted, steps lost, …): their report entries, in the order recorded.
func renderSteps(b *strings.Builder, suites []types.Report, measured []string) {
	var rows []string
	for _, r := range suites {
		for _, sp := range r.SpecReports {
			if sp.LeafNodeType != types.NodeTypeIt || sp.State != types.SpecStatePassed {
				continue
			}
			if !slices.ContainsFunc(sp.Labels(), func(l string) bool { return slices.Contains(measured, l) }) {
				continue
			}
			for _, e := range sp.ReportEntries {
				if e.Visibility == types.ReportEntryVisibilityNever || e.Name == RunIDEntry || e.Name == timeline.ReportEntry || e.Name == "artifacts" {
					continue
				}
				rows = append(rows, fmt.Sprintf("| %s | %s | %s |", cell(sp.FullText()), cell(e.Name), cell(e.StringRepresentation())))
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n## Measured steps of the resilience scenarios\n\n| Spec | Step | Value |\n|---|---|---|\n")
	b.WriteString(strings.Join(rows, "\n") + "\n")
}

// UpgradeVerdicts lists the upgrade rehearsals' verdicts of the run.
func UpgradeVerdicts(suites []types.Report) []string {
	var out []string
	for _, r := range suites {
		for _, sp := range r.SpecReports {
			for _, e := range sp.ReportEntries {
				if e.Name == upgrade.VerdictEntry {
					out = append(out, e.StringRepresentation())
				}
			}
		}
	}
	return out
}

// Rehearsal is what the signoff shows of one upgrade rehearsal: its verdict, the application check on the
// upgraded canary, the representative load, the serving reserve through the drain and the record diff.
type Rehearsal struct {
	Verdict             string
	Checks              []upgrade.AppCheck
	Load, Reserve, Diff string
}

// UpgradeRehearsals lists the run's upgrade rehearsals from their report entries.
func UpgradeRehearsals(suites []types.Report) []Rehearsal {
	var out []Rehearsal
	for _, r := range suites {
		for _, sp := range r.SpecReports {
			var h Rehearsal
			for _, e := range sp.ReportEntries {
				v := strings.Trim(e.StringRepresentation(), `"`)
				switch e.Name {
				case upgrade.VerdictEntry:
					h.Verdict = v
				case upgrade.AppCheckEntry:
					h.Checks = upgrade.ParseAppChecks(e.StringRepresentation())
				case upgrade.LoadEntry:
					h.Load = v
				case upgrade.ReserveEntry:
					h.Reserve = v
				case "record diff":
					h.Diff = v
				}
			}
			if h.Verdict != "" {
				out = append(out, h)
			}
		}
	}
	return out
}

// renderRehearsals is the signoff's "Upgrade rehearsal" section.
func renderRehearsals(b *strings.Builder, suites []types.Report) {
	for _, h := range UpgradeRehearsals(suites) {
		fmt.Fprintf(b, "## Upgrade rehearsal\n\n%s\n\n", h.Verdict)
		if len(h.Checks) > 0 {
			b.WriteString("| Application check on the upgraded canary | Path | Node | Result |\n|---|---|---|---|\n")
			for _, c := range h.Checks {
				fmt.Fprintf(b, "| %s | %s | %s | %s |\n", cell(c.Check), cell(c.Path), cell(c.Node), cell(c.Result))
			}
			b.WriteString("\n")
		}
		for _, kv := range [][2]string{{"Representative load", h.Load}, {"Serving reserve through the drain", h.Reserve}, {"Record diff (canary before/after)", h.Diff}} {
			if kv[1] != "" {
				fmt.Fprintf(b, "- %s: %s\n", kv[0], kv[1])
			}
		}
		b.WriteString("\n")
	}
}

// SpecLine is a finished spec's progress line: "[gpuconform] PASSED (1m6s) <full text>", with the
// failure's first line for a failed spec.
func SpecLine(sp types.SpecReport) string {
	line := fmt.Sprintf("[gpuconform] %s (%s) %s", strings.ToUpper(sp.State.String()), sp.RunTime.Round(time.Second), sp.FullText())
	if sp.State.Is(types.SpecStateFailureStates) {
		line += ": " + firstLine(sp.Failure.Message)
	}
	return line
}

// renderEvidence is the signoff's "Conformance evidence" section: the requirement table of the run's
// checklist version, pointing at the evidence directory.
func renderEvidence(b *strings.Builder, ev Evidence) {
	if !ev.HasClaims() {
		return
	}
	fmt.Fprintf(b, "\n## Conformance evidence\n\nKubernetes AI Conformance checklist v%s: one page per requirement in `%s/`, and the checklist filled in, [%s](%s) (check it with `gpuconform report --check-product`).\n\n", ev.Version, EvidenceDir, ProductFile, ProductFile)
	b.WriteString("| Requirement | Level | Result | Checklist status | Notes |\n|---|---|---|---|---|\n")
	for _, r := range ev.Requirements {
		fmt.Fprintf(b, "| [%s](%s/%s) | %s | %s | %s | %s |\n", r.ID, EvidenceDir, r.Page, r.Level, r.Result, cell(cmp.Or(r.Status, "left to the participant")), cell(r.Notes))
	}
}
