// Package podresources asks the kubelet which devices it allocated to pods, through the PodResources
// v1 gRPC API on the node-local unix socket.
//
// This is the kubelet's own record of an allocation, independent of what a device plugin or a DRA
// driver injected into the container. The suite runs it in a helper pod that mounts the socket and
// compares it with what `gpu-workload probe` saw inside the workload, which catches a plugin that
// allocates one device and exposes another.
package podresources

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the PodResources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// DefaultTimeout bounds connecting and listing: the socket is local, so a slow answer means a wedged
// kubelet, and the helper pod should say so rather than hang.
const DefaultTimeout = 10 * time.Second

// maxMessageSize matches the kubelet's server-side limit, so a node with many pods is not cut off by
// gRPC's smaller client default.
const maxMessageSize = 16 * 1024 * 1024

// Report is the JSON document `gpu-workload podresources` prints.
type Report struct {
	// Socket is the socket that was queried.
	Socket string `json:"socket"`
	// Pods are the matching pods sorted by namespace and name; never null.
	Pods []Pod `json:"pods"`
	// Error is set when the kubelet could not be queried; Pods is then empty.
	Error string `json:"error,omitempty"`
}

// Pod is one pod's allocation.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Containers are sorted by name; never null.
	Containers []Container `json:"containers"`
}

// Container is one container's allocation.
type Container struct {
	// Name is the container name within the pod.
	Name string `json:"name"`
	// Devices maps an extended resource name (device-plugin path), e.g. "nvidia.com/gpu", to the
	// device IDs the kubelet assigned, sorted; never null.
	Devices map[string][]string `json:"devices"`
	// DynamicResources lists one entry per device allocated through a DRA claim; never null.
	DynamicResources []DynamicResource `json:"dynamic_resources"`
}

// DynamicResource is one device allocated to a container through a ResourceClaim, flattened from the
// API's claim → claim resources nesting so each entry names exactly one device.
type DynamicResource struct {
	// ClaimName and ClaimNamespace identify the ResourceClaim the device was allocated for.
	ClaimName      string `json:"claim_name"`
	ClaimNamespace string `json:"claim_namespace"`
	// Driver, Pool and Device name the device the way ResourceSlices and allocation results do.
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
	Device string `json:"device"`
	// ShareID identifies a shared allocation of a device (DRA consumable capacity); empty otherwise.
	ShareID string `json:"share_id,omitempty"`
	// CDIDevices are the fully qualified CDI device names the driver handed to the runtime.
	CDIDevices []string `json:"cdi_devices"`
}

// DevicesOf returns the device IDs of resource that the kubelet assigned to container of pod
// namespace/pod; found is false when the pod is not in the report.
func (r Report) DevicesOf(namespace, pod, container, resource string) (devices []string, found bool) {
	for _, p := range r.Pods {
		if p.Namespace != namespace || p.Name != pod {
			continue
		}
		for _, c := range p.Containers {
			if c.Name == container {
				return c.Devices[resource], true
			}
		}
		return nil, true
	}
	return nil, false
}

// Filter selects pods; empty fields match everything.
type Filter struct {
	Namespace string
	Pod       string
}

func (f Filter) matches(namespace, name string) bool {
	return (f.Namespace == "" || f.Namespace == namespace) && (f.Pod == "" || f.Pod == name)
}

// Query lists the pod resources from the kubelet at socket and converts the pods matching f.
// The whole exchange, connection included, is bounded by timeout (DefaultTimeout when zero).
func Query(ctx context.Context, socket string, f Filter, timeout time.Duration) (Report, error) {
	report := Report{Socket: socket, Pods: []Pod{}}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// The "passthrough" target hands the address to the dialer untouched; the dialer ignores it and
	// always opens the unix socket, which avoids gRPC's name resolution for a purely local endpoint.
	conn, err := grpc.NewClient("passthrough:///kubelet-pod-resources",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize)),
	)
	if err != nil {
		return report, fmt.Errorf("connecting to kubelet pod-resources socket %s: %w", socket, err)
	}
	defer conn.Close()

	// WaitForReady turns "socket not there yet" into a retry until the deadline instead of an
	// immediate failure, which matters right after a kubelet restart.
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return report, fmt.Errorf("listing pod resources from %s: %w", socket, err)
	}
	report.Pods = Convert(resp, f)
	return report, nil
}

// Convert turns a List response into the report's pods, keeping those matching f.
func Convert(resp *podresourcesv1.ListPodResourcesResponse, f Filter) []Pod {
	pods := []Pod{}
	for _, p := range resp.GetPodResources() {
		if !f.matches(p.GetNamespace(), p.GetName()) {
			continue
		}
		pod := Pod{Namespace: p.GetNamespace(), Name: p.GetName(), Containers: []Container{}}
		for _, c := range p.GetContainers() {
			pod.Containers = append(pod.Containers, convertContainer(c))
		}
		slices.SortFunc(pod.Containers, func(a, b Container) int { return strings.Compare(a.Name, b.Name) })
		pods = append(pods, pod)
	}
	slices.SortFunc(pods, func(a, b Pod) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return pods
}

func convertContainer(c *podresourcesv1.ContainerResources) Container {
	out := Container{Name: c.GetName(), Devices: map[string][]string{}, DynamicResources: []DynamicResource{}}
	// A resource can appear in several entries (one per NUMA topology), so IDs are merged.
	for _, d := range c.GetDevices() {
		out.Devices[d.GetResourceName()] = append(out.Devices[d.GetResourceName()], d.GetDeviceIds()...)
	}
	for name, ids := range out.Devices {
		slices.Sort(ids)
		out.Devices[name] = ids
	}
	for _, dr := range c.GetDynamicResources() {
		for _, cr := range dr.GetClaimResources() {
			cdi := []string{}
			for _, d := range cr.GetCdiDevices() {
				cdi = append(cdi, d.GetName())
			}
			out.DynamicResources = append(out.DynamicResources, DynamicResource{
				ClaimName:      dr.GetClaimName(),
				ClaimNamespace: dr.GetClaimNamespace(),
				Driver:         cr.GetDriverName(),
				Pool:           cr.GetPoolName(),
				Device:         cr.GetDeviceName(),
				ShareID:        cr.GetShareId(),
				CDIDevices:     cdi,
			})
		}
	}
	return out
}
