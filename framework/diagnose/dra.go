package diagnose

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// claimState is what the pod's ResourceClaims say.
type claimState struct {
	// missing are texts naming claims or templates that do not exist.
	missing []string
	// unallocated names claims with no status.allocation.
	unallocated []string
	// status is one line per claim, for the evidence.
	status []string
	// refs are the claims and templates found.
	refs []ObjectRef
}

// podClaim names what one spec.resourceClaims entry refers to: its
// ResourceClaim (named, or generated from a template and recorded in
// status.resourceClaimStatuses by the resourceclaim controller), or its
// template while no claim has been generated; neither when the controller
// decided no claim is needed.
func podClaim(pod *corev1.Pod, pc corev1.PodResourceClaim) (claim, template string) {
	switch {
	case pc.ResourceClaimName != nil:
		return *pc.ResourceClaimName, ""
	case pc.ResourceClaimTemplateName != nil:
		i := slices.IndexFunc(pod.Status.ResourceClaimStatuses, func(s corev1.PodResourceClaimStatus) bool { return s.Name == pc.Name })
		if i < 0 {
			return "", *pc.ResourceClaimTemplateName
		}
		if gen := pod.Status.ResourceClaimStatuses[i].ResourceClaimName; gen != nil {
			return *gen, ""
		}
	}
	return "", ""
}

// claimsOf says what the pod's ResourceClaims are: missing (a claim or a template that does not exist),
// unallocated, and one status line each; or, with what was found before it, the verdict on a read of them
// that failed (stop), or the API server's error.
func claimsOf(pod *corev1.Pod, claims []resourcev1.ResourceClaim, templates []resourcev1.ResourceClaimTemplate, errs ReadErrors) got[*claimState] {
	st := &claimState{}
	for _, pc := range pod.Spec.ResourceClaims {
		name, template := podClaim(pod, pc)
		switch {
		case template != "":
			r := getRead("resourceclaimtemplates", resourcev1.GroupName, pod.Namespace, template)
			if stop, err := errs.check(r, StageScheduling); stop != nil || err != nil {
				return got[*claimState]{val: st, stop: stop, err: err}
			}
			if named(templates, pod.Namespace, template) == nil {
				st.missing = append(st.missing, fmt.Sprintf("pod claim %s: %s", pc.Name, missingText(r)))
				continue
			}
			st.refs = append(st.refs, ObjectRef{Kind: "ResourceClaimTemplate", Namespace: pod.Namespace, Name: template})
			st.unallocated = append(st.unallocated, pc.Name)
			st.status = append(st.status, fmt.Sprintf("pod claim %s: no ResourceClaim generated yet from template %s", pc.Name, template))
		case name != "":
			r := getRead("resourceclaims", resourcev1.GroupName, pod.Namespace, name)
			if stop, err := errs.check(r, StageScheduling); stop != nil || err != nil {
				return got[*claimState]{val: st, stop: stop, err: err}
			}
			claim := named(claims, pod.Namespace, name)
			if claim == nil {
				st.missing = append(st.missing, fmt.Sprintf("pod claim %s: %s", pc.Name, missingText(r)))
				continue
			}
			st.refs = append(st.refs, ObjectRef{Kind: "ResourceClaim", Namespace: claim.Namespace, Name: claim.Name})
			st.status = append(st.status, describeClaim(claim))
			if claim.Status.Allocation == nil {
				st.unallocated = append(st.unallocated, claim.Name)
			}
		}
	}
	return got[*claimState]{val: st}
}

// restsOn adds the claims and templates found to the objects res rests on.
func (st *claimState) restsOn(res *Result) {
	for _, o := range st.refs {
		res.rests(o.Kind, o.Namespace, o.Name)
	}
}

// describeClaim is one line of claim evidence: allocated devices or the lack of them.
func describeClaim(c *resourcev1.ResourceClaim) string {
	if c.Status.Allocation == nil {
		return fmt.Sprintf("ResourceClaim %s/%s: not allocated (status.allocation is empty)", c.Namespace, c.Name)
	}
	devs := make([]string, 0, len(c.Status.Allocation.Devices.Results))
	for _, r := range c.Status.Allocation.Devices.Results {
		devs = append(devs, fmt.Sprintf("%s/%s/%s", r.Driver, r.Pool, r.Device))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ResourceClaim %s/%s: allocated %s", c.Namespace, c.Name, strings.Join(devs, ", "))
	for _, dv := range c.Status.Devices {
		for _, cond := range dv.Conditions {
			if cond.Status != metav1.ConditionTrue {
				fmt.Fprintf(&b, "; device %s condition %s=%s: %s", dv.Device, cond.Type, cond.Status, cond.Message)
			}
		}
	}
	return b.String()
}

// addClaims appends the pod's claim status to a DRA verdict's evidence; a read of them that failed is
// the verdict instead (stop).
func addClaims(claims got[*claimState], res *Result) (stop *Result, err error) {
	claims.val.restsOn(res)
	if claims.failed() {
		return claims.verdict(res)
	}
	res.Messages = append(res.Messages, claims.val.missing...)
	res.Messages = append(res.Messages, claims.val.status...)
	return nil, nil
}

// notRegisteredRE finds the kubelet's words for a claim whose driver has no registered kubelet plugin on
// the node: DRAPluginManager.GetPlugin's `DRA driver %s is not registered`
// (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go in k8s v1.37), inside the FailedPrepareDynamicResources
// event `Failed to prepare dynamic resources: prepare dynamic resources: %v`
// (pkg/kubelet/kuberuntime/kuberuntime_manager.go).
var notRegisteredRE = regexp.MustCompile(`DRA driver (\S+) is not registered`)

// notRegistered reports whether the kubelet's latest FailedPrepareDynamicResources event among evs says
// the claim's driver is not registered on the node.
func notRegistered(evs []corev1.Event) bool {
	latest := latestEvent(evs, eventFailedPrepareDRA)
	return latest != nil && notRegisteredRE.MatchString(latest.Message)
}

// chained keeps the events of replaced that lead up to the pod's own failures (evs) without a pause longer
// than outageGap: a replaced pod failed the same way shortly before its successor was placed, while an
// older failure of the Job's on the node (an earlier restart of the driver, registered again since) is
// another outage and does not count toward this one.
func chained(replaced, evs []corev1.Event) []corev1.Event {
	all := append(slices.Clone(replaced), evs...)
	slices.SortStableFunc(all, func(a, b corev1.Event) int { return EventTime(a).Compare(EventTime(b)) })
	start := len(all) - 1 // the earliest event of the chain that ends with the newest
	for start > 0 && eventFirstTime(all[start]).Sub(EventTime(all[start-1])) <= outageGap {
		start--
	}
	since := eventFirstTime(all[start])
	var out []corev1.Event
	for _, e := range replaced {
		if !EventTime(e).Before(since) {
			out = append(out, e)
		}
	}
	return out
}

// outageGap is the longest pause between the failures of a Job's successive pods on a node that still
// makes them one outage: Kueue requeues a Workload its PodsReady timeout evicted after a back-off of 60 s,
// then 120 s and 240 s (requeuingStrategy.backoffBaseSeconds, apis/config/v1beta2 defaults in v0.17), so
// the first three replacements fall within it.
const outageGap = 5 * time.Minute

// notRegisteredFinal is how long a driver may stay unregistered on a node before the failure is final.
// It is the kubelet's own grace for a plugin that went away: it waits 30 s for the plugin to register
// again before it wipes the driver's ResourceSlices from the node (defaultWipingDelay,
// pkg/kubelet/cm/dra/manager.go in k8s v1.37: "long enough to actually allow stopping a pod and starting
// the replacement"). A plugin that is only restarting is back within it; one that is not will not be.
const notRegisteredFinal = 30 * time.Second

// unregistered makes a DRAPrepareFailed verdict final when the kubelet's reason is that the claim's driver
// is not registered on the node, and that failure has repeated repeatsFinal times or lasted
// notRegisteredFinal; the count and span go into the evidence either way, as for a container's repeated
// failures (repeated). How long it lasted runs from its first event to readAt (when the snapshot was read;
// the span between its events where readAt is unknown) while it is still the kubelet's latest word: the
// kubelet retries a failed pod sync with a back-off that doubles (pkg/kubelet/pod_workers.go), so a second
// identical event may come only a minute after the first, and waiting for the events' own span would make
// the 30 s grace a 90 s one. evs are the pod's events, replaced those of the pods its Job replaced on the
// node (predecessorFailures), whose failures count toward the pod's.
func unregistered(pod *corev1.Pod, evs, replaced []corev1.Event, readAt time.Time, res *Result) {
	// Only the kubelet's latest word counts: a driver that registered since fails, if at all, otherwise.
	if !notRegistered(evs) {
		return
	}
	about := func(e *corev1.Event) bool { return e.Reason == eventFailedPrepareDRA }
	// The pods the Job replaced on the node failed the same way before it: Kueue's PodsReady eviction
	// replaces a pod that cannot start well within the grace, so only they show how long it has lasted.
	prior := chained(replaced, slices.DeleteFunc(slices.Clone(evs), func(e corev1.Event) bool { return !about(&e) }))
	rep, ok := repeated(append(prior, evs...), about, notRegisteredRE.MatchString)
	if !ok {
		return
	}
	driver := notRegisteredRE.FindStringSubmatch(rep.newest.Message)[1]
	node := cmp.Or(pod.Spec.NodeName, rep.newest.Source.Host)
	res.Messages = append(res.Messages, fmt.Sprintf("the kubelet on node %s found DRA driver %s not registered %d time(s) over %s (events %s, count %d%s): its kubelet plugin does not run there, or does not register",
		node, driver, rep.count, rep.span.Round(time.Second), eventFailedPrepareDRA, rep.count, carriedFrom(prior, about, rep.newest)))
	res.Next = fmt.Sprintf("kubectl get pods -A -o wide --field-selector spec.nodeName=%s (the DRA driver's kubelet plugin pod); its log and the kubelet's", node)
	if !readAt.IsZero() {
		rep.span = max(rep.span, readAt.Sub(rep.first))
	}
	if !rep.final(notRegisteredFinal) {
		res.Messages = append(res.Messages, fmt.Sprintf("not final yet: final after %d identical failures or %s", repeatsFinal, notRegisteredFinal))
		return
	}
	res.terminal(fmt.Sprintf("DRA driver %s stayed unregistered on node %s (%d failures, the first %s ago; final from %d or %s, the kubelet's own grace for a plugin to register again): the pod cannot start there until the driver's kubelet plugin runs on the node",
		driver, node, rep.count, rep.span.Round(time.Second), repeatsFinal, notRegisteredFinal))
}
