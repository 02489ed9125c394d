package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/monitoring"
	"gpuconform.io/gpuconform/infra/localcluster"
)

// The local cluster's Prometheus (infra/localcluster/manifests/prometheus.yaml).
const (
	prometheusDeployment = "prometheus"
	prometheusConfigMap  = "prometheus-config"
	prometheusConfigKey  = "prometheus.yml"
	// prometheusConfigAnnotation on the pod template rolls Prometheus when its configuration changes.
	prometheusConfigAnnotation = "gpuconform.io/prometheus-config"
)

// monitoringOwnNamespaceOnly restarts the local Prometheus with its pod discovery limited to its own
// namespace, a common misconfiguration (a scrape job written for one team's namespace, or a Prometheus
// Operator's default of selecting monitors in its own namespace only): workloads elsewhere are never
// discovered. The undo restarts it with the configuration it had.
func monitoringOwnNamespaceOnly(ctx context.Context, kube kubernetes.Interface) (func(context.Context) error, error) {
	ns := localcluster.MonitoringNamespace
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, prometheusConfigMap, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the local Prometheus's configuration: %w", err)
	}
	before := cm.Data[prometheusConfigKey]
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(before), &doc); err != nil {
		return nil, fmt.Errorf("parsing the local Prometheus's configuration: %w", err)
	}
	jobs, _ := doc["scrape_configs"].([]any)
	limited := 0
	for _, j := range jobs {
		job, _ := j.(map[string]any)
		sds, _ := job["kubernetes_sd_configs"].([]any)
		for _, sd := range sds {
			if m, ok := sd.(map[string]any); ok {
				m["namespaces"] = map[string]any{"names": []any{ns}}
				limited++
			}
		}
	}
	if limited == 0 {
		return nil, errors.New("the local Prometheus's configuration has no kubernetes_sd_configs to limit")
	}
	after, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if err := restartPrometheusWith(ctx, kube, string(after)); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return restartPrometheusWith(ctx, kube, before) }, nil
}

// restartPrometheusWith writes config as the local Prometheus's configuration, rolls its Deployment and
// waits until the new server is available.
func restartPrometheusWith(ctx context.Context, kube kubernetes.Interface, config string) error {
	d := configuredDeployment{Namespace: localcluster.MonitoringNamespace, Name: prometheusDeployment, ConfigMap: prometheusConfigMap,
		Key: prometheusConfigKey, Annotation: prometheusConfigAnnotation, What: "the local Prometheus"}
	return d.restartWith(ctx, kube, config, nil)
}

// The local custom metrics API (infra/localcluster/manifests/prometheus-adapter.yaml).
const (
	adapterConfigKey = "config.yaml"
	// adapterConfigAnnotation on the pod template rolls prometheus-adapter when its rules change.
	adapterConfigAnnotation = "gpuconform.io/adapter-config"
	// customMetricsAPI is the APIService the adapter serves the HPA through.
	customMetricsAPI = "v1beta1.custom.metrics.k8s.io"
	// adapterRateName is how the local adapter's rule names a counter's rate; the fault renames it.
	adapterRateName = `as: "${1}_per_second"`
)

var adapterDeployment = configuredDeployment{Namespace: localcluster.MonitoringNamespace, Name: localcluster.MetricsAdapterDeployment,
	ConfigMap: localcluster.MetricsAdapterConfigMap, Key: adapterConfigKey, Annotation: adapterConfigAnnotation, What: "the local prometheus-adapter"}

// hpaMetricRenamed restarts the local prometheus-adapter with its rule serving a counter's rate as X_rate
// instead of X_per_second: an adapter whose rules do not serve the metric the HPA is written for. The undo
// restarts it with the rules it had.
func hpaMetricRenamed(ctx context.Context, clients *cluster.Clients) (func(context.Context) error, error) {
	cm, err := clients.Kube.CoreV1().ConfigMaps(adapterDeployment.Namespace).Get(ctx, adapterDeployment.ConfigMap, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the local prometheus-adapter's rules: %w", err)
	}
	before := cm.Data[adapterConfigKey]
	if !strings.Contains(before, adapterRateName) {
		return nil, fmt.Errorf("the local prometheus-adapter's rules have no %s to rename", adapterRateName)
	}
	after := strings.ReplaceAll(before, adapterRateName, `as: "${1}_rate"`)
	ready := func(ctx context.Context) (bool, string) { return apiServiceIs(ctx, clients, "True") }
	if err := adapterDeployment.restartWith(ctx, clients.Kube, after, ready); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return adapterDeployment.restartWith(ctx, clients.Kube, before, ready)
	}, nil
}

// metricsAdapterGone scales the local prometheus-adapter to zero replicas and waits until the aggregator
// finds the custom metrics API unavailable: an adapter that is gone. The undo scales it back to one and
// waits until the API is Available again.
func metricsAdapterGone(ctx context.Context, clients *cluster.Clients) (func(context.Context) error, error) {
	scale := func(ctx context.Context, replicas int32, want string) error {
		return scaleDeployment(ctx, clients.Kube, adapterDeployment.Namespace, adapterDeployment.Name, replicas, 2*time.Minute,
			func(ctx context.Context) (bool, string) {
				done, why := apiServiceIs(ctx, clients, want)
				return done, fmt.Sprintf("APIService %s not yet Available=%s: %s", customMetricsAPI, want, why)
			})
	}
	if err := scale(ctx, 0, "False"); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return scale(ctx, 1, "True") }, nil
}

// apiServiceIs reports whether the custom metrics APIService's Available condition has status want, read
// as the platform scenario reads it (monitoring.MetricsAPIs).
func apiServiceIs(ctx context.Context, clients *cluster.Clients, want string) (bool, string) {
	apis, err := monitoring.MetricsAPIs(ctx, clients.Dynamic)
	if err != nil {
		return false, err.Error()
	}
	for _, a := range apis {
		if a.Name == customMetricsAPI {
			return a.Status == want, a.String()
		}
	}
	return false, "APIService " + customMetricsAPI + " is not registered"
}
