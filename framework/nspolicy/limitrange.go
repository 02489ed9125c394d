package nspolicy

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Violation is one LimitRange rule a pod breaks, in the LimitRanger's own words.
type Violation struct {
	// LimitRange is the LimitRange's name; Rule the LimitRanger's refusal ("maximum cpu usage per
	// Container is 50m, but limit is 100m").
	LimitRange, Rule string
}

// String reads "LimitRange container-limits: maximum cpu usage per Container is 50m, but limit is 100m".
func (v Violation) String() string { return "LimitRange " + v.LimitRange + ": " + v.Rule }

// Violations is the LimitRanger's verdict on creating pod where limitRanges are: the mutating phase fills
// in every LimitRange's container defaults (default, defaultRequest) where a container sets none, then
// the validating phase checks each LimitRange's Container bounds on every container and init container
// and its Pod bounds on the pod's effective requests and limits (min, max, maxLimitRequestRatio).
// A rule broken the same way by several containers is listed once.
func Violations(limitRanges []corev1.LimitRange, pod *corev1.Pod) []Violation {
	pod = pod.DeepCopy()
	for i := range limitRanges {
		applyDefaults(&limitRanges[i], pod)
	}
	var out []Violation
	add := func(lr string, rules []string) {
		for _, r := range rules {
			if v := (Violation{LimitRange: lr, Rule: r}); !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	for _, lr := range limitRanges {
		for _, item := range lr.Spec.Limits {
			switch item.Type {
			case corev1.LimitTypeContainer:
				for _, c := range append(slices.Clone(pod.Spec.Containers), pod.Spec.InitContainers...) {
					add(lr.Name, bounds(item, c.Resources.Requests, c.Resources.Limits))
				}
			case corev1.LimitTypePod:
				opts := resourcehelper.PodResourcesOptions{}
				add(lr.Name, bounds(item, resourcehelper.PodRequests(pod, opts), resourcehelper.PodLimits(pod, opts)))
			}
		}
	}
	return out
}

// applyDefaults is the LimitRanger's mutation: each Container item's default limits and default
// requests fill what a container leaves unset.
func applyDefaults(lr *corev1.LimitRange, pod *corev1.Pod) {
	for _, item := range lr.Spec.Limits {
		if item.Type != corev1.LimitTypeContainer {
			continue
		}
		for _, list := range []*[]corev1.Container{&pod.Spec.Containers, &pod.Spec.InitContainers} {
			for i := range *list {
				r := &(*list)[i].Resources
				r.Limits = fill(r.Limits, item.Default)
				r.Requests = fill(r.Requests, item.DefaultRequest)
			}
		}
	}
}

func fill(list, defaults corev1.ResourceList) corev1.ResourceList {
	for name, q := range defaults {
		if list == nil {
			list = corev1.ResourceList{}
		}
		if _, set := list[name]; !set {
			list[name] = q.DeepCopy()
		}
	}
	return list
}

// bounds checks one LimitRange item on requests and limits, resource by resource (sorted), and returns
// the refusals in the LimitRanger's format (minConstraint, maxConstraint, limitRequestRatioConstraint).
func bounds(item corev1.LimitRangeItem, requests, limits corev1.ResourceList) []string {
	kind := string(item.Type)
	var out []string
	for _, name := range sortedNames(item.Min) {
		enforced := item.Min[name]
		req, hasReq := requests[name]
		lim, hasLim := limits[name]
		switch {
		case !hasReq:
			out = append(out, fmt.Sprintf("minimum %s usage per %s is %s.  No request is specified", name, kind, enforced.String()))
		case req.Cmp(enforced) < 0:
			out = append(out, fmt.Sprintf("minimum %s usage per %s is %s, but request is %s", name, kind, enforced.String(), req.String()))
		case hasLim && lim.Cmp(enforced) < 0:
			out = append(out, fmt.Sprintf("minimum %s usage per %s is %s, but limit is %s", name, kind, enforced.String(), lim.String()))
		}
	}
	for _, name := range sortedNames(item.Max) {
		enforced := item.Max[name]
		req, hasReq := requests[name]
		lim, hasLim := limits[name]
		switch {
		case !hasLim:
			out = append(out, fmt.Sprintf("maximum %s usage per %s is %s.  No limit is specified", name, kind, enforced.String()))
		case lim.Cmp(enforced) > 0:
			out = append(out, fmt.Sprintf("maximum %s usage per %s is %s, but limit is %s", name, kind, enforced.String(), lim.String()))
		case hasReq && req.Cmp(enforced) > 0:
			out = append(out, fmt.Sprintf("maximum %s usage per %s is %s, but request is %s", name, kind, enforced.String(), req.String()))
		}
	}
	for _, name := range sortedNames(item.MaxLimitRequestRatio) {
		if r := ratio(name, kind, item.MaxLimitRequestRatio[name], requests, limits); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// ratio is limitRequestRatioConstraint: limit / request may not exceed enforced.
func ratio(name corev1.ResourceName, kind string, enforced resource.Quantity, requests, limits corev1.ResourceList) string {
	req, hasReq := requests[name]
	lim, hasLim := limits[name]
	switch {
	case !hasReq || req.IsZero():
		return fmt.Sprintf("%s max limit to request ratio per %s is %s, but no request is specified or request is 0", name, kind, enforced.String())
	case !hasLim || lim.IsZero():
		return fmt.Sprintf("%s max limit to request ratio per %s is %s, but no limit is specified or limit is 0", name, kind, enforced.String())
	}
	observed := float64(lim.MilliValue()) / float64(req.MilliValue())
	if observed*1000 > float64(enforced.MilliValue()) {
		return fmt.Sprintf("%s max limit to request ratio per %s is %s, but provided ratio is %f", name, kind, enforced.String(), observed)
	}
	return ""
}

func sortedNames(list corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(list))
	for name := range list {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
