// Package gpu is the allocation-path abstraction: one interface, one implementation per way a pod can
// be given GPUs (device plugin, DRA). Scenarios are written once against Path and run per discovered
// path, so the report shows parity between them.
package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/diagnose"
)

// Path is one allocation path.
type Path interface {
	fixtures.DeviceRequester

	// Name is "device-plugin", "dra" or "extended-resource-dra".
	Name() string
	// Label is the Ginkgo label of specs on this path.
	Label() string
	// QuotaResource is the resource Kueue accounts this path's devices as.
	QuotaResource() corev1.ResourceName
	// Capacity is the number of devices per node.
	Capacity() map[string]int64
	// Given reads which devices pod (running, or recently finished for DRA) was given, from the
	// authority of this path: the kubelet for the device plugin, the ResourceClaim for DRA.
	Given(ctx context.Context, in GivenInput) (Allocation, error)
	// Describe is a one-line description for reports.
	Describe() string
	// Authority names what decides which devices a pod gets, for messages: "the kubelet" (device
	// plugin) or "the ResourceClaim" (DRA).
	Authority() string
	// ClaimBased reports whether devices are allocated through ResourceClaims (DRA): pods carry claims,
	// the scheduler allocates them, and a lost pod's claim must be released.
	ClaimBased() bool
}

// AllGiver is a Path that reads the allocations of several pods more cheaply together than one by one
// (the device plugin: one kubelet reader per node instead of one per pod).
type AllGiver interface {
	GivenAll(ctx context.Context, ins []GivenInput) ([]Allocation, error)
}

// GivenAll returns what each pod was given, in the order of ins: through the path's GivenAll when it has
// one (which reads every node and joins their errors), else one Given after the other, where the first
// error stops it.
func GivenAll(ctx context.Context, p Path, ins []GivenInput) ([]Allocation, error) {
	if g, ok := p.(AllGiver); ok {
		return g.GivenAll(ctx, ins)
	}
	out := make([]Allocation, len(ins))
	for i, in := range ins {
		a, err := p.Given(ctx, in)
		out[i] = a
		if err != nil {
			return out, fmt.Errorf("pod %s/%s: %w", in.Pod.Namespace, in.Pod.Name, err)
		}
	}
	return out, nil
}

// GivenInput is what Given needs.
type GivenInput struct {
	Kube kubernetes.Interface
	// Pod is the workload pod (freshly read).
	Pod *corev1.Pod
	// Container is the container the devices were attached to.
	Container string
	// Factory builds helper pods (podresources reader) with the run label and tolerations.
	Factory fixtures.Factory
	// Claims is a recorder of ResourceClaims seen in the pod's namespace, for pods whose generated
	// claim was already released; may be nil.
	Claims *ClaimRecorder
	// HelperTimeout bounds the podresources helper pod (which is watched, not polled).
	HelperTimeout time.Duration
	// HelperNamespace is where the podresources helper runs (it mounts the kubelet's socket through a
	// hostPath, as root); empty means the pod's own namespace.
	HelperNamespace string
}

// Allocation is what a pod was given.
type Allocation struct {
	// Node is where the devices are.
	Node string
	// Devices are the device identities, sorted, in the form the container should see them: for DRA the
	// device's "uuid" attribute when its ResourceSlice publishes one (NVIDIA's driver does; it is what
	// nvidia-smi shows in the container), else the device name.
	Devices []string
	// DeviceRefs are the allocated devices as the API names them ("pool/device"; DRA only), sorted.
	DeviceRefs []string
	// Replicas are the replica IDs the authority handed out when the devices are shared (time-slicing or
	// MPS: NVIDIA's "<uuid>::<n>"), sorted, duplicates kept; Devices then holds the distinct physical
	// devices behind them, which is what the container sees. Nil when every ID is a physical device.
	Replicas []string
	// Aliases maps another name a container may know a device by to its identity in Devices: for DRA the
	// device name, which drivers that publish no uuid attribute, or that name devices by it in the
	// container's environment (the dra-example-driver), hand to the container.
	Aliases map[string]string
	// Source names the authority, e.g. "kubelet podresources" or "ResourceClaim ns/x".
	Source string
	// CountOnly is true when the authority could not be read and only the count is known (Devices is
	// then empty and Count set); Note says why.
	CountOnly bool
	Count     int
	Note      string
	// Claims are the generated claims (DRA only).
	Claims []ClaimInfo
}

// ClaimInfo is one DRA claim behind an allocation.
type ClaimInfo struct {
	Name string
	// Pools are the pool names the devices came from (for DRA node-local drivers, the node name).
	Pools []string
	// ReservedFor are the UIDs of the claim's consumers when read.
	ReservedFor []string
}

// Paths returns the discovered paths, in a stable order.
func Paths(caps cluster.Capabilities, cfg config.Config) []Path {
	var out []Path
	ext := caps.ExtendedDRA
	if caps.DevicePlugin != nil {
		dp := &DevicePlugin{Resource: caps.DevicePlugin.ResourceName, Allocatable: caps.DevicePlugin.Allocatable}
		if ext != nil && ext.ResourceName == dp.Resource {
			dp.ServedByDRA = slices.Sorted(maps.Keys(ext.DRANodes))
		}
		out = append(out, dp)
	}
	if caps.DRA != nil {
		out = append(out, &DRA{
			DeviceClass: caps.DRA.DeviceClass, Driver: caps.DRA.Driver, KueueResource: corev1.ResourceName(cfg.DRA.KueueResourceName),
			Devices: caps.DRA.Devices, Published: caps.DRA.Published, Tainted: caps.DRA.Tainted,
		})
	}
	if ext != nil {
		out = append(out, NewExtendedDRA(ext, caps.DRA, caps.DevicePlugin))
	}
	return out
}

// NodesWithAtLeast returns the nodes with at least n devices on p, sorted.
func NodesWithAtLeast(p Path, n int64) []string {
	var out []string
	for node, c := range p.Capacity() {
		if c >= n {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}

// Normalize maps the names a container reported to the allocation's identities through Aliases, and,
// when the allocation holds replicas, a replica ID to its physical device: a container cannot tell the
// replicas of one GPU apart, so what it sees is compared with Devices at the physical level.
func (a Allocation) Normalize(seen []string) []string {
	out := make([]string, len(seen))
	for i, d := range seen {
		if id, ok := a.Aliases[d]; ok {
			d = id
		}
		if a.Replicas != nil {
			d = PhysicalOf(d)
		}
		out[i] = d
	}
	return out
}

// Allocated are the IDs as the authority handed them out: the replica IDs when shared, else Devices.
func (a Allocation) Allocated() []string {
	if a.Replicas != nil {
		return a.Replicas
	}
	return a.Devices
}

// Sharing describes the replicas the allocation holds ("replicas 0, 1 of GPU-a"); "" when unshared.
func (a Allocation) Sharing() string { return DescribeReplicas(a.Replicas) }

// CheckSeen compares what a container saw with the allocation; the error reads "container saw [...] but
// <Source> allocated [...]" (the shape make selfcheck recognises). Without replicas the two sets must be
// equal, as always. With replicas the comparison is at the physical level, since a container sees each
// GPU once however many of its replicas it holds; a visible GPU none of whose replicas were allocated is
// still a mismatch, and so is one replica ID handed to the container twice (a share is never held twice).
func (a Allocation) CheckSeen(seen []string) error {
	head := fmt.Sprintf("container saw %s but %s allocated %s", FormatDevices(seen), a.Source, FormatDevices(a.Allocated()))
	if dup := duplicates(a.Replicas); len(dup) > 0 {
		return fmt.Errorf("%s: replica %s twice to one container", head, strings.Join(dup, ", "))
	}
	if SameDevices(a.Normalize(seen), a.Devices) {
		return nil
	}
	if a.Replicas != nil {
		return fmt.Errorf("%s, replicas of %s", head, FormatDevices(a.Devices))
	}
	return errors.New(head)
}

// SameDevices compares two device sets ignoring order.
func SameDevices(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// FormatDevices renders a device list for messages.
func FormatDevices(d []string) string { return "[" + strings.Join(d, " ") + "]" }

// PublishedSlices reads, now, the ResourceSlices the drivers of a DRA path p publish for node, by UID
// (their names as values); nil for a path without slices (the device plugin). A kubelet deletes every
// slice of its node as it starts (k8s.io/kubernetes pkg/kubelet/cm/dra/plugin, NewDRAPluginManager: no
// driver has registered yet), so after a kubelet or node restart the node's devices are back only in
// slices published anew, under other UIDs.
func PublishedSlices(ctx context.Context, kube kubernetes.Interface, p Path, node string) (map[string]string, error) {
	d, ok := ClaimPath(p)
	if !ok {
		return nil, nil
	}
	list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: resourcev1.ResourceSliceSelectorNodeName + "=" + node})
	if err != nil {
		return nil, err
	}
	drivers := strings.Split(d.Driver, ",")
	out := map[string]string{}
	for _, s := range list.Items {
		if slices.Contains(drivers, s.Spec.Driver) && s.Spec.NodeName != nil && *s.Spec.NodeName == node {
			out[string(s.UID)] = s.Name
		}
	}
	return out, nil
}

// LiveCapacity reads, now, how many devices node offers on path p: the node's allocatable for the device
// plugin, the devices of the node's ResourceSlices for DRA. Capacity() is what discovery saw at start; a
// health or kubelet check watches this one change.
func LiveCapacity(ctx context.Context, kube kubernetes.Interface, p Path, node string) (int64, error) {
	switch p := p.(type) {
	case *DevicePlugin:
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		q := n.Status.Allocatable[p.Resource]
		return q.Value(), nil
	case *ExtendedDRA:
		// A device plugin advertising the name on node serves it there, not the DRA driver.
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		if q := n.Status.Allocatable[p.Resource]; q.Value() > 0 {
			return 0, nil
		}
		return LiveCapacity(ctx, kube, p.DRA, node)
	case *DRA:
		list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		drivers := strings.Split(p.Driver, ",")
		rules := taintRules(ctx, kube)
		selected := p.selectedNow(ctx, kube, list.Items)
		var count int64
		for _, s := range list.Items {
			if slices.Contains(drivers, s.Spec.Driver) && s.Spec.NodeName != nil && *s.Spec.NodeName == node {
				for _, d := range s.Spec.Devices {
					if selected(node, d.Name) && !deviceTainted(d, s.Spec.Driver, s.Spec.Pool.Name, rules) {
						count++
					}
				}
			}
		}
		return count, nil
	}
	return 0, fmt.Errorf("no live capacity for path %s", p.Name())
}

// DeviceSignal says how the published ResourceSlices show one device of the path (pool and name as in an
// allocation result): absent (a driver that withdraws an unhealthy device), or in which slice with which
// taints ("key=value:Effect"; a driver that reports health by device taints, as NVIDIA's does). It is the
// evidence a health check quotes: what the scheduler was shown.
func (p *DRA) DeviceSignal(ctx context.Context, kube kubernetes.Interface, pool, name string) (string, error) {
	list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	drivers := strings.Split(p.Driver, ",")
	rules := taintRules(ctx, kube)
	for _, s := range list.Items {
		if !slices.Contains(drivers, s.Spec.Driver) || s.Spec.Pool.Name != pool {
			continue
		}
		for _, dev := range s.Spec.Devices {
			if dev.Name != name {
				continue
			}
			var by []string
			for _, r := range rules {
				if r.selects(s.Spec.Driver, pool, name) {
					by = append(by, fmt.Sprintf("DeviceTaintRule %s taints it %s", r.name, cluster.FormatDeviceTaint(r.taint)))
				}
			}
			where := "in ResourceSlice " + s.Name
			if len(dev.Taints) == 0 {
				where += ", untainted"
			} else {
				taints := make([]string, len(dev.Taints))
				for i, t := range dev.Taints {
					taints[i] = cluster.FormatDeviceTaint(t)
				}
				where += " with taint " + strings.Join(taints, ", ")
			}
			return strings.Join(append([]string{where}, by...), "; "), nil
		}
	}
	return fmt.Sprintf("in no ResourceSlice of pool %s (withdrawn)", pool), nil
}

// selectedNow returns whether the path's DeviceClass selects a node's device by name in the published
// slices: a driver that publishes a GPU's partitions beside the GPU (MIG through shared counters) offers
// the class's devices, not all it publishes. When the class cannot be read, every device counts, as
// before there were partitions.
func (p *DRA) selectedNow(ctx context.Context, kube kubernetes.Interface, published []resourcev1.ResourceSlice) func(node, device string) bool {
	class, err := kube.ResourceV1().DeviceClasses().Get(ctx, p.DeviceClass, metav1.GetOptions{})
	if err != nil || p.DeviceClass == "" {
		return func(string, string) bool { return true }
	}
	match := diagnose.MatchDeviceClass(ctx, class, published)
	sets := map[string]map[string]bool{}
	for node, names := range match.Matched {
		sets[node] = map[string]bool{}
		for _, n := range names {
			sets[node][n] = true
		}
	}
	return func(node, device string) bool { return sets[node][device] }
}

// taintRule is a DeviceTaintRule: its name, its device selector (empty fields match any) and its taint.
type taintRule struct {
	name                 string
	driver, pool, device string
	taint                resourcev1.DeviceTaint
}

// selects reports whether the rule's selector matches a device of driver and pool.
func (r taintRule) selects(driver, pool, device string) bool {
	return (r.driver == "" || r.driver == driver) && (r.pool == "" || r.pool == pool) && (r.device == "" || r.device == device)
}

// taintRules lists the DeviceTaintRules. The typed client of this client-go predates their v1, so they are
// read raw; a server that does not serve them has none.
func taintRules(ctx context.Context, kube kubernetes.Interface) []taintRule {
	rc, ok := kube.ResourceV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		return nil
	}
	raw, err := rc.Get().Resource("devicetaintrules").Do(ctx).Raw()
	if err != nil {
		return nil
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
			Spec     struct {
				DeviceSelector *struct{ Driver, Pool, Device string } `json:"deviceSelector"`
				Taint          resourcev1.DeviceTaint                 `json:"taint"`
			} `json:"spec"`
		} `json:"items"`
	}
	if json.Unmarshal(raw, &list) != nil {
		return nil
	}
	var out []taintRule
	for _, it := range list.Items {
		r := taintRule{name: it.Metadata.Name, taint: it.Spec.Taint}
		if d := it.Spec.DeviceSelector; d != nil {
			r.driver, r.pool, r.device = d.Driver, d.Pool, d.Device
		}
		out = append(out, r)
	}
	return out
}

// deviceTainted reports whether d is kept from new allocations: a NoSchedule or NoExecute taint in the
// slice (a driver's own health report) or a DeviceTaintRule with such an effect selecting it.
func deviceTainted(d resourcev1.Device, driver, pool string, rules []taintRule) bool {
	for _, t := range d.Taints {
		if cluster.KeepsFromAllocation(t.Effect) {
			return true
		}
	}
	for _, r := range rules {
		if cluster.KeepsFromAllocation(r.taint.Effect) && r.selects(driver, pool, d.Name) {
			return true
		}
	}
	return false
}
