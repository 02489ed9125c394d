package cluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeMonitorGracePeriodFromTheControllerManagersCommand(t *testing.T) {
	pod := func(args ...string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-cp"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Command: append([]string{"kube-controller-manager"}, args...)}}}}
	}
	for _, c := range []struct {
		name string
		pods []corev1.Pod
		want string
	}{
		{"flag=value", []corev1.Pod{pod("--leader-elect=true", "--node-monitor-grace-period=20s")}, "20s (kube-controller-manager --node-monitor-grace-period, pod kube-controller-manager-cp)"},
		{"flag value", []corev1.Pod{pod("--node-monitor-grace-period", "1m")}, "1m (kube-controller-manager"},
		{"default", []corev1.Pod{pod("--leader-elect=true")}, "the default, 50s since Kubernetes 1.32 (kube-controller-manager pod kube-controller-manager-cp sets no --node-monitor-grace-period)"},
		{"managed", nil, "not visible: no kube-controller-manager pod in kube-system"},
	} {
		if got := nodeMonitorGracePeriod(c.pods); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: got %q, want %q…", c.name, got, c.want)
		}
	}
}
