package faults

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// OutOfServiceTaint is Kubernetes' taint for a node that is shut down and will not come back soon
// (node.kubernetes.io/out-of-service, GA in 1.28): the pod garbage collector force-deletes the pods stuck
// Terminating on it and their volumes are detached, so a StatefulSet's or a claim's replacement can start
// elsewhere. The value is free-form; the docs use "nodeshutdown".
var OutOfServiceTaint = corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}

// PutOutOfService taints a stopped node out-of-service, recorded under the run like any fault; the
// returned Undo removes the taint (do it once the node is back and Ready, as the docs say).
func (i *Injector) PutOutOfService(ctx context.Context, node string) (Undo, error) {
	if err := i.inPool(node); err != nil {
		return nil, err
	}
	if err := Mark(ctx, i.Kube, node, i.RunID, string(OutOfService), true); err != nil {
		return nil, err
	}
	if err := setTaint(ctx, i.Kube, node, OutOfServiceTaint, true); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if err := RemoveOutOfService(ctx, i.Kube, node); err != nil {
			return err
		}
		return Mark(ctx, i.Kube, node, i.RunID, string(OutOfService), false)
	}, nil
}

// RemoveOutOfService removes the out-of-service taint from node.
func RemoveOutOfService(ctx context.Context, kube kubernetes.Interface, node string) error {
	return setTaint(ctx, kube, node, OutOfServiceTaint, false)
}

func setTaint(ctx context.Context, kube kubernetes.Interface, node string, taint corev1.Taint, on bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		has := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taint.Key && t.Effect == taint.Effect })
		if has == on {
			return nil
		}
		if on {
			n.Spec.Taints = append(n.Spec.Taints, taint)
		} else {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taint.Key && t.Effect == taint.Effect })
		}
		_, err = kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}
