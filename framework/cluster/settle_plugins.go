package cluster

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/internal/podcond"
)

// What Settle reads from nodes, DaemonSets and pods, as pure functions of the objects.

// settlingWhy says why a node's device plugin is settling, "" when it is not. On a node that serves
// fewer devices than its capacity, a plugin pod being deleted, not Ready or younger than the window is
// settling, and so is no pod at all while a plugin DaemonSet is (re)creating its pods. On a node that
// serves its capacity (looked at because a DaemonSet is rolling), only a pod being replaced or a new one
// not Ready yet is: the kubelet may have withdrawn the devices before the node status says so.
func settlingWhy(pods []corev1.Pod, short bool, rolling []string, now time.Time, window time.Duration) string {
	if len(pods) == 0 {
		if short && len(rolling) > 0 {
			return "no device plugin pod on the node yet: " + strings.Join(rolling, ", ")
		}
		return ""
	}
	for _, p := range pods {
		name := p.Namespace + "/" + p.Name
		age := now.Sub(podStarted(p))
		young := age < window
		switch {
		case p.DeletionTimestamp != nil:
			return fmt.Sprintf("pod %s was being deleted", name)
		case !podcond.Ready(&p) && (short || young):
			return fmt.Sprintf("pod %s was not Ready, %s old", name, age.Round(time.Second))
		case short && young:
			return fmt.Sprintf("pod %s was Ready, %s old", name, age.Round(time.Second))
		}
	}
	return ""
}

// shortNodes returns, per node that serves fewer devices of a GPU resource than its capacity (resource,
// when configured) or is labelled as a GPU node and advertises no GPU resource, what its status says.
func shortNodes(nodes []corev1.Node, resource string) map[string]string {
	out := map[string]string{}
	for _, n := range nodes {
		hasGPU := false
		for _, name := range slices.Sorted(maps.Keys(n.Status.Capacity)) {
			c := n.Status.Capacity[name]
			if c.Value() <= 0 || !isExtendedGPUResource(name) {
				continue
			}
			a := n.Status.Allocatable[name]
			// A resource at 0 whose renamed sibling serves is left over like a stale MIG resource: the plugin
			// now advertises those GPUs under the other name (renameByDefault switched on or off).
			if a.Value() == 0 && (staleMIGResource(n.Labels, name) || renamedSibling(n, name) != name) {
				continue
			}
			hasGPU = true
			if (resource == "" || string(name) == resource) && a.Value() < c.Value() {
				out[n.Name] = fmt.Sprintf("served %d of %d %s", a.Value(), c.Value(), name)
			}
		}
		for name, a := range n.Status.Allocatable {
			hasGPU = hasGPU || a.Value() > 0 && isExtendedGPUResource(name)
		}
		if !hasGPU && labelledGPU(n) {
			out[n.Name] = "advertised no GPU resource though labelled as a GPU node"
		}
	}
	return out
}

// staleMIGResource reports whether a MIG resource (nvidia.com/mig-<profile>) is left over from an earlier
// MIG layout of the node, so its capacity without allocatable is no plugin settling: the kubelet keeps a
// resource whose plugin stopped advertising it for endpointStopGracePeriod (5 minutes) with every device
// unhealthy. GPU Feature Discovery's labels say what the layout is now: a mig.strategy other than mixed
// advertises no nvidia.com/mig-* resource, and under mixed a profile is advertised only where its
// nvidia.com/mig-<profile>.count is positive. Without the strategy label there is no evidence, and the
// resource is judged as any other.
func staleMIGResource(labels map[string]string, name corev1.ResourceName) bool {
	profile, ok := strings.CutPrefix(string(name), migResourcePrefix)
	strategy, labelled := labels[LabelMIGStrategy]
	if !ok || !labelled {
		return false
	}
	if strategy != "mixed" {
		return true
	}
	count, counted := labelInt(labels, migResourcePrefix+profile+".count")
	return !counted || count <= 0
}

// labelledGPU reports whether a GPU label (gpuNodeLabels) says the node has GPUs.
func labelledGPU(n corev1.Node) bool {
	for _, l := range gpuNodeLabels {
		if v, ok := n.Labels[l]; ok && v != "0" && v != "false" {
			return true
		}
	}
	return false
}

// readyGPUNodes are the Ready nodes with a GPU resource or label that are not short, sorted: where a
// rolling plugin may have withdrawn devices the node status still shows. A node that is not Ready is
// left out: its kubelet re-registers nothing until it is back.
func readyGPUNodes(nodes []corev1.Node, short map[string]string) []string {
	var out []string
	for _, n := range nodes {
		if _, ok := short[n.Name]; ok || !nodeReady(n) {
			continue
		}
		if isGPUNode(n) {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// isGPUNode reports a node with a GPU label (labelledGPU) or capacity (or allocatable) of a GPU
// resource: one the GPU stack's agents must serve.
func isGPUNode(n corev1.Node) bool {
	gpu := labelledGPU(n)
	for _, list := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
		for name, q := range list {
			gpu = gpu || q.Value() > 0 && isExtendedGPUResource(name)
		}
	}
	return gpu
}

// pluginDaemonSets are the DaemonSets whose pod template mounts a hostPath at or under devicePluginDir:
// the device plugins (a plugin must put its socket there for the kubelet to reach it).
func pluginDaemonSets(all []appsv1.DaemonSet) []appsv1.DaemonSet {
	var out []appsv1.DaemonSet
	for _, ds := range all {
		if mountsDevicePluginDir(ds.Spec.Template.Spec) {
			out = append(out, ds)
		}
	}
	return out
}

// mountsDevicePluginDir reports a pod spec with a container that mounts a hostPath at or under
// devicePluginDir.
func mountsDevicePluginDir(spec corev1.PodSpec) bool {
	dirs := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			p := path.Clean(v.HostPath.Path)
			dirs[v.Name] = p == devicePluginDir || strings.HasPrefix(p, devicePluginDir+"/")
		}
	}
	mounts := func(c corev1.Container) bool {
		return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return dirs[m.Name] })
	}
	return slices.ContainsFunc(spec.Containers, mounts) || slices.ContainsFunc(spec.InitContainers, mounts)
}

// rollingDaemonSets describes the plugin DaemonSets that are not fully available: some node's plugin is
// starting or being replaced.
func rollingDaemonSets(plugins []appsv1.DaemonSet) []string {
	var out []string
	for _, ds := range plugins {
		st := ds.Status
		if st.ObservedGeneration < ds.Generation || st.NumberAvailable < st.DesiredNumberScheduled || st.UpdatedNumberScheduled < st.DesiredNumberScheduled {
			out = append(out, fmt.Sprintf("DaemonSet %s/%s had %d of %d pods available", ds.Namespace, ds.Name, st.NumberAvailable, st.DesiredNumberScheduled))
		}
	}
	return out
}

// pluginPods are the pods on node controlled by one of the plugin DaemonSets, sorted by name.
func pluginPods(pods []corev1.Pod, node string, plugins []appsv1.DaemonSet) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		ref := metav1.GetControllerOf(&p)
		if p.Spec.NodeName != node || ref == nil || ref.Kind != "DaemonSet" {
			continue
		}
		if slices.ContainsFunc(plugins, func(ds appsv1.DaemonSet) bool { return ds.Namespace == p.Namespace && ds.Name == ref.Name }) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func dsNames(dss []appsv1.DaemonSet) []string {
	out := make([]string, 0, len(dss))
	for _, ds := range dss {
		out = append(out, ds.Namespace+"/"+ds.Name)
	}
	return out
}

// podStarted is when the pod's newest running container started (a restarted container registers
// again), else when the pod was created.
func podStarted(p corev1.Pod) time.Time {
	t := p.CreationTimestamp.Time
	for _, c := range p.Status.ContainerStatuses {
		if r := c.State.Running; r != nil && r.StartedAt.After(t) {
			t = r.StartedAt.Time
		}
	}
	return t
}

func nodeReady(n corev1.Node) bool {
	return slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
}
