package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/framework/cluster"
)

// The cluster faults of the operator and platform checks: each plays a component a real cluster can
// have broken (a webhook configuration that lost its rule, a metrics adapter that is gone, an unhealthy
// autoscaler, Gateway API CRDs no controller serves), through the same objects a real one shows.

// kueueValidatingWebhooks is the local Kueue's ValidatingWebhookConfiguration and its ResourceFlavor
// webhook (Kueue's manifests).
const (
	kueueValidatingWebhooks = "kueue-validating-webhook-configuration"
	kueueFlavorWebhook      = "vresourceflavor.kb.io"
)

// webhookSkipsResourceFlavors gives Kueue's ResourceFlavor validating webhook an object selector no
// object matches; the undo puts the selector it had back.
func webhookSkipsResourceFlavors(ctx context.Context, kube kubernetes.Interface) (func(context.Context) error, error) {
	api := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	cfg, err := api.Get(ctx, kueueValidatingWebhooks, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Kueue's validating webhooks: %w", err)
	}
	i := -1
	for j, w := range cfg.Webhooks {
		if w.Name == kueueFlavorWebhook {
			i = j
		}
	}
	if i < 0 {
		return nil, fmt.Errorf("%s has no webhook %s", kueueValidatingWebhooks, kueueFlavorWebhook)
	}
	before := cfg.Webhooks[i].ObjectSelector
	cfg.Webhooks[i].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"gpuconform.io/selfcheck": "no-object-has-this"}}
	if _, err := api.Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("switching %s off: %w", kueueFlavorWebhook, err)
	}
	return func(ctx context.Context) error {
		cfg, err := api.Get(ctx, kueueValidatingWebhooks, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for j := range cfg.Webhooks {
			if cfg.Webhooks[j].Name == kueueFlavorWebhook {
				cfg.Webhooks[j].ObjectSelector = before
			}
		}
		_, err = api.Update(ctx, cfg, metav1.UpdateOptions{})
		return err
	}, nil
}

// clusterObject is an object a fault creates, with where it lives.
type clusterObject struct {
	gvr schema.GroupVersionResource
	obj *unstructured.Unstructured
}

// createObjects creates objs in order; the undo deletes them in reverse order and waits until they are gone.
func createObjects(ctx context.Context, dyn dynamic.Interface, objs ...clusterObject) (func(context.Context) error, error) {
	var made []clusterObject
	undo := func(ctx context.Context) error {
		var errs []error
		for _, o := range slices.Backward(made) {
			api := dyn.Resource(o.gvr).Namespace(o.obj.GetNamespace())
			if err := api.Delete(ctx, o.obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
				_, err := api.Get(ctx, o.obj.GetName(), metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			}))
		}
		return errors.Join(errs...)
	}
	for _, o := range objs {
		api := dyn.Resource(o.gvr).Namespace(o.obj.GetNamespace())
		if _, err := api.Create(ctx, o.obj, metav1.CreateOptions{}); err != nil {
			return nil, errors.Join(fmt.Errorf("creating %s %s: %w", o.gvr.Resource, o.obj.GetName(), err), undo(ctx))
		}
		made = append(made, o)
	}
	return undo, nil
}

func object(apiVersion, kind, namespace, name string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: fields}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetLabels(map[string]string{"gpuconform.io/selfcheck": "fault"})
	return u
}

// unhealthyAutoscalerStatus is cluster-autoscaler's status ConfigMap, in the YAML form it writes, with
// its cluster-wide health Unhealthy.
func unhealthyAutoscalerStatus() clusterObject {
	return clusterObject{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		obj: object("v1", "ConfigMap", "kube-system", "cluster-autoscaler-status", map[string]any{"data": map[string]any{
			"status": "time: 2026-12-06 10:00:00.000000000 +0000 UTC\nautoscalerStatus: Running\nclusterWide:\n  health:\n    status: Unhealthy\n" +
				"    nodeCounts:\n      registered:\n        total: 4\n        ready: 1\n  scaleUp:\n    status: NoActivity\n",
		}})}
}

// stripDeviceTolerationsPolicy names the MutatingAdmissionPolicy and its binding of
// FaultDRATolerationsStripped.
const stripDeviceTolerationsPolicy = "gpuconform-selfcheck-strip-device-tolerations"

// stripDeviceTolerations installs a MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in
// Kubernetes 1.36) that removes the tolerations of a ResourceClaim's first request as the claim is created,
// and waits until the API server applies it (a server-side dry run of a claim with a toleration comes back
// without it).
func stripDeviceTolerations(ctx context.Context, clients *cluster.Clients) (func(context.Context) error, error) {
	probe := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "gpuconform-selfcheck-probe-", Namespace: "default"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
			DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
			Tolerations: []resourcev1.DeviceToleration{{Key: "gpuconform.io/selfcheck", Operator: resourcev1.DeviceTolerationOpExists}},
		}}}}},
	}
	return mutatingPolicy(ctx, clients.Dynamic, stripDeviceTolerationsPolicy, map[string]any{
		"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
			"apiGroups": []any{"resource.k8s.io"}, "apiVersions": []any{"*"}, "operations": []any{"CREATE"}, "resources": []any{"resourceclaims"},
		}}},
		"matchConditions": []any{map[string]any{"name": "first-request-tolerates",
			"expression": "has(object.spec.devices) && has(object.spec.devices.requests) && size(object.spec.devices.requests) > 0 && " +
				"has(object.spec.devices.requests[0].exactly) && has(object.spec.devices.requests[0].exactly.tolerations)"}},
		"mutations": []any{map[string]any{"patchType": "JSONPatch", "jsonPatch": map[string]any{
			"expression": `[JSONPatch{op: "remove", path: "/spec/devices/requests/0/exactly/tolerations"}]`,
		}}},
	}, func(ctx context.Context) (bool, string) {
		got, err := clients.Kube.ResourceV1().ResourceClaims("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		n := len(got.Spec.Devices.Requests[0].Exactly.Tolerations)
		return n == 0, fmt.Sprintf("a dry-run claim keeps %d toleration(s)", n)
	})
}

// mutatingPolicy installs the MutatingAdmissionPolicy name with spec (failing closed, never reinvoked),
// bound cluster-wide, and polls applied until the API server applies it; the undo deletes both.
func mutatingPolicy(ctx context.Context, dyn dynamic.Interface, name string, spec map[string]any, applied func(context.Context) (bool, string)) (func(context.Context) error, error) {
	gvr := func(r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: r}
	}
	spec["failurePolicy"], spec["reinvocationPolicy"] = "Fail", "Never"
	policy := object("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy", "", name, map[string]any{"spec": spec})
	binding := object("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding", "", name, map[string]any{"spec": map[string]any{"policyName": name}})
	undo, err := createObjects(ctx, dyn, clusterObject{gvr: gvr("mutatingadmissionpolicies"), obj: policy}, clusterObject{gvr: gvr("mutatingadmissionpolicybindings"), obj: binding})
	if err != nil {
		return nil, err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		var done bool
		done, last = applied(ctx)
		return done, nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("MutatingAdmissionPolicy %s is not applied: %s: %w", name, last, err), undo(ctx))
	}
	return undo, nil
}
