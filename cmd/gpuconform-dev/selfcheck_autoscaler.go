package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/infra/localcluster"
)

// scaleDeployment sets a Deployment's replicas through its scale subresource and polls ready (up to
// limit) until the change shows where it must; last says what ready saw last.
func scaleDeployment(ctx context.Context, kube kubernetes.Interface, ns, name string, replicas int32, limit time.Duration,
	ready func(ctx context.Context) (bool, string),
) error {
	deps := kube.AppsV1().Deployments(ns)
	s, err := deps.GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Deployment %s/%s's scale: %w", ns, name, err)
	}
	s.Spec.Replicas = replicas
	if _, err := deps.UpdateScale(ctx, name, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("scaling Deployment %s/%s to %d: %w", ns, name, replicas, err)
	}
	last := ""
	err = wait.PollUntilContextTimeout(ctx, time.Second, limit, true, func(ctx context.Context) (bool, error) {
		done, why := ready(ctx)
		last = why
		return done, nil
	})
	if err != nil {
		return fmt.Errorf("after scaling Deployment %s/%s to %d: %s", ns, name, replicas, last)
	}
	return nil
}

// nodeAutoscalerGone scales the local node autoscaler (Karpenter) to zero.
func nodeAutoscalerGone(ctx context.Context, kube kubernetes.Interface) (func(context.Context) error, error) {
	return deploymentGone(ctx, kube, localcluster.AutoscalerNamespace, localcluster.KarpenterDeployment)
}

// deploymentGone scales a component's Deployment to zero and waits until its pod is gone, terminating
// ones included (a terminating controller still acts); the undo scales it back to one and waits until it
// is available again.
func deploymentGone(ctx context.Context, kube kubernetes.Interface, ns, name string) (func(context.Context) error, error) {
	scale := func(ctx context.Context, replicas int32) error {
		return scaleDeployment(ctx, kube, ns, name, replicas, 3*time.Minute,
			func(ctx context.Context) (bool, string) {
				d, err := kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
				if err != nil {
					return false, err.Error()
				}
				pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
				if err != nil {
					return false, err.Error()
				}
				return len(pods.Items) == int(replicas) && d.Status.AvailableReplicas == replicas,
					fmt.Sprintf("%d pod(s), %d available, want %d", len(pods.Items), d.Status.AvailableReplicas, replicas)
			})
	}
	if err := scale(ctx, 0); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return scale(ctx, 1) }, nil
}

// nodePoolsGVR are Karpenter's NodePools.
var nodePoolsGVR = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}

// nodePoolNeverConsolidates sets the local NodePool's consolidateAfter to Never; the undo restores the value
// it had and waits until the node the row left is consolidated away, so that the next row finds the pool
// empty.
func nodePoolNeverConsolidates(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) (func(context.Context) error, error) {
	pools := dyn.Resource(nodePoolsGVR)
	np, err := pools.Get(ctx, localcluster.AutoscalingNodePool, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading NodePool %s: %w", localcluster.AutoscalingNodePool, err)
	}
	before, _, _ := unstructured.NestedString(np.Object, "spec", "disruption", "consolidateAfter")
	set := func(ctx context.Context, v string) error {
		patch := fmt.Sprintf(`{"spec":{"disruption":{"consolidateAfter":%q}}}`, v)
		if _, err := pools.Patch(ctx, localcluster.AutoscalingNodePool, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("setting NodePool %s's consolidateAfter to %s: %w", localcluster.AutoscalingNodePool, v, err)
		}
		return nil
	}
	if err := set(ctx, "Never"); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if err := set(ctx, before); err != nil {
			return err
		}
		left := ""
		err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: localcluster.AutoscalingPoolSelector})
			if err == nil {
				left = fmt.Sprintf("%d node(s)", len(nodes.Items))
				return len(nodes.Items) == 0, nil
			}
			left = err.Error() // listed again at the next poll
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("the autoscaled pool %s still has nodes after consolidateAfter was restored to %s: %s", localcluster.AutoscalingPoolSelector, before, left)
		}
		return nil
	}, nil
}
