package localcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// prometheusDeployment is the local monitoring system's Deployment in MonitoringNamespace
// (manifests/prometheus.yaml).
const prometheusDeployment = "prometheus"

// installMonitoring waits for Prometheus's build (started beside the node image's steps), loads its
// content-keyed image into every node and applies manifests/prometheus.yaml, then waits until the server
// answers its readiness probe. Unchanged since the last bring-up, nothing is re-applied.
func (c *Cluster) installMonitoring(ctx context.Context, build *background) error {
	if err := build.wait(); err != nil {
		return err
	}
	image, err := c.loadKeyed(ctx, c.prometheusImage(), prometheusImageRepo)
	if err != nil {
		return err
	}
	raw, err := manifests.ReadFile("manifests/prometheus.yaml")
	if err != nil {
		return err
	}
	sum := sha256.Sum256(raw)
	doc, err := render("prometheus.yaml", map[string]string{"Namespace": MonitoringNamespace, "Image": image, "ConfigDigest": hex.EncodeToString(sum[:8])})
	if err != nil {
		return err
	}
	fp := func() string {
		return c.objectsFingerprint(ctx, string(doc), "-n", MonitoringNamespace, "deployments,configmaps,services,serviceaccounts")
	}
	return c.unlessUnchanged("monitoring", "Prometheus's Deployment, configuration and Service", fp,
		func() error { return c.applyManifest(ctx, "prometheus", doc) },
		func(bool) error {
			return c.kubectl(ctx, "rollout prometheus", "-n", MonitoringNamespace, "rollout", "status", "deploy/"+prometheusDeployment, "--timeout=180s")
		})
}

// The local custom metrics API's Deployment and rules ConfigMap in MonitoringNamespace
// (manifests/prometheus-adapter.yaml); selfcheck's faults change them.
const (
	MetricsAdapterDeployment = "prometheus-adapter"
	MetricsAdapterConfigMap  = "prometheus-adapter-config"
)

// installMetricsAdapter waits for prometheus-adapter's build, loads its content-keyed image and applies
// manifests/prometheus-adapter.yaml, then waits until the aggregator finds both custom metrics
// APIServices Available. Unchanged since the last bring-up, nothing is re-applied.
func (c *Cluster) installMetricsAdapter(ctx context.Context, build *background) error {
	if err := build.wait(); err != nil {
		return err
	}
	image, err := c.loadKeyed(ctx, c.metricsAdapterImage(), metricsAdapterImageRepo)
	if err != nil {
		return err
	}
	raw, err := manifests.ReadFile("manifests/prometheus-adapter.yaml")
	if err != nil {
		return err
	}
	sum := sha256.Sum256(raw)
	doc, err := render("prometheus-adapter.yaml", map[string]string{"Namespace": MonitoringNamespace, "Image": image,
		"Deployment": MetricsAdapterDeployment, "ConfigMap": MetricsAdapterConfigMap, "ConfigDigest": hex.EncodeToString(sum[:8])})
	if err != nil {
		return err
	}
	fp := func() string {
		return c.objectsFingerprint(ctx, string(doc), "-n", MonitoringNamespace, "deployments,configmaps,services,serviceaccounts,apiservices")
	}
	return c.unlessUnchanged("custom metrics API", "prometheus-adapter's Deployment, rules, Service and APIServices", fp,
		func() error { return c.applyManifest(ctx, "prometheus-adapter", doc) },
		func(bool) error {
			if err := c.kubectl(ctx, "rollout prometheus-adapter", "-n", MonitoringNamespace, "rollout", "status", "deploy/"+MetricsAdapterDeployment, "--timeout=180s"); err != nil {
				return err
			}
			return c.kubectl(ctx, "custom metrics APIServices Available", "wait", "--for=condition=Available", "--timeout=120s",
				"apiservice/v1beta1.custom.metrics.k8s.io", "apiservice/v1beta2.custom.metrics.k8s.io")
		})
}
