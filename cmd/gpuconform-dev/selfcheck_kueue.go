package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/internal/fakeplugin"
)

// The local Kueue's Deployment and the ConfigMap its Configuration lives in (infra/localcluster).
const (
	kueueNamespace  = "kueue-system"
	kueueDeployment = "kueue-controller-manager"
	kueueConfigMap  = "kueue-manager-config"
	kueueConfigKey  = "controller_manager_config.yaml"
	// kueueConfigAnnotation on the pod template rolls Kueue when its Configuration changes.
	kueueConfigAnnotation = "gpuconform.io/kueue-config"
)

// applyClusterFault applies a fault that is the cluster's, not the agent's, and returns its undo.
func applyClusterFault(ctx context.Context, clients *cluster.Clients, f fakeplugin.Fault) (func(context.Context) error, error) {
	switch f {
	case fakeplugin.FaultKueueNoPodsReady:
		return withoutConfigKey(ctx, clients.Kube, "waitForPodsReady")
	case fakeplugin.FaultKueueWebhookSkipsValidation:
		return webhookSkipsResourceFlavors(ctx, clients.Kube)
	case fakeplugin.FaultMetricsAPIUnavailable:
		return metricsAdapterGone(ctx, clients)
	case fakeplugin.FaultHPAMetricUnserved:
		return hpaMetricRenamed(ctx, clients)
	case fakeplugin.FaultAutoscalerUnhealthy:
		return createObjects(ctx, clients.Dynamic, unhealthyAutoscalerStatus())
	case fakeplugin.FaultAutoscalerDown:
		return nodeAutoscalerGone(ctx, clients.Kube)
	case fakeplugin.FaultAutoscalerNoScaleDown:
		return nodePoolNeverConsolidates(ctx, clients.Kube, clients.Dynamic)
	case fakeplugin.FaultGatewayNoController:
		return gatewayClassUnaccepted(ctx, clients.Kube, clients.Dynamic)
	case fakeplugin.FaultGatewayDown:
		return gatewayGone(ctx, clients.Kube)
	case fakeplugin.FaultGatewayWeightsStripped:
		return stripRouteWeights(ctx, clients.Dynamic)
	case fakeplugin.FaultMonitoringOwnNamespaceOnly:
		return monitoringOwnNamespaceOnly(ctx, clients.Kube)
	case fakeplugin.FaultDRANoTaintEviction:
		return kcmWithout(ctx, clients.Kube, taintEvictionController)
	case fakeplugin.FaultHPAControllerOff:
		return kcmWithout(ctx, clients.Kube, hpaController)
	case fakeplugin.FaultDRATolerationsStripped:
		return stripDeviceTolerations(ctx, clients)
	}
	return nil, fmt.Errorf("fault %s is not a cluster fault", f)
}

// withoutConfigKey restarts the local Kueue with key removed from its Configuration; the undo restarts it
// with the Configuration it had.
func withoutConfigKey(ctx context.Context, kube kubernetes.Interface, key string) (func(context.Context) error, error) {
	cm, err := kube.CoreV1().ConfigMaps(kueueNamespace).Get(ctx, kueueConfigMap, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Kueue's Configuration: %w", err)
	}
	before := cm.Data[kueueConfigKey]
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(before), &doc); err != nil {
		return nil, fmt.Errorf("parsing Kueue's Configuration: %w", err)
	}
	if _, ok := doc[key]; !ok {
		return nil, fmt.Errorf("the local Kueue's Configuration has no %s to remove", key)
	}
	delete(doc, key)
	after, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if err := restartKueueWith(ctx, kube, string(after)); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return restartKueueWith(ctx, kube, before) }, nil
}

// restartKueueWith writes config as Kueue's Configuration, rolls its Deployment and waits until the new
// controller runs and its webhook suspends a queued Job again.
func restartKueueWith(ctx context.Context, kube kubernetes.Interface, config string) error {
	d := configuredDeployment{Namespace: kueueNamespace, Name: kueueDeployment, ConfigMap: kueueConfigMap, Key: kueueConfigKey,
		Annotation: kueueConfigAnnotation, What: "the local Kueue"}
	return d.restartWith(ctx, kube, config, func(ctx context.Context) (bool, string) {
		// The webhook of the new controller: a queued Job is suspended by it (a server-side dry run).
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "gpuconform-webhook-probe-", Namespace: "default", Labels: map[string]string{"kueue.x-k8s.io/queue-name": "gpuconform-webhook-probe"}},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "gpuconform.local/gpu-workload:dev"}}}}},
		}
		got, err := kube.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err != nil:
			return false, "Kueue's webhook does not answer yet: " + err.Error()
		case !ptr.Deref(got.Spec.Suspend, false):
			return false, "Kueue's webhook does not suspend a queued Job yet"
		}
		return true, ""
	})
}

// configuredDeployment is a local component whose configuration is a key of a ConfigMap it reads once,
// at start: a changed configuration takes a new pod, which a digest annotation on the pod template makes.
type configuredDeployment struct {
	Namespace, Name, ConfigMap, Key, Annotation string
	// What names the component in errors.
	What string
}

// restartWith writes config into the ConfigMap, rolls the Deployment (the digest annotation) and waits
// until its rollout is complete and ready, when set, says the new pod serves.
func (c configuredDeployment) restartWith(ctx context.Context, kube kubernetes.Interface, config string, ready func(context.Context) (bool, string)) error {
	cm, err := kube.CoreV1().ConfigMaps(c.Namespace).Get(ctx, c.ConfigMap, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cm.Data[c.Key] = config
	if _, err := kube.CoreV1().ConfigMaps(c.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing %s's configuration: %w", c.What, err)
	}
	sum := sha256.Sum256([]byte(config + time.Now().String()))
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{c.Annotation: hex.EncodeToString(sum[:8])}}}}})
	if _, err := kube.AppsV1().Deployments(c.Namespace).Patch(ctx, c.Name, k8stypes.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("restarting %s: %w", c.What, err)
	}
	last := ""
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := kube.AppsV1().Deployments(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // a failed read is retried until the deadline; last says why
		}
		done, why := rolledOut(d)
		if done && ready != nil {
			done, why = ready(ctx)
		}
		last = why
		return done, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not come back with its new configuration: %s", c.What, last)
	}
	return nil
}

// rolledOut reports whether the Deployment's rollout is complete: every replica updated and available,
// and none of the old ones left; else how far it is.
func rolledOut(d *appsv1.Deployment) (bool, string) {
	want := ptr.Deref(d.Spec.Replicas, 1)
	st := d.Status
	if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.Replicas != want || st.AvailableReplicas != want {
		return false, fmt.Sprintf("rollout: %d updated, %d replicas, %d available of %d", st.UpdatedReplicas, st.Replicas, st.AvailableReplicas, want)
	}
	return true, ""
}
