package upgrade

// The DRA driver's rolling upgrade (scenarios/dra_upgrade.go): the DRA kubelet plugin of the canary pool
// moves to a new version while pods with claims keep starting there. A DRA driver that supports it
// (NVIDIA's, through the kubeletplugin helper's RollingUpdate) runs the old and the new plugin side by
// side on a node (a DaemonSet with maxSurge) and the kubelet moves to the new one once it registered; its
// ResourceSlices stay as they are. What the rehearsal reads is what any cluster shows: the plugin pods
// on the canary nodes (DaemonSet pods that register with the kubelet through its plugin registry), their
// version (the app.kubernetes.io/version label of Helm charts, else the image tag), the node's slices of
// the driver, and the kubelet's events on the probe pods.

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
)

// PluginRegistryDir is where the kubelet's plugin watcher finds the registration sockets of DRA (and CSI)
// kubelet plugins: a pod that mounts it from the host registers a kubelet plugin.
const PluginRegistryDir = "/var/lib/kubelet/plugins_registry"

// VersionLabel is the recommended label (Helm charts set it) that names an application's version.
const VersionLabel = "app.kubernetes.io/version"

// PluginPod is a kubelet plugin's pod on a node: a DaemonSet's pod that mounts PluginRegistryDir.
type PluginPod struct {
	Namespace, Name, Node, DaemonSet string
	UID                              types.UID
	// Version is the pod's VersionLabel, else its first container's image tag ("" when neither says).
	Version string
	Ready   bool
	// Restarts sums its containers' restarts; Waiting is a container's waiting reason and message, LastExit
	// its last termination (reason, exit code, message).
	Restarts          int32
	Waiting, LastExit string
	Deleting          bool
}

// String names the pod for findings.
func (p PluginPod) String() string {
	return fmt.Sprintf("%s/%s (DaemonSet %s, version %s)", p.Namespace, p.Name, p.DaemonSet, orUnknown(p.Version))
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// PluginPods are the kubelet plugin pods on each of nodes.
func PluginPods(ctx context.Context, kube kubernetes.Interface, nodes []string) (map[string][]PluginPod, error) {
	out := map[string][]PluginPod{}
	for _, n := range nodes {
		list, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n).String()})
		if err != nil {
			return nil, fmt.Errorf("listing the pods on %s: %w", n, err)
		}
		out[n] = []PluginPod{}
		for _, p := range list.Items {
			if pp, ok := pluginPodOf(&p); ok && p.Spec.NodeName == n {
				out[n] = append(out[n], pp)
			}
		}
		slices.SortFunc(out[n], func(a, b PluginPod) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	}
	return out, nil
}

// pluginPodOf reads a pod as a kubelet plugin's pod; false when it is not one.
func pluginPodOf(p *corev1.Pod) (PluginPod, bool) {
	owner := metav1.GetControllerOf(p)
	if owner == nil || owner.Kind != "DaemonSet" {
		return PluginPod{}, false
	}
	if !slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool {
		return v.HostPath != nil && path.Clean(v.HostPath.Path) == PluginRegistryDir
	}) {
		return PluginPod{}, false
	}
	pp := PluginPod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, DaemonSet: owner.Name, UID: p.UID,
		Version: p.Labels[VersionLabel], Deleting: p.DeletionTimestamp != nil}
	if pp.Version == "" && len(p.Spec.Containers) > 0 {
		pp.Version = imageTag(p.Spec.Containers[0].Image)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			pp.Ready = c.Status == corev1.ConditionTrue
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		pp.Restarts += cs.RestartCount
		if w := cs.State.Waiting; w != nil && pp.Waiting == "" {
			pp.Waiting = strings.TrimSuffix(w.Reason+": "+w.Message, ": ")
		}
		if t := cs.LastTerminationState.Terminated; t != nil && pp.LastExit == "" {
			pp.LastExit = strings.TrimSuffix(strings.TrimSpace(fmt.Sprintf("%s, exit code %d: %s", t.Reason, t.ExitCode, strings.TrimSpace(t.Message))), ":")
		}
	}
	return pp, true
}

// imageTag is an image reference's tag ("" for none or a digest only).
func imageTag(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ""
	}
	return ref[i+1:]
}

// cannotStart says why a new plugin pod will not become Ready without someone's help ("" while it may):
// its container in back-off after failing twice, or its image not to be had.
func cannotStart(p PluginPod) string {
	reason, _, _ := strings.Cut(p.Waiting, ":")
	switch {
	case reason == "CrashLoopBackOff" && p.Restarts >= 2:
	case slices.Contains([]string{"ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError"}, reason):
	default:
		return ""
	}
	why := p.Waiting
	if p.LastExit != "" {
		why += "; last exit: " + p.LastExit
	}
	return fmt.Sprintf("%s, %d restarts", why, p.Restarts)
}

// RollState judges a roll of the kubelet plugin to version to from the plugin pods on each node before
// it and now: done when every node runs a pod of to that is new and Ready, with no pod of that DaemonSet
// from before left; terminal (not "") when a new pod cannot start, naming it, its failure and the pods of
// before still serving; progress says what is still awaited.
func RollState(before, now map[string][]PluginPod, to string) (done bool, terminal, progress string) {
	var waiting, broken []string
	for _, node := range slices.Sorted(maps.Keys(before)) {
		old := map[types.UID]PluginPod{}
		for _, p := range before[node] {
			old[p.UID] = p
		}
		var fresh, rolled []PluginPod
		for _, p := range now[node] {
			if _, was := old[p.UID]; was {
				continue
			}
			fresh = append(fresh, p)
			if p.Version == to && p.Ready && !p.Deleting {
				rolled = append(rolled, p)
			}
		}
		for _, p := range fresh {
			if why := cannotStart(p); why != "" {
				broken = append(broken, fmt.Sprintf("on %s the new plugin pod %s cannot start (%s); %s", node, p, why, serving(now[node], old)))
			}
		}
		switch {
		case len(rolled) == 0 && len(fresh) == 0:
			waiting = append(waiting, node+": no new plugin pod yet")
		case len(rolled) == 0:
			var s []string
			for _, p := range fresh {
				s = append(s, fmt.Sprintf("%s ready=%t %s", p, p.Ready, p.Waiting))
			}
			waiting = append(waiting, fmt.Sprintf("%s: no new plugin pod of version %s Ready (new: %s)", node, to, strings.Join(s, "; ")))
		default:
			for _, p := range now[node] {
				if _, was := old[p.UID]; was && slices.ContainsFunc(rolled, func(r PluginPod) bool { return r.DaemonSet == p.DaemonSet && r.Namespace == p.Namespace }) {
					waiting = append(waiting, fmt.Sprintf("%s: the old plugin pod %s is still there", node, p))
				}
			}
		}
	}
	if len(broken) > 0 {
		return false, strings.Join(broken, "; "), strings.Join(waiting, "; ")
	}
	return len(waiting) == 0, "", strings.Join(waiting, "; ")
}

// RollbackState judges a roll back to version from the plugin pods on each node when the rollback began
// and now: done when, on every node, each DaemonSet that had a pod of another version there then now has
// one Ready pod, of version, and no pod of another version left (the pod that kept serving through a
// failed roll counts); terminal when a new pod of version cannot start.
func RollbackState(began, now map[string][]PluginPod, version string) (done bool, terminal, progress string) {
	var waiting, broken []string
	for _, node := range slices.Sorted(maps.Keys(began)) {
		old := map[types.UID]bool{}
		var rolled []string // namespace/DaemonSet
		for _, p := range began[node] {
			old[p.UID] = true
			if k := p.Namespace + "/" + p.DaemonSet; p.Version != version && !slices.Contains(rolled, k) {
				rolled = append(rolled, k)
			}
		}
		for _, k := range rolled {
			var back, other []PluginPod
			for _, p := range now[node] {
				if p.Namespace+"/"+p.DaemonSet != k {
					continue
				}
				if why := cannotStart(p); why != "" && !old[p.UID] && p.Version == version {
					broken = append(broken, fmt.Sprintf("on %s the plugin pod %s cannot start (%s)", node, p, why))
				}
				if p.Version == version && p.Ready && !p.Deleting {
					back = append(back, p)
				} else {
					other = append(other, p)
				}
			}
			switch {
			case len(back) == 0:
				waiting = append(waiting, fmt.Sprintf("%s: no Ready pod of %s at version %s", node, k, version))
			case len(other) > 0:
				waiting = append(waiting, fmt.Sprintf("%s: %s still left", node, other[0]))
			}
		}
	}
	if len(broken) > 0 {
		return false, strings.Join(broken, "; "), strings.Join(waiting, "; ")
	}
	return len(waiting) == 0, "", strings.Join(waiting, "; ")
}

// serving says which plugin pods of before still run on the node, Ready or not.
func serving(now []PluginPod, old map[types.UID]PluginPod) string {
	var s []string
	for _, p := range now {
		if _, was := old[p.UID]; was {
			s = append(s, fmt.Sprintf("%s Ready=%t", p, p.Ready))
		}
	}
	if len(s) == 0 {
		return "no plugin pod from before the roll is left on the node"
	}
	return "still there from before the roll: " + strings.Join(s, ", ")
}

// DriverPluginVersion is the version the plugin pods of one DaemonSet run on every one of nodes, when
// exactly one DaemonSet has kubelet plugin pods on all of them and they agree ("" otherwise): the DRA
// driver's version before a roll, known before anything changed.
func DriverPluginVersion(pods map[string][]PluginPod, nodes []string) string {
	versions := map[string]map[string]bool{} // namespace/DaemonSet → versions
	count := map[string]int{}
	for _, n := range nodes {
		seen := map[string]bool{}
		for _, p := range pods[n] {
			k := p.Namespace + "/" + p.DaemonSet
			if versions[k] == nil {
				versions[k] = map[string]bool{}
			}
			versions[k][p.Version] = true
			if !seen[k] {
				seen[k] = true
				count[k]++
			}
		}
	}
	found := ""
	for k, c := range count {
		if c != len(nodes) {
			continue
		}
		if found != "" || len(versions[k]) != 1 {
			return ""
		}
		found = k
	}
	for v := range versions[found] {
		return v
	}
	return ""
}

// Versions are the plugin versions of every kubelet-plugin DaemonSet with a pod on any of the nodes (the
// DRA driver's, and whatever other kubelet plugin runs there), as "DaemonSet=version" sorted; the rehearsal
// names the version it moved from with them.
func Versions(pods map[string][]PluginPod) []string {
	var out []string
	for _, ps := range pods {
		for _, p := range ps {
			if v := p.Namespace + "/" + p.DaemonSet + "=" + orUnknown(p.Version); !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	slices.Sort(out)
	return out
}

// SliceWatch watches a driver's ResourceSlices on some nodes through a roll and records every moment a
// node offered fewer devices than before and every slice deleted or created: a rolling upgrade that
// keeps its slices shows none.
type SliceWatch struct {
	driver string
	nodes  []string

	mu       sync.Mutex
	current  map[types.UID]sliceState
	initial  map[string]int // node → devices before
	findings []string
	events   int
	short    map[string]bool // nodes reported short already (one finding per shortage)
	cancel   context.CancelFunc
	done     chan struct{}
}

type sliceState struct {
	name, node string
	devices    int
}

// WatchSlices starts watching driver's slices on nodes; Stop ends it and returns the findings.
func WatchSlices(ctx context.Context, kube kubernetes.Interface, driver string, nodes []string) (*SliceWatch, error) {
	sel := fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorDriver, driver).String()
	list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("listing the ResourceSlices of %s: %w", driver, err)
	}
	w := &SliceWatch{driver: driver, nodes: slices.Clone(nodes), current: map[types.UID]sliceState{}, initial: map[string]int{},
		short: map[string]bool{}, done: make(chan struct{})}
	for i := range list.Items {
		if st, ok := w.stateOf(&list.Items[i]); ok {
			w.current[list.Items[i].UID] = st
			w.initial[st.node] += st.devices
		}
	}
	for _, n := range nodes {
		if w.initial[n] == 0 {
			return nil, fmt.Errorf("node %s publishes no device of %s in a ResourceSlice: there is nothing to keep through a roll", n, driver)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = sel
		return kube.ResourceV1().ResourceSlices().Watch(ctx, o)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(wctx, list.ResourceVersion, lw)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watching the ResourceSlices of %s: %w", driver, err)
	}
	go func() {
		defer close(w.done)
		defer rw.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case ev, ok := <-rw.ResultChan():
				if !ok {
					return
				}
				w.observe(ev.Type, ev.Object)
			}
		}
	}()
	return w, nil
}

func (w *SliceWatch) stateOf(s *resourcev1.ResourceSlice) (sliceState, bool) {
	if s.Spec.NodeName == nil || !slices.Contains(w.nodes, *s.Spec.NodeName) || s.Spec.Driver != w.driver {
		return sliceState{}, false
	}
	return sliceState{name: s.Name, node: *s.Spec.NodeName, devices: len(s.Spec.Devices)}, true
}

// observe records one watch event.
func (w *SliceWatch) observe(typ watch.EventType, obj runtime.Object) {
	s, ok := obj.(*resourcev1.ResourceSlice)
	if !ok {
		if st, isStatus := obj.(*metav1.Status); isStatus && typ == watch.Error {
			w.mu.Lock()
			w.findings = append(w.findings, "the watch of the ResourceSlices failed: "+st.Message)
			w.mu.Unlock()
		}
		return
	}
	st, mine := w.stateOf(s)
	if !mine {
		return
	}
	at := time.Now().UTC().Format("15:04:05.000")
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	switch typ {
	case watch.Deleted:
		delete(w.current, s.UID)
		w.findings = append(w.findings, fmt.Sprintf("%s: ResourceSlice %s of %s (%d devices) deleted", at, s.Name, st.node, st.devices))
	case watch.Added:
		w.current[s.UID] = st
		w.findings = append(w.findings, fmt.Sprintf("%s: ResourceSlice %s of %s (%d devices) created", at, s.Name, st.node, st.devices))
	case watch.Modified:
		w.current[s.UID] = st
	}
	have := 0
	for _, c := range w.current {
		if c.node == st.node {
			have += c.devices
		}
	}
	switch {
	case have < w.initial[st.node] && !w.short[st.node]:
		w.short[st.node] = true
		w.findings = append(w.findings, fmt.Sprintf("%s: %s offered %d of its %d devices of %s", at, st.node, have, w.initial[st.node], w.driver))
	case have >= w.initial[st.node]:
		w.short[st.node] = false
	}
}

// Stop ends the watch and returns what it found (nothing for a roll that kept the slices) and how many
// events of the nodes' slices it saw.
func (w *SliceWatch) Stop() (findings []string, events int) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.findings), w.events
}

// Initial is how many devices of the driver each node offered when the watch started.
func (w *SliceWatch) Initial() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.initial)
}

// Local DaemonSet and annotation of the project's fake GPU agent on the canary pool (localcluster
// CanaryPluginDaemonSet); repeated because the framework must not import the local cluster.
const (
	localCanaryDaemonSet     = "fake-device-plugin-canary"
	localCanaryContainer     = "fake-device-plugin"
	localPluginTargetAnnotn  = "gpuconform.io/fake-plugin-upgrade-to"
	localPluginVersionPrefix = "--version="
)

// LocalDRA is the local cluster's provider of the DRA driver's rolling upgrade: the canary pool's agent
// DaemonSet (whose DRA half is the DRA kubelet plugin) gets the new version in its pod template (its
// --version argument and VersionLabel), and rolls it with a surge, node by node.
type LocalDRA struct {
	Kube      kubernetes.Interface
	Namespace string
}

// Name implements Provider.
func (l *LocalDRA) Name() string {
	return "local (the canary pool's fake agent DaemonSet, rolled with a surge)"
}

// Apply implements Provider.
func (l *LocalDRA) Apply(ctx context.Context, nodes []string, target string) error {
	return l.set(ctx, nodes, target, false)
}

// Rollback implements Provider: the DaemonSet goes back whole (nodes may be some of its nodes: the
// leftover cleanup rolls back node by node).
func (l *LocalDRA) Rollback(ctx context.Context, nodes []string, from string) error {
	return l.set(ctx, nodes, from, true)
}

// set puts version into the canary DaemonSet's pod template; it refuses when the DaemonSet's pods are not
// exactly on nodes (it would roll others, or miss some), or, for a rollback, some node is not one of its.
func (l *LocalDRA) set(ctx context.Context, nodes []string, version string, back bool) error {
	dss := l.Kube.AppsV1().DaemonSets(l.Namespace)
	ds, err := dss.Get(ctx, localCanaryDaemonSet, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading DaemonSet %s/%s: %w", l.Namespace, localCanaryDaemonSet, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return err
	}
	pods, err := l.Kube.CoreV1().Pods(l.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return err
	}
	var on []string
	for _, p := range pods.Items {
		if c := metav1.GetControllerOf(&p); c != nil && c.UID == ds.UID && !slices.Contains(on, p.Spec.NodeName) {
			on = append(on, p.Spec.NodeName)
		}
	}
	slices.Sort(on)
	want := slices.Sorted(slices.Values(nodes))
	covered := !slices.ContainsFunc(want, func(n string) bool { return !slices.Contains(on, n) })
	if back && !covered || !back && !slices.Equal(on, want) {
		return fmt.Errorf("DaemonSet %s/%s runs on %v, not on exactly the nodes to roll %v: rolling it would not be a roll of those nodes", l.Namespace, localCanaryDaemonSet, on, want)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := dss.Get(ctx, localCanaryDaemonSet, metav1.GetOptions{})
		if err != nil {
			return err
		}
		i := slices.IndexFunc(ds.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == localCanaryContainer })
		if i < 0 {
			return fmt.Errorf("DaemonSet %s/%s has no container %s", l.Namespace, localCanaryDaemonSet, localCanaryContainer)
		}
		c := &ds.Spec.Template.Spec.Containers[i]
		c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, localPluginVersionPrefix) })
		c.Args = append(c.Args, localPluginVersionPrefix+version)
		if ds.Spec.Template.Labels == nil {
			ds.Spec.Template.Labels = map[string]string{}
		}
		ds.Spec.Template.Labels[VersionLabel] = version
		_, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
}

// LocalTarget is the plugin version the local canary agent declares it can be rolled to ("" none).
func (l *LocalDRA) LocalTarget(ctx context.Context) (string, error) {
	ds, err := l.Kube.AppsV1().DaemonSets(l.Namespace).Get(ctx, localCanaryDaemonSet, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return ds.Annotations[localPluginTargetAnnotn], nil
}

// LocalDRAServes reports whether the local provider can roll the canary's DRA plugin: the canary agent's
// DaemonSet exists.
func (l *LocalDRA) LocalDRAServes(ctx context.Context) bool {
	_, err := l.Kube.AppsV1().DaemonSets(l.Namespace).Get(ctx, localCanaryDaemonSet, metav1.GetOptions{})
	return err == nil
}
