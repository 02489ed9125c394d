// Package timeline records what happened to each workload of a spec, and when, from the objects' own
// timestamps: created, queued, quota reserved and admitted (Kueue's Workload conditions), scheduled and
// started (the pod's conditions and container states), the workload's own progress lines (first useful
// step, checkpoints, resume), evicted or preempted and re-admitted, finished. From those it derives the
// timings a GPU platform is judged by: admission wait, Pending, start, useful work and idle reservation.
//
// A Recorder watches one namespace (and, in a shared namespace, one spec's label) with informers while
// the spec runs; the Timeline is written beside the spec's other artifacts (specs/<spec>/timeline.json)
// and read back by `gpuconform report`, so a report is rebuilt offline from the files alone.
package timeline

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gpuconform.io/gpuconform/framework/artifacts"
)

// File is the timeline's name in a spec's artifacts directory.
const File = "timeline.json"

// ReportEntry names the Ginkgo report entry that points at a spec's timeline file.
const ReportEntry = "timeline"

// Kind is what happened.
type Kind string

// The event kinds, in the order a workload normally meets them.
const (
	Created       Kind = "created"        // the Job or Pod was created
	Queued        Kind = "queued"         // Kueue created its Workload
	QuotaReserved Kind = "quota-reserved" // Workload QuotaReserved=True
	Admitted      Kind = "admitted"       // Workload Admitted=True (again after an eviction: re-admitted)
	Evicted       Kind = "evicted"        // Workload Evicted=True for a reason other than preemption
	Preempted     Kind = "preempted"      // Workload Evicted=True, reason Preempted
	Scheduled     Kind = "scheduled"      // a pod's PodScheduled=True
	Started       Kind = "started"        // a pod's workload container runs
	FirstStep     Kind = "first-step"     // the workload's progress line for its first useful step
	Checkpoint    Kind = "checkpoint"     // the workload wrote a checkpoint
	Resumed       Kind = "resumed"        // the workload started from a checkpoint
	Stopped       Kind = "stopped"        // a pod's workload container terminated (SIGTERM, failure, end)
	Finished      Kind = "finished"       // the Job completed (or a bare pod succeeded)
	Deleting      Kind = "deleting"       // a pod's deletion was asked for (its deletionTimestamp less the grace period)
	Gone          Kind = "gone"           // a pod is gone from the API: the kubelet stopped it and released its devices
	Failed        Kind = "failed"         // the Job failed (or a bare pod failed)

	// Faults and what the cluster did about them (the failure scenario records these).
	Fault           Kind = "fault"            // the suite injected a fault (node stopped, device unhealthy)
	NodeNotReady    Kind = "node-not-ready"   // the faulty node's Ready condition left True
	PodEvicted      Kind = "pod-evicted"      // a pod was marked for deletion by a disruption (DisruptionTarget)
	NodeReady       Kind = "node-ready"       // the node is Ready again
	DeviceWithdrawn Kind = "device-withdrawn" // the unhealthy device is no longer offered
	Recovered       Kind = "recovered"        // the fault was undone and the node or device is offered again
)

// Event is one thing that happened, at the time the component recorded it.
type Event struct {
	At   time.Time `json:"at"`
	Kind Kind      `json:"kind"`
	// Object is what the time was read from: Job/name, Workload/name, Pod/name.
	Object string `json:"object"`
	Detail string `json:"detail,omitempty"`
}

// Workload is one Job (or bare Pod) of the spec and everything that happened to it and its pods.
type Workload struct {
	Name    string  `json:"name"`
	Events  []Event `json:"events"`
	Derived Derived `json:"derived"`
}

// Derived are the timings of one workload; a nil field could not be measured (the events it needs did
// not happen, e.g. no Kueue, or the workload never started).
type Derived struct {
	// AdmissionWait: created → first admitted (Kueue only).
	AdmissionWait *Duration `json:"admissionWait,omitempty"`
	// Pending: admitted (or created, without Kueue) → first pod scheduled.
	Pending *Duration `json:"pending,omitempty"`
	// Start: first pod scheduled → its workload container running.
	Start *Duration `json:"start,omitempty"`
	// UsefulWork: the sum, over attempts, of first useful step → the attempt's end.
	UsefulWork *Duration `json:"usefulWork,omitempty"`
	// IdleReservation: the sum, over attempts, of the time the workload held its admission or devices
	// without doing useful work: admitted (or scheduled) → first useful step.
	IdleReservation *Duration `json:"idleReservation,omitempty"`
	// Evictions counts evictions and preemptions.
	Evictions int `json:"evictions,omitempty"`
	// Recovery: the first fault → the first resumed step after it (the work was going again).
	Recovery *Duration `json:"recovery,omitempty"`
	// Teardown: the first deletion asked for → the last pod gone (the devices are free again).
	Teardown *Duration `json:"teardown,omitempty"`
}

// Duration is a time.Duration that reads and writes as a Go duration string in JSON ("1m2.5s").
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

func (d *Duration) String() string {
	if d == nil {
		return "—"
	}
	return time.Duration(*d).Round(100 * time.Millisecond).String()
}

func dur(from, to time.Time) *Duration {
	if from.IsZero() || to.IsZero() || to.Before(from) {
		return nil
	}
	d := Duration(to.Sub(from))
	return &d
}

// Timeline is one spec's record.
type Timeline struct {
	Spec      string     `json:"spec"`
	Namespace string     `json:"namespace"`
	Start     time.Time  `json:"start"`
	End       time.Time  `json:"end"`
	Workloads []Workload `json:"workloads"`
}

// Merge is one timeline of a spec's workloads recorded in two namespaces (or two selectors of one): from
// the earlier start to the later end, every workload of both; a name b shares with a is given b's namespace
// ("<namespace>/<name>") so that two workloads never become one. The namespace is a's.
func Merge(a, b Timeline) Timeline {
	out := a
	out.Workloads = slices.Clone(a.Workloads)
	if !b.Start.IsZero() && (out.Start.IsZero() || b.Start.Before(out.Start)) {
		out.Start = b.Start
	}
	if b.End.After(out.End) {
		out.End = b.End
	}
	for _, w := range b.Workloads {
		if out.Workload(w.Name) != nil {
			w.Name = b.Namespace + "/" + w.Name
		}
		out.Workloads = append(out.Workloads, w)
	}
	sortWorkloads(out.Workloads)
	return out
}

// Workload returns the named workload, or nil.
func (t Timeline) Workload(name string) *Workload {
	for i := range t.Workloads {
		if t.Workloads[i].Name == name {
			return &t.Workloads[i]
		}
	}
	return nil
}

// Write stores the timeline as dir/timeline.json.
func (t Timeline) Write(dir string) (string, error) {
	return artifacts.WriteJSON(dir, File, t)
}

// Read loads dir/timeline.json.
func Read(dir string) (Timeline, error) {
	var t Timeline
	data, err := os.ReadFile(filepath.Join(dir, File))
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(data, &t); err != nil {
		return t, fmt.Errorf("%s: %w", filepath.Join(dir, File), err)
	}
	return t, nil
}

// ReadAll loads every specs/<spec>/timeline.json under an artifacts directory, sorted by spec.
func ReadAll(artifactsDir string) ([]Timeline, error) {
	matches, err := filepath.Glob(filepath.Join(artifactsDir, "specs", "*", File))
	if err != nil {
		return nil, err
	}
	var out []Timeline
	for _, m := range matches {
		t, err := Read(filepath.Dir(m))
		if err != nil {
			return out, err
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Timeline) int { return strings.Compare(a.Spec, b.Spec) })
	return out, nil
}

// sortEvents orders events by time, then by the kinds' natural order.
func sortEvents(evs []Event) {
	rank := map[Kind]int{}
	for i, k := range []Kind{Created, Queued, QuotaReserved, Admitted, Scheduled, Started, Resumed, FirstStep, Checkpoint, Preempted, Evicted, Stopped, Finished, Failed, Deleting, Gone} {
		rank[k] = i
	}
	slices.SortStableFunc(evs, func(a, b Event) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(rank[a.Kind], rank[b.Kind]))
	})
}

// Derive computes the timings from the events (sorted first). An attempt runs from a Started event to
// the next Stopped, eviction or the end; its useful work from its first useful step to that end.
func (w *Workload) Derive() {
	sortEvents(w.Events)
	var d Derived
	first := func(k Kind) time.Time {
		for _, e := range w.Events {
			if e.Kind == k {
				return e.At
			}
		}
		return time.Time{}
	}
	created, admitted, scheduled := first(Created), first(Admitted), first(Scheduled)
	d.AdmissionWait = dur(created, admitted)
	pendingFrom := admitted
	if pendingFrom.IsZero() {
		pendingFrom = created
	}
	d.Pending = dur(pendingFrom, scheduled)
	for _, e := range w.Events {
		if e.Kind == Started && !e.At.Before(scheduled) {
			d.Start = dur(scheduled, e.At)
			break
		}
	}

	// Attempts: held from admission (or scheduling) until the first step; working from the first step
	// until the attempt stops.
	var useful, idle time.Duration
	var held, working time.Time
	measured := false
	end := func(at time.Time) {
		if !working.IsZero() {
			useful += at.Sub(working)
		} else if !held.IsZero() {
			idle += at.Sub(held)
		}
		held, working = time.Time{}, time.Time{}
	}
	for _, e := range w.Events {
		switch e.Kind {
		case Admitted, Scheduled:
			if held.IsZero() && working.IsZero() {
				held = e.At
			}
		case FirstStep:
			if !held.IsZero() {
				idle += e.At.Sub(held)
			}
			held, working, measured = time.Time{}, e.At, true
		case Evicted, Preempted:
			d.Evictions++
			end(e.At)
		case Fault:
			// Work on a stopped node or a lost device ends at the fault, whenever the API learns of it.
			end(e.At)
		case Stopped, Finished, Failed:
			end(e.At)
		}
	}
	if fault := first(Fault); !fault.IsZero() {
		for _, e := range w.Events {
			if (e.Kind == Resumed || e.Kind == FirstStep) && e.At.After(fault) {
				d.Recovery = dur(fault, e.At)
				break
			}
		}
	}
	if deleting := first(Deleting); !deleting.IsZero() {
		var gone time.Time
		for _, e := range w.Events {
			if e.Kind == Gone && e.At.After(gone) {
				gone = e.At
			}
		}
		d.Teardown = dur(deleting, gone)
	}
	if measured {
		u, i := Duration(useful), Duration(idle)
		d.UsefulWork, d.IdleReservation = &u, &i
	}
	w.Derived = d
}
