package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
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

// restartPrometheusWith writes config as the local Prometheus's configuration, rolls its Deployment (the
// digest annotation) and waits until the new server is available.
func restartPrometheusWith(ctx context.Context, kube kubernetes.Interface, config string) error {
	ns := localcluster.MonitoringNamespace
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, prometheusConfigMap, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cm.Data[prometheusConfigKey] = config
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the local Prometheus's configuration: %w", err)
	}
	sum := sha256.Sum256([]byte(config + time.Now().String()))
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{prometheusConfigAnnotation: hex.EncodeToString(sum[:8])}}}}})
	if _, err := kube.AppsV1().Deployments(ns).Patch(ctx, prometheusDeployment, k8stypes.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("restarting the local Prometheus: %w", err)
	}
	last := ""
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, prometheusDeployment, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // a failed read is retried until the deadline; last says why
		}
		done, why := rolledOut(d)
		last = why
		return done, nil
	})
	if err != nil {
		return fmt.Errorf("the local Prometheus did not come back with its new configuration: %s", last)
	}
	return nil
}
