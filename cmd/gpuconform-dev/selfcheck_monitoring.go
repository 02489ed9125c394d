package main

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

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
