package gpu

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// Usage is what other workloads hold of one node's devices on one path, read now.
type Usage struct {
	// Devices is how many devices are held.
	Devices int64
	// Holders names the pods (device plugin) or ResourceClaims (DRA) that hold them, as namespace/name.
	Holders []string
}

// InUse reads how many of node's devices on path p are held by workloads outside the namespaces in
// ignore (the suite's own): for the device plugin, the requests of the node's pods that have not ended;
// for DRA, the allocated devices of ResourceClaims from the node's pools. A cluster the suite was not
// built beside runs other GPU work; a check that needs a whole node must count only what is free.
func InUse(ctx context.Context, kube kubernetes.Interface, p Path, node string, ignore ...string) (Usage, error) {
	var u Usage
	switch p := p.(type) {
	case *DevicePlugin:
		sel := fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", node),
			fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
			fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed))).String()
		list, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return u, fmt.Errorf("listing the pods on %s: %w", node, err)
		}
		for _, pod := range list.Items {
			if pod.Spec.NodeName != node || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || slices.Contains(ignore, pod.Namespace) {
				continue
			}
			var n int64
			for _, c := range pod.Spec.Containers {
				q, ok := c.Resources.Requests[p.Resource]
				if !ok {
					q = c.Resources.Limits[p.Resource]
				}
				n += q.Value()
			}
			if n > 0 {
				u.Devices += n
				u.Holders = append(u.Holders, pod.Namespace+"/"+pod.Name)
			}
		}
	case *DRA:
		slicesList, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return u, fmt.Errorf("listing ResourceSlices: %w", err)
		}
		drivers := strings.Split(p.Driver, ",")
		pools := map[string]bool{} // driver/pool of the node's devices
		for _, s := range slicesList.Items {
			if slices.Contains(drivers, s.Spec.Driver) && s.Spec.NodeName != nil && *s.Spec.NodeName == node {
				pools[s.Spec.Driver+"/"+s.Spec.Pool.Name] = true
			}
		}
		claims, err := kube.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return u, fmt.Errorf("listing ResourceClaims: %w", err)
		}
		for _, c := range claims.Items {
			if c.Status.Allocation == nil || slices.Contains(ignore, c.Namespace) {
				continue
			}
			var n int64
			for _, r := range c.Status.Allocation.Devices.Results {
				if pools[r.Driver+"/"+r.Pool] {
					n++
				}
			}
			if n > 0 {
				u.Devices += n
				u.Holders = append(u.Holders, c.Namespace+"/"+c.Name)
			}
		}
	default:
		return u, fmt.Errorf("no usage reading for path %s", p.Name())
	}
	sort.Strings(u.Holders)
	return u, nil
}
