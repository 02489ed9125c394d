package audit

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"gpuconform.io/gpuconform/framework/runlease"
)

// Leftovers is what other runs have on the cluster, sorted by whether the run is alive.
type Leftovers struct {
	// Live are the runs whose lease is current, by run ID; LiveObjects their objects and node marks.
	Live        map[string]runlease.Info
	LiveObjects []Finding
	// Dead are what runs without a current lease left (and marks that name no run); DeadLeases are
	// those runs' expired leases.
	Dead       []Finding
	DeadLeases []runlease.Info
}

// SortLeftovers sorts other runs' findings by the leases at now.
func SortLeftovers(others []Finding, leases []runlease.Info, now time.Time) Leftovers {
	out := Leftovers{Live: runlease.LiveRuns(leases, now)}
	for _, f := range others {
		if _, live := out.Live[f.Run]; live && f.Run != "" {
			out.LiveObjects = append(out.LiveObjects, f)
		} else {
			out.Dead = append(out.Dead, f)
		}
	}
	for _, l := range leases {
		if _, live := out.Live[l.RunID]; !live {
			out.DeadLeases = append(out.DeadLeases, l)
		}
	}
	return out
}

// LiveNote names the live runs whose objects a run found and left alone.
func (l Leftovers) LiveNote() string {
	if len(l.LiveObjects) == 0 {
		return ""
	}
	owners := map[string]bool{}
	for _, f := range l.LiveObjects {
		owners[f.Run] = true
	}
	var runs []string
	for _, id := range slices.Sorted(maps.Keys(owners)) {
		runs = append(runs, l.Live[id].String())
	}
	return fmt.Sprintf("objects of live gpuconform runs, left alone: %s:\n%s", strings.Join(runs, "; "), Summary(l.LiveObjects))
}
