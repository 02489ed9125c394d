package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"gpuconform.io/gpuconform/infra/localcluster"
	"gpuconform.io/gpuconform/internal/objcond"
)

// gatewayClassesGVR are the Gateway API's GatewayClasses.
var gatewayClassesGVR = schema.GroupVersionResource{Group: gatewayv1.GroupName, Version: gatewayv1.GroupVersion.Version, Resource: "gatewayclasses"}

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
	return meta.IsStatusConditionTrue(objcond.Of(u.Object, "status", "conditions"), string(gatewayv1.GatewayClassConditionStatusAccepted))
}

// stripRouteWeightsPolicy names the MutatingAdmissionPolicy and its binding of FaultGatewayWeightsStripped.
const stripRouteWeightsPolicy = "gpuconform-selfcheck-strip-route-weights"

// stripRouteWeights installs a MutatingAdmissionPolicy that rebuilds every rule of an HTTPRoute as it is
// created with its matches and its backends' names and ports only: each backend's weight falls to the
// Gateway API's default, 1, and a weighted split becomes an even one. It waits until the API server
// applies it (a server-side dry run of a weighted route comes back without the weight).
func stripRouteWeights(ctx context.Context, dyn dynamic.Interface) (func(context.Context) error, error) {
	routes := dyn.Resource(schema.GroupVersionResource{Group: gatewayv1.GroupName, Version: gatewayv1.GroupVersion.Version, Resource: "httproutes"}).Namespace("default")
	probe := object("gateway.networking.k8s.io/v1", "HTTPRoute", "default", "gpuconform-selfcheck-probe", map[string]any{"spec": map[string]any{
		"parentRefs": []any{map[string]any{"name": "none"}},
		"rules": []any{map[string]any{"matches": []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/"}}},
			"backendRefs": []any{map[string]any{"name": "a", "port": int64(80), "weight": int64(3)}}}},
	}})
	return mutatingPolicy(ctx, dyn, stripRouteWeightsPolicy, map[string]any{
		"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
			"apiGroups": []any{gatewayv1.GroupName}, "apiVersions": []any{"*"}, "operations": []any{"CREATE"}, "resources": []any{"httproutes"},
		}}},
		"matchConditions": []any{map[string]any{"name": "weighted-rules",
			"expression": "has(object.spec.rules) && object.spec.rules.all(r, has(r.matches) && has(r.backendRefs))"}},
		"mutations": []any{map[string]any{"patchType": "JSONPatch", "jsonPatch": map[string]any{
			"expression": `[JSONPatch{op: "replace", path: "/spec/rules", value: object.spec.rules.map(r, Object.spec.rules{matches: r.matches, ` +
				`backendRefs: r.backendRefs.map(b, Object.spec.rules.backendRefs{name: b.name, port: b.port})})}]`,
		}}},
	}, func(ctx context.Context) (bool, string) {
		got, err := routes.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		rules, _, _ := unstructured.NestedSlice(got.Object, "spec", "rules")
		if len(rules) == 0 {
			return false, "a dry-run route has no rules"
		}
		refs, _, _ := unstructured.NestedSlice(rules[0].(map[string]any), "backendRefs")
		weight, _, _ := unstructured.NestedInt64(refs[0].(map[string]any), "weight")
		return weight == 1, fmt.Sprintf("a dry-run route's backend keeps weight %d", weight)
	})
}
