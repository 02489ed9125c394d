package runlease

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Mode is how a run holds an allocation path.
type Mode string

const (
	// Shared is how a run holds a path whose specs only use a device beside others: runs that hold
	// the path shared may run side by side.
	Shared Mode = "shared"
	// Exclusive is how a run holds a path when some spec of it fills the path's devices or leases its
	// nodes: no other run may use the path meanwhile. Any mode other than Shared counts as Exclusive,
	// so a lease written by a newer suite with a mode this one does not know keeps others off.
	Exclusive Mode = "exclusive"
)

// exclusive says whether m keeps other runs off the path; unknown modes do, to be safe.
func (m Mode) exclusive() bool { return m != Shared }

// Holds is what a run holds while it runs.
type Holds struct {
	// Paths maps an allocation path's name ("device-plugin", "dra", …) to how the run holds it:
	// Exclusive when some spec of the run fills the path's devices or leases its nodes, Shared when its
	// specs only use a device beside others.
	Paths map[string]Mode `json:"paths,omitempty"`
	// Disrupts says the run stops nodes or fails devices (disruptive specs).
	Disrupts bool `json:"disrupts,omitempty"`
	// Canary names the canary nodes the run upgrades (the upgrade rehearsal); empty when it does not.
	Canary []string `json:"canary,omitempty"`
	// Nodes are the GPU nodes the run's pods may use and its faults may reach (its GPU pool); empty when
	// unknown, which overlaps every run. Runs on disjoint pools never conflict.
	Nodes []string `json:"nodes,omitempty"`
}

// Empty reports whether the run holds nothing: such a run conflicts with nobody.
func (h Holds) Empty() bool {
	return len(h.Paths) == 0 && !h.Disrupts && len(h.Canary) == 0
}

// clone copies h, so that a lease keeps what it was given even when the caller changes its map or
// slice later (the renewals read them from another goroutine).
func (h Holds) clone() Holds {
	h.Paths = maps.Clone(h.Paths)
	h.Canary = slices.Clone(h.Canary)
	h.Nodes = slices.Clone(h.Nodes)
	return h
}

// String says what the run holds in words, for progress lines and errors.
func (h Holds) String() string {
	if h.Empty() {
		return "nothing"
	}
	var parts []string
	if len(h.Paths) > 0 {
		parts = append(parts, h.pathsString())
	}
	parts = append(parts, disruptions("", h)...)
	if len(h.Nodes) > 0 {
		parts = append(parts, plural(len(h.Nodes), "on node ", "on nodes ")+strings.Join(h.Nodes, ", "))
	}
	return strings.Join(parts, "; ")
}

// pathsString lists the paths in name order, so the same holds always read the same.
func (h Holds) pathsString() string {
	names := slices.Sorted(maps.Keys(h.Paths))
	items := make([]string, len(names))
	for i, n := range names {
		items[i] = fmt.Sprintf("%s (%s)", n, h.Paths[n])
	}
	return plural(len(names), "path", "paths") + " " + strings.Join(items, ", ")
}

// Conflict says why a run holding a may not run beside a run holding b, or "" when they may. a is
// this run's holds and b the other run's, which only shows in the wording.
//
// A path both hold conflicts when either holds it exclusive. A run that stops nodes, fails devices or
// upgrades canary nodes conflicts with every run that holds anything, since those steps reach every
// path's pods; two runs that hold nothing never conflict.
//
// Runs whose GPU pools (Nodes) are both known and share no node never conflict: nothing one does reaches
// the other's pods.
func Conflict(a, b Holds) string {
	if len(a.Nodes) > 0 && len(b.Nodes) > 0 && !slices.ContainsFunc(a.Nodes, func(n string) bool { return slices.Contains(b.Nodes, n) }) {
		return ""
	}
	var why []string
	if paths := contested(a, b); len(paths) > 0 {
		why = append(why, pathReason(paths))
	}
	if !b.Empty() {
		why = append(why, disruptions("this run ", a)...)
	}
	if !a.Empty() {
		why = append(why, disruptions("the other run ", b)...)
	}
	return strings.Join(why, "; ")
}

// contested lists, in name order, the paths both hold where at least one holds exclusive.
func contested(a, b Holds) []string {
	var paths []string
	for name, ma := range a.Paths {
		if mb, ok := b.Paths[name]; ok && (ma.exclusive() || mb.exclusive()) {
			paths = append(paths, name)
		}
	}
	slices.Sort(paths)
	return paths
}

func pathReason(paths []string) string {
	if len(paths) == 1 {
		return "both use path " + paths[0] + " and one holds it exclusive"
	}
	return "both use paths " + strings.Join(paths, ", ") + " and one holds each exclusive"
}

// disruptions names h's disruptive steps, each prefixed by who (which may be "").
func disruptions(who string, h Holds) []string {
	var steps []string
	if h.Disrupts {
		steps = append(steps, who+"stops nodes or fails devices")
	}
	if len(h.Canary) > 0 {
		steps = append(steps, who+"upgrades canary "+strings.Join(h.Canary, ", "))
	}
	return steps
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
