package diagnose

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"gpuconform.io/gpuconform/internal/podcond"
)

// An unscheduled pod is explained from the scheduler's own words (its
// PodScheduled condition and FailedScheduling events), its DRA claims, and,
// where the words cannot say it, the nodes.
//
// The scheduler's message counts nodes per reason but cannot say two things a
// human needs: whether a device the pod asks for exists anywhere at all, and,
// when some nodes fail on taints and others on the selector, which of the two
// actually excludes the nodes the pod wants. A read-only list of nodes answers
// both. It is optional: when nodes cannot be read the verdict rests on the
// scheduler's message alone and the evidence says so.

// maxEvidenceNodes bounds how many node names one evidence line quotes.
const maxEvidenceNodes = 3

// scheduled is the scheduler's pass: a pod with no node waits on the scheduler, or on the DRA claims it
// allocates. It looks at DRA objects first (nothing schedules without them), then the scheduler's counted
// causes, then an unallocated claim as the likely culprit when the scheduler names nothing more specific.
func scheduled(w view) (*Result, error) {
	pod := w.pod
	if pod.Spec.NodeName != "" {
		return nil, nil
	}
	res := &Result{Stage: StageScheduling, Layer: LayerScheduler, Reason: SchedulingPending, Next: describePod(pod)}
	cond := podcond.Find(pod, corev1.PodScheduled)
	if cond != nil && cond.Reason == corev1.PodReasonSchedulingGated {
		gates := make([]string, 0, len(pod.Spec.SchedulingGates))
		for _, g := range pod.Spec.SchedulingGates {
			gates = append(gates, g.Name)
		}
		res.Messages = []string{fmt.Sprintf("PodScheduled=False reason SchedulingGated: %s (gates: %s)", cond.Message, strings.Join(gates, ", "))}
		return res, nil
	}

	podEvents := w.events[eventsKey("Pod", pod.Name)]
	if podEvents.failed() {
		return podEvents.verdict(nil)
	}
	evs := podEvents.val
	schedMsg := schedulerSaid(pod, evs)
	if cond != nil && cond.Status == corev1.ConditionFalse && cond.Message != "" {
		res.Messages = append(res.Messages, cond.Message)
	}
	if e := schedulerEvent(pod, evs); e != nil {
		res.rests("Event", e.Namespace, e.Name)
		res.Messages = appendUnique(res.Messages, e.Message)
	}

	if d, ok := knownDefectIn(res.Messages); ok {
		kd := knownDefectResult(pod, StageScheduling, res.Messages, d)
		kd.Objects = res.Objects
		return kd, nil
	}

	var claims *claimState
	if len(pod.Spec.ResourceClaims) > 0 {
		w.claims.val.restsOn(res)
		if w.claims.failed() {
			return w.claims.verdict(res)
		}
		claims = w.claims.val
		if e := latestEvent(evs, eventFailedClaimCreation); e != nil {
			res.rests("Event", e.Namespace, e.Name)
			claims.missing = append(claims.missing, e.Message)
		}
		if len(claims.missing) > 0 {
			res.Layer, res.Reason = LayerDRA, DRAClaimMissing
			res.Messages = append(claims.missing, res.Messages...)
			res.Next = fmt.Sprintf("kubectl get resourceclaims,resourceclaimtemplates -n %s", pod.Namespace)
			if lasted := missingFor(pod, evs, w.readAt); lasted >= claimMissingFinal {
				res.terminal(fmt.Sprintf("a ResourceClaim or ResourceClaimTemplate the pod needs has been missing for %s of the pod's life (final from %s): only whoever wrote the pod creates it",
					lasted.Round(time.Second), claimMissingFinal))
			}
			return res, nil
		}
	}

	parsed := ParseSchedulerMessage(schedMsg)
	primary, ok := parsed.PrimaryCause()
	cls := classOther
	if ok {
		cls = classify(primary.Text)
	}
	if cls == classOther && claims != nil && len(claims.unallocated) > 0 && schedMsg != "" {
		cls = classDRA
	}
	res.Layer, res.Reason = cls.reason()
	if cls == classOther && schedMsg == "" {
		// No scheduling attempt is recorded yet (an unknown message stays Unknown, quoted, not guessed).
		res.Reason = SchedulingPending
	}
	switch res.Reason {
	case UntoleratedTaint, NodeSelectorMismatch:
		refineGates(pod, parsed, w.nodes, res)
		if why := gatedEverywhere(parsed, evs); why != "" && (res.Reason == UntoleratedTaint || res.Reason == NodeSelectorMismatch) {
			if transient := transientGate(pod, nodesOr(w.nodes, res)); transient != "" {
				res.Messages = append(res.Messages, transient)
			} else {
				res.terminal(why)
			}
		}
	case InsufficientDevice, InsufficientCPU, InsufficientMemory:
		if name, ok := capacityResource(res.Reason, primary.Text); ok {
			refineCapacity(pod, name, w.nodes, res)
		}
	}
	switch res.Reason {
	case DRAAllocationFailed, DRAClaimMissing:
		if claims != nil {
			res.Messages = append(res.Messages, claims.status...)
		}
		res.Next = fmt.Sprintf("kubectl get resourceclaims -n %s -o yaml; kubectl get resourceslices -o wide", pod.Namespace)
		if res.Reason == DRAAllocationFailed {
			classesSelect(pod, w.classes, w.slices, res)
		}
	case InsufficientDevice:
		res.Next = "kubectl describe nodes | grep -E '^Name:|" + strings.ReplaceAll(strings.TrimPrefix(primary.Text, "Insufficient "), ".", `\.`) + "'"
	case UntoleratedTaint:
		res.Next = "kubectl get nodes -o custom-columns=NAME:.metadata.name,TAINTS:.spec.taints[*].key"
	case NodeSelectorMismatch:
		res.Next = "kubectl get nodes --show-labels"
	case DeviceNotAdvertised:
		// refineCapacity set Next.
	case UnboundVolume:
		res.Next = fmt.Sprintf("kubectl get pvc -n %s", pod.Namespace)
	case InsufficientCPU, InsufficientMemory:
		res.Next = "kubectl describe nodes"
	}
	if len(res.Messages) == 0 {
		res.Messages = []string{fmt.Sprintf("pod %s has no node and no scheduling attempt is recorded yet", pod.Name)}
	}
	return res, nil
}

// claimMissingFinal is how long a claim or template the pod names may be missing before that is final. A
// workload's objects are created together (a chart, a manifest, a suite's prerequisites), so one still
// absent this long after its pod was not forgotten for a moment but not written; the resourceclaim
// controller retries with the workqueue's back-off meanwhile and says so in FailedResourceClaimCreation
// (pkg/controller/resourceclaim/controller.go in k8s v1.37).
const claimMissingFinal = 30 * time.Second

// missingFor is how long the pod has waited on a claim or template that is missing: from its creation to
// readAt, or, where either is unknown, the span of the resourceclaim controller's events about it.
func missingFor(pod *corev1.Pod, evs []corev1.Event, readAt time.Time) time.Duration {
	if !readAt.IsZero() && !pod.CreationTimestamp.IsZero() {
		return readAt.Sub(pod.CreationTimestamp.Time)
	}
	rep, ok := repeated(evs, func(e *corev1.Event) bool { return e.Reason == eventFailedClaimCreation }, func(string) bool { return true })
	if !ok {
		return 0
	}
	return rep.span
}

// eventTriggeredScaleUp is the cluster autoscaler's event on a pod it is adding a node for.
const eventTriggeredScaleUp = "TriggeredScaleUp"

// gatedEverywhere says why a scheduling failure is final, or "": every node the scheduler counted was
// excluded by a gate (taint, node affinity or selector, cordon), none for lack of capacity, so nothing
// that finishes or is freed can make room. A cluster autoscaler adding a node for the pod
// (TriggeredScaleUp) may still change that, so then it is not final.
func gatedEverywhere(parsed SchedulerMessage, evs []corev1.Event) string {
	if len(parsed.Causes) == 0 {
		return ""
	}
	for _, c := range parsed.Causes {
		// A cordon (unschedulable) is a gate that maintenance lifts: never final.
		if cl := classify(c.Text); !cl.isGate() || cl == classNodeUnusable {
			return ""
		}
	}
	if latestEvent(evs, eventTriggeredScaleUp) != nil {
		return ""
	}
	return "every node is excluded by a gate (taint, node affinity or cordon), none by a lack of capacity: freeing devices cannot help"
}

// schedulerSaid is why the scheduler last said the pod does not fit: its
// PodScheduled=False message, else its newest FailedScheduling event; "" when
// it has not tried yet.
func schedulerSaid(pod *corev1.Pod, evs []corev1.Event) string {
	if cond := podcond.Find(pod, corev1.PodScheduled); cond != nil && cond.Status == corev1.ConditionFalse && cond.Message != "" {
		return cond.Message
	}
	if e := schedulerEvent(pod, evs); e != nil {
		return e.Message
	}
	return ""
}

// schedulerEvent is the newest FailedScheduling event the pod's own scheduler (spec.schedulerName)
// recorded, or nil. Node autoscalers record events of that reason about the same pod in their own words
// (Karpenter's "Failed to schedule pod, ..."), which the scheduler's message format does not parse. The
// scheduler names itself as the events' reporting controller (its profile's recorder); an event that
// names no component is taken as the scheduler's.
func schedulerEvent(pod *corev1.Pod, evs []corev1.Event) *corev1.Event {
	name := cmp.Or(pod.Spec.SchedulerName, corev1.DefaultSchedulerName)
	for i := len(evs) - 1; i >= 0; i-- {
		e := &evs[i]
		if by := cmp.Or(e.ReportingController, e.Source.Component); e.Reason == eventFailedScheduling &&
			(by == "" || by == name || e.Source.Component == name) {
			return e
		}
	}
	return nil
}

// nodesMatter reports whether the scheduler's message leads to a verdict the
// nodes refine: a gate (taint, node affinity) or a lack of CPU, memory or
// devices as the primary cause.
func nodesMatter(schedMsg string) bool {
	c, ok := ParseSchedulerMessage(schedMsg).PrimaryCause()
	if !ok {
		return false
	}
	switch classify(c.Text) {
	case classTaint, classAffinity, classDevice, classCPU, classMemory:
		return true
	}
	return false
}

// nodesOr returns the nodes Collect read. When they could not be read it adds
// that to res's evidence (once) and returns nil, so callers keep the verdict
// the scheduler's message gave.
func nodesOr(nodes got[[]corev1.Node], res *Result) []corev1.Node {
	if nodes.err != nil {
		res.Messages = appendUnique(res.Messages, fmt.Sprintf("nodes could not be read (%v); the verdict rests on the scheduler's message alone", nodes.err))
		return nil
	}
	return nodes.val
}

// LifecycleTaint reports the taints Kubernetes itself puts on nodes while they start, lose contact,
// run short of memory or disk, or are cordoned (node lifecycle controller, kubelet, cloud node
// controller): they go away by themselves, so a pod they keep off is not stuck for good, and they
// never dedicate a pool.
func LifecycleTaint(t corev1.Taint) bool {
	return strings.HasPrefix(t.Key, "node.kubernetes.io/") || strings.HasPrefix(t.Key, "node.cloudprovider.kubernetes.io/")
}

// transientGate returns a sentence when a node the pod may use is kept from it by a lifecycle taint
// (NotReady, unreachable, pressure, cordon) and so may become usable by itself; "" otherwise. Without a
// node list it cannot rule that out and says so.
func transientGate(pod *corev1.Pod, nodes []corev1.Node) string {
	if len(nodes) == 0 {
		return "not final: without the nodes it cannot be ruled out that a node is only temporarily tainted"
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	for i := range nodes {
		if m, err := required.Match(&nodes[i]); err != nil || !m {
			continue
		}
		if nodes[i].Spec.Unschedulable {
			return fmt.Sprintf("not final: node %s is cordoned, which maintenance lifts", nodes[i].Name)
		}
		for _, t := range UntoleratedTaints(&nodes[i], pod.Spec.Tolerations) {
			if LifecycleTaint(t) {
				return fmt.Sprintf("not final: node %s carries %s, a taint Kubernetes removes when the node recovers", nodes[i].Name, formatTaints([]corev1.Taint{t}))
			}
		}
	}
	return ""
}

// UntoleratedTaints returns the node's NoSchedule and NoExecute taints that none
// of the tolerations tolerates: the taints that keep a pod with those
// tolerations off the node. PreferNoSchedule never excludes a node.
func UntoleratedTaints(node *corev1.Node, tolerations []corev1.Toleration) []corev1.Taint {
	var out []corev1.Taint
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		tolerated := false
		for j := range tolerations {
			if tolerations[j].ToleratesTaint(klog.Background(), t, false) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			out = append(out, *t)
		}
	}
	return out
}

// refineGates decides between UntoleratedTaint and NodeSelectorMismatch when the
// scheduler rejected every node on a gate and named both. The scheduler runs
// its taint filter before its affinity filter, so a node counted under
// "untolerated taint" may or may not match the selector: counting cannot tell a
// pod pinned to a tainted control plane (taint) from a pod whose selector
// matches nothing (selector). The nodes can: no node matching the pod's
// selector and required affinity is a selector mismatch; matching nodes that
// all carry an untolerated taint are a taint.
func refineGates(pod *corev1.Pod, parsed SchedulerMessage, all got[[]corev1.Node], res *Result) {
	// With or without a node selector, the taints of the nodes the pod may use are named.
	var taint, capacity bool
	for _, c := range parsed.Causes {
		switch cl := classify(c.Text); {
		case cl == classTaint:
			taint = true
		case !cl.isGate():
			capacity = true
		}
	}
	if !taint || capacity {
		return
	}
	nodes := nodesOr(all, res)
	if len(nodes) == 0 {
		return
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	var matching []*corev1.Node
	for i := range nodes {
		if m, err := required.Match(&nodes[i]); err == nil && m {
			matching = append(matching, &nodes[i])
		}
	}
	if len(matching) == 0 {
		res.Layer, res.Reason = LayerScheduler, NodeSelectorMismatch
		res.Messages = append(res.Messages, fmt.Sprintf("no node matches the pod's node selector and required node affinity (%s; %d node(s) read)", describeSelector(pod), len(nodes)))
		res.Next = "kubectl get nodes --show-labels"
		return
	}
	var tainted []string
	for _, n := range matching {
		ts := UntoleratedTaints(n, pod.Spec.Tolerations)
		if len(ts) == 0 {
			return // an eligible, untainted node exists: the counts' verdict stands
		}
		if len(tainted) < maxEvidenceNodes {
			tainted = append(tainted, fmt.Sprintf("%s (%s)", n.Name, formatTaints(ts)))
			res.rests("Node", "", n.Name)
		}
	}
	res.Layer, res.Reason = LayerScheduler, UntoleratedTaint
	res.Messages = append(res.Messages, fmt.Sprintf("every node matching the pod's node selector and required node affinity (%d of %d) carries a taint the pod does not tolerate: %s",
		len(matching), len(nodes), strings.Join(tainted, "; ")))
	res.Next = "kubectl get nodes -o custom-columns=NAME:.metadata.name,TAINTS:.spec.taints[*].key"
}

// refineCapacity adds what the nodes say to a capacity verdict (device, CPU,
// memory): the most any node has allocatable against what the pod requests,
// and turns a device "shortage" on a cluster where no node advertises the
// device at all into DeviceNotAdvertised.
func refineCapacity(pod *corev1.Pod, name corev1.ResourceName, all got[[]corev1.Node], res *Result) {
	nodes := nodesOr(all, res)
	if len(nodes) == 0 {
		return
	}
	var (
		most     resource.Quantity
		mostNode string
	)
	for i := range nodes {
		q, ok := nodes[i].Status.Allocatable[name]
		if ok && (mostNode == "" || q.Cmp(most) > 0) {
			most, mostNode = q, nodes[i].Name
		}
	}
	requested := podRequest(pod, name)
	if mostNode == "" || most.IsZero() {
		if res.Reason != InsufficientDevice {
			return
		}
		res.Layer, res.Reason = LayerKubelet, DeviceNotAdvertised
		res.Messages = append(res.Messages, fmt.Sprintf("no node advertises %s in status.allocatable (%d node(s) read): the device plugin is not running, not registered, or its devices are unhealthy", name, len(nodes)))
		res.Next = fmt.Sprintf("kubectl get nodes -o custom-columns=NAME:.metadata.name,DEVICES:.status.allocatable.%s; kubectl get daemonsets -A", strings.ReplaceAll(string(name), ".", `\.`))
		return
	}
	res.rests("Node", "", mostNode)
	line := fmt.Sprintf("the pod requests %s %s; the most any node has allocatable is %s (node %s)", requested.String(), name, most.String(), mostNode)
	if requested.Cmp(most) > 0 {
		line += ": no node can ever satisfy the request, whatever is freed"
		res.terminal(fmt.Sprintf("the request (%s %s) is above every node's allocatable", requested.String(), name))
	} else {
		line += ": the eligible nodes' capacity is in use"
	}
	res.Messages = append(res.Messages, line)
}

// podRequest is what the pod asks for of one resource: the sum over its
// containers (request, or the limit when only a limit is set, as for
// extended resources), or the largest init container when that is more.
func podRequest(pod *corev1.Pod, name corev1.ResourceName) resource.Quantity {
	of := func(c corev1.Container) resource.Quantity {
		if q, ok := c.Resources.Requests[name]; ok {
			return q
		}
		if q, ok := c.Resources.Limits[name]; ok {
			return q
		}
		return resource.Quantity{}
	}
	var sum resource.Quantity
	for _, c := range pod.Spec.Containers {
		sum.Add(of(c))
	}
	for _, c := range pod.Spec.InitContainers {
		if q := of(c); q.Cmp(sum) > 0 {
			sum = q
		}
	}
	return sum
}

// capacityResource names the resource a capacity verdict is about.
func capacityResource(reason Reason, primaryText string) (corev1.ResourceName, bool) {
	switch reason {
	case InsufficientCPU:
		return corev1.ResourceCPU, true
	case InsufficientMemory:
		return corev1.ResourceMemory, true
	case InsufficientDevice:
		return corev1.ResourceName(strings.TrimSpace(strings.TrimPrefix(primaryText, "Insufficient "))), true
	}
	return "", false
}

func describeSelector(pod *corev1.Pod) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(pod.Spec.NodeSelector)) {
		parts = append(parts, k+"="+pod.Spec.NodeSelector[k])
	}
	s := "nodeSelector {" + strings.Join(parts, ", ") + "}"
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		s += fmt.Sprintf(", %d required node affinity term(s)", len(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms))
	}
	return s
}

func formatTaints(ts []corev1.Taint) string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
	}
	return strings.Join(out, ", ")
}
