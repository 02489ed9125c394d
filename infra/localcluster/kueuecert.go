package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"gpuconform.io/gpuconform/internal/podcond"
)

// kueueCertSecret is the Secret Kueue's internal certificate management writes its webhook's serving
// certificate into; the manager's own pod mounts it (config/default's manager_webhook_patch).
const kueueCertSecret = "kueue-webhook-server-cert"

// certSyncAnnotation is the annotation certMountNudger writes on a manager pod to make its kubelet sync it.
const certSyncAnnotation = "gpuconform.io/cert-sync"

// certMountNudger shortens the start of a new Kueue manager. The manager generates its serving certificate
// into kueueCertSecret after its pod started, and serves its webhooks (and reports Ready) only once the
// certificate appears in the pod's Secret volume. The kubelet rewrites a Secret volume when it syncs the
// pod (its volume manager reprocesses the pod's volumes in WaitForAttachAndMount), which happens on a change
// of the pod and otherwise at the periodic resync, 1 to 1.5 minutes apart, most of a fresh Kueue's start.
// A new annotation on the pod, written once the Secret holds the certificate, is such a change. The nudge
// is repeated (at most once per `again`) while the pod is still not Ready, since the kubelet's own view of
// the Secret may lag behind the first one.
type certMountNudger struct {
	kube  kubernetes.Interface
	again time.Duration
	// nudged is, per pod, how often and when it was last annotated.
	nudged map[types.UID]nudge
}

type nudge struct {
	count int
	at    time.Time
}

// once annotates the manager pods that need it now and returns their names.
func (n *certMountNudger) once(ctx context.Context, now time.Time) ([]string, error) {
	sec, err := n.kube.CoreV1().Secrets(KueueNamespace).Get(ctx, kueueCertSecret, metav1.GetOptions{})
	if err != nil || len(sec.Data["tls.crt"]) == 0 {
		return nil, err // not written yet: nothing the kubelet could mount
	}
	pods, err := n.kube.CoreV1().Pods(KueueNamespace).List(ctx, metav1.ListOptions{LabelSelector: kueueManagerSelector})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range pods.Items {
		last, seen := n.nudged[p.UID]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || podcond.Ready(&p) || (seen && now.Sub(last.at) < n.again) {
			continue
		}
		value := fmt.Sprintf("%s/%d", sec.ResourceVersion, last.count+1)
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{certSyncAnnotation: value}}})
		if _, err := n.kube.CoreV1().Pods(KueueNamespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return names, err
		}
		n.nudged[p.UID] = nudge{count: last.count + 1, at: now}
		names = append(names, p.Name)
	}
	return names, nil
}

// nudgeKueueCertMount runs certMountNudger every two seconds until ctx ends (the rollout's wait returned).
// It only shortens a wait: a failure is logged and ends it, and the rollout's wait decides.
func (c *Cluster) nudgeKueueCertMount(ctx context.Context) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	var kube kubernetes.Interface
	if err == nil {
		kube, err = kubernetes.NewForConfig(cfg)
	}
	if err != nil {
		c.logf("  no client for Kueue's certificate nudge (%v): waiting for the kubelet's periodic sync", err)
		return
	}
	n := &certMountNudger{kube: kube, again: 5 * time.Second, nudged: map[types.UID]nudge{}}
	_ = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		names, err := n.once(ctx, time.Now())
		if err != nil && ctx.Err() == nil {
			c.logf("  could not ask the kubelet to mount Kueue's certificate (%v): waiting for its periodic sync", err)
			return true, nil
		}
		for _, name := range names {
			c.logf("  Kueue's certificate is in %s: annotated %s so that its kubelet mounts it now", kueueCertSecret, name)
		}
		return false, nil
	})
}
