package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"gpuconform.io/gpuconform/fixtures"
)

// DeviceTaintKey is the key of the taints the device-taint-rule provider puts on devices.
const DeviceTaintKey = "gpuconform.io/unhealthy"

// TaintRule is the DRA device provider that works through the API alone: a DeviceTaintRule
// (resource.k8s.io/v1) selects exactly the device by driver, pool and name and taints it. NoSchedule keeps
// it from new allocations; NoExecute also makes kube-controller-manager evict the pods using it, which is
// what a DRA driver's health reporting does. Healthy again deletes the rule.
type TaintRule struct {
	Kube   kubernetes.Interface
	RunID  string
	Effect string // NoExecute (default) or NoSchedule
}

// Name implements DeviceProvider.
func (t *TaintRule) Name() string { return "device-taint-rule (" + t.effect() + ")" }

func (t *TaintRule) effect() string {
	if t.Effect == "" {
		return "NoExecute"
	}
	return t.Effect
}

// Evicts implements DeviceProvider.
func (t *TaintRule) Evicts() bool { return t.effect() == "NoExecute" }

var nonName = regexp.MustCompile(`[^a-z0-9-]+`)

// RuleName is the DeviceTaintRule's name for dev in run.
func RuleName(runID string, dev Device) string {
	n := nonName.ReplaceAllString(strings.ToLower(fmt.Sprintf("gpuconform-%s-%s-%s", runID, dev.Pool, dev.Name)), "-")
	if len(n) > 253 {
		n = n[:253]
	}
	return strings.Trim(n, "-")
}

// SetHealth implements DeviceProvider.
func (t *TaintRule) SetHealth(ctx context.Context, dev Device, healthy bool) error {
	rc, ok := restClient(t.Kube)
	if !ok {
		return errors.New("no REST client for resource.k8s.io/v1")
	}
	if dev.Name == "" || dev.Driver == "" {
		return fmt.Errorf("device %s has no DRA identity (driver, pool, name) to select in a DeviceTaintRule", dev.ID)
	}
	name := RuleName(t.RunID, dev)
	if healthy {
		err := rc.Delete().Resource("devicetaintrules").Name(name).Do(ctx).Error()
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	rule := map[string]any{
		"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
		"metadata": map[string]any{"name": name, "labels": map[string]string{fixtures.RunLabel: t.RunID, fixtures.ManagedByLabel: fixtures.ManagedByValue}},
		"spec": map[string]any{
			"deviceSelector": map[string]any{"driver": dev.Driver, "pool": dev.Pool, "device": dev.Name},
			"taint":          map[string]any{"key": DeviceTaintKey, "value": "gpuconform", "effect": t.effect()},
		},
	}
	body, _ := json.Marshal(rule)
	return rc.Post().Resource("devicetaintrules").Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
}

// Status describes what kube-controller-manager's device-taint-eviction-controller wrote on dev's rule:
// its conditions (EvictionInProgress, with the count of pods pending and evicted), or that it wrote none,
// which is what a control plane without that controller shows.
func (t *TaintRule) Status(ctx context.Context, dev Device) (string, error) {
	rule, err := t.read(ctx, dev)
	if err != nil {
		return "", err
	}
	if len(rule.Status.Conditions) == 0 {
		return fmt.Sprintf("DeviceTaintRule %s has no status condition: kube-controller-manager's device-taint-eviction-controller has not processed it", rule.Metadata.Name), nil
	}
	var conds []string
	for _, c := range rule.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("DeviceTaintRule %s: %s", rule.Metadata.Name, strings.Join(conds, "; ")), nil
}

// EvictionCondition is the EvictionInProgress condition kube-controller-manager's
// device-taint-eviction-controller writes on a DeviceTaintRule (resourceapi.DeviceTaintConditionEvictionInProgress):
// for NoExecute, True with reason PodsPendingEviction while pods using the device wait to be evicted, else
// False with reason Completed (it evicted some) or NotStarted (none needed it).
type EvictionCondition struct {
	Status, Reason, Message string
	// Current says it was written for the rule as it is now (observedGeneration = generation).
	Current bool
}

// EvictionInProgress is the condition on dev's rule; false when the controller wrote none.
func (t *TaintRule) EvictionInProgress(ctx context.Context, dev Device) (EvictionCondition, bool, error) {
	rule, err := t.read(ctx, dev)
	if err != nil {
		return EvictionCondition{}, false, err
	}
	for _, c := range rule.Status.Conditions {
		if c.Type == resourcev1alpha3.DeviceTaintConditionEvictionInProgress {
			return EvictionCondition{Status: c.Status, Reason: c.Reason, Message: c.Message, Current: c.ObservedGeneration == rule.Metadata.Generation}, true, nil
		}
	}
	return EvictionCondition{}, false, nil
}

// taintRuleObject is the part of a DeviceTaintRule the provider reads.
type taintRuleObject struct {
	Metadata struct {
		Name       string `json:"name"`
		Generation int64  `json:"generation"`
	} `json:"metadata"`
	Status struct {
		Conditions []struct {
			Type, Status, Reason, Message string
			ObservedGeneration            int64 `json:"observedGeneration"`
		} `json:"conditions"`
	} `json:"status"`
}

// read reads dev's rule.
func (t *TaintRule) read(ctx context.Context, dev Device) (taintRuleObject, error) {
	var rule taintRuleObject
	rc, ok := restClient(t.Kube)
	if !ok {
		return rule, errors.New("no REST client for resource.k8s.io/v1")
	}
	raw, err := rc.Get().Resource("devicetaintrules").Name(RuleName(t.RunID, dev)).Do(ctx).Raw()
	if err != nil {
		return rule, err
	}
	err = json.Unmarshal(raw, &rule)
	return rule, err
}

// restClient returns the REST client of resource.k8s.io/v1, which also serves DeviceTaintRules (the
// typed client of this client-go predates their v1).
func restClient(kube kubernetes.Interface) (*rest.RESTClient, bool) {
	rc, ok := kube.ResourceV1().RESTClient().(*rest.RESTClient)
	return rc, ok && rc != nil
}

// ServesDeviceTaintRules reports whether the API server serves resource.k8s.io/v1 DeviceTaintRules.
func ServesDeviceTaintRules(kube kubernetes.Interface) bool {
	list, err := kube.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1")
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == "devicetaintrules" {
			return true
		}
	}
	return false
}
