package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/diagnose"
)

// ExtendedDRAPathName names the third allocation path: an extended resource (nvidia.com/gpu) served by a
// DRA driver through a DeviceClass's spec.extendedResourceName (DRAExtendedResource), on nodes where no
// device plugin advertises that resource. Unchanged pods that ask for nvidia.com/gpu: 1 are given a
// claim the scheduler creates (pod.status.extendedResourceClaimStatus). On a node where a device plugin
// advertises the name as well, the device plugin serves it: the scheduler considers DRA for an extended
// resource only on nodes whose allocatable does not list it.
const ExtendedDRAPathName = config.PathExtendedDRA

// ExtendedDRAPath is the discovered extended-resource mapping and which nodes serve it which way.
type ExtendedDRAPath struct {
	// DeviceClass maps ResourceName to its devices.
	DeviceClass  string
	ResourceName corev1.ResourceName
	// Driver is the driver the class names (comma-separated when several), "" when it names none.
	Driver string
	// DRANodes are the nodes where the class's devices serve the name (no device plugin advertises it
	// there), with how many devices the class selects on each; Devices names them.
	DRANodes map[string]int
	Devices  map[string][]string
	// PluginNodes are the nodes with devices of the class where a device plugin advertises the name (it
	// serves pods there), with its allocatable.
	PluginNodes map[string]int64
}

// Served says which nodes serve the name which way, for the record.
func (p ExtendedDRAPath) Served() string {
	s := fmt.Sprintf("%s through DeviceClass %s: by the DRA driver on %s", p.ResourceName, p.DeviceClass, nodeCounts(p.DRANodes))
	if len(p.PluginNodes) > 0 {
		s += "; by a device plugin on " + nodeCounts(p.PluginNodes) + " (a device plugin that advertises the name serves it)"
	}
	return s
}

func nodeCounts[N int | int64](m map[string]N) string {
	if len(m) == 0 {
		return "no node"
	}
	parts := make([]string, 0, len(m))
	for _, n := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s (%d)", n, m[n]))
	}
	return strings.Join(parts, ", ")
}

// discoverExtendedDRA finds the extended-resource mapping: among the DeviceClasses that set
// spec.extendedResourceName (by name), the first whose selected devices lie on some node that does not
// advertise the name through a device plugin. It returns why there is none otherwise, naming what was
// found: no mapping, a mapping whose class selects no published device, or one whose every device lies
// on nodes a device plugin serves.
func discoverExtendedDRA(s Snapshot) (*ExtendedDRAPath, string) {
	if !s.ResourceAPI {
		return nil, "the API server does not serve resource.k8s.io/v1 (DRA is not enabled)"
	}
	var mapped []*resourcev1.DeviceClass
	for i := range s.DeviceClasses {
		if s.DeviceClasses[i].Spec.ExtendedResourceName != nil {
			mapped = append(mapped, &s.DeviceClasses[i])
		}
	}
	if len(mapped) == 0 {
		return nil, "no DeviceClass sets spec.extendedResourceName: no extended resource is served through DRA"
	}
	slices.SortFunc(mapped, func(a, b *resourcev1.DeviceClass) int { return strings.Compare(a.Name, b.Name) })
	var why []string
	for _, class := range mapped {
		name := corev1.ResourceName(*class.Spec.ExtendedResourceName)
		// Discovery is pure and each evaluation is bounded by the API's CEL cost limit: no context to honour.
		match := diagnose.MatchDeviceClass(context.Background(), class, s.ResourceSlices)
		p := &ExtendedDRAPath{DeviceClass: class.Name, ResourceName: name, Driver: strings.Join(match.Drivers, ","),
			DRANodes: map[string]int{}, Devices: map[string][]string{}, PluginNodes: map[string]int64{}}
		for node, devices := range match.Matched {
			if node == "" || len(devices) == 0 {
				continue
			}
			if n := pluginAllocatable(s.Nodes, node, name); n > 0 {
				p.PluginNodes[node] = n
				continue
			}
			p.DRANodes[node] = len(devices)
			p.Devices[node] = slices.Clone(devices)
		}
		switch {
		case len(p.DRANodes) > 0:
			return p, ""
		case len(p.PluginNodes) > 0:
			why = append(why, fmt.Sprintf("DeviceClass %s maps %s, but every node with its devices also advertises %s through a device plugin, which serves the name there: %s",
				class.Name, name, name, nodeCounts(p.PluginNodes)))
		default:
			why = append(why, fmt.Sprintf("DeviceClass %s maps %s but selects no device of a node-local ResourceSlice", class.Name, name))
		}
	}
	return nil, strings.Join(why, "; ")
}

// pluginAllocatable is the node's allocatable of the extended resource name (a device plugin's), 0 when
// the node is not in the snapshot or does not list it.
func pluginAllocatable(nodes []corev1.Node, node string, name corev1.ResourceName) int64 {
	i := slices.IndexFunc(nodes, func(n corev1.Node) bool { return n.Name == node })
	if i < 0 {
		return 0
	}
	q, ok := nodes[i].Status.Allocatable[name]
	if !ok {
		return 0
	}
	return q.Value()
}
