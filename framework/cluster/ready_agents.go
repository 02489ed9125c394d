package cluster

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/diagnose"
)

// The GPU stack's node agents are read as Kueue's controller is (ready_component.go): when an allocation
// path has no devices, or is broken, the DaemonSets that serve it say whether waiting can mend it. They
// are found by what they serve, never by name, so NVIDIA's, AMD's or a vendor's agents read the same: a
// DaemonSet whose pod template mounts the kubelet's device-plugin directory is a device plugin, one that
// mounts the kubelet's plugin registry or a DRA driver's plugin directory is that driver's kubelet plugin
// (mountsPlugin). One that is scheduled on no node, crash-looping on a GPU node, or whose image cannot be
// pulled there is down for good: the stack wait stops at once and names it, what keeps it off the GPU
// nodes, and the fix.

// gpuAgent is a DaemonSet that serves an allocation path on the nodes.
type gpuAgent struct {
	ds appsv1.DaemonSet
	// devicePlugin: its template mounts devicePluginDir; drivers: the DRA drivers whose kubelet plugin
	// directories it mounts.
	devicePlugin bool
	drivers      []string
}

// findGPUAgents are the DaemonSets of all that run a device plugin or the kubelet plugin of one of
// drivers, sorted by namespace and name.
func findGPUAgents(all []appsv1.DaemonSet, drivers []string) []gpuAgent {
	var out []gpuAgent
	for _, ds := range all {
		a := gpuAgent{ds: ds, devicePlugin: mountsDevicePluginDir(ds.Spec.Template.Spec)}
		for _, d := range drivers {
			if mountsPlugin(ds.Spec.Template.Spec, d) {
				a.drivers = append(a.drivers, d)
			}
		}
		if a.devicePlugin || len(a.drivers) > 0 {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b gpuAgent) int {
		return cmp.Or(strings.Compare(a.ds.Namespace, b.ds.Namespace), strings.Compare(a.ds.Name, b.ds.Name))
	})
	return out
}

// component names what the agent serves: "device plugin", "DRA kubelet plugin (driver D)", or both.
func (a gpuAgent) component() string {
	var roles []string
	if a.devicePlugin {
		roles = append(roles, "device plugin")
	}
	if len(a.drivers) > 0 {
		roles = append(roles, fmt.Sprintf("DRA kubelet plugin (driver %s)", strings.Join(a.drivers, ", ")))
	}
	return strings.Join(roles, " and ")
}

// paths are the allocation paths the agent serves.
func (a gpuAgent) paths() []string {
	var out []string
	if a.devicePlugin {
		out = append(out, config.PathDevicePlugin)
	}
	if len(a.drivers) > 0 {
		out = append(out, config.PathDRA)
	}
	return out
}

// agentReady reports a DaemonSet whose controller has seen its spec and schedules pods, every one of them
// updated and Ready.
func agentReady(ds *appsv1.DaemonSet) bool {
	st := ds.Status
	return st.ObservedGeneration >= ds.Generation && st.DesiredNumberScheduled > 0 &&
		st.NumberReady >= st.DesiredNumberScheduled && st.UpdatedNumberScheduled >= st.DesiredNumberScheduled
}

// describeAgent reads a GPU node agent's DaemonSet and its pods as of now: nil when it is ready, else
// what is down. nodes are every node, as discovery read them.
func describeAgent(ctx context.Context, kube kubernetes.Interface, a gpuAgent, nodes []corev1.Node, now time.Time) *ComponentDown {
	ds := &a.ds
	if agentReady(ds) {
		return nil
	}
	c := &ComponentDown{Component: a.component()}
	var pods []corev1.Pod
	podsRead, unread := true, ""
	if ds.Status.DesiredNumberScheduled > 0 {
		var err error
		if pods, err = daemonSetPods(ctx, kube, *ds); err != nil {
			podsRead, unread = false, fmt.Sprintf("cannot list its pods (%s)", reasonOf(err))
		}
	}
	classifyDaemonSet(c, ds, pods, podsRead, nodes, now)
	if unread != "" {
		c.Why += "; " + unread
	}
	return c
}

// classifyDaemonSet fills c from the DaemonSet and its pods (podsRead false: they could not be read), as
// classify does from a Deployment. Terminal: scheduled on no node while nothing in its template fits a
// GPU node (scheduledNowhere), or a pod on a GPU node (any node, when none is known as one) failing for
// good. A pod that cannot be scheduled, is starting, or is being replaced is not.
func classifyDaemonSet(c *ComponentDown, ds *appsv1.DaemonSet, pods []corev1.Pod, podsRead bool, nodes []corev1.Node, now time.Time) {
	st := ds.Status
	c.Kind, c.Namespace, c.Name = KindDaemonSet, ds.Namespace, ds.Name
	c.Desired, c.Ready, c.PodsUnknown = st.DesiredNumberScheduled, st.NumberReady, !podsRead
	stale := st.ObservedGeneration < ds.Generation
	if c.Desired == 0 {
		if stale {
			c.Rollout, c.Why = true, fmt.Sprintf("its controller has not observed generation %d yet", ds.Generation)
			return
		}
		c.Why, c.Terminal = scheduledNowhere(ds.Spec.Template.Spec, nodes)
		return
	}
	gpu := gpuNodeSet(nodes)
	onGPU := func(p *corev1.Pod) bool { return len(gpu) == 0 || gpu[targetNode(p)] }
	t := tallyPods(pods, now, onGPU)
	var final []podReading
	for _, r := range t.pods {
		if !r.state.ready {
			c.Pods = append(c.Pods, fmt.Sprintf("%s on %s: %s", r.pod.Name, cmp.Or(targetNode(r.pod), "no node"), r.state.words))
		}
		if r.state.final && onGPU(r.pod) {
			final = append(final, r)
		}
	}
	c.Pods = firstN(c.Pods, 5)
	c.NewestPod = t.newest
	young := !t.newest.IsZero() && now.Sub(t.newest) < SettleWindow
	c.Rollout = stale || st.UpdatedNumberScheduled < c.Desired || t.leaving > 0 || young
	switch {
	case len(final) > 0:
		c.Terminal, c.Why = true, failingForGoodWhy(final, len(gpu) > 0)
	case !podsRead:
		c.Why = "its pods could not be read, so whether they are starting is unknown"
	case t.live == 0 && t.leaving > 0:
		c.Why = "its pods are terminating; their replacements are not created yet"
	case t.live == 0:
		c.Why = fmt.Sprintf("it has created none of its %d pods yet (its events say why)", c.Desired)
	case t.failing > 0:
		c.Why = fmt.Sprintf("%d of its pods cannot be scheduled (see their states)", t.failing)
	case c.Rollout:
		c.Why = fmt.Sprintf("a rollout is in progress (%d of %d pods updated) and pods are starting", st.UpdatedNumberScheduled, c.Desired)
	default:
		c.Why = fmt.Sprintf("%d of its %d pods are not Ready", c.Desired-c.Ready, c.Desired)
	}
}

// failingForGoodWhy says where the agent's pods fail for good, how the first of them does, and the fix.
func failingForGoodWhy(final []podReading, gpuNodes bool) string {
	var where []string
	for _, r := range final {
		where = append(where, cmp.Or(targetNode(r.pod), r.pod.Name))
	}
	first := final[0]
	ns, pod, ctr := first.pod.Namespace, first.pod.Name, first.state.container
	var what, fix string
	switch {
	case first.state.reason == reasonCrashLoop:
		what = fmt.Sprintf("container %s of pod %s is in a crash loop after %d restarts", ctr, pod, first.state.restarts)
		fix = fmt.Sprintf("read why it exits (`kubectl -n %s logs %s -c %s --previous`) and fix its configuration or the node", ns, pod, ctr)
	case imageNotPullable(first.state.reason):
		what = fmt.Sprintf("the image %s of container %s of pod %s is not pullable (%s)", cmp.Or(containerImage(first.pod, ctr), "?"), ctr, pod, first.state.reason)
		fix = "fix the image reference, or the nodes' access to its registry"
	default:
		what = fmt.Sprintf("container %s of pod %s cannot be created (%s)", ctr, pod, first.state.reason)
		fix = "create the Secret or ConfigMap it refers to, or fix the reference"
	}
	noun := "GPU node(s)"
	if !gpuNodes {
		noun = "node(s)"
	}
	return fmt.Sprintf("its pods on %s %s fail for good (see their states): %s, so the node's devices are not served until it is fixed; %s",
		noun, strings.Join(firstN(where, 5), ", "), what, fix)
}

// targetNode is the node a DaemonSet's pod is bound to or, while it is Pending, the one its controller
// made it for (a required node affinity on metadata.name), "" when neither.
func targetNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if f.Key == metav1.ObjectNameField && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	return ""
}

// gpuNodeSet are the GPU nodes (isGPUNode) by name.
func gpuNodeSet(nodes []corev1.Node) map[string]bool {
	out := map[string]bool{}
	for _, n := range nodes {
		if isGPUNode(n) {
			out[n.Name] = true
		}
	}
	return out
}

// exclusionKind groups the nodes a DaemonSet's template keeps its pods off.
type exclusionKind int

const (
	excludedBySelector exclusionKind = iota
	excludedByTaint
)

// exclusion is why a node does not take a DaemonSet's pod.
type exclusion struct {
	kind exclusionKind
	// what names the nodeSelector entry, the required node affinity, or the taint; fix says what to do.
	what, fix string
}

// scheduledNowhere says why a DaemonSet whose controller schedules its pods on no node runs on none of the
// GPU nodes (isGPUNode; every node when none is one): for each, the first of the DaemonSet controller's
// own tests it fails (k8s.io/kubernetes pkg/controller/daemon: its nodeSelector, its required node
// affinity, a NoSchedule or NoExecute taint its pods do not tolerate even with the tolerations the
// controller gives every daemon pod), grouped, and the fix. It is final unless some node passes every
// test: the controller's count is then behind its spec.
func scheduledNowhere(spec corev1.PodSpec, nodes []corev1.Node) (string, bool) {
	candidates, noun, prefix := []corev1.Node{}, "GPU node", ""
	for _, n := range nodes {
		if isGPUNode(n) {
			candidates = append(candidates, n)
		}
	}
	if len(candidates) == 0 {
		candidates, noun = nodes, "node"
		prefix = fmt.Sprintf("no node is known as a GPU node (none has a GPU resource or a label %s), and ", strings.Join(gpuNodeLabels, " or "))
	}
	if len(candidates) == 0 {
		return "the cluster has no node", true
	}
	pod := &corev1.Pod{Spec: *spec.DeepCopy()}
	addDaemonTolerations(&pod.Spec)
	var order []exclusion
	excluded := map[exclusion][]string{}
	var fits []string
	for i := range candidates {
		n := &candidates[i]
		e, ok := excludes(pod, n)
		if !ok {
			fits = append(fits, n.Name)
			continue
		}
		if _, seen := excluded[e]; !seen {
			order = append(order, e)
		}
		excluded[e] = append(excluded[e], n.Name)
	}
	var parts, fixes []string
	for _, e := range order {
		parts = append(parts, describeExclusion(e, excluded[e], len(candidates), noun))
		if !slices.Contains(fixes, e.fix) {
			fixes = append(fixes, e.fix)
		}
	}
	if len(fits) > 0 {
		slices.Sort(fits)
		parts = append(parts, fmt.Sprintf("%s(s) %s fit its pod template, so its controller has not counted them yet", noun, strings.Join(firstN(fits, 5), ", ")))
		return prefix + strings.Join(parts, "; "), false
	}
	return prefix + strings.Join(slices.Concat(parts, fixes), "; "), true
}

// describeExclusion says that e keeps the DaemonSet's pods off nodes, of the total candidates.
func describeExclusion(e exclusion, nodes []string, total int, noun string) string {
	slices.Sort(nodes)
	list := strings.Join(firstN(nodes, 5), ", ")
	all := len(nodes) == total
	switch {
	case e.kind == excludedByTaint && all && total == 1:
		return fmt.Sprintf("the only %s, %s, carries taint %s, which its pods do not tolerate", noun, list, e.what)
	case e.kind == excludedByTaint && all:
		return fmt.Sprintf("the %d %ss (%s) carry taint %s, which its pods do not tolerate", total, noun, list, e.what)
	case e.kind == excludedByTaint:
		return fmt.Sprintf("%s(s) %s carry taint %s, which its pods do not tolerate", noun, list, e.what)
	case all && total == 1:
		return fmt.Sprintf("%s does not match the only %s, %s", e.what, noun, list)
	case all:
		return fmt.Sprintf("%s matches none of the %d %ss (%s)", e.what, total, noun, list)
	}
	return fmt.Sprintf("%s does not match %s(s) %s", e.what, noun, list)
}

// excludes says what keeps pod off node, in the order the DaemonSet controller tests: the nodeSelector
// (its first entry the node's labels lack), the required node affinity, then the taints.
func excludes(pod *corev1.Pod, node *corev1.Node) (exclusion, bool) {
	for _, k := range slices.Sorted(maps.Keys(pod.Spec.NodeSelector)) {
		v := pod.Spec.NodeSelector[k]
		if !labels.SelectorFromSet(labels.Set{k: v}).Matches(labels.Set(node.Labels)) {
			return exclusion{kind: excludedBySelector, what: fmt.Sprintf("its nodeSelector %s=%s", k, v), fix: "label the GPU nodes or fix the selector"}, true
		}
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		required := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		if ok, err := nodeaffinity.NewLazyErrorNodeSelector(required).Match(node); !ok {
			what := "its required node affinity " + formatNodeSelector(required)
			if err != nil {
				what += fmt.Sprintf(" (invalid: %v)", err)
			}
			return exclusion{kind: excludedBySelector, what: what, fix: "label the GPU nodes or fix the affinity"}, true
		}
	}
	taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	if untolerated {
		return exclusion{kind: excludedByTaint, what: FormatTaint(taint), fix: "tolerate the taint in the DaemonSet's pod template or remove it from the nodes"}, true
	}
	return exclusion{}, false
}

// addDaemonTolerations adds the tolerations the DaemonSet controller gives every daemon pod
// (AddOrUpdateDaemonPodTolerations, k8s.io/kubernetes pkg/controller/daemon/util): node conditions and
// cordons never keep a daemon pod off a node.
func addDaemonTolerations(spec *corev1.PodSpec) {
	add := func(key string, effect corev1.TaintEffect) {
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect})
	}
	add(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)
	add(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)
	add(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule)
	add(corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule)
	add(corev1.TaintNodePIDPressure, corev1.TaintEffectNoSchedule)
	add(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)
	if spec.HostNetwork {
		add(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)
	}
}

// formatNodeSelector writes a required node affinity as its terms, "or" between them.
func formatNodeSelector(ns *corev1.NodeSelector) string {
	terms := make([]string, 0, len(ns.NodeSelectorTerms))
	for _, t := range ns.NodeSelectorTerms {
		var reqs []string
		for _, r := range t.MatchExpressions {
			reqs = append(reqs, formatRequirement(r))
		}
		for _, r := range t.MatchFields {
			reqs = append(reqs, "field "+formatRequirement(r))
		}
		terms = append(terms, strings.Join(reqs, ", "))
	}
	if len(terms) == 1 {
		return terms[0]
	}
	return "(" + strings.Join(terms, ") or (") + ")"
}

func formatRequirement(r corev1.NodeSelectorRequirement) string {
	if r.Operator == corev1.NodeSelectorOpExists || r.Operator == corev1.NodeSelectorOpDoesNotExist {
		return r.Key + " " + string(r.Operator)
	}
	return fmt.Sprintf("%s %s (%s)", r.Key, r.Operator, strings.Join(r.Values, ", "))
}

// draDrivers are the DRA drivers whose kubelet plugins serve the DRA path: the discovered path's, those
// the DeviceClasses name (the configured class only, when one is), and those that publish ResourceSlices
// when no class names a driver. A driver whose slices are gone (its plugin scheduled nowhere) is still
// named by its class.
func draDrivers(s Snapshot, caps Capabilities, configured string) []string {
	var out []string
	add := func(d string) {
		if d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	if caps.DRA != nil {
		for d := range strings.SplitSeq(caps.DRA.Driver, ",") {
			add(d)
		}
	}
	for i := range s.DeviceClasses {
		if configured == "" || s.DeviceClasses[i].Name == configured {
			for _, d := range diagnose.ClassDrivers(&s.DeviceClasses[i]) {
				add(d)
			}
		}
	}
	if len(out) == 0 {
		for _, sl := range s.ResourceSlices {
			add(sl.Spec.Driver)
		}
	}
	slices.Sort(out)
	return out
}

// agentPaths says which allocation paths lack devices for the stack check: noDevices, paths the run
// needs and has no devices on (requested explicitly and absent, or, for "auto", every wanted path when
// none has devices), whose agents' states hold the run; broken, paths present but broken, where only an
// agent down for good does.
func agentPaths(caps Capabilities, cfg config.Config) (noDevices, broken map[string]bool) {
	noDevices, broken = map[string]bool{}, map[string]bool{}
	wanted := slices.DeleteFunc([]string{config.PathDevicePlugin, config.PathDRA}, func(p string) bool { return !cfg.WantsPath(p) })
	if explicit := cfg.ExplicitPaths(); len(explicit) > 0 {
		for _, p := range explicit {
			if !caps.HasPath(p) && !caps.Settled[p] {
				noDevices[p] = true
			}
		}
	} else if caps.DevicePlugin == nil && caps.DRA == nil && caps.SettledBroken() == "" {
		for _, p := range wanted {
			noDevices[p] = true
		}
	}
	for _, p := range wanted {
		if caps.Broken[p] != "" {
			broken[p] = true
		}
	}
	return noDevices, broken
}

// checkAgents reads the node agents of the paths that lack devices or are broken (agentPaths) and returns
// the problems among them and the notes for the record: an agent down for good is a problem; one down
// and not settling (settling: the paths whose plugins Settle is waiting for) is one where its path has no
// devices. An agent scheduled on no node beside another of its kind that is scheduled somewhere (an AMD
// plugin on an NVIDIA cluster) is only noted.
func checkAgents(ctx context.Context, kube kubernetes.Interface, snap Snapshot, caps Capabilities, cfg config.Config, settling map[string]bool, now time.Time) (problems []error, notes []string) {
	noDevices, broken := agentPaths(caps, cfg)
	if len(noDevices) == 0 && len(broken) == 0 {
		return nil, nil
	}
	list, err := kube.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, []string{fmt.Sprintf("cannot list DaemonSets to read the GPU stack's node agents (%s): why the path has no devices is not said", reasonOf(err))}
	}
	var drivers []string
	if cfg.WantsPath(config.PathDRA) {
		drivers = draDrivers(snap, caps, cfg.DRA.DeviceClass)
	}
	agents := findGPUAgents(list.Items, drivers)
	scheduled := map[string]bool{}
	for _, a := range agents {
		for _, p := range a.paths() {
			scheduled[p] = scheduled[p] || a.ds.Status.DesiredNumberScheduled > 0
		}
	}
	for p := range noDevices {
		if !slices.ContainsFunc(agents, func(a gpuAgent) bool { return slices.Contains(a.paths(), p) }) {
			notes = append(notes, fmt.Sprintf("no DaemonSet serves the %s path's devices on the nodes (none mounts %s): no node agent to say why it has none", p, agentMounts(p)))
		}
	}
	slices.Sort(notes)
	for _, a := range agents {
		paths := slices.DeleteFunc(a.paths(), func(p string) bool { return !noDevices[p] && !broken[p] })
		if len(paths) == 0 {
			continue
		}
		down := describeAgent(ctx, kube, a, snap.Nodes, now)
		if down == nil {
			continue
		}
		if down.Desired == 0 && !slices.ContainsFunc(a.paths(), func(p string) bool { return !scheduled[p] }) {
			notes = append(notes, fmt.Sprintf("GPU node agent %s (another DaemonSet serves its path on the nodes): %s", a.component(), down.Error()))
			continue
		}
		notes = append(notes, "GPU node agent not ready: "+down.Error())
		lacks := slices.ContainsFunc(paths, func(p string) bool { return noDevices[p] })
		waitedFor := slices.ContainsFunc(a.paths(), func(p string) bool { return settling[p] })
		if down.Terminal || lacks && !waitedFor {
			problems = append(problems, down)
		}
	}
	return problems, notes
}

// agentMounts names the kubelet directories an agent of path mounts.
func agentMounts(path string) string {
	if path == config.PathDRA {
		return "/var/lib/kubelet/plugins_registry or /var/lib/kubelet/plugins/DRIVER"
	}
	return devicePluginDir
}
