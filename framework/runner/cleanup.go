package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/runlease"
)

// owner tells framework/audit what the runner creates and how it labels it.
func owner() *audit.Owner {
	return &audit.Owner{
		Label: Label,
		Cluster: []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("Namespace"),
			rbacv1.SchemeGroupVersion.WithKind("ClusterRole"), rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding")},
		Namespaced: []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("Pod"), batchv1.SchemeGroupVersion.WithKind("Job"),
			corev1.SchemeGroupVersion.WithKind("ServiceAccount"), rbacv1.SchemeGroupVersion.WithKind("Role"), rbacv1.SchemeGroupVersion.WithKind("RoleBinding")},
	}
}

// clearLeftovers stops a run while an earlier runner's objects are still on the cluster or, with the
// suite's --cleanup-leftovers (Options.CleanupLeftovers), deletes them first: an in-cluster run that was
// killed (SIGKILL, a CI job's time limit) never reached its Cleanup.
func (r *Runner) clearLeftovers(ctx context.Context) error {
	res := r.audit.RunIn(ctx, r.id, r.opts.Namespace, "")
	if len(res.Others) == 0 {
		return nil
	}
	// Another runner's objects are leftovers only when its run has no current lease: a run still going
	// is never touched.
	leases, err := runlease.List(ctx, r.kube, r.opts.LeaseNamespace)
	if err != nil {
		return fmt.Errorf("other in-cluster runs' objects are on the cluster, and whether those runs are still going cannot be read (leases in %s: %w):\n%s",
			r.opts.LeaseNamespace, err, audit.Summary(res.Others))
	}
	found := audit.SortLeftovers(res.Others, leases, time.Now())
	if note := found.LiveNote(); note != "" {
		fmt.Fprintf(r.out, "gpuconform-runner: %s\n", note)
	}
	if len(found.Dead) == 0 {
		return nil
	}
	if !r.opts.CleanupLeftovers {
		return fmt.Errorf("an earlier in-cluster run left (label %s; its run has ended):\n%s\ndelete them first (kubectl delete ns,clusterrolebinding,clusterrole,job,sa,role,rolebinding -l %s), or run with --cleanup-leftovers",
			Label, audit.Summary(found.Dead), Label)
	}
	fmt.Fprintf(r.out, "gpuconform-runner: --cleanup-leftovers: deleting what earlier in-cluster runs left:\n%s\n", audit.Summary(found.Dead))
	if err := r.audit.Delete(ctx, found.Dead); err != nil {
		return fmt.Errorf("deleting what earlier in-cluster runs left: %w", err)
	}
	return nil
}

// Cleanup deletes everything carrying the runner's label with its run ID, then waits until nothing is
// left (a namespace takes a while to go); what is still there when ctx ends is the error.
func (r *Runner) Cleanup(ctx context.Context) error {
	var errs []error
	if r.ns != "" {
		// The pod at once: the run is over or was interrupted, and a terminating pod would count as left.
		sel := metav1.ListOptions{LabelSelector: Label + "=" + r.id}
		if err := r.kube.CoreV1().Pods(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, sel); err != nil {
			errs = append(errs, err)
		}
	}
	// Namespaced kinds are listed in the Job's namespace; in a namespace of the runner's own they go with
	// it, and the wait below waits for the namespace too.
	ns := r.ns
	if err := r.audit.Delete(ctx, r.audit.RunIn(ctx, r.id, ns, "").Ours); err != nil {
		errs = append(errs, err)
	}
	var left []audit.Finding
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		left = r.audit.RunIn(ctx, r.id, ns, "").Ours
		return len(left) == 0, nil
	})
	switch {
	case err != nil && len(left) > 0:
		errs = append(errs, fmt.Errorf("left on the cluster:\n%s", audit.Summary(left)))
	case err != nil:
		errs = append(errs, err)
	case len(errs) == 0:
		fmt.Fprintf(r.out, "gpuconform-runner: cleaned up; nothing labelled %s=%s is left\n", Label, r.id)
	}
	// The run is over: what it left, if anything, is a leftover for the next run to name.
	if err := r.lease.Release(ctx); err != nil {
		errs = append(errs, fmt.Errorf("releasing the runner's lease: %w", err))
	}
	return errors.Join(errs...)
}
