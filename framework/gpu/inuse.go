package gpu

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// Usage is what one node offers on a path now, and what other workloads hold of it.
type Usage struct {
	// Capacity is what the node advertises now: allocatable (device plugin) or its slices' devices (DRA).
	Capacity int64
	// Devices is how many devices are held.
	Devices int64
	// Holders names the pods (device plugin) or ResourceClaims (DRA) that hold them, as namespace/name.
	Holders []string
}

// Free is the devices nobody holds.
func (u Usage) Free() int64 { return max(u.Capacity-u.Devices, 0) }

// InUse reads, for each of nodes, what it offers on path p and how much of it workloads hold: for the
// device plugin, the node's allocatable and the requests of its pods that have not ended; for DRA, the
// devices of the node's ResourceSlices and the allocated devices of ResourceClaims from its pools. A
// cluster the suite was not built beside runs other GPU work; a check that needs a whole node must count
// only what is free. One list per kind serves every node.
func InUse(ctx context.Context, kube kubernetes.Interface, p Path, nodes ...string) (map[string]Usage, error) {
	u := usages(make(map[string]Usage, len(nodes)))
	for _, n := range nodes {
		u[n] = Usage{}
	}
	var err error
	switch p := p.(type) {
	case *DevicePlugin:
		err = u.devicePlugin(ctx, kube, p)
	case *DRA:
		err = u.dra(ctx, kube, p)
	default:
		err = fmt.Errorf("no usage reading for path %s", p.Name())
	}
	if err != nil {
		return nil, err
	}
	for n, v := range u {
		slices.Sort(v.Holders)
		u[n] = v
	}
	return u, nil
}

// usages are the nodes' usages InUse fills in.
type usages map[string]Usage

// hold counts n devices of node as held by holder.
func (u usages) hold(node string, n int64, holder string) {
	v := u[node]
	v.Devices += n
	v.Holders = append(v.Holders, holder)
	u[node] = v
}

// devicePlugin: the nodes' allocatable, and the requests of their pods that have not ended.
func (u usages) devicePlugin(ctx context.Context, kube kubernetes.Interface, p *DevicePlugin) error {
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range list.Items {
		if v, ok := u[n.Name]; ok {
			q := n.Status.Allocatable[p.Resource]
			v.Capacity = q.Value()
			u[n.Name] = v
		}
	}
	sel := fields.AndSelectors(fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed))).String()
	pods, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	for _, pod := range pods.Items {
		if _, ok := u[pod.Spec.NodeName]; !ok || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if n := podRequest(pod, p.Resource); n > 0 {
			u.hold(pod.Spec.NodeName, n, pod.Namespace+"/"+pod.Name)
		}
	}
	return nil
}

// podRequest is how many of resource the pod's containers request (their limit where no request is given).
func podRequest(pod corev1.Pod, resource corev1.ResourceName) int64 {
	var n int64
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Requests[resource]
		if !ok {
			q = c.Resources.Limits[resource]
		}
		n += q.Value()
	}
	return n
}

// dra: the devices of the nodes' ResourceSlices the path selects, and the allocated devices of
// ResourceClaims from their pools.
func (u usages) dra(ctx context.Context, kube kubernetes.Interface, p *DRA) error {
	slicesList, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ResourceSlices: %w", err)
	}
	drivers := strings.Split(p.Driver, ",")
	selected := p.selectedNow(ctx, kube, slicesList.Items)
	poolNode := map[string]string{} // driver/pool → node
	for _, s := range slicesList.Items {
		if !slices.Contains(drivers, s.Spec.Driver) || s.Spec.NodeName == nil {
			continue
		}
		node := *s.Spec.NodeName
		v, ok := u[node]
		if !ok {
			continue
		}
		for _, d := range s.Spec.Devices {
			if selected(node, d.Name) {
				v.Capacity++
			}
		}
		u[node] = v
		poolNode[s.Spec.Driver+"/"+s.Spec.Pool.Name] = node
	}
	claims, err := kube.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ResourceClaims: %w", err)
	}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		per := map[string]int64{}
		for _, r := range c.Status.Allocation.Devices.Results {
			if node, ok := poolNode[r.Driver+"/"+r.Pool]; ok {
				per[node]++
			}
		}
		for node, n := range per {
			u.hold(node, n, c.Namespace+"/"+c.Name)
		}
	}
	return nil
}
