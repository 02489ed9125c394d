package suite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/runlease"
)

// exclusiveLabels are the pool-lock labels of a spec that needs its path's devices, or nodes, to itself
// inside one run (scenarios' poolHold). Across runs the pool locks are not shared, so a run with any such
// spec holds the path exclusive for the whole run: another run's pods would otherwise fill the node the
// spec leased, or take the devices it counts.
var exclusiveLabels = []string{labels.HoldsPath, labels.HoldsNode, labels.HoldsNodes, labels.LeasesNodes,
	labels.StopsNode, labels.FaultsDevice, labels.HoldsCanary}

// PlanHolds decides, from the specs the run will run (Ginkgo's preview of its tree under its filters),
// what the run holds on the cluster for its lease: each path its specs use, exclusive where one of them
// holds it; whether it stops nodes or fails devices; the canary nodes when it rehearses an upgrade. A spec
// of no path (the upgrade rehearsal) uses every path of the run. Its nodes are the GPU pool's: a run on
// another pool of the cluster does not conflict with it.
func (r *Run) PlanHolds(specs []types.SpecReport) runlease.Holds {
	h := runlease.Holds{Paths: map[string]runlease.Mode{}, Nodes: slices.Clone(r.Caps.Pools.GPU.Nodes)}
	all := make([]string, len(r.Paths))
	for i, p := range r.Paths {
		all[i] = p.Name()
	}
	for _, sp := range specs {
		if sp.LeafNodeType != types.NodeTypeIt || sp.State.Is(types.SpecStateSkipped|types.SpecStatePending) {
			continue
		}
		ls := sp.Labels()
		paths := specPaths(ls, all)
		mode := runlease.Shared
		if slices.ContainsFunc(ls, func(l string) bool { return slices.Contains(exclusiveLabels, l) }) {
			mode = runlease.Exclusive
		}
		for _, p := range paths {
			if h.Paths[p] != runlease.Exclusive {
				h.Paths[p] = mode
			}
		}
		if slices.Contains(ls, labels.StopsNode) || slices.Contains(ls, labels.FaultsDevice) {
			h.Disrupts = true
		}
		if slices.Contains(ls, labels.HoldsCanary) {
			h.Canary = slices.Clone(r.Caps.Pools.Canary.Nodes)
		}
	}
	return h
}

// specPaths are the paths a spec's labels name, or all of them when it names none.
func specPaths(ls, all []string) []string {
	var out []string
	for _, l := range ls {
		if p, ok := strings.CutPrefix(l, labels.ForPath("")); ok && slices.Contains(all, p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return all
	}
	return out
}

// HoldLease takes the run's lease, with the holds PlanHolds decided, after waiting for the earlier live
// runs whose holds conflict (at most Config.OtherRunsWait; progress lines go to say). A wait that ran out
// is a run.Refusal naming the holders. What the run waited for joins the record's notes.
func (r *Run) HoldLease(ctx context.Context, holds runlease.Holds, say func(string)) error {
	host, _ := os.Hostname()
	l, err := runlease.Acquire(ctx, r.Clients.Kube, runlease.Options{Namespace: r.Config.LeaseNamespace(), RunID: r.RunID, Role: runlease.RoleSuite,
		Host: host, Holds: holds, WaitFor: r.Config.OtherRunsWait(), Progress: say})
	if werr := new(runlease.WaitError); errors.As(err, &werr) {
		return &run.Refusal{Why: werr.Error(), Fix: "run again when they have ended, or raise --wait-for-other-runs"}
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("interrupted while waiting for other gpuconform runs: %w", err)
	}
	if err != nil {
		return fmt.Errorf("taking the run's lease in namespace %s (it tells other runs that this one is alive): %w; "+
			"grant create, get, list, update and delete on leases.coordination.k8s.io there, or name another namespace with --run-lease-namespace", r.Config.LeaseNamespace(), err)
	}
	r.lease = l
	if waited, whom := l.Waited(); waited > 0 {
		note := fmt.Sprintf("waited %s for other gpuconform runs on this cluster before starting: %s", waited.Round(time.Second), strings.Join(whom, "; "))
		r.Notes = append(r.Notes, note)
		say(note)
	}
	return nil
}

// ReleaseLease lets the run's lease go: the run is over, and what it leaves now is a leftover.
func (r *Run) ReleaseLease(ctx context.Context) error {
	return r.lease.Release(ctx)
}
