package cluster

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/internal/podcond"
)

// The DRA path is present when a DeviceClass selects a driver that publishes devices. Two ways it can be
// present and still serve nothing are found here rather than by specs that each wait out their timeout:
// a class whose selectors accept none of the published devices (a driver upgrade renamed or retyped an
// attribute), and slices whose driver has no kubelet plugin running on the nodes that publish them (the
// kubelet then refuses every pod given its devices: "DRA driver X is not registered"). Waiting mends
// neither, so both are settled: the stack-ready wait does not wait for them.

// maxPluginNodes bounds how many nodes' pods discovery lists to find a DRA driver's kubelet plugin: one
// list per node (a field selector on spec.nodeName), taken from every publishing driver in turn.
const maxPluginNodes = 16

// SettledFor is how long a settled broken path must stay the same before the stack-ready wait ends on
// it. The kubelet gives a DRA driver whose plugin unregistered 30 s to come back before it wipes the
// driver's ResourceSlices (defaultWipingDelay, pkg/kubelet/cm/dra/manager.go in k8s v1.37): a plugin
// that is only restarting has registered again, and a driver that went away has no slices left, within
// it. A DeviceClass edited by hand, or slices being republished by a driver upgrade, settle in it too.
const SettledFor = 30 * time.Second

// draDecision is what discovery concluded about the DRA path.
type draDecision struct {
	path *DRAPath
	// absent says why there is no path ("" when there is one, or it is broken).
	absent string
	// broken says why the path is present but not working; settled that waiting will not change it.
	broken  string
	settled bool
	notes   []string
}

// decideDRA finds the DRA path, narrows it to the devices its class selects, and checks that the
// driver's kubelet plugin runs where its devices are published.
func decideDRA(s Snapshot, configured string) draDecision {
	p, absent, selectsNothing := discoverDRA(s, configured)
	switch {
	case selectsNothing != "":
		return draDecision{broken: selectsNothing, settled: true}
	case p == nil:
		return draDecision{absent: absent, broken: brokenDRA(s, configured)}
	}
	d := draDecision{path: p}
	var missing []string
	drivers := strings.Split(p.Driver, ",")
	for _, driver := range drivers {
		broken, note := pluginMissing(s, driver)
		if broken != "" {
			missing = append(missing, broken)
		}
		if note != "" {
			d.notes = append(d.notes, note)
		}
	}
	if len(missing) == len(drivers) {
		// No driver behind the class can prepare a device: every spec on the path would wait its pod
		// out in ContainerCreating.
		return draDecision{broken: strings.Join(missing, "; "), settled: true, notes: d.notes}
	}
	d.notes = append(d.notes, missing...)
	return d
}

// pluginMissing says, for one driver, whether its kubelet plugin is missing on every node that publishes
// its devices (broken), or on some of them (note). Pods that could not be listed leave it unchecked, with
// a note; nodes whose pods were not listed (past maxPluginNodes) are not judged.
func pluginMissing(s Snapshot, driver string) (broken, note string) {
	publishing := publishingNodes(s.ResourceSlices)[driver]
	if len(publishing) == 0 {
		return "", ""
	}
	if s.NodePodsUnread != "" {
		return "", fmt.Sprintf("DRA driver %s: whether its kubelet plugin runs on the nodes that publish its devices was not checked: %s", driver, s.NodePodsUnread)
	}
	var read, without []string
	for _, n := range publishing {
		pods, ok := s.NodePods[n]
		if !ok {
			continue
		}
		read = append(read, n)
		if !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return servesPlugin(p, driver) }) {
			without = append(without, n)
		}
	}
	if len(without) == 0 {
		return "", ""
	}
	scope := ""
	if len(read) < len(publishing) {
		scope = fmt.Sprintf(" (pods read on %d of the %d nodes that publish them)", len(read), len(publishing))
	}
	where := fmt.Sprintf("no plugin pod is Ready on node(s) %s (none mounts the kubelet's plugin registry, %s, or the driver's plugin directory, %s)",
		strings.Join(firstN(without, 5), ", "), "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/"+driver)
	if len(without) < len(read) {
		return "", fmt.Sprintf("DRA driver %s publishes ResourceSlices, but %s%s: pods given its devices there fail with \"DRA driver %s is not registered\"",
			driver, where, scope, driver)
	}
	return fmt.Sprintf("DRA driver %s publishes ResourceSlices, but %s%s: its kubelet plugin is not running, so the driver is not registered with the kubelet and every pod given its devices fails with \"DRA driver %s is not registered\" (check the driver's DaemonSet; the kubelet wipes the slices of a plugin that unregistered, so slices without one were published by something else or outlived it)",
		driver, where, scope, driver), ""
}

// servesPlugin reports a pod that may be driver's kubelet plugin: running, Ready, not being deleted, and
// mounting from the node the driver's own plugin directory (…/plugins/<driver>), or the kubelet's plugin
// registry or a directory above it (…/plugins_registry, …/plugins, the kubelet's root) while mounting no
// other plugin's own directory (a CSI node plugin mounts the registry too, and its own directory). Paths
// are matched by their end, so a kubelet with another --root-dir is recognised.
func servesPlugin(p corev1.Pod, driver string) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podcond.Ready(&p) {
		return false
	}
	return mountsPlugin(p.Spec, driver)
}

// mountsPlugin reports a pod spec (a running pod's, or a DaemonSet's template) that mounts a kubelet
// plugin's directories for driver, as servesPlugin says.
func mountsPlugin(spec corev1.PodSpec, driver string) bool {
	own, covers, other := false, false, false
	for _, v := range spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		dir := path.Clean(v.HostPath.Path)
		switch {
		case path.Base(path.Dir(dir)) == "plugins" && path.Base(dir) == driver:
			own = true
		case path.Base(path.Dir(dir)) == "plugins":
			other = true
		case slices.Contains([]string{"plugins_registry", "plugins", "kubelet"}, path.Base(dir)):
			covers = true
		}
	}
	return own || covers && !other
}

// publishingNodes lists, per driver, the nodes that have a node-local ResourceSlice of it with devices,
// sorted.
func publishingNodes(published []resourcev1.ResourceSlice) map[string][]string {
	out := map[string][]string{}
	for _, sl := range published {
		if sl.Spec.NodeName != nil && len(sl.Spec.Devices) > 0 && !slices.Contains(out[sl.Spec.Driver], *sl.Spec.NodeName) {
			out[sl.Spec.Driver] = append(out[sl.Spec.Driver], *sl.Spec.NodeName)
		}
	}
	for d := range out {
		slices.Sort(out[d])
	}
	return out
}

// pluginNodes picks the nodes whose pods are listed: the publishing nodes of each driver in turn (driver
// order, then node order), so every driver has some read, at most maxPluginNodes in all.
func pluginNodes(published []resourcev1.ResourceSlice) []string {
	byDriver := publishingNodes(published)
	drivers := slices.Sorted(maps.Keys(byDriver))
	var out []string
	for i := 0; len(out) < maxPluginNodes; i++ {
		more := false
		for _, d := range drivers {
			if i < len(byDriver[d]) {
				more = true
				if n := byDriver[d][i]; !slices.Contains(out, n) && len(out) < maxPluginNodes {
					out = append(out, n)
				}
			}
		}
		if !more {
			break
		}
	}
	return out
}

// collectPluginPods lists the pods of the nodes pluginNodes picks, one node at a time, keeping those
// that mount a hostPath (a kubelet plugin does). It stops at the first list that fails and says why.
func collectPluginPods(ctx context.Context, kube kubernetes.Interface, published []resourcev1.ResourceSlice) (map[string][]corev1.Pod, string) {
	nodes := pluginNodes(published)
	if len(nodes) == 0 {
		return nil, ""
	}
	out := map[string][]corev1.Pod{}
	for _, n := range nodes {
		list, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n).String()})
		if err != nil {
			what := "cannot list"
			if apierrors.IsForbidden(err) {
				what = "may not list"
			}
			return nil, fmt.Sprintf("%s pods on node %s: %v", what, n, err)
		}
		pods := []corev1.Pod{}
		for _, p := range list.Items {
			// The field selector is repeated: not every client (fakes) honours it.
			if p.Spec.NodeName == n && slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil }) {
				pods = append(pods, p)
			}
		}
		out[n] = pods
	}
	return out, ""
}

// SettledBroken lists the broken paths that are settled, with their findings, in path order ("" when
// none): the stack-ready wait ends on them once they stay the same for SettledFor.
func (c Capabilities) SettledBroken() string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(c.Settled)) {
		if c.Settled[p] {
			out = append(out, p+": "+c.Broken[p])
		}
	}
	return strings.Join(out, "\n")
}

// draModel reads the driver version and model the compatibility record shows from the first device of
// the path's drivers that publishes them.
func draModel(published []resourcev1.ResourceSlice, drivers []string) (version, model string) {
	for _, sl := range published {
		if !slices.Contains(drivers, sl.Spec.Driver) || sl.Spec.NodeName == nil {
			continue
		}
		for _, d := range sl.Spec.Devices {
			version = cmp.Or(version, attr(d, "driverVersion"))
			model = cmp.Or(model, attr(d, "model"), attr(d, "productName"))
		}
	}
	return version, model
}
