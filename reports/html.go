package reports

import (
	"cmp"
	"fmt"
	"html"
	"html/template"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"
	corev1 "k8s.io/api/core/v1"

	"gpuconform.io/gpuconform/framework/timeline"
	"gpuconform.io/gpuconform/internal/textcut"
)

// HTMLFile is the self-contained signoff page beside signoff.md.
const HTMLFile = "signoff.html"

// RenderHTML renders the signoff as one self-contained page for people: inline CSS and SVG, no script,
// nothing fetched. Verdict and reasons first; the compatibility record and its baseline diff; per spec
// with a timeline a Gantt chart of its workloads; failures with their diagnosis; what was not exercised
// and why; feature gates; run parameters.
func RenderHTML(suites []types.Report, rec Record) string {
	v := Decide(suites, rec)
	var b strings.Builder
	if err := pageTemplate.Execute(&b, pageData{Rec: rec, V: v, Suites: suites}); err != nil {
		return "<!doctype html><p>rendering failed: " + html.EscapeString(err.Error())
	}
	return b.String()
}

type pageData struct {
	Rec    Record
	V      Verdict
	Suites []types.Report
}

// specRow is one leaf spec for the results table.
type specRow struct {
	Path, Text, State, Class string
	Time                     time.Duration
	Failure, Location        string
	Entries                  []string
}

// Upgrades are the upgrade rehearsals' verdicts.
func (p pageData) Upgrades() []string { return UpgradeVerdicts(p.Suites) }

// Rehearsals are the upgrade rehearsals with their application check, load and serving reserve.
func (p pageData) Rehearsals() []Rehearsal { return UpgradeRehearsals(p.Suites) }

// Evidence is the run's AI Conformance evidence (the "Conformance evidence" section).
func (p pageData) Evidence() Evidence { return ConformanceEvidence(p.Suites, p.Rec) }

func (p pageData) Specs() []specRow {
	var out []specRow
	for _, s := range p.Suites {
		for _, sp := range s.SpecReports {
			if sp.LeafNodeType != types.NodeTypeIt && !sp.State.Is(types.SpecStateFailureStates) {
				continue
			}
			if sp.State == types.SpecStateSkipped && sp.Failure.Message == "" && len(sp.ContainerHierarchyTexts) == 0 {
				continue
			}
			r := specRow{Path: pathOf(sp), Text: sp.FullText(), State: stateText(sp.State), Time: sp.RunTime.Round(time.Second)}
			if r.Text == "" {
				r.Text = sp.LeafNodeType.String()
			}
			switch {
			case sp.State == types.SpecStatePassed:
				r.Class = "pass"
			case sp.State.Is(types.SpecStateFailureStates):
				r.Class = "fail"
				r.Failure, r.Location = strings.TrimSpace(sp.Failure.Message), sp.Failure.Location.String()
				for _, e := range sp.ReportEntries {
					r.Entries = append(r.Entries, e.Name+": "+e.StringRepresentation())
				}
			default:
				r.Class = "skip"
			}
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b specRow) int { return cmp.Compare(a.Path, b.Path) })
	return out
}

func (p pageData) Failures() []specRow {
	var out []specRow
	for _, r := range p.Specs() {
		if r.Class == "fail" {
			out = append(out, r)
		}
	}
	return out
}

// Filters says how the run was narrowed, "" when it was not.
func (p pageData) Filters() string { return Filters(p.Suites) }

// Sharing is the record's sharing line (SharingText).
func (p pageData) Sharing() string { return SharingText(p.Rec, p.Suites) }

// SharingRows are the "Sharing per node" table (SharingRows).
func (p pageData) SharingRows() []SharingRow { return SharingRows(p.Rec, p.Suites) }

// SharingMismatches name the nodes whose labels, evidence and pods disagree (SharingMismatches).
func (p pageData) SharingMismatches() []string { return SharingMismatches(p.Rec, p.Suites) }

func (p pageData) Kueue() string {
	if p.Rec.Kueue.Present {
		return p.Rec.Kueue.Version
	}
	return "absent"
}

func (p pageData) Taints(ts []corev1.Taint) string { return taintList(ts) }

// Gantts draws one chart per timeline.
func (p pageData) Gantts() []gantt {
	var out []gantt
	for _, t := range p.Rec.Timelines {
		out = append(out, gantt{Spec: t.Spec, SVG: template.HTML(GanttSVG(t)), Workloads: t.Workloads})
	}
	return out
}

type gantt struct {
	Spec      string
	SVG       template.HTML
	Workloads []timeline.Workload
}

// Phase is one stretch of a workload's life in a Gantt row.
type Phase struct {
	Name       string
	From, To   time.Time
	Event      string
	markerOnly bool
}

// Phases cuts a workload's events into the stretches the chart draws: queued (created → admitted),
// pending (→ scheduled), starting (→ container running), idle (running, no useful step yet), working
// (first useful step → stop), running (a workload with no progress lines), evicted (→ admitted again),
// down (a node or device fault → the replacement is scheduled).
func Phases(w timeline.Workload, end time.Time) []Phase {
	var out []Phase
	state, since := "", time.Time{}
	sawAdmission := false
	// Without Kueue (no Workload was ever queued) the wait before scheduling is Pending, not queued.
	firstWait := "pending"
	for _, e := range w.Events {
		if e.Kind == timeline.Queued || e.Kind == timeline.Admitted {
			firstWait = "queued"
		}
	}
	open := func(name string, at time.Time) { state, since = name, at }
	closeAt := func(at time.Time) {
		if state != "" && !at.Before(since) {
			out = append(out, Phase{Name: state, From: since, To: at})
		}
		state = ""
	}
	for _, e := range w.Events {
		switch e.Kind {
		case timeline.Created:
			if state == "" {
				open(firstWait, e.At)
			}
		case timeline.Admitted:
			sawAdmission = true
			if state == "queued" || state == "evicted" || state == "" {
				closeAt(e.At)
				open("pending", e.At)
			}
		case timeline.Scheduled:
			if state == "queued" && !sawAdmission {
				state = "pending" // no Kueue: the wait before scheduling is Pending
			}
			if state == "queued" || state == "pending" || state == "" || state == "down" {
				closeAt(e.At)
				open("starting", e.At)
			}
		case timeline.Started:
			if state == "starting" || state == "" || state == "pending" {
				closeAt(e.At)
				open("running", e.At)
			}
		case timeline.FirstStep:
			if state == "running" {
				state = "idle"
			}
			closeAt(e.At)
			open("working", e.At)
		case timeline.Preempted, timeline.Evicted:
			closeAt(e.At)
			open("evicted", e.At)
		case timeline.Fault:
			// The work stops at the fault; until a replacement is scheduled the workload is down.
			if state == "working" || state == "running" || state == "idle" || state == "starting" {
				closeAt(e.At)
				open("down", e.At)
			}
		case timeline.Stopped:
			if state == "working" || state == "running" || state == "idle" {
				closeAt(e.At)
			}
		case timeline.Finished, timeline.Failed:
			if state != "stopping" {
				closeAt(e.At)
			}
		case timeline.Deleting:
			// From the deletion asked for until the pod is gone, whatever it was doing: the devices are
			// still held.
			if state != "stopping" {
				closeAt(e.At)
				open("stopping", e.At)
			}
		case timeline.Gone:
			if state == "stopping" {
				closeAt(e.At)
			}
		}
	}
	if state != "" && !end.IsZero() {
		closeAt(end)
	}
	for _, e := range w.Events {
		switch e.Kind {
		case timeline.Checkpoint, timeline.Resumed, timeline.Preempted, timeline.Evicted, timeline.Finished, timeline.Failed,
			timeline.Fault, timeline.NodeNotReady, timeline.PodEvicted, timeline.NodeReady, timeline.DeviceWithdrawn, timeline.Recovered:
			out = append(out, Phase{Name: string(e.Kind), From: e.At, To: e.At, Event: e.Detail, markerOnly: true})
		}
	}
	return out
}

var phaseColors = map[string]string{
	"queued": "#b0b7c3", "pending": "#f2c14e", "starting": "#f08a4b", "idle": "#e05a5a",
	"working": "#3aa655", "running": "#4a90d9", "evicted": "#9b59b6", "down": "#6b6b6b",
	"stopping": "#c7a4a4",
}

// GanttSVG draws the timeline as an inline SVG: one row per workload, its phases as bars, checkpoints,
// resumes, evictions and ends as markers, with a time axis in seconds from the first event.
func GanttSVG(t timeline.Timeline) string {
	const label, width, row, top = 170.0, 900.0, 26.0, 22.0
	var start, end time.Time
	for _, w := range t.Workloads {
		for _, e := range w.Events {
			if start.IsZero() || e.At.Before(start) {
				start = e.At
			}
			if e.At.After(end) {
				end = e.At
			}
		}
	}
	if start.IsZero() {
		return ""
	}
	if !t.End.IsZero() && t.End.After(end) && t.End.Sub(end) < time.Minute {
		end = t.End
	}
	span := end.Sub(start).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(at time.Time) float64 { return label + (width-label-10)*at.Sub(start).Seconds()/span }
	height := top + row*float64(len(t.Workloads)) + 30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" role="img" aria-label="%s">`, width, height, html.EscapeString("timeline of "+t.Spec))
	// Axis: about eight ticks in whole seconds.
	step := niceStep(span / 8)
	for s := 0.0; s <= span+1e-9; s += step {
		px := label + (width-label-10)*s/span
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" class="grid"/><text x="%.1f" y="14" class="tick">%gs</text>`, px, top-4, px, height-24, px, s)
	}
	for i, w := range t.Workloads {
		y := top + row*float64(i)
		fmt.Fprintf(&b, `<text x="4" y="%.0f" class="wl">%s</text>`, y+16, html.EscapeString(textcut.Head(w.Name, 24)))
		for _, p := range Phases(w, end) {
			tip := fmt.Sprintf("%s %s: %s → %s (%s)", w.Name, p.Name, p.From.Format("15:04:05.0"), p.To.Format("15:04:05.0"), p.To.Sub(p.From).Round(100*time.Millisecond))
			if p.markerOnly {
				tip = fmt.Sprintf("%s %s at %s %s", w.Name, p.Name, p.From.Format("15:04:05.0"), p.Event)
				fmt.Fprintf(&b, `<g class="mk %s"><line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f"/><title>%s</title></g>`, p.Name, x(p.From), y+2, x(p.From), y+row-4, html.EscapeString(tip))
				continue
			}
			wpx := x(p.To) - x(p.From)
			if wpx < 1 {
				wpx = 1
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="%s"><title>%s</title></rect>`, x(p.From), y+4, wpx, row-10, phaseColors[p.Name], html.EscapeString(tip))
		}
	}
	// Legend.
	lx := label
	for _, name := range []string{"queued", "pending", "starting", "idle", "working", "running", "evicted", "stopping"} {
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/><text x="%.0f" y="%.0f" class="tick">%s</text>`, lx, height-14, phaseColors[name], lx+13, height-5, name)
		lx += 85
	}
	b.WriteString(`</svg>`)
	return b.String()
}

func niceStep(raw float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600} {
		if s >= raw {
			return s
		}
	}
	return 7200
}

var pageTemplate = template.Must(template.New("signoff").Funcs(template.FuncMap{
	"join": strings.Join,
	"tols": func(p Parameters) string { return tolerationList(p.Tolerations) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>GPU scheduling signoff: {{.V.Outcome}}</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1100px;color:#1d2330;padding:0 16px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #dde1e8;padding-bottom:4px}
.verdict{display:inline-block;padding:2px 12px;border-radius:6px;color:#fff;font-weight:700}
.GO{background:#2e8b57}.NO-GO{background:#c0392b}.INCOMPLETE{background:#d68910}
table{border-collapse:collapse;width:100%;margin:6px 0}td,th{border:1px solid #dde1e8;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f8}tr.pass td.state{color:#2e8b57}tr.fail td.state{color:#c0392b;font-weight:700}tr.skip td.state{color:#888}
pre{background:#f6f8fa;border:1px solid #dde1e8;padding:8px;overflow-x:auto;white-space:pre-wrap;font-size:12px}
.muted{color:#667}svg{display:block;margin:6px 0 2px;font:11px system-ui,sans-serif}
svg .grid{stroke:#e4e7ec}svg .tick{fill:#667}svg .wl{fill:#1d2330}svg .mk line{stroke:#1d2330;stroke-width:2}
svg .mk.checkpoint line{stroke:#1f6f3a;stroke-dasharray:2 2}svg .mk.resumed line{stroke:#1f4f8a}svg .mk.preempted line,svg .mk.evicted line{stroke:#6c2d86}svg .mk.failed line{stroke:#c0392b}
</style></head><body>
<h1>GPU scheduling signoff: <span class="verdict {{.V.Outcome}}">{{.V.Outcome}}</span></h1>
<p class="muted">Run <code>{{.Rec.RunID}}</code> against context <code>{{.Rec.Context}}</code> ({{.Rec.Server}}), {{.Rec.GeneratedAt.Format "2006-01-02 15:04:05 MST"}}. Exit code {{.V.ExitCode}}.</p>
{{with .V.StandInSummary}}<p><strong>{{.}}:</strong></p><ul>{{range $.V.StandIns}}<li>stand-in: {{.}}</li>{{end}}</ul>{{end}}
{{if or .V.NoGo .V.Incomplete .V.NotApplicable}}<ul>{{range .V.NoGo}}<li>{{.}}</li>{{end}}{{range .V.Incomplete}}<li>incomplete: {{.}}{{if $.Rec.Signoff.AllowIncomplete}} (allowed by the signoff policy){{end}}</li>{{end}}{{range .V.NotApplicable}}<li>not applicable: {{.}}</li>{{end}}</ul>{{end}}
{{if .Rec.Signoff.Require}}<p>Required: {{join .Rec.Signoff.Require ", "}}, and every discovered allocation path.</p>{{end}}
{{range .Upgrades}}<p><strong>{{.}}</strong></p>{{end}}
{{range .Rehearsals}}<h2>Upgrade rehearsal</h2><p>{{.Verdict}}</p>
{{if .Checks}}<table><tr><th>Application check on the upgraded canary</th><th>Path</th><th>Node</th><th>Result</th></tr>{{range .Checks}}<tr><td>{{.Check}}</td><td>{{.Path}}</td><td>{{.Node}}</td><td>{{.Result}}</td></tr>{{end}}</table>{{end}}
<ul>{{with .Load}}<li>Representative load: {{.}}</li>{{end}}{{with .Reserve}}<li>Serving reserve through the drain: {{.}}</li>{{end}}{{with .Diff}}<li>Record diff (canary before/after): {{.}}</li>{{end}}</ul>{{end}}
{{with .Rec.Signoff.Baseline}}<h2>Compared with baseline run <code>{{.RunID}}</code></h2><p class="muted">{{.Source}}</p>
{{if $.V.Baseline}}<ul>{{range $.V.Baseline}}<li>{{.}}</li>{{end}}</ul>{{else}}<p>Everything that passed in the baseline passes now.</p>{{end}}{{end}}

<h2>Compatibility record</h2>
<table><tr><th>Kubernetes</th><td>{{.Rec.KubernetesVersion}}</td></tr><tr><th>Kueue</th><td>{{.Kueue}}</td></tr>{{with .Rec.Kueue.WaitForPodsReady}}<tr><th>Kueue waitForPodsReady</th><td>{{.}}</td></tr>{{end}}{{with .Rec.Kueue.TAS}}<tr><th>Kueue topology-aware scheduling</th><td>{{.}}</td></tr>{{end}}{{with .Rec.AcceleratorMetrics}}<tr><th>Accelerator metrics</th><td>{{.}}</td></tr>{{end}}{{with .Rec.Monitoring}}<tr><th>Monitoring</th><td>{{.}}</td></tr>{{end}}{{with .Rec.NodeMonitorGracePeriod}}<tr><th>Node monitor grace period</th><td>{{.}}</td></tr>{{end}}
{{range .Rec.Paths}}<tr><th>Path {{.Name}}</th><td>{{.Description}}{{if .DriverVersion}}, driver {{.DriverVersion}}{{end}}</td></tr>{{end}}
<tr><th>Sharing</th><td>{{.Sharing}}</td></tr></table>
{{if .Rec.Nodes}}<table><tr><th>Node</th><th>Accelerator</th><th>Driver</th><th>OS</th><th>Kernel</th><th>Runtime</th><th>Kubelet</th><th>Devices (plugin/DRA)</th></tr>
{{range .Rec.Nodes}}<tr><td>{{.Name}}</td><td>{{.Accelerator}}</td><td>{{.Driver}}</td><td>{{.OSImage}}</td><td>{{.Kernel}}</td><td>{{.ContainerRuntime}}</td><td>{{.Kubelet}}</td><td>{{.DevicePluginDevices}}/{{.DRADevices}}</td></tr>{{end}}</table>{{end}}
{{with .SharingRows}}<h3>Sharing per node</h3><p class="muted">The mode from each node's evidence (advertised devices, MIG resources, DRA counters), and what a pod saw there.</p>
<table><tr><th>Node</th><th>Path</th><th>Mode from evidence</th><th>Seen from a pod</th><th>Note</th></tr>
{{range .}}<tr><td>{{.Node}}</td><td>{{.Path}}</td><td>{{.Mode}}</td><td>{{with .Seen}}{{.}}{{else}}not recorded{{end}}</td><td>{{with .Note}}{{.}}{{else}}–{{end}}</td></tr>{{end}}</table>
{{with $.SharingMismatches}}<p>Labels, evidence and pods disagree on:</p><ul>{{range .}}<li><b>{{.}}</b></li>{{end}}</ul>{{end}}{{end}}

<h2>Results</h2>
<table><tr><th>Path</th><th>Spec</th><th>Result</th><th>Time</th></tr>
{{range .Specs}}<tr class="{{.Class}}"><td>{{.Path}}</td><td>{{.Text}}</td><td class="state">{{.State}}</td><td>{{.Time}}</td></tr>{{end}}</table>

{{with .Gantts}}<h2>Timelines</h2><p class="muted">Per spec, each workload's life from the objects' own timestamps; hover a bar or marker for times.</p>
{{range .}}<h3>{{.Spec}}</h3>{{.SVG}}
<table><tr><th>Workload</th><th>Admission wait</th><th>Pending</th><th>Start</th><th>Useful work</th><th>Idle reservation</th><th>Evictions</th><th>Recovery</th><th>Teardown</th></tr>
{{range .Workloads}}<tr><td>{{.Name}}</td><td>{{.Derived.AdmissionWait}}</td><td>{{.Derived.Pending}}</td><td>{{.Derived.Start}}</td><td>{{.Derived.UsefulWork}}</td><td>{{.Derived.IdleReservation}}</td><td>{{.Derived.Evictions}}</td><td>{{.Derived.Recovery}}</td><td>{{.Derived.Teardown}}</td></tr>{{end}}</table>{{end}}{{end}}

{{with .Evidence}}{{if .HasClaims}}<h2>Conformance evidence</h2>
<p class="muted">Kubernetes AI Conformance checklist v{{.Version}}: one page per requirement in <a href="evidence/README.md">evidence/</a>, and the checklist filled in, <a href="PRODUCT.yaml">PRODUCT.yaml</a>. A requirement is proven only by passed specs that carry its label.</p>
<table><tr><th>Requirement</th><th>Level</th><th>Result</th><th>Checklist status</th><th>Notes</th></tr>
{{range .Requirements}}<tr class="req-{{.Result}}"><td><a href="evidence/{{.Page}}">{{.ID}}</a></td><td>{{.Level}}</td><td>{{.Result}}</td><td>{{with .Status}}{{.}}{{else}}left to the participant{{end}}</td><td>{{.Notes}}</td></tr>{{end}}</table>{{end}}{{end}}

{{with .Failures}}<h2>Failures and their diagnosis</h2>
{{range .}}<h3>{{.Text}}</h3><p class="muted">{{.Location}}</p><pre>{{.Failure}}</pre>{{if .Entries}}<ul>{{range .Entries}}<li>{{.}}</li>{{end}}</ul>{{end}}{{end}}{{end}}

<h2>Not exercised</h2>
{{if .Rec.NotExercised}}<ul>{{range .Rec.NotExercised}}<li><b>{{.What}}</b>: {{.Why}}</li>{{end}}</ul>{{else}}<p>Everything the suite knows how to check was exercised.</p>{{end}}

{{if .Rec.FeatureGates}}<h2>Feature gates</h2><table><tr><th>Gate</th><th>Stage</th><th>Component</th><th>Enabled</th></tr>
{{range .Rec.FeatureGates}}<tr><td>{{.Name}}</td><td>{{with .Stage}}{{.}}{{else}}GA{{end}}</td><td>{{.Component}}</td><td>{{if .Enabled}}on{{else}}off{{end}}</td></tr>{{end}}</table>{{end}}

<h2>Run parameters</h2>
<table><tr><th>Filters</th><td>{{with .Filters}}{{.}}{{else}}none: every registered spec ran{{end}}</td></tr>
<tr><th>Timeout profile</th><td>{{.Rec.Parameters.TimeoutProfile}}{{with .Rec.Parameters.TimeoutProfileWhy}} ({{.}}){{end}}</td></tr>
<tr><th>Namespace</th><td>{{with .Rec.Parameters.Namespace}}{{.}} (team-namespace mode){{else}}one per spec{{end}}</td></tr>
<tr><th>Queues</th><td>{{with .Rec.Parameters.LocalQueue}}{{.}}{{else}}own per spec{{end}}</td></tr>
<tr><th>GPU pool</th><td>{{join .Rec.Parameters.GPUPool ", "}}</td></tr>
<tr><th>Dedication taints</th><td>{{.Taints .Rec.Taints.Dedication}}</td></tr>
<tr><th>Tolerated automatically</th><td>{{.Taints .Rec.Taints.Tolerated}}</td></tr>
<tr><th>Test pod tolerations</th><td>{{tols .Rec.Parameters}}</td></tr>
<tr><th>Checkpoint storage</th><td>{{with .Rec.Parameters.Checkpoints}}{{.}}{{else}}not recorded{{end}}</td></tr>
<tr><th>Fault providers</th><td>{{with .Rec.Parameters.Faults}}{{.}}{{else}}none: not a disruptive run{{end}}</td></tr></table>

{{if .Rec.Notes}}<h2>Notes</h2><ul>{{range .Rec.Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{with .Rec.LeakAudit}}<h2>Leak audit</h2>{{if .Clean}}<p>Nothing labelled by this run is left on the cluster.</p>{{else}}<ul>{{range .Ours}}<li>left behind: {{.}}</li>{{end}}</ul>{{end}}{{end}}
</body></html>
`))
