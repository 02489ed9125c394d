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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// SettleWindow is how long discovery waits, from the run's start, for a device plugin that is
// (re)starting before it judges the device-plugin path. When the last plugin serving a resource
// disconnects, the kubelet's device manager marks all its devices unhealthy at once
// (ManagerImpl.PluginDisconnected → markResourceUnhealthy) and keeps their capacity for
// endpointStopGracePeriod (5 minutes): a plugin pod that restarts shows as capacity without allocatable
// until the new one registers on kubelet.sock, answers its first ListAndWatch, and the kubelet writes the
// node status again (every nodeStatusUpdateFrequency, 10 s by default). A minute covers a container
// start, the registration and several status updates; a plugin that serves nothing after that is broken,
// not starting.
const SettleWindow = 60 * time.Second

// devicePluginDir is where the kubelet listens for device plugin registrations (kubelet.sock) and the
// plugins put their sockets: DevicePluginPath of the device plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1). It is spelled out here because that package would link
// gRPC into the binary for one string; a test keeps the two equal.
const devicePluginDir = "/var/lib/kubelet/device-plugins"

// maxSettleNodes bounds the nodes one check lists pods on (one request each): a rollout's batch of nodes
// fits, and a cluster with thousands of GPU nodes costs the API server the same.
const maxSettleNodes = 16

// Settle lets the stack-ready wait of one run tell a device plugin that is re-registering (its pod new,
// not Ready yet, or being replaced) from a broken one, instead of calling the path "present but broken"
// while it recovers. A node is looked at when its status serves fewer devices than its capacity (or it is
// labelled as a GPU node and advertises none), and every GPU node while a plugin DaemonSet is not fully
// available, because the node status lags the kubelet by up to a status update. The plugin's pod is the
// node's pod owned by a DaemonSet whose template mounts devicePluginDir. The wait is bounded by the
// window; what could not be read, and every wait, becomes a note for the record. Not safe for concurrent
// use: one run's wait polls it.
type Settle struct {
	start  time.Time
	window time.Duration
	waits  map[string]*settleWait
	order  []string
	notes  []string
	noted  map[string]bool
}

// settleWait is what the run waited for on one node.
type settleWait struct {
	// first is why the node was settling when first seen; state is its status at the last check.
	first, state string
	// done is set when the node served its capacity again, after that long from the run's start.
	done  bool
	after time.Duration
	// last is the last check's time from the run's start.
	last time.Duration
}

// NewSettle starts one run's settling; the window counts from start.
func NewSettle(start time.Time) *Settle {
	return &Settle{start: start, window: SettleWindow, waits: map[string]*settleWait{}, noted: map[string]bool{}}
}

// Check is one poll of the stack-ready wait: nil when no node's device plugin is settling (the path is
// judged from nodes as they are), else an error naming the nodes still settling. nodes are the nodes
// discovery read; resource is the configured device-plugin resource ("" for any GPU resource); now is the
// poll's time. Once the window has passed nothing settles.
func (s *Settle) Check(ctx context.Context, kube kubernetes.Interface, nodes []corev1.Node, resource string, now time.Time) error {
	short := shortNodes(nodes, resource)
	elapsed := now.Sub(s.start)
	var settling map[string]string
	if elapsed < s.window {
		settling = s.inspect(ctx, kube, nodes, short, now)
	}
	s.record(short, settling, elapsed)
	if len(settling) == 0 {
		return nil
	}
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(settling)) {
		parts = append(parts, n+" ("+settling[n]+")")
	}
	// Three nodes with their reasons keep the line readable in a log that repeats it every poll.
	return fmt.Errorf("device plugin settling on %s; the device-plugin path is judged %s after the run started at the latest",
		strings.Join(firstN(parts, 3), ", "), s.window)
}

// Notes are what the record says of settling: what could not be read, then each node waited for.
func (s *Settle) Notes() []string {
	out := slices.Clone(s.notes)
	for _, n := range s.order {
		w := s.waits[n]
		if w.done {
			out = append(out, fmt.Sprintf("device plugin on %s re-registered %s after the run started (when first seen, %s); discovery waited for it instead of judging the device-plugin path broken",
				n, w.after.Round(time.Second), w.first))
			continue
		}
		out = append(out, fmt.Sprintf("device plugin on %s had not settled %s after the run started (when first seen, %s; at the last look the node %s): the device-plugin path was judged as it stood",
			n, w.last.Round(time.Second), w.first, cmp.Or(w.state, "served its capacity")))
	}
	return out
}

// note records a note once per key (the first wording).
func (s *Settle) note(key, text string) {
	if !s.noted[key] {
		s.noted[key] = true
		s.notes = append(s.notes, text)
	}
}

// inspect finds the plugin pods of the nodes to look at and returns the settling nodes with why.
func (s *Settle) inspect(ctx context.Context, kube kubernetes.Interface, nodes []corev1.Node, short map[string]string, now time.Time) map[string]string {
	shortNames := slices.Sorted(maps.Keys(short))
	list, err := kube.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		if len(short) > 0 {
			s.note("daemonsets", fmt.Sprintf("cannot list DaemonSets to find the device plugin's pods (%v): node(s) %s were judged without telling a re-registering plugin from a broken one",
				err, strings.Join(firstN(shortNames, 5), ", ")))
		}
		return nil
	}
	plugins := pluginDaemonSets(list.Items)
	if len(plugins) == 0 {
		if len(short) > 0 {
			s.note("no-plugin-daemonset", fmt.Sprintf("no DaemonSet mounts %s, so the device plugin's pods on node(s) %s could not be found: judged without telling a re-registering plugin from a broken one",
				devicePluginDir, strings.Join(firstN(shortNames, 5), ", ")))
		}
		return nil
	}
	rolling := rollingDaemonSets(plugins)
	look := shortNames
	if len(rolling) > 0 {
		look = append(look, readyGPUNodes(nodes, short)...)
	}
	if len(look) > maxSettleNodes {
		s.note("too-many-nodes", fmt.Sprintf("device plugin pods were looked for on %d of %d nodes (at most %d per check); the others were judged as they stood",
			maxSettleNodes, len(look), maxSettleNodes))
		look = look[:maxSettleNodes]
	}
	settling := map[string]string{}
	for _, node := range look {
		pods, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		if err != nil {
			s.note("pods/"+node, fmt.Sprintf("cannot list the pods on node %s to find its device plugin (%v): judged without telling a re-registering plugin from a broken one", node, err))
			continue
		}
		_, isShort := short[node]
		mine := pluginPods(pods.Items, node, plugins)
		if why := settlingWhy(mine, isShort, rolling, now, s.window); why != "" {
			settling[node] = why
		} else if isShort && len(mine) == 0 {
			s.note("no-plugin-pod/"+node, fmt.Sprintf("no device plugin pod runs on node %s (looked for pods of %s): judged as it stood", node, strings.Join(dsNames(plugins), ", ")))
		}
	}
	return settling
}

// record updates the waits from one check: a node settling now is waited for; one that neither settles
// nor is short any more is done.
func (s *Settle) record(short, settling map[string]string, elapsed time.Duration) {
	for _, n := range slices.Sorted(maps.Keys(settling)) {
		w := s.waits[n]
		if w == nil {
			w = &settleWait{first: settling[n]}
			s.waits[n] = w
			s.order = append(s.order, n)
		}
		w.done = false
	}
	for _, n := range s.order {
		w := s.waits[n]
		w.last = elapsed
		if w.done {
			continue
		}
		_, still := settling[n]
		state, isShort := short[n]
		w.state = state
		if !still && !isShort {
			w.done, w.after = true, elapsed
		}
	}
}

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
		case !podReady(p) && (short || young):
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
			hasGPU = true
			if a := n.Status.Allocatable[name]; (resource == "" || string(name) == resource) && a.Value() < c.Value() {
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
		gpu := labelledGPU(n)
		for name, c := range n.Status.Capacity {
			gpu = gpu || c.Value() > 0 && isExtendedGPUResource(name)
		}
		if gpu {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// pluginDaemonSets are the DaemonSets whose pod template mounts a hostPath at or under devicePluginDir:
// the device plugins (a plugin must put its socket there for the kubelet to reach it).
func pluginDaemonSets(all []appsv1.DaemonSet) []appsv1.DaemonSet {
	var out []appsv1.DaemonSet
	for _, ds := range all {
		spec := ds.Spec.Template.Spec
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
		if slices.ContainsFunc(spec.Containers, mounts) || slices.ContainsFunc(spec.InitContainers, mounts) {
			out = append(out, ds)
		}
	}
	return out
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

func podReady(p corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}

func nodeReady(n corev1.Node) bool {
	return slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
}
