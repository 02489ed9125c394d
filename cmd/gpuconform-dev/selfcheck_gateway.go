package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/infra/localcluster"
)

// gatewayClassesGVR are the Gateway API's GatewayClasses.
var gatewayClassesGVR = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"}

// gatewayGone scales the local Gateway API implementation (Traefik) to zero: its GatewayClass stays
// accepted, as a class whose controller stopped does, and nothing programs a new Gateway.
func gatewayGone(ctx context.Context, kube kubernetes.Interface) (func(context.Context) error, error) {
	return deploymentGone(ctx, kube, localcluster.GatewayNamespace, localcluster.GatewayDeployment)
}

// gatewayClassUnaccepted scales Traefik to zero and creates its GatewayClass anew, so that the class has
// the status a class no controller has read has: CRDs and a class without an implementation. The undo
// scales Traefik back and waits until it has accepted the class again.
func gatewayClassUnaccepted(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) (func(context.Context) error, error) {
	classes := dyn.Resource(gatewayClassesGVR)
	class, err := classes.Get(ctx, localcluster.GatewayClassName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading GatewayClass %s: %w", localcluster.GatewayClassName, err)
	}
	up, err := gatewayGone(ctx, kube)
	if err != nil {
		return nil, err
	}
	undo := func(ctx context.Context) error {
		if err := up(ctx); err != nil {
			return err
		}
		return wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := classes.Get(ctx, localcluster.GatewayClassName, metav1.GetOptions{})
			return err == nil && acceptedClass(got), nil
		})
	}
	fresh := &unstructured.Unstructured{Object: map[string]any{"spec": class.Object["spec"]}}
	fresh.SetAPIVersion(class.GetAPIVersion())
	fresh.SetKind(class.GetKind())
	fresh.SetName(class.GetName())
	fresh.SetLabels(class.GetLabels())
	if err := classes.Delete(ctx, class.GetName(), metav1.DeleteOptions{}); err != nil {
		return nil, errors.Join(fmt.Errorf("deleting GatewayClass %s: %w", class.GetName(), err), undo(ctx))
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := classes.Create(ctx, fresh, metav1.CreateOptions{})
		return err == nil, nil // AlreadyExists until the old one is gone
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, errors.Join(fmt.Errorf("creating GatewayClass %s anew: %w", class.GetName(), err), undo(ctx))
	}
	return undo, nil
}

// acceptedClass reports whether a GatewayClass's controller accepted it.
func acceptedClass(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Accepted" && m["status"] == "True" {
			return true
		}
	}
	return false
}
