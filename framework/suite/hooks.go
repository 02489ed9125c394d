package suite

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/runlease"
)

// Preflight checks, before any spec, that the suite may do what the registered scenarios need (uses:
// the union of their needs) and in team-namespace mode that the namespace exists. The suite then takes
// the run's lease (HoldLease) and clears what dead runs left (ClearLeftovers).
func (r *Run) Preflight(ctx context.Context, uses Needs) error {
	facts := r.Facts()
	perms := cluster.PreflightNeeds(cluster.Needs{
		OwnQueues: r.KueueUsable && r.Config.Queues.Mode == config.QueuesOwn, Kueue: r.KueueUsable, DRA: r.Caps.DRA != nil,
		Namespace: r.Config.Namespace, HelperNamespace: r.Config.HelperNamespace,
		Checkpoints: uses.CheckpointStorage && facts.CheckpointStorage, SharedDir: uses.CheckpointStorage && r.Checkpoints.HostPath != "",
		Disruptive: uses.Disruptive && r.Config.Disruptive, LeaseNamespace: r.Config.LeaseNamespace()})
	if err := cluster.Preflight(ctx, r.Clients.Kube, perms); err != nil {
		return err
	}
	if r.Config.Namespace != "" {
		// The suite may not be able to read the namespace (a Role cannot grant reads of Namespace
		// objects), so only "not found" stops the run.
		if _, err := r.Clients.Kube.CoreV1().Namespaces().Get(ctx, r.Config.Namespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return fmt.Errorf("--namespace %s: the namespace does not exist; team-namespace mode runs in an existing namespace (create it, or ask the cluster's administrators to)", r.Config.Namespace)
		}
	}
	return nil
}

// auditor is the leak audit of the run's clients.
func (r *Run) auditor() audit.Auditor { return audit.For(r.Clients, r.Caps.Kueue.Present) }

// ClearLeftovers refuses a cluster holding what dead runs left, or with --cleanup-leftovers deletes it,
// undoing the faults an interrupted run left (a stopped node, an unhealthy device, an upgraded canary)
// with this run's providers first; the record's notes list what it deleted. Objects of runs whose lease
// is current are a live run's, never leftovers: they stay, and the notes name the run.
func (r *Run) ClearLeftovers(ctx context.Context) error {
	_, err := r.clearLeftovers(ctx, r.auditor(), r.leaseLister(), r.restoreNode, r.Config.CleanupLeftovers)
	return err
}

// CleanupLeftovers deletes what dead runs left and restores what they changed, whatever the configuration
// says (`gpuconform cleanup`); it returns what it found, live runs' objects included.
func (r *Run) CleanupLeftovers(ctx context.Context) (audit.Leftovers, error) {
	return r.clearLeftovers(ctx, r.auditor(), r.leaseLister(), r.restoreNode, true)
}

func (r *Run) restoreNode(ctx context.Context, node string) error {
	return r.Faults().Restore(ctx, node)
}

// leaseLister reads the runs' leases where this run keeps its own.
func (r *Run) leaseLister() leaseLister {
	return leaseLister{
		list: func(ctx context.Context) ([]runlease.Info, error) {
			return runlease.List(ctx, r.Clients.Kube, r.Config.LeaseNamespace())
		},
		remove: func(ctx context.Context, l runlease.Info) error {
			err := r.Clients.Kube.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		},
	}
}

// leaseLister lists the runs' leases and deletes a dead run's.
type leaseLister struct {
	list   func(ctx context.Context) ([]runlease.Info, error)
	remove func(ctx context.Context, l runlease.Info) error
}

// clearLeftovers is ClearLeftovers through auditor a and the leases of leases, undoing a node's fault
// marks with restore; cleanup says whether to delete (else a dead run's leftovers refuse the run).
func (r *Run) clearLeftovers(ctx context.Context, a audit.Auditor, leases leaseLister, restore func(ctx context.Context, node string) error, cleanup bool) (audit.Leftovers, error) {
	left := a.RunIn(ctx, r.RunID, r.Config.Namespace, r.Config.HelperNamespace)
	infos, err := leases.list(ctx)
	if err != nil && len(left.Others) > 0 {
		return audit.Leftovers{Dead: left.Others}, &run.Refusal{
			Why: fmt.Sprintf("the cluster holds objects of other gpuconform runs, and whether those runs are still going cannot be read (listing their leases in namespace %s: %v):\n%s",
				r.Config.LeaseNamespace(), err, audit.Summary(left.Others)),
			Fix: "grant list on leases.coordination.k8s.io there (the shipped roles do), or name the namespace the runs use with --run-lease-namespace"}
	}
	found := audit.SortLeftovers(left.Others, infos, time.Now())
	if note := found.LiveNote(); note != "" {
		r.Notes = append(r.Notes, note)
	}
	if len(found.Dead) == 0 && len(found.DeadLeases) == 0 {
		return found, nil
	}
	if len(found.Dead) > 0 && !cleanup {
		return found, &run.Refusal{Why: "the cluster holds what earlier gpuconform runs left (their runs have ended: no current lease); refusing to start:\n" + audit.Summary(found.Dead),
			Fix: "re-run with --cleanup-leftovers, or run `gpuconform cleanup` with the same flags, to restore and delete them first"}
	}
	for _, f := range found.Dead {
		if f.Kind == "NodeFault" {
			if err := restore(ctx, f.Name); err != nil {
				return found, fmt.Errorf("undoing the faults run %s left on node %s: %w", f.Run, f.Name, err)
			}
		}
	}
	if err := a.Delete(ctx, found.Dead); err != nil {
		return found, err
	}
	for _, l := range found.DeadLeases {
		if err := leases.remove(ctx, l); err != nil {
			return found, fmt.Errorf("deleting the expired lease %s/%s of run %s: %w", l.Namespace, l.Name, l.RunID, err)
		}
	}
	if len(found.Dead) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("deleted what earlier runs left (runs with no current lease):\n%s", audit.Summary(found.Dead)))
	}
	return found, nil
}

// LeakAudit lists what of this run is still on the cluster, giving cleanup its Cleanup budget to finish
// unless resources are kept; the error names what is left.
func (r *Run) LeakAudit(ctx context.Context) (audit.Result, error) {
	var res audit.Result
	list := func(ctx context.Context) (bool, error) {
		res = r.auditor().RunIn(ctx, r.RunID, r.Config.Namespace, r.Config.HelperNamespace)
		return len(res.Ours) == 0, nil
	}
	if r.Config.KeepResources {
		_, _ = list(ctx)
		return res, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, r.Env.Timeouts.Cleanup, true, list); err != nil {
		return res, fmt.Errorf("leak audit: objects labelled with this run are still on the cluster after %s:\n%s", r.Env.Timeouts.Cleanup, audit.Summary(res.Ours))
	}
	return res, nil
}
