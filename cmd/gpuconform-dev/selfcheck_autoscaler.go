package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/infra/localcluster"
)

// nodeAutoscalerGone scales the local node autoscaler (Karpenter) to zero and waits until its pod is gone;
// the undo scales it back to one and waits until it is available again.
func nodeAutoscalerGone(ctx context.Context, kube kubernetes.Interface) (func(context.Context) error, error) {
	deps := kube.AppsV1().Deployments(localcluster.AutoscalerNamespace)
	scale := func(ctx context.Context, replicas int32) error {
		s, err := deps.GetScale(ctx, localcluster.KarpenterDeployment, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading the node autoscaler's scale: %w", err)
		}
		s.Spec.Replicas = replicas
		if _, err := deps.UpdateScale(ctx, localcluster.KarpenterDeployment, s, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("scaling the node autoscaler to %d: %w", replicas, err)
		}
		last := ""
		err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			d, err := deps.Get(ctx, localcluster.KarpenterDeployment, metav1.GetOptions{})
			if err == nil {
				last = fmt.Sprintf("%d replicas, %d available", d.Status.Replicas, d.Status.AvailableReplicas)
				return d.Status.Replicas == replicas && d.Status.AvailableReplicas == replicas, nil
			}
			last = err.Error() // read again at the next poll
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("the node autoscaler %s/%s did not reach %d replicas: %s", localcluster.AutoscalerNamespace, localcluster.KarpenterDeployment, replicas, last)
		}
		return nil
	}
	if err := scale(ctx, 0); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return scale(ctx, 1) }, nil
}
