package diagnose

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// The scheduler's message counts nodes per reason but cannot say two things a
// human needs: whether a device the pod asks for exists anywhere at all, and,
// when some nodes fail on taints and others on the selector, which of the two
// actually excludes the nodes the pod wants. A read-only list of nodes answers
// both. It is optional: when nodes cannot be read the verdict rests on the
// scheduler's message alone and the evidence says so.

// maxEvidenceNodes bounds how many node names one evidence line quotes.
const maxEvidenceNodes = 3

// nodesFor reads every node once per diagnosis. When they cannot be read it
// adds that to res's evidence (once) and returns nil, so callers keep the verdict the
// scheduler's message gave.
func (d *diagnosis) nodesFor(ctx context.Context, res *Result) []corev1.Node {
	if !d.nodesRead {
		d.nodesRead = true
		list, err := d.c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			d.nodesNote = fmt.Sprintf("nodes could not be read (%v); the verdict rests on the scheduler's message alone", err)
		} else {
			d.nodes = list.Items
		}
	}
	// Both gate refinements may ask; the note is evidence once.
	res.Messages = appendUnique(res.Messages, d.nodesNote)
	return d.nodes
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
func (d *diagnosis) transientGate(ctx context.Context, pod *corev1.Pod, res *Result) string {
	nodes := d.nodesFor(ctx, res)
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
func (d *diagnosis) refineGates(ctx context.Context, pod *corev1.Pod, parsed SchedulerMessage, res *Result) {
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
	nodes := d.nodesFor(ctx, res)
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
			d.ref("Node", "", n.Name)
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
func (d *diagnosis) refineCapacity(ctx context.Context, pod *corev1.Pod, name corev1.ResourceName, res *Result) {
	nodes := d.nodesFor(ctx, res)
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
	d.ref("Node", "", mostNode)
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
	keys := make([]string, 0, len(pod.Spec.NodeSelector))
	for k := range pod.Spec.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
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
