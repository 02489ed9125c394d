package queues

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
)

// Coverage is which resources a ClusterQueue's resource groups cover. Kueue's flavor assigner admits a
// workload only if a resource group covers each resource it requests; otherwise the workload stays
// pending with "couldn't assign flavors to pod set …: resource R unavailable in ClusterQueue"
// (diagnose.QueueNoMatchingFlavor), for as long as the ClusterQueue is unchanged.
type Coverage struct {
	// ClusterQueue is the queue's name; Covered its resource groups' coveredResources, sorted.
	ClusterQueue string
	Covered      []corev1.ResourceName
}

// CoverageOf reads the coverage of cq.
func CoverageOf(cq *kueue.ClusterQueue) Coverage {
	c := Coverage{ClusterQueue: cq.Name}
	for _, rg := range cq.Spec.ResourceGroups {
		c.Covered = append(c.Covered, rg.CoveredResources...)
	}
	slices.Sort(c.Covered)
	c.Covered = slices.Compact(c.Covered)
	return c
}

// Gap is "" when the ClusterQueue covers resource, else why a workload asking for it is never admitted:
// "ClusterQueue X does not cover example.com/gpu (covered: cpu, memory, nvidia.com/gpu)".
func (c Coverage) Gap(resource corev1.ResourceName) string {
	if slices.Contains(c.Covered, resource) {
		return ""
	}
	covered := make([]string, len(c.Covered))
	for i, r := range c.Covered {
		covered[i] = string(r)
	}
	list := strings.Join(covered, ", ")
	if list == "" {
		list = "none"
	}
	return fmt.Sprintf("ClusterQueue %s does not cover %s (covered: %s)", c.ClusterQueue, resource, list)
}

// ReadCoverage reads the coverage of the ClusterQueue behind the LocalQueue localQueue in namespace. The
// error names what could not be read (the LocalQueue is the team's to read, the ClusterQueue the
// platform's), wrapping the API error.
func ReadCoverage(ctx context.Context, kq kueueclient.Interface, namespace, localQueue string) (Coverage, error) {
	lq, err := kq.KueueV1beta2().LocalQueues(namespace).Get(ctx, localQueue, metav1.GetOptions{})
	if err != nil {
		return Coverage{}, fmt.Errorf("cannot get LocalQueue %s in %s: %w", localQueue, namespace, err)
	}
	name := string(lq.Spec.ClusterQueue)
	cq, err := kq.KueueV1beta2().ClusterQueues().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Coverage{}, fmt.Errorf("cannot get ClusterQueue %s (of LocalQueue %s/%s): %w", name, namespace, localQueue, err)
	}
	return CoverageOf(cq), nil
}
