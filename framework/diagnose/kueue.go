package diagnose

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/constants"
)

// queued places a workload that Kueue holds: its pods all terminating after an eviction, its pods gated
// while its Workload is not admitted, or, with no pods, a Workload that does not let them be created yet
// (unless a controller already says why none exist, or the Job finished), or a suspended Job that no
// Workload owns.
func queued(f view) (*Result, error) {
	job, wl := f.job, f.wl
	admitted := wl != nil && meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)
	if len(f.pods) > 0 {
		if wl == nil {
			return nil, nil
		}
		if allTerminating(f.pods) && meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted) {
			return workloadVerdict(wl, f.events[eventsKey("Workload", wl.Name)], f.queues)
		}
		// Pods held by a scheduling gate (Kueue's own gates, for instance) wait on the queue, not on the
		// scheduler.
		if pod := representativePod(f.pods); pod.Spec.NodeName == "" && len(pod.Spec.SchedulingGates) > 0 && !admitted {
			return workloadVerdict(wl, f.events[eventsKey("Workload", wl.Name)], f.queues)
		}
		return nil, nil
	}
	// An owner whose Workload (if any) is admitted, a finished Job, or a Job whose controller was refused
	// (refusedCreate): the controllers, not the queue, say where it is.
	controllersSay := (isOwnerKind(f.target.Kind) && (wl == nil || admitted)) ||
		(job != nil && (jobFinished(job) != nil || refusedCreate(job, wl, f.events[eventsKey("Job", job.Name)])))
	switch {
	case controllersSay:
		return nil, nil
	case wl != nil:
		return workloadVerdict(wl, f.events[eventsKey("Workload", wl.Name)], f.queues)
	case job != nil && isSuspended(job):
		return unmanaged(job, f.kueueMissing)
	}
	return nil, nil
}

// refusedCreate reports a Job whose controller should be creating pods (createsPods) and has a
// FailedCreate event, readable, that says why it has none.
func refusedCreate(job *batchv1.Job, wl *kueue.Workload, evs got[[]corev1.Event]) bool {
	return createsPods(job, wl) && !evs.failed() && latestEvent(evs.val, eventFailedCreate) != nil
}

// unmanaged places a suspended Job that no Workload owns: Kueue does not manage it, or cannot be asked.
func unmanaged(job *batchv1.Job, kueueMissing string) (*Result, error) {
	q := job.Labels[constants.QueueLabel]
	if q != "" && kueueMissing != "" {
		return apiMissing(workloadsRead("list", job.Namespace, ""), StageQueued, kueueMissing), nil
	}
	msg := fmt.Sprintf("Job %s/%s has spec.suspend=true and no Kueue Workload owns it", job.Namespace, job.Name)
	if q != "" {
		msg += fmt.Sprintf(" (label %s=%s is set, so Kueue should have created one: check that Kueue manages Jobs and that its controller runs)", constants.QueueLabel, q)
	} else {
		msg += fmt.Sprintf(" (no %s label)", constants.QueueLabel)
	}
	return &Result{Stage: StageQueued, Layer: LayerKueue, Reason: QueueNotManaged, Messages: []string{msg},
		Next: fmt.Sprintf("kubectl get job -n %s %s -o jsonpath='{.metadata.labels}'", job.Namespace, job.Name)}, nil
}

func allTerminating(pods []corev1.Pod) bool {
	return !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.DeletionTimestamp == nil })
}

// workloadVerdict places a Workload that has no pods yet. The order follows
// Kueue's own life cycle (pkg/workload, pkg/scheduler in v0.17): finished,
// evicted, no quota reservation, admission checks, admitted.
func workloadVerdict(wl *kueue.Workload, evs got[[]corev1.Event], q queues) (*Result, error) {
	res, err := workloadSays(wl, evs, q)
	if res != nil {
		res.Objects = append([]ObjectRef{{Kind: "Workload", Namespace: wl.Namespace, Name: wl.Name}}, res.Objects...)
	}
	return res, err
}

// workloadSays is workloadVerdict's verdict before the Workload is added to the objects it rests on.
func workloadSays(wl *kueue.Workload, evs got[[]corev1.Event], q queues) (*Result, error) {
	describe := fmt.Sprintf("kubectl describe workload -n %s %s", wl.Namespace, wl.Name)
	conds := wl.Status.Conditions

	if c := meta.FindStatusCondition(conds, kueue.WorkloadFinished); c != nil && c.Status == metav1.ConditionTrue {
		if c.Reason == kueue.WorkloadFinishedReasonSucceeded {
			return &Result{Stage: StageSucceeded, Layer: LayerNone, Reason: ReasonCompleted, Messages: []string{c.Message}, Next: describe}, nil
		}
		return &Result{Stage: StageFailed, Layer: LayerApplication, Reason: ApplicationError, Messages: []string{c.Message}, Next: describe}, nil
	}

	// Kueue resets Evicted to False when it reserves quota again, so True
	// means the eviction is still the current state.
	if c := meta.FindStatusCondition(conds, kueue.WorkloadEvicted); c != nil && c.Status == metav1.ConditionTrue {
		res := &Result{Stage: StageQueued, Layer: LayerKueue, Reason: WorkloadEvicted, Messages: []string{c.Message}, Next: describe}
		if c.Reason == kueue.WorkloadEvictedByPreemption {
			res.Reason = WorkloadPreempted
			if p := meta.FindStatusCondition(conds, kueue.WorkloadPreempted); p != nil && p.Status == metav1.ConditionTrue {
				res.Messages = appendUnique(res.Messages, p.Message)
			}
		}
		if q := meta.FindStatusCondition(conds, kueue.WorkloadQuotaReserved); q != nil && q.Status != metav1.ConditionTrue {
			res.Messages = appendUnique(res.Messages, q.Message)
		}
		return res, nil
	}

	if !meta.IsStatusConditionTrue(conds, kueue.WorkloadQuotaReserved) {
		return notReserved(wl, evs, q, describe)
	}

	if !meta.IsStatusConditionTrue(conds, kueue.WorkloadAdmitted) {
		res := &Result{Stage: StageQueued, Layer: LayerKueue, Reason: QueueAdmissionCheckPending, Next: describe}
		for _, ac := range wl.Status.AdmissionChecks {
			if ac.State != kueue.CheckStateReady {
				res.Messages = append(res.Messages, fmt.Sprintf("admission check %s is %s: %s", ac.Name, ac.State, ac.Message))
				res.rests("AdmissionCheck", "", string(ac.Name))
			}
		}
		if a := meta.FindStatusCondition(conds, kueue.WorkloadAdmitted); a != nil {
			res.Messages = appendUnique(res.Messages, a.Message)
		}
		if len(wl.Status.AdmissionChecks) == 0 {
			// Quota is reserved and there are no checks: Kueue is between
			// the two updates, or waits on delayed topology assignment.
			res.Reason = QueuePending
		}
		return res, nil
	}

	// Admitted and still no pods: the Job controller has not created them yet.
	return &Result{Stage: StageScheduling, Layer: LayerNone, Reason: SchedulingPending,
		Messages: []string{fmt.Sprintf("Workload %s/%s is admitted; no pods exist yet", wl.Namespace, wl.Name)},
		Next:     fmt.Sprintf("kubectl get events -n %s --field-selector involvedObject.kind=Job", wl.Namespace)}, nil
}

// awaitsQuota reports a Workload that has neither finished nor been evicted
// (both explain themselves) and has no quota reserved.
func awaitsQuota(wl *kueue.Workload) bool {
	c := wl.Status.Conditions
	return !meta.IsStatusConditionTrue(c, kueue.WorkloadFinished) && !meta.IsStatusConditionTrue(c, kueue.WorkloadEvicted) &&
		!meta.IsStatusConditionTrue(c, kueue.WorkloadQuotaReserved)
}

// kueueSaid is the message of the Workload's QuotaReserved condition, or "".
func kueueSaid(wl *kueue.Workload) string {
	if qr := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); qr != nil {
		return qr.Message
	}
	return ""
}

// blamesQuota reports the reasons whose Next names the ClusterQueue.
func blamesQuota(r Reason) bool {
	return r == QueueQuotaExhausted || r == QueueNoMatchingFlavor
}

// notReserved explains QuotaReserved!=True from Kueue's message, then from
// the Workload's "Pending" events, then from the queues themselves.
func notReserved(wl *kueue.Workload, evs got[[]corev1.Event], q queues, describe string) (*Result, error) {
	res := &Result{Stage: StageQueued, Layer: LayerKueue, Reason: QueuePending, Next: describe}
	msg := kueueSaid(wl)
	if msg == "" {
		if evs.failed() {
			return evs.verdict(res)
		}
		if e := latestEvent(evs.val, "Pending", "SecondPassFailed"); e != nil {
			msg = e.Message
			res.rests("Event", e.Namespace, e.Name)
		}
	}
	res.Messages = appendUnique(res.Messages, msg)
	res.Reason = classifyKueueMessage(msg)
	if why := kueueFinal(msg); why != "" {
		res.terminal(why)
	}
	if gate, why := topologyGated(msg); gate != "" {
		res.Reason, res.Next = gate, "kubectl get nodes -o custom-columns=NAME:.metadata.name,TAINTS:.spec.taints[*].key --show-labels"
		res.terminal(why)
	}
	switch {
	case blamesQuota(res.Reason):
		if cq := clusterQueueName(wl, q, res); cq != "" {
			res.Next = fmt.Sprintf("kubectl describe clusterqueue %s", cq)
		}
	case res.Reason == QueueInactive:
		res.Next = fmt.Sprintf("kubectl describe localqueue -n %s %s", wl.Namespace, wl.Spec.QueueName)
	case res.Reason == QueuePending:
		// Kueue has not said why; the queues may.
		if qres, err := checkQueues(wl, q, res); err != nil || qres != nil {
			return qres, err
		}
	}
	return res, nil
}

// classifyKueueMessage maps Kueue's inadmissible message to a reason. The
// phrases are Kueue v0.17's own: flavorassigner ("couldn't assign flavors to
// pod set ...: insufficient quota|insufficient unused quota ...", "resource
// X unavailable in ClusterQueue", "flavor X not found", "untolerated taint",
// "doesn't match node affinity"), workload_controller ("LocalQueue X doesn't
// exist|is inactive|is stopped", "ClusterQueue X is inactive|doesn't exist|is
// terminating or missing|is stopped") and scheduler ("ClusterQueue X is
// inactive|not found", "The workload has failed admission checks").
func classifyKueueMessage(msg string) Reason {
	m := strings.ToLower(msg)
	switch {
	case m == "":
		return QueuePending
	case strings.Contains(m, "insufficient quota") || strings.Contains(m, "insufficient unused quota"):
		return QueueQuotaExhausted
	case strings.Contains(m, "couldn't assign flavors") || strings.Contains(m, "failed to assign flavors") ||
		strings.Contains(m, "unavailable in clusterqueue"):
		return QueueNoMatchingFlavor
	case (strings.Contains(m, "localqueue") || strings.Contains(m, "clusterqueue")) &&
		(strings.Contains(m, "doesn't exist") || strings.Contains(m, "is inactive") || strings.Contains(m, "is stopped") ||
			strings.Contains(m, "not found") || strings.Contains(m, "terminating or missing")):
		return QueueInactive
	case strings.Contains(m, "failed admission checks"):
		return QueueAdmissionCheckPending
	}
	// Kueue said why, in words this classifier does not know: quote it, do not guess.
	return Unknown
}

// kueueFinal says why a Kueue message means the workload can never be admitted as it is, or "": the
// flavor assigner's "insufficient quota ... > maximum capacity" (the request exceeds what the
// ClusterQueue can hold even with its cohort, whatever finishes) and "resource X unavailable in
// ClusterQueue" (the queue does not cover the resource at all).
func kueueFinal(msg string) string {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "insufficient quota") && strings.Contains(m, "> maximum capacity"):
		return "the request is above the ClusterQueue's maximum capacity (nominal quota plus what it may borrow): no finished workload frees enough"
	case strings.Contains(m, "unavailable in clusterqueue"):
		return "the ClusterQueue does not cover the requested resource"
	}
	return ""
}

// clusterQueueName resolves the Workload's ClusterQueue via its LocalQueue,
// best effort (for the Next command only).
func clusterQueueName(wl *kueue.Workload, q queues, res *Result) string {
	if wl.Status.Admission != nil && wl.Status.Admission.ClusterQueue != "" {
		return string(wl.Status.Admission.ClusterQueue)
	}
	lq := q.lq.val
	if lq == nil {
		return ""
	}
	res.rests("LocalQueue", lq.Namespace, lq.Name)
	return string(lq.Spec.ClusterQueue)
}

// checkQueues looks at the LocalQueue and ClusterQueue behind a Workload that
// Kueue has not explained (a brand-new Workload has no QuotaReserved
// condition at all) and returns QueueInactive when either is missing,
// stopped or inactive; nil when both look healthy.
func checkQueues(wl *kueue.Workload, q queues, res *Result) (*Result, error) {
	if wl.Spec.QueueName == "" {
		return nil, nil
	}
	inactive := func(msg string) *Result {
		return &Result{Stage: StageQueued, Layer: LayerKueue, Reason: QueueInactive, Messages: []string{msg},
			Next: fmt.Sprintf("kubectl describe localqueue -n %s %s", wl.Namespace, wl.Spec.QueueName), Objects: slices.Clone(res.Objects)}
	}
	if q.lq.failed() {
		return q.lq.verdict(res)
	}
	lq := q.lq.val
	if lq == nil {
		return inactive(missingText(q.lqRead)), nil
	}
	res.rests("LocalQueue", lq.Namespace, lq.Name)
	if lq.Spec.StopPolicy != nil && *lq.Spec.StopPolicy != kueue.None {
		return inactive(fmt.Sprintf("LocalQueue %s/%s has spec.stopPolicy=%s", lq.Namespace, lq.Name, *lq.Spec.StopPolicy)), nil
	}
	if c := meta.FindStatusCondition(lq.Status.Conditions, kueue.LocalQueueActive); c != nil && c.Status == metav1.ConditionFalse {
		return inactive(fmt.Sprintf("LocalQueue %s/%s Active=False reason %s: %s", lq.Namespace, lq.Name, c.Reason, c.Message)), nil
	}
	if q.cq.failed() {
		return q.cq.verdict(res)
	}
	cq := q.cq.val
	if cq == nil {
		return inactive(missingText(q.cqRead)), nil
	}
	res.rests("ClusterQueue", "", cq.Name)
	if cq.Spec.StopPolicy != nil && *cq.Spec.StopPolicy != kueue.None {
		return inactive(fmt.Sprintf("ClusterQueue %s has spec.stopPolicy=%s", cq.Name, *cq.Spec.StopPolicy)), nil
	}
	if c := meta.FindStatusCondition(cq.Status.Conditions, kueue.ClusterQueueActive); c != nil && c.Status == metav1.ConditionFalse {
		return inactive(fmt.Sprintf("ClusterQueue %s Active=False reason %s: %s", cq.Name, c.Reason, c.Message)), nil
	}
	return nil, nil
}

// Kueue's topology-aware scheduling appends to a pod set's not-fit message how many nodes it excluded and
// why (notFitMessage and formatReasons, pkg/cache/scheduler/tas_flavor_snapshot.go in v0.17):
// ". Total nodes: N; excluded: nodeSelector: n, affinity: n, topologyDomain: n, taint \"k=v:Effect\": n,
// resource \"r\": n", each reason only where its count is above zero.
var (
	tasExcludedRE = regexp.MustCompile(`Total nodes: (\d+); excluded: ((?:(?:nodeSelector|affinity|topologyDomain|taint "[^"]*"|resource "[^"]*"): \d+(?:, )?)+)`)
	tasReasonRE   = regexp.MustCompile(`(nodeSelector|affinity|topologyDomain|taint "[^"]*"|resource "[^"]*"): (\d+)`)
)

// topologyGated reads Kueue's topology-aware exclusions and, when a pod set has every node excluded by a
// gate (an untolerated taint, the node selector or affinity) and none for lack of a resource, returns the
// gate's reason (the larger count decides) and why that is final: nothing that finishes frees a node the
// pod set may use. A node without the topology's labels (topologyDomain) is no gate here; "" otherwise.
func topologyGated(msg string) (Reason, string) {
	for _, m := range tasExcludedRE.FindAllStringSubmatch(msg, -1) {
		total, _ := strconv.Atoi(m[1])
		var taints, selectors, other int
		for _, r := range tasReasonRE.FindAllStringSubmatch(m[2], -1) {
			n, _ := strconv.Atoi(r[2])
			switch {
			case strings.HasPrefix(r[1], "taint "):
				taints += n
			case r[1] == "nodeSelector" || r[1] == "affinity":
				selectors += n
			default:
				other += n
			}
		}
		if total == 0 || other > 0 || taints+selectors < total {
			continue
		}
		gate := UntoleratedTaint
		if selectors > taints {
			gate = NodeSelectorMismatch
		}
		return gate, fmt.Sprintf("Kueue's topology-aware scheduling excludes all %d nodes by a gate (%s), none for lack of a resource: nothing that finishes makes room",
			total, strings.TrimSuffix(m[2], ", "))
	}
	return "", ""
}
