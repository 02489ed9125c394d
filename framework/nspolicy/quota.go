package nspolicy

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Shortfall is one quota resource that cannot take what a workload needs: hard − used < needed.
type Shortfall struct {
	// Quota is the ResourceQuota's name; Resource the quota resource name (limits.cpu).
	Quota    string
	Resource corev1.ResourceName
	// Hard, Used and Needed are the quota's limit, the namespace's recorded usage and the workload's need.
	Hard, Used, Needed resource.Quantity
}

// String reads "ResourceQuota compute-quota: limits.cpu hard 50m, used 0, needed 100m".
func (s Shortfall) String() string {
	return fmt.Sprintf("ResourceQuota %s: %s hard %s, used %s, needed %s", s.Quota, s.Resource, s.Hard.String(), s.Used.String(), s.Needed.String())
}

// Shortfalls lists, quota by quota and resource by resource (sorted), where the charges do not fit what
// is left. A quota charges what it matches (Charge); its limits are the quota controller's status.hard,
// which is what admission enforces, or spec.hard before the controller has written it (it will).
// Usage the controller has not recorded counts as none: the refusal it causes ("status unknown for
// quota") is passing (diagnose.QuotaStatusGrace).
func Shortfalls(quotas []corev1.ResourceQuota, charges ...Charge) []Shortfall {
	var out []Shortfall
	for i := range quotas {
		q := &quotas[i]
		hard := q.Status.Hard
		if len(hard) == 0 {
			hard = q.Spec.Hard
		}
		needed := corev1.ResourceList{}
		for _, c := range charges {
			if !charged(q, c) {
				continue
			}
			for name, amount := range c.Usage {
				if _, limited := hard[name]; limited {
					n := needed[name]
					n.Add(amount)
					needed[name] = n
				}
			}
		}
		names := make([]corev1.ResourceName, 0, len(needed))
		for name := range needed {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			h, used, need := hard[name], q.Status.Used[name], needed[name]
			left := h.DeepCopy()
			left.Sub(used)
			if need.Cmp(left) > 0 {
				out = append(out, Shortfall{Quota: q.Name, Resource: name, Hard: h, Used: used, Needed: need})
			}
		}
	}
	return out
}

// charged reports whether quota q charges c: a quota without scopes charges everything; a scoped one
// only a pod in every one of its scopes.
func charged(q *corev1.ResourceQuota, c Charge) bool {
	scopes := scopeSelectors(q)
	if len(scopes) == 0 {
		return true
	}
	if c.Pod == nil {
		return false
	}
	for _, s := range scopes {
		if !podInScope(c.Pod, s) {
			return false
		}
	}
	return true
}

// scopeSelectors are q's scopes and scope selector as one list (spec.scopes are "Exists" selectors).
func scopeSelectors(q *corev1.ResourceQuota) []corev1.ScopedResourceSelectorRequirement {
	var out []corev1.ScopedResourceSelectorRequirement
	for _, s := range q.Spec.Scopes {
		out = append(out, corev1.ScopedResourceSelectorRequirement{ScopeName: s, Operator: corev1.ScopeSelectorOpExists})
	}
	if q.Spec.ScopeSelector != nil {
		out = append(out, q.Spec.ScopeSelector.MatchExpressions...)
	}
	return out
}

// podInScope is the pod evaluator's podMatchesScopeFunc: Terminating is an activeDeadlineSeconds,
// BestEffort no CPU or memory request or limit anywhere, PriorityClass the pod's priorityClassName
// matched as a label, CrossNamespacePodAffinity a pod (anti-)affinity term reaching other namespaces.
// Other scopes match no pod.
func podInScope(pod *corev1.Pod, s corev1.ScopedResourceSelectorRequirement) bool {
	switch s.ScopeName {
	case corev1.ResourceQuotaScopeTerminating:
		return terminating(pod)
	case corev1.ResourceQuotaScopeNotTerminating:
		return !terminating(pod)
	case corev1.ResourceQuotaScopeBestEffort:
		return bestEffort(pod)
	case corev1.ResourceQuotaScopeNotBestEffort:
		return !bestEffort(pod)
	case corev1.ResourceQuotaScopePriorityClass:
		class, set := pod.Spec.PriorityClassName, pod.Spec.PriorityClassName != ""
		switch s.Operator {
		case corev1.ScopeSelectorOpExists:
			return set
		case corev1.ScopeSelectorOpDoesNotExist:
			return !set
		case corev1.ScopeSelectorOpIn:
			return set && slices.Contains(s.Values, class)
		case corev1.ScopeSelectorOpNotIn:
			return !set || !slices.Contains(s.Values, class)
		}
	case corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return crossNamespaceAffinity(pod)
	}
	return false
}

func terminating(pod *corev1.Pod) bool {
	return pod.Spec.ActiveDeadlineSeconds != nil && *pod.Spec.ActiveDeadlineSeconds >= 0
}

// bestEffort is the BestEffort QoS class: no container sets a non-zero CPU or memory request or limit.
func bestEffort(pod *corev1.Pod) bool {
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		for _, list := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
			if cpu, mem := list[corev1.ResourceCPU], list[corev1.ResourceMemory]; !cpu.IsZero() || !mem.IsZero() {
				return false
			}
		}
	}
	return true
}

func crossNamespaceAffinity(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	if a == nil {
		return false
	}
	var terms []corev1.PodAffinityTerm
	if a.PodAffinity != nil {
		terms = append(terms, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	if a.PodAntiAffinity != nil {
		terms = append(terms, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	return slices.ContainsFunc(terms, func(t corev1.PodAffinityTerm) bool { return len(t.Namespaces) > 0 || t.NamespaceSelector != nil })
}
