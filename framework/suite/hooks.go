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
)

// Preflight checks, before any spec, that the suite may do what the registered scenarios need (uses:
// the union of their needs), in team-namespace mode that the namespace exists, and that no earlier run
// left objects behind (ClearLeftovers).
func (r *Run) Preflight(ctx context.Context, uses Needs) error {
	facts := r.Facts()
	perms := cluster.PreflightNeeds(cluster.Needs{
		OwnQueues: r.KueueUsable && r.Config.Queues.Mode == config.QueuesOwn, Kueue: r.KueueUsable, DRA: r.Caps.DRA != nil,
		Namespace: r.Config.Namespace, HelperNamespace: r.Config.HelperNamespace,
		Checkpoints: uses.CheckpointStorage && facts.CheckpointStorage, SharedDir: uses.CheckpointStorage && r.Checkpoints.HostPath != "",
		Disruptive: uses.Disruptive && r.Config.Disruptive})
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
	return r.ClearLeftovers(ctx)
}

// auditor is the leak audit of the run's clients.
func (r *Run) auditor() audit.Auditor { return audit.For(r.Clients, r.Caps.Kueue.Present) }

// ClearLeftovers refuses a cluster holding earlier runs' objects, or with --cleanup-leftovers deletes
// them, undoing the faults an interrupted run left (a stopped node, an unhealthy device) with this run's
// providers first; the record's notes list what it deleted.
func (r *Run) ClearLeftovers(ctx context.Context) error {
	return r.clearLeftovers(ctx, r.auditor(), func(ctx context.Context, node string) error { return r.Faults().Restore(ctx, node) })
}

// clearLeftovers is ClearLeftovers through auditor a, undoing a node's fault marks with restore.
func (r *Run) clearLeftovers(ctx context.Context, a audit.Auditor, restore func(ctx context.Context, node string) error) error {
	left := a.RunIn(ctx, r.RunID, r.Config.Namespace, r.Config.HelperNamespace)
	if len(left.Others) == 0 {
		return nil
	}
	if !r.Config.CleanupLeftovers {
		return fmt.Errorf("the cluster holds objects of earlier gpuconform runs; refusing to start (re-run with --cleanup-leftovers to delete them first):\n%s", audit.Summary(left.Others))
	}
	for _, f := range left.Others {
		if f.Kind == "NodeFault" {
			if err := restore(ctx, f.Name); err != nil {
				return fmt.Errorf("undoing the faults run %s left on node %s: %w", f.Run, f.Name, err)
			}
		}
	}
	if err := a.Delete(ctx, left.Others); err != nil {
		return err
	}
	r.Notes = append(r.Notes, fmt.Sprintf("--cleanup-leftovers: deleted what earlier runs left:\n%s", audit.Summary(left.Others)))
	return nil
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
