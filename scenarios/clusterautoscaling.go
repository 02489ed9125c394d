package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/diagnose"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/wait"
)

// ClusterAutoscalingInput is the input of ClusterAutoscalingSpec.
type ClusterAutoscalingInput struct {
	Base
	// Pool selects the autoscaled node group's nodes (config pools.autoscaling); "" when none is named.
	Pool string
	// Tolerations are the scenario pod's tolerations of the pool's taints (pools.autoscalingTolerations).
	Tolerations []corev1.Toleration
}

const clusterAutoscalingName = "cluster-autoscaling"

// ClusterAutoscaling proves the AI Conformance requirement cluster_autoscaling where the cluster has a node
// autoscaler and the run names its GPU node group: a pod asking for a device, which no node of the group
// can take, makes the autoscaler add a node to the group, the pod runs there, and once the pod is gone the
// autoscaler removes the node. Not required by the signoff.
var ClusterAutoscaling = Define(Scenario{Name: clusterAutoscalingName, Title: "a node autoscaler grows a GPU node group for a pending pod and removes the node once idle",
	Proves: []conformance.Proof{{Requirement: conformance.ClusterAutoscaling,
		How: "a pod asking for one device of the device-plugin path, required onto the node group --autoscaling-pool selects and off every node " +
			"it has now, tolerating --autoscaling-toleration: it must be bound to a node of the group created after the pod (the autoscaler's), " +
			"and run there; once the pod is deleted the node must be removed. No node autoscaler (cluster-autoscaler's " +
			"status ConfigMap, Karpenter's API) and no pool named is not applicable; an autoscaler found but no pool named is not exercised"}}},
	func(r *suite.Run) ClusterAutoscalingInput {
		return ClusterAutoscalingInput{Base: baseOf(r), Pool: r.Config.Pools.Autoscaling, Tolerations: r.Config.Pools.AutoscalingTolerations}
	},
	ClusterAutoscalingSpec)

// ClusterAutoscalingSpec registers the check on the first device-plugin path, Serial: while it runs the
// cluster has a node more, which no other spec's view of the nodes may include.
func ClusterAutoscalingSpec(input func() ClusterAutoscalingInput) {
	reg := input()
	for _, regPath := range reg.Paths {
		if _, ok := regPath.(*gpu.DevicePlugin); !ok {
			continue
		}
		describePath(input, regPath, "Cluster autoscaling", "nodescale", []any{labels.Of(labels.Scenario(clusterAutoscalingName)), takes(Takes{AddsNodes: true})},
			func(s *Spec[ClusterAutoscalingInput]) {
				ginkgo.It("grows the autoscaled GPU node group for a pending pod and removes the idle node", proves(clusterAutoscalingName, conformance.ClusterAutoscaling),
					func(ctx context.Context) {
						poolGrows(ctx, s)
					})
			})
		return
	}
	reg.notExercised("cluster autoscaling", "no device-plugin path: node autoscalers size node groups by the extended resources their nodes advertise")
}

// poolGrows runs the check: the pool as it is, the pod that cannot fit it, the node added for it, and the
// node removed once the pod is gone.
func poolGrows(ctx context.Context, s *Spec[ClusterAutoscalingInput]) {
	env := s.Env
	if s.In.Pool == "" {
		found := autoscalers(ctx, env)
		if len(found) == 0 {
			notApplicable(noClusterAutoscaler)
		}
		notExercisedYet(strings.Join(found, "; "), "no node group named: give its label selector with --autoscaling-pool (and its taints with --autoscaling-toleration)")
	}
	sel, err := k8slabels.Parse(s.In.Pool)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "--autoscaling-pool %q", s.In.Pool)
	before := poolNodes(ctx, s)
	ginkgo.AddReportEntry("evidence: pool before", fmt.Sprintf("%s: %d node(s) %v", s.In.Pool, len(before), slices.Sorted(maps.Keys(before))))

	w := env.Factory.GPUPod("grow", s.NS).Path(s.Path).Devices(1)
	pod := w.Obj()
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, s.In.Tolerations...)
	pod.Spec.Affinity = poolAffinity(sel, slices.Collect(maps.Values(before)))
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	ginkgo.By(fmt.Sprintf("creating pod %s/%s: one device, onto a node of %s that is not there yet", s.NS, pod.Name, s.In.Pool))
	env.Create(ctx, pod)
	target := wait.Target{Kind: "Pod", Namespace: s.NS, Name: pod.Name}
	var placed *corev1.Pod
	env.Wait.ForJudged(ctx, fmt.Sprintf("the autoscaler to add a node to %s for pod %s/%s", s.In.Pool, s.NS, pod.Name), target, env.Timeouts.NodeScale,
		func(ctx context.Context, _ wait.Target) (string, bool) { return autoscalerVerdict(ctx, s, pod.Name) },
		func(g gomega.Gomega) {
			p, err := env.Clients.Kube.CoreV1().Pods(s.NS).Get(ctx, pod.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(p.Spec.NodeName).NotTo(gomega.BeEmpty(), "pod %s/%s is not bound: %s; %s", s.NS, pod.Name, scheduledCondition(p), scalingEvents(ctx, s, pod.Name))
			placed = p
		})
	nodeName := placed.Spec.NodeName
	node, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading node %s, where pod %s/%s was bound", nodeName, s.NS, pod.Name)
	_, existed := before[nodeName]
	gomega.Expect(existed).To(gomega.BeFalse(), "pod %s/%s was bound to node %s, which the pool had before it: the pod's affinity kept it off every node the pool had", s.NS, pod.Name, nodeName)
	gomega.Expect(sel.Matches(k8slabels.Set(node.Labels))).To(gomega.BeTrue(), "pod %s/%s was bound to node %s, which %s does not select", s.NS, pod.Name, nodeName, s.In.Pool)
	gomega.Expect(node.CreationTimestamp.Before(&placed.CreationTimestamp)).To(gomega.BeFalse(),
		"node %s was created at %s, before pod %s/%s (%s): it was not added for the pod", nodeName, node.CreationTimestamp.UTC(), s.NS, pod.Name, placed.CreationTimestamp.UTC())
	ran := waitRuns(ctx, s, pod.Name)
	added := node.CreationTimestamp.Sub(placed.CreationTimestamp.Time)
	ginkgo.AddReportEntry("evidence: scale-up", fmt.Sprintf("node %s added to %s %s after pod %s/%s was created (%s); the pod %s there; %s",
		nodeName, s.In.Pool, added.Round(time.Second), s.NS, pod.Name, scheduledCondition(placed), ran, scalingEvents(ctx, s, pod.Name)))

	ginkgo.By(fmt.Sprintf("deleting pod %s/%s: node %s must be removed once it is empty", s.NS, pod.Name, nodeName))
	deleted := time.Now()
	// Gone already is as good as deleted: the node must go either way. kube-controller-manager's taint
	// eviction can delete a pod just bound to a new node whose earlier NoExecute taint its cache still
	// holds (TaintManagerEviction the second the pod was scheduled); the pod's events
	// say who deleted it.
	if err := env.Clients.Kube.CoreV1().Pods(s.NS).Delete(ctx, pod.Name, metav1.DeleteOptions{}); apierrors.IsNotFound(err) {
		ginkgo.AddReportEntry("evidence: pod gone before its deletion", fmt.Sprintf("pod %s/%s: %s", s.NS, pod.Name, scalingEvents(ctx, s, pod.Name)))
	} else {
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting pod %s/%s", s.NS, pod.Name)
	}
	env.Wait.ForJudged(ctx, fmt.Sprintf("the autoscaler to remove node %s from %s once empty", nodeName, s.In.Pool), wait.Target{Kind: "Node", Name: nodeName}, env.Timeouts.NodeScale,
		func(ctx context.Context, _ wait.Target) (string, bool) {
			n, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return "node " + nodeName + ": " + err.Error(), false
			}
			why := scaleDownBlocked(n.Annotations)
			return "node " + nodeName + ": " + cmp.Or(why, "no annotation keeps it"), why != ""
		}, func(g gomega.Gomega) {
			n, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return
			}
			g.Expect(err).NotTo(gomega.HaveOccurred(), "reading node %s", nodeName)
			g.Expect(apierrors.IsNotFound(err)).To(gomega.BeTrue(), "node %s is still there (taints %s, unschedulable %t, deleting %t): the autoscaler did not remove it once empty; %s",
				nodeName, taintList(n.Spec.Taints), n.Spec.Unschedulable, n.DeletionTimestamp != nil, nodeEvents(ctx, s, nodeName))
		})
	ginkgo.AddReportEntry("evidence: scale-down", fmt.Sprintf("node %s removed from %s within %s of its last pod's deletion", nodeName, s.In.Pool, time.Since(deleted).Round(time.Second)))
}

// scaleDownDisabled are the node annotations with which an autoscaler never removes a node, from their
// sources: cluster-autoscaler's (its FAQ and utils/annotations) and Karpenter's v1 API (karpenter.sh).
var scaleDownDisabled = []string{"cluster-autoscaler.kubernetes.io/scale-down-disabled", "karpenter.sh/do-not-disrupt"}

// scaleDownBlocked says which annotation keeps the autoscaler from removing a node ("" for none).
func scaleDownBlocked(annotations map[string]string) string {
	for _, key := range scaleDownDisabled {
		if annotations[key] == "true" {
			return fmt.Sprintf("annotated %s=true: the autoscaler never removes it; whoever set it must remove the node", key)
		}
	}
	return ""
}

// poolNodes are the nodes the pool selector selects now, each with the value of its hostname label (the
// node's name where it has none).
func poolNodes(ctx context.Context, s *Spec[ClusterAutoscalingInput]) map[string]string {
	ginkgo.GinkgoHelper()
	list, err := s.Env.Clients.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: s.In.Pool})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "listing the nodes of %s", s.In.Pool)
	out := map[string]string{}
	for _, n := range list.Items {
		out[n.Name] = n.Name
		if h := n.Labels[corev1.LabelHostname]; h != "" {
			out[n.Name] = h
		}
	}
	return out
}

// nodeSelectorOps are the label selector's operators as node selector operators.
var nodeSelectorOps = map[selection.Operator]corev1.NodeSelectorOperator{
	selection.Equals: corev1.NodeSelectorOpIn, selection.DoubleEquals: corev1.NodeSelectorOpIn, selection.In: corev1.NodeSelectorOpIn,
	selection.NotEquals: corev1.NodeSelectorOpNotIn, selection.NotIn: corev1.NodeSelectorOpNotIn,
	selection.Exists: corev1.NodeSelectorOpExists, selection.DoesNotExist: corev1.NodeSelectorOpDoesNotExist,
	selection.GreaterThan: corev1.NodeSelectorOpGt, selection.LessThan: corev1.NodeSelectorOpLt,
}

// poolAffinity requires a node the pool selector selects whose hostname label is none of hostnames: the
// form both cluster-autoscaler (which simulates the pod on a template node of each group) and Karpenter
// (which turns a pod's required terms into a NodeClaim's requirements) read, so neither places the pod
// on a node the pool already has.
func poolAffinity(sel k8slabels.Selector, hostnames []string) *corev1.Affinity {
	reqs, _ := sel.Requirements()
	term := corev1.NodeSelectorTerm{}
	for _, r := range reqs {
		term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: r.Key(), Operator: nodeSelectorOps[r.Operator()], Values: r.ValuesUnsorted()})
	}
	if len(hostnames) > 0 {
		slices.Sort(hostnames)
		term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: hostnames})
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}}}
}

// The autoscalers' event reasons on a pod, from their sources: cluster-autoscaler's TriggeredScaleUp and
// NotTriggerScaleUp (processors/status/eventing_scale_up_processor.go: "pod didn't trigger scale-up: …",
// only in a loop that attempted no scale-up), Karpenter's Nominated and its FailedScheduling, whose message
// starts "Failed to schedule pod, " (kube-scheduler's FailedScheduling starts "0/N nodes are available").
const (
	eventTriggeredScaleUp  = "TriggeredScaleUp"
	eventNotTriggerScaleUp = "NotTriggerScaleUp"
	eventNominated         = "Nominated"
	karpenterRefusal       = "Failed to schedule pod, "
)

// podEvents are the events of the pod named name, oldest first.
func podEvents(ctx context.Context, s *Spec[ClusterAutoscalingInput], kind, name string) []corev1.Event {
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}.AsSelector().String()
	evs, err := s.Env.Clients.Kube.CoreV1().Events(s.NS).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil
	}
	slices.SortFunc(evs.Items, func(a, b corev1.Event) int { return diagnose.EventTime(a).Compare(diagnose.EventTime(b)) })
	return evs.Items
}

// scalingEvents are the pod's events in a line each: the scheduler's and the autoscaler's.
func scalingEvents(ctx context.Context, s *Spec[ClusterAutoscalingInput], name string) string {
	return eventLines(podEvents(ctx, s, "Pod", name))
}

// eventLines are events in a line each, with who wrote them and how often.
func eventLines(evs []corev1.Event) string {
	var lines []string
	for _, e := range evs {
		lines = append(lines, fmt.Sprintf("%s %s (%s ×%d): %s", e.Reason, e.Type, cmp.Or(e.Source.Component, e.ReportingController), max(e.Count, 1), e.Message))
	}
	if len(lines) == 0 {
		return "the pod has no events"
	}
	return "the pod's events: " + strings.Join(lines, " | ")
}

// autoscalerVerdict judges a pod waiting for a node: final when an autoscaler said it will not add one and
// none said it would (refusedOnly).
func autoscalerVerdict(ctx context.Context, s *Spec[ClusterAutoscalingInput], name string) (string, bool) {
	evs := podEvents(ctx, s, "Pod", name)
	text := eventLines(evs)
	if refusedOnly(evs) {
		return "the node autoscaler will not add a node for the pod (its own event says why; the pool's taints need --autoscaling-toleration, " +
			"its limits or instance types may not fit one device): " + text, true
	}
	return text, false
}

// refusedOnly reports whether a pod's events hold an autoscaler's refusal (cluster-autoscaler's
// NotTriggerScaleUp, Karpenter's "Failed to schedule pod") and no scale-up (TriggeredScaleUp, Nominated).
func refusedOnly(evs []corev1.Event) bool {
	refused, scaling := false, false
	for _, e := range evs {
		switch {
		case e.Reason == eventTriggeredScaleUp || e.Reason == eventNominated:
			scaling = true
		case e.Reason == eventNotTriggerScaleUp || strings.HasPrefix(e.Message, karpenterRefusal):
			refused = true
		}
	}
	return refused && !scaling
}

// nodeEvents are the events of a node in a line (those in the default namespace, where the node
// controllers and autoscalers write them).
func nodeEvents(ctx context.Context, s *Spec[ClusterAutoscalingInput], name string) string {
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": name}.AsSelector().String()
	evs, err := s.Env.Clients.Kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return "its events unreadable: " + err.Error()
	}
	var lines []string
	for _, e := range evs.Items {
		lines = append(lines, fmt.Sprintf("%s: %s", e.Reason, e.Message))
	}
	if len(lines) == 0 {
		return "the node has no events"
	}
	return "its events: " + strings.Join(lines, " | ")
}

// scheduledCondition is the pod's PodScheduled condition in a phrase.
func scheduledCondition(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			out := fmt.Sprintf("PodScheduled=%s", c.Status)
			if c.Reason != "" {
				out += " " + c.Reason
			}
			out += " since " + c.LastTransitionTime.UTC().Format(time.TimeOnly)
			if c.Message != "" {
				out += ": " + c.Message
			}
			return out
		}
	}
	return "no PodScheduled condition"
}

// waitRuns waits until the pod runs or has run to success on its node and says which; a pod that failed
// (the device not seen, say) fails the check.
func waitRuns(ctx context.Context, s *Spec[ClusterAutoscalingInput], name string) string {
	ginkgo.GinkgoHelper()
	var phase corev1.PodPhase
	s.Env.Wait.ForProgress(ctx, fmt.Sprintf("pod %s/%s to run on its new node", s.NS, name), wait.Target{Kind: "Pod", Namespace: s.NS, Name: name}, s.Env.Timeouts.PodStart,
		func(g gomega.Gomega) {
			p, err := s.Env.Clients.Kube.CoreV1().Pods(s.NS).Get(ctx, name, metav1.GetOptions{})
			g.Expect(err).NotTo(gomega.HaveOccurred())
			phase = p.Status.Phase
			g.Expect(phase).To(gomega.Or(gomega.Equal(corev1.PodRunning), gomega.Equal(corev1.PodSucceeded)), "pod %s/%s is %s on node %s", s.NS, name, phase, p.Spec.NodeName)
		})
	return strings.ToLower(string(phase))
}

// taintList is the taints in a phrase.
func taintList(ts []corev1.Taint) string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ToString())
	}
	return "[" + strings.Join(out, ", ") + "]"
}
