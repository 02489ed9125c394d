package gpu

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/labels"
)

// ExtendedDRA is the extended-resource path served by a DRA driver: the container asks for the extended
// resource (nvidia.com/gpu) exactly as on the device-plugin path; on a node where no device plugin
// advertises it, the scheduler creates a ResourceClaim for the pod from the DeviceClass whose
// spec.extendedResourceName names the resource (DRAExtendedResource), allocates it, and names it in
// pod.status.extendedResourceClaimStatus; the driver prepares it like any claim. The pods are kept off the
// nodes where a device plugin advertises the name: it serves them there.
//
// It reads allocations like the DRA path (the embedded DRA, whose DeviceClass is the mapping's and whose
// Devices are those on the nodes DRA serves the name on), from the claim the scheduler created.
type ExtendedDRA struct {
	*DRA
	// Resource is the extended resource the DeviceClass maps.
	Resource corev1.ResourceName
	// ServedByPlugin are the nodes where a device plugin advertises Resource (and so serves it): the
	// path's pods are kept off them. Sorted.
	ServedByPlugin []string
}

var _ Path = (*ExtendedDRA)(nil)

// NewExtendedDRA is the path of a discovered mapping. Devices whose slices taint them NoSchedule or
// NoExecute (discovery's DRA path of the same class lists them in Tainted) are left out, as on the DRA path.
// plugin is the device-plugin path when one was discovered (nil otherwise): where it advertises the same
// name, it serves the name.
func NewExtendedDRA(p *cluster.ExtendedDRAPath, dra *cluster.DRAPath, plugin *cluster.DevicePluginPath) *ExtendedDRA {
	served := slices.Collect(maps.Keys(p.PluginNodes))
	if plugin != nil && plugin.ResourceName == p.ResourceName {
		served = append(served, slices.Collect(maps.Keys(plugin.Allocatable))...)
	}
	slices.Sort(served)
	d := &DRA{DeviceClass: p.DeviceClass, Driver: p.Driver, Devices: map[string][]string{}, Published: map[string]int{}, Tainted: map[string][]string{}}
	for node, devices := range p.Devices {
		d.Devices[node] = slices.Clone(devices)
		d.Published[node] = len(devices)
		if dra == nil || dra.DeviceClass != p.DeviceClass {
			continue
		}
		d.Devices[node] = slices.DeleteFunc(d.Devices[node], func(name string) bool { return !slices.Contains(dra.Devices[node], name) })
		if t := dra.Tainted[node]; len(t) > 0 {
			d.Tainted[node] = slices.Clone(t)
		}
	}
	return &ExtendedDRA{DRA: d, Resource: p.ResourceName, ServedByPlugin: slices.Compact(served)}
}

// Name implements Path.
func (p *ExtendedDRA) Name() string { return config.PathExtendedDRA }

// Label implements Path.
func (p *ExtendedDRA) Label() string { return labels.PathExtendedDRA }

// Authority implements Path.
func (p *ExtendedDRA) Authority() string { return "the ResourceClaim the scheduler created" }

// QuotaResource implements Path: Kueue sees the pod's extended-resource request.
func (p *ExtendedDRA) QuotaResource() corev1.ResourceName { return p.Resource }

// Describe implements Path.
func (p *ExtendedDRA) Describe() string {
	d := fmt.Sprintf("extended resource through DRA: %s mapped by DeviceClass %s (driver %s): %d devices on %s, which no device plugin serves it on",
		p.Resource, p.DeviceClass, p.Driver, sum(p.Capacity()), strings.Join(slices.Sorted(maps.Keys(p.Devices)), ", "))
	if len(p.ServedByPlugin) > 0 {
		d += "; a device plugin serves it on " + strings.Join(p.ServedByPlugin, ", ")
	}
	if len(p.Tainted) > 0 {
		d += "; not counted, tainted in their slices: " + cluster.DescribeTainted(p.Tainted)
	}
	return d
}

// RequestDevices implements fixtures.DeviceRequester: the device plugin's request (limit = request =
// count of the extended resource), kept off the nodes where a device plugin serves the name.
func (p *ExtendedDRA) RequestDevices(_ fixtures.Factory, spec *corev1.PodSpec, container string, count int, _ metav1.ObjectMeta) []fixtures.Object {
	requestExtended(spec, container, p.Resource, count)
	fixtures.KeepOffNodes(spec, p.ServedByPlugin)
	return nil
}

// DevicesOf implements DeviceSource: the driver's devices, which the DRA path hands out as well.
func (p *ExtendedDRA) DevicesOf() string { return config.PathDRA }

// ClaimPath is the DRA path behind a claim-based path: p itself on the DRA path, the DRA driver's on the
// extended-resource-dra path; false on the device plugin's.
func ClaimPath(p Path) (*DRA, bool) {
	switch p := p.(type) {
	case *DRA:
		return p, true
	case *ExtendedDRA:
		return p.DRA, true
	}
	return nil, false
}

// DeviceSource is a path whose devices are another path's (by name): specs that hold a node's devices
// hold them for both.
type DeviceSource interface{ DevicesOf() string }

// DeviceDomain is the name of the path whose devices p hands out: its own unless it is a DeviceSource.
func DeviceDomain(p Path) string {
	if s, ok := p.(DeviceSource); ok {
		return s.DevicesOf()
	}
	return p.Name()
}
