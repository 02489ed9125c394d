package cluster

import (
	"context"
	"fmt"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/framework/config"
)

// KueueWebhookService is the Service that fronts Kueue's admission webhooks. Until it has a ready
// endpoint, creating a Job with a queue label fails with "no endpoints available".
const KueueWebhookService = "kueue-webhook-service"

// CheckKueueWebhookReady returns nil when Kueue's webhook Service has at least one ready endpoint,
// otherwise an error saying what is missing. It is one check; callers poll it.
func CheckKueueWebhookReady(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	slices, err := kube.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + KueueWebhookService,
	})
	if err != nil {
		return fmt.Errorf("listing EndpointSlices of %s/%s: %w", namespace, KueueWebhookService, err)
	}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				return nil
			}
		}
	}
	return fmt.Errorf("Kueue webhook Service %s/%s has no ready endpoint (%d EndpointSlices); is kueue-controller-manager running? `kubectl -n %s get pods`",
		namespace, KueueWebhookService, len(slices.Items), namespace)
}

// CheckStackReady returns nil when every path the configuration demands is discovered with devices
// (or, for "auto", when at least one path is), and Kueue's webhook is ready when Kueue is installed.
func CheckStackReady(ctx context.Context, kube kubernetes.Interface, cfg config.Config) (Capabilities, error) {
	snap, err := Collect(ctx, kube, cfg.Kueue.Namespace)
	if err != nil {
		return Capabilities{}, err
	}
	caps := Discover(snap, cfg)
	var problems []string
	if explicit := cfg.ExplicitPaths(); len(explicit) > 0 {
		for _, p := range explicit {
			if !caps.HasPath(p) {
				problems = append(problems, fmt.Sprintf("allocation path %s was requested but is absent: %s", p, caps.NotExercised[p]))
			}
		}
	} else if caps.DevicePlugin == nil && caps.DRA == nil {
		problems = append(problems, fmt.Sprintf("no allocation path has devices yet: device-plugin: %s; dra: %s",
			caps.NotExercised[config.PathDevicePlugin], caps.NotExercised[config.PathDRA]))
	}
	if caps.Kueue.Present {
		if err := CheckKueueWebhookReady(ctx, kube, cfg.Kueue.Namespace); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return caps, fmt.Errorf("GPU stack not ready:\n  - %s", strings.Join(problems, "\n  - "))
	}
	return caps, nil
}
