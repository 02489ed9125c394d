package localcluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/cluster"
)

// Kueue's controller as the local cluster installs it (addons.go): hardening row kueue-down scales it to
// zero, and the suite must say so in its setup failure instead of waiting out its StackReady budget.
const (
	KueueNamespace = "kueue-system"
	KueueManager   = "kueue-controller-manager"
	// kueueDownWait bounds each wait of the variation: for the controller's pods to go (their grace
	// period is Kueue's default, 10 s) and, in the undo, for its webhook to answer again (its image is on
	// the nodes and its certificate in its Secret, so it is Ready within a minute when it is healthy).
	kueueDownWait = 3 * time.Minute
)

// ApplyKueueDown scales Kueue's controller Deployment to zero and waits until its pods are gone, so its
// webhook Service has no endpoint. The undo scales it back to the replicas it had and waits until the
// webhook Service has a ready endpoint again (cluster.CheckKueueWebhookReady).
func ApplyKueueDown(ctx context.Context, kube kubernetes.Interface) (Undo, error) {
	deps := kube.AppsV1().Deployments(KueueNamespace)
	dep, err := deps.Get(ctx, KueueManager, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Deployment %s/%s: %w", KueueNamespace, KueueManager, err)
	}
	replicas := ptr.Deref(dep.Spec.Replicas, 1)
	if replicas == 0 {
		return nil, fmt.Errorf("deployment %s/%s is already scaled to zero: the local cluster's Kueue is not running (make cluster)", KueueNamespace, KueueManager)
	}
	selector, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("deployment %s/%s: %w", KueueNamespace, KueueManager, err)
	}
	scale := func(ctx context.Context, n int32) error {
		patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
		if _, err := deps.Patch(ctx, KueueManager, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("scaling Deployment %s/%s to %d: %w", KueueNamespace, KueueManager, n, err)
		}
		return nil
	}
	undo := func(ctx context.Context) error {
		if err := scale(ctx, replicas); err != nil {
			return err
		}
		var last error
		if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, kueueDownWait, true, func(ctx context.Context) (bool, error) {
			last = cluster.CheckKueueWebhookReady(ctx, kube, KueueNamespace)
			return last == nil, nil
		}); err != nil {
			return fmt.Errorf("deployment %s/%s is scaled back to %d, but Kueue's webhook has no ready endpoint after %s: %w", KueueNamespace, KueueManager, replicas, kueueDownWait, cmp.Or(last, err))
		}
		return nil
	}
	if err := scale(ctx, 0); err != nil {
		return nil, err
	}
	left := 0
	if err := wait.PollUntilContextTimeout(ctx, time.Second, kueueDownWait, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods(KueueNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil {
			return false, nil //nolint:nilerr // a failed list is retried until the bound
		}
		left = len(pods.Items)
		return left == 0, nil
	}); err != nil {
		return nil, errors.Join(fmt.Errorf("%d pod(s) of Deployment %s/%s still there %s after scaling it to zero: %w", left, KueueNamespace, KueueManager, kueueDownWait, err), undo(ctx))
	}
	return undo, nil
}
