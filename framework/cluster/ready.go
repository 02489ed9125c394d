package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"gpuconform.io/gpuconform/framework/config"
)

// KueueWebhookService is the name Kueue's own manifests give the Service that fronts its admission
// webhooks. It is only the fallback: the Service is found from the cluster's webhook configurations, so an
// installation that names it otherwise (a Helm release prefix, another namespace) works.
const KueueWebhookService = "kueue-webhook-service"

// KueueWebhookRef is the Service a webhook configuration sends Kueue's admission requests to.
type KueueWebhookRef struct {
	Namespace, Name string
	// Configuration and Webhook name where it was found ("" when it is the fallback).
	Configuration, Webhook string
}

// FindKueueWebhook returns the Service behind the mutating webhook that handles Kueue's own resources
// (a rule on the kueue.x-k8s.io API group), as the cluster's MutatingWebhookConfigurations say. It returns
// an error when none handles them: Kueue's CRDs without its webhook are a broken installation.
func FindKueueWebhook(ctx context.Context, kube kubernetes.Interface) (KueueWebhookRef, error) {
	list, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return KueueWebhookRef{}, fmt.Errorf("listing MutatingWebhookConfigurations to find Kueue's webhook: %w", err)
	}
	for _, c := range list.Items {
		for _, w := range c.Webhooks {
			if w.ClientConfig.Service == nil {
				continue
			}
			for _, r := range w.Rules {
				if slices.Contains(r.APIGroups, kueue.GroupVersion.Group) {
					return KueueWebhookRef{Namespace: w.ClientConfig.Service.Namespace, Name: w.ClientConfig.Service.Name, Configuration: c.Name, Webhook: w.Name}, nil
				}
			}
		}
	}
	return KueueWebhookRef{}, fmt.Errorf("no MutatingWebhookConfiguration handles %s resources: Kueue's CRDs are installed but its webhook is not (is kueue-controller-manager installed?)", kueue.GroupVersion.Group)
}

// CheckKueueWebhookReady returns nil when the Service behind Kueue's webhook (FindKueueWebhook; when the
// configurations cannot be read, KueueWebhookService in namespace) has at least one ready endpoint,
// otherwise an error saying what is missing: when the Service has no ready endpoint, it wraps a
// *ComponentDown that says what is behind it. It is one check; callers poll it.
func CheckKueueWebhookReady(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	ref, err := FindKueueWebhook(ctx, kube)
	if err != nil {
		if !apierrors.IsForbidden(errors.Unwrap(err)) {
			return err
		}
		ref = KueueWebhookRef{Namespace: namespace, Name: KueueWebhookService}
	}
	eps, err := kube.DiscoveryV1().EndpointSlices(ref.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + ref.Name,
	})
	if err != nil {
		return fmt.Errorf("listing EndpointSlices of %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	for _, s := range eps.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				return nil
			}
		}
	}
	// What is behind the Service says whether waiting can help: the stack wait stops on a terminal answer.
	down := describeKueueController(ctx, kube, ref, namespace, time.Now())
	return fmt.Errorf("the Kueue webhook Service %s/%s (of webhook %s) has no ready endpoint (%d EndpointSlices): %w",
		ref.Namespace, ref.Name, cmp.Or(ref.Webhook, "unknown"), len(eps.Items), down)
}

// StackNotReady lists what keeps the GPU stack from being ready, one problem per line; errors.As reaches
// each problem (a *ComponentDown among them).
type StackNotReady struct{ Problems []error }

// Error lists the problems.
func (e *StackNotReady) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Error()
	}
	return "GPU stack not ready:\n  - " + strings.Join(lines, "\n  - ")
}

// Unwrap returns the problems, so that errors.As finds a typed one.
func (e *StackNotReady) Unwrap() []error { return e.Problems }

// CheckStackReady returns nil when every path the configuration demands is discovered with devices
// (or, for "auto", when at least one path is), no device plugin or DRA driver's kubelet plugin is settling
// (settle, when not nil: the run's Settle, so that a plugin that is re-registering or publishing its
// slices again is waited for instead of judged broken or left out), and
// Kueue's webhook is ready when Kueue is installed; otherwise a *StackNotReady. A path found broken and
// settled (Capabilities.Settled) counts as an answer: waiting will not mend it, and the run reports it as
// a failing spec. Where a path has no devices or is broken, the GPU node agents that serve it are read
// (checkAgents): one down for good, or down and not settling on a path without devices, is a
// *ComponentDown among the problems, and every one that is not ready is a note of the returned
// capabilities, for the record.
func CheckStackReady(ctx context.Context, kube kubernetes.Interface, cfg config.Config, settle *Settle) (Capabilities, error) {
	snap, err := Collect(ctx, kube, cfg.Kueue.Namespace)
	if err != nil {
		return Capabilities{}, err
	}
	caps := Discover(snap, cfg)
	now := time.Now()
	var problems []error
	settling := map[string]bool{}
	if settle != nil && cfg.WantsPath(config.PathDevicePlugin) {
		if err := settle.Check(ctx, kube, snap.Nodes, cfg.DevicePlugin.ResourceName, now); err != nil {
			problems, settling[config.PathDevicePlugin] = append(problems, err), true
		}
	}
	if settle != nil && caps.DRA != nil {
		if err := settle.CheckDRA(ctx, kube, snap, strings.Split(caps.DRA.Driver, ","), now); err != nil {
			problems, settling[config.PathDRA] = append(problems, err), true
		}
	}
	agents, notes := checkAgents(ctx, kube, snap, caps, cfg, settling, now)
	problems, caps.Notes = append(problems, agents...), append(caps.Notes, notes...)
	if explicit := cfg.ExplicitPaths(); len(explicit) > 0 {
		for _, p := range explicit {
			if !caps.HasPath(p) && !caps.Settled[p] {
				problems = append(problems, fmt.Errorf("allocation path %s was requested but is absent: %s", p, lacking(caps, p)))
			}
		}
	} else if caps.DevicePlugin == nil && caps.DRA == nil && caps.SettledBroken() == "" {
		problems = append(problems, fmt.Errorf("no allocation path has devices yet: device-plugin: %s; dra: %s",
			lacking(caps, config.PathDevicePlugin), lacking(caps, config.PathDRA)))
	}
	if caps.Kueue.Present {
		if err := CheckKueueWebhookReady(ctx, kube, cfg.Kueue.Namespace); err != nil {
			problems = append(problems, err)
		}
	}
	if len(problems) > 0 {
		return caps, &StackNotReady{Problems: problems}
	}
	return caps, nil
}

// lacking says why path has no devices: why it is absent, or what is broken on it.
func lacking(caps Capabilities, path string) string {
	return cmp.Or(caps.NotExercised[path], caps.Broken[path], "no devices")
}
