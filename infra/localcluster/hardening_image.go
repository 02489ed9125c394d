package localcluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ApplyImageMissingOnNode removes the workload image's name from one GPU-pool node's containerd, as a
// node that never pulled it (or whose image was garbage-collected, with no registry reachable) would be:
// pods sent there cannot start (ErrImageNeverPull / ErrImagePull), pods elsewhere can. The image's content
// stays under the tools image's name, which the fake agent runs from; the undo tags it back. It returns the
// node.
func ApplyImageMissingOnNode(ctx context.Context, kube kubernetes.Interface) (string, Undo, error) {
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: PoolLabel + "=gpu"})
	if err != nil {
		return "", nil, fmt.Errorf("listing the GPU pool's nodes: %w", err)
	}
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	if len(names) < 2 {
		return "", nil, fmt.Errorf("the GPU pool has %d node(s): the row needs one without the image and one with it", len(names))
	}
	slices.Sort(names)
	node := names[len(names)-1]
	refs, err := output(ctx, "docker", "exec", node, "ctr", "-n", "k8s.io", "images", "ls", "-q")
	if err != nil {
		return "", nil, fmt.Errorf("listing %s's images: %w", node, err)
	}
	var tools string
	for ref := range strings.FieldsSeq(refs) {
		if strings.HasPrefix(ref, toolsImageRepo+":") {
			tools = ref
		}
	}
	if tools == "" || !slices.Contains(strings.Fields(refs), ImageWorkload) {
		return "", nil, fmt.Errorf("node %s lacks %s or %s: bring the cluster up first (make cluster)", node, ImageWorkload, toolsImageRepo)
	}
	if _, err := output(ctx, "docker", "exec", node, "ctr", "-n", "k8s.io", "images", "rm", ImageWorkload); err != nil {
		return "", nil, fmt.Errorf("removing %s from %s: %w", ImageWorkload, node, err)
	}
	undo := func(ctx context.Context) error {
		if _, err := output(ctx, "docker", "exec", node, "ctr", "-n", "k8s.io", "images", "tag", tools, ImageWorkload); err != nil {
			return fmt.Errorf("tagging %s back as %s on %s: %w", tools, ImageWorkload, node, err)
		}
		return nil
	}
	return node, undo, nil
}
