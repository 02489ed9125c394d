package queues

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuefake "sigs.k8s.io/kueue/client-go/clientset/versioned/fake"
)

func clusterQueue(name string, groups ...[]corev1.ResourceName) *kueue.ClusterQueue {
	cq := &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, g := range groups {
		cq.Spec.ResourceGroups = append(cq.Spec.ResourceGroups, kueue.ResourceGroup{CoveredResources: g})
	}
	return cq
}

func TestCoverageGap(t *testing.T) {
	teamCQ := clusterQueue("team-a", []corev1.ResourceName{"cpu", "memory"}, []corev1.ResourceName{"nvidia.com/gpu"})
	for _, c := range []struct {
		name     string
		cq       *kueue.ClusterQueue
		resource corev1.ResourceName
		want     string
	}{
		{"covered in the second group", teamCQ, "nvidia.com/gpu", ""},
		{"not covered", teamCQ, "example.com/gpu", "ClusterQueue team-a does not cover example.com/gpu (covered: cpu, memory, nvidia.com/gpu)"},
		{"no groups", clusterQueue("empty"), "cpu", "ClusterQueue empty does not cover cpu (covered: none)"},
	} {
		if got := CoverageOf(c.cq).Gap(c.resource); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// ReadCoverage follows the LocalQueue to its ClusterQueue, and says which of the two it could not read.
func TestReadCoverage(t *testing.T) {
	lq := &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: "team-gpus", Namespace: "team-a"}, Spec: kueue.LocalQueueSpec{ClusterQueue: "platform-cq"}}
	kq := kueuefake.NewSimpleClientset(lq, clusterQueue("platform-cq", []corev1.ResourceName{"cpu", "example.com/gpu"}))
	cov, err := ReadCoverage(t.Context(), kq, "team-a", "team-gpus")
	if err != nil || cov.ClusterQueue != "platform-cq" || cov.Gap("example.com/gpu") != "" {
		t.Errorf("ReadCoverage = %+v, %v", cov, err)
	}
	if _, err := ReadCoverage(t.Context(), kueuefake.NewSimpleClientset(lq), "team-a", "team-gpus"); !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "cannot get ClusterQueue platform-cq") {
		t.Errorf("a missing ClusterQueue: %v", err)
	}
	if _, err := ReadCoverage(t.Context(), kq, "team-a", "other"); err == nil {
		t.Error("a missing LocalQueue is an error")
	}
}
