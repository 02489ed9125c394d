package localcluster

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
)

// prometheusDeployment is the local monitoring system's Deployment in MonitoringNamespace
// (manifests/prometheus.yaml).
const prometheusDeployment = "prometheus"

// installMonitoring waits for Prometheus's build (started beside the node image's steps), loads its
// content-keyed image into every node and applies manifests/prometheus.yaml, then waits until the server
// answers its readiness probe. Unchanged since the last bring-up, nothing is re-applied.
func (c *Cluster) installMonitoring(ctx context.Context, build *background) error {
	return c.installAddon(ctx, build, keyedAddon{part: "monitoring", what: "Prometheus's Deployment, configuration and Service",
		image: c.prometheusImage, repo: prometheusImageRepo, manifest: "prometheus.yaml",
		kinds: "deployments,configmaps,services,serviceaccounts",
		prove: func() error {
			return c.kubectl(ctx, "rollout prometheus", "-n", MonitoringNamespace, "rollout", "status", "deploy/"+prometheusDeployment, "--timeout=180s")
		}})
}

// keyedAddon is a component the bring-up runs from a content-keyed image with one manifest in its
// namespace (MonitoringNamespace unless named).
type keyedAddon struct {
	// namespace holds its namespaced objects; "" is MonitoringNamespace.
	namespace string
	// extra are YAML documents applied with the manifest but not rendered as a template (they hold
	// templates of their own, KWOK's stages); the manifest's digest covers them.
	extra []byte
	// part and what name it for the unchanged check.
	part, what string
	// image is called once the build is done: an image's files are the build's outputs.
	image func() imageSpec
	repo  string
	// manifest is its file under manifests/, rendered with values, Namespace, Image and ConfigDigest (the
	// manifest's digest, which rolls its pods when the manifest changes).
	manifest string
	values   map[string]string
	// kinds are what the fingerprint lists in the namespace (kubectl get's resource list).
	kinds string
	// prove waits until the applied component serves.
	prove func() error
}

// installAddon waits for the component's build, loads its image into every node, applies its manifest
// and waits until it serves; unchanged since the last bring-up, nothing is re-applied.
func (c *Cluster) installAddon(ctx context.Context, build *background, a keyedAddon) error {
	if err := build.wait(); err != nil {
		return err
	}
	image, err := c.loadKeyed(ctx, a.image(), a.repo)
	if err != nil {
		return err
	}
	raw, err := manifests.ReadFile("manifests/" + a.manifest)
	if err != nil {
		return err
	}
	ns := cmp.Or(a.namespace, MonitoringNamespace)
	sum := sha256.Sum256(append(raw, a.extra...))
	values := map[string]string{"Namespace": ns, "Image": image, "ConfigDigest": hex.EncodeToString(sum[:8])}
	maps.Copy(values, a.values)
	doc, err := render(a.manifest, values)
	if err != nil {
		return err
	}
	if len(a.extra) > 0 {
		doc = slices.Concat(doc, []byte("\n---\n"), a.extra)
	}
	fp := func() string { return c.objectsFingerprint(ctx, string(doc), "-n", ns, a.kinds) }
	return c.unlessUnchanged(a.part, a.what, fp,
		func() error { return c.applyManifest(ctx, strings.TrimSuffix(a.manifest, ".yaml"), doc) },
		func(bool) error { return a.prove() })
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
	return c.installAddon(ctx, build, keyedAddon{part: "custom metrics API", what: "prometheus-adapter's Deployment, rules, Service and APIServices",
		image: c.metricsAdapterImage, repo: metricsAdapterImageRepo, manifest: "prometheus-adapter.yaml",
		values: map[string]string{"Deployment": MetricsAdapterDeployment, "ConfigMap": MetricsAdapterConfigMap},
		kinds:  "deployments,configmaps,services,serviceaccounts,apiservices",
		prove: func() error {
			if err := c.kubectl(ctx, "rollout prometheus-adapter", "-n", MonitoringNamespace, "rollout", "status", "deploy/"+MetricsAdapterDeployment, "--timeout=180s"); err != nil {
				return err
			}
			return c.kubectl(ctx, "custom metrics APIServices Available", "wait", "--for=condition=Available", "--timeout=120s",
				"apiservice/v1beta1.custom.metrics.k8s.io", "apiservice/v1beta2.custom.metrics.k8s.io")
		}})
}
