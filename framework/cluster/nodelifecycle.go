package cluster

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// gracePeriodFlag is the kube-controller-manager flag that sets how long a node may go without a status
// report or lease renewal before it is marked NotReady (and its pods' NoExecute tolerations start to count).
const gracePeriodFlag = "--node-monitor-grace-period"

// ReadNodeMonitorGracePeriod says how long the cluster waits before it calls a silent node NotReady, as
// the control plane's kube-controller-manager pod (kubeadm's static pod, label
// component=kube-controller-manager in kube-system) is configured, for the record: every node-failure
// timing the suite measures starts with it. A managed control plane shows no such pod; the answer then
// says so rather than guessing.
func ReadNodeMonitorGracePeriod(ctx context.Context, kube kubernetes.Interface) string {
	pods, err := kube.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "component=kube-controller-manager"})
	if err != nil {
		return "not visible: " + err.Error()
	}
	return nodeMonitorGracePeriod(pods.Items)
}

// nodeMonitorGracePeriod reads the grace period from the controller-manager pods' command lines.
func nodeMonitorGracePeriod(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "not visible: no kube-controller-manager pod in kube-system (a managed control plane keeps its own)"
	}
	// Every control-plane node runs the same manifest; the first one speaks for them.
	p := pods[0]
	for _, c := range p.Spec.Containers {
		args := append(append([]string{}, c.Command...), c.Args...)
		for i, a := range args {
			if v, ok := strings.CutPrefix(a, gracePeriodFlag+"="); ok {
				return fmt.Sprintf("%s (kube-controller-manager %s, pod %s)", v, gracePeriodFlag, p.Name)
			}
			if a == gracePeriodFlag && i+1 < len(args) {
				return fmt.Sprintf("%s (kube-controller-manager %s, pod %s)", args[i+1], gracePeriodFlag, p.Name)
			}
		}
	}
	return fmt.Sprintf("the default, 50s since Kubernetes 1.32 (kube-controller-manager pod %s sets no %s)", p.Name, gracePeriodFlag)
}
