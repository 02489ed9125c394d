// Package nspolicy says whether a namespace's resource policy, its ResourceQuotas and LimitRanges, lets
// one workload in: what the API server's ResourceQuota admission would charge its pod and claims, against
// each quota's hard limit and usage, and what the LimitRanger would refuse in the pod. It reimplements the
// parts of the components the suite's pods meet (k8s.io/kubernetes v1.37: pkg/quota/v1/evaluator/core,
// plugin/pkg/admission/limitranger; k8s.io/apiserver v0.37: pkg/admission/plugin/resourcequota), because
// the suite never imports k8s.io/kubernetes; the tests pin each rule to the source's behaviour.
package nspolicy

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	resourcehelper "k8s.io/component-helpers/resource"

	"gpuconform.io/gpuconform/internal/resname"
)

// Charge is what one object costs the namespace's quotas, in quota resource names. Scoped quotas charge
// only pods, and only pods in their scopes (the pod evaluator's scope function); claims and other objects
// are counted by quotas without scopes alone (the generic evaluators' MatchesNoScopeFunc).
type Charge struct {
	// Usage is the object's usage by quota resource name.
	Usage corev1.ResourceList
	// Pod, when set, is the pod charged: a quota's scopes are matched against it.
	Pod *corev1.Pod
}

// ObjectCount is the quota resource name that counts objects of gr: count/<resource>[.<group>]
// (k8s.io/apiserver's generic.ObjectCountQuotaResourceNameFor).
func ObjectCount(gr schema.GroupResource) corev1.ResourceName {
	if gr.Group == "" {
		return corev1.ResourceName("count/" + gr.Resource)
	}
	return corev1.ResourceName("count/" + gr.Resource + "." + gr.Group)
}

// Object-count names of what a workload of the suite creates.
var (
	podCount      = ObjectCount(schema.GroupResource{Resource: "pods"})
	claimCount    = ObjectCount(resourcev1.SchemeGroupVersion.WithResource("resourceclaims").GroupResource())
	templateCount = ObjectCount(resourcev1.SchemeGroupVersion.WithResource("resourceclaimtemplates").GroupResource())
)

// PodCharge is what the pod evaluator charges pod (its PodUsageFunc for a pod that is not finished): the
// pod count, CPU, memory and ephemeral storage as requests (also under the bare name) and limits, huge
// pages, and each extended resource as requests.<name>. Requests and limits are the pod's effective ones
// (init containers and sidecars folded in, as the scheduler and the quota see them).
func PodCharge(pod *corev1.Pod) Charge {
	opts := resourcehelper.PodResourcesOptions{}
	requests := resourcehelper.PodRequests(pod, opts)
	limits := resourcehelper.PodLimits(pod, opts)
	usage := corev1.ResourceList{podCount: *resource.NewQuantity(1, resource.DecimalSI), corev1.ResourcePods: *resource.NewQuantity(1, resource.DecimalSI)}
	for _, r := range []struct{ name, requests, limits corev1.ResourceName }{
		{corev1.ResourceCPU, corev1.ResourceRequestsCPU, corev1.ResourceLimitsCPU},
		{corev1.ResourceMemory, corev1.ResourceRequestsMemory, corev1.ResourceLimitsMemory},
		{corev1.ResourceEphemeralStorage, corev1.ResourceRequestsEphemeralStorage, corev1.ResourceLimitsEphemeralStorage},
	} {
		if q, ok := requests[r.name]; ok {
			usage[r.name], usage[r.requests] = q.DeepCopy(), q.DeepCopy()
		}
		if q, ok := limits[r.name]; ok {
			usage[r.limits] = q.DeepCopy()
		}
	}
	for name, q := range requests {
		switch {
		case strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix):
			usage[name], usage[corev1.DefaultResourceRequestsPrefix+name] = q.DeepCopy(), q.DeepCopy()
		case resname.Extended(name):
			usage[corev1.DefaultResourceRequestsPrefix+name] = q.DeepCopy()
		}
	}
	return Charge{Usage: usage, Pod: pod}
}

// ClaimCharge is what the resource claim evaluator charges a claim generated from spec: one claim, and
// per DeviceClass its devices as <class>.deviceclass.resource.k8s.io/devices (exact counts; All as the
// most one claim may be allocated; for a list of alternatives, the largest of each class). A class that
// maps to an extended resource (extended: class → its extendedResourceName) is charged under the implicit
// names too, requests.deviceclass.resource.kubernetes.io/<class> and requests.<extended resource>, as the
// evaluator does with DRAExtendedResource (GA in 1.37).
func ClaimCharge(spec resourcev1.ResourceClaimSpec, extended map[string]string) Charge {
	usage := corev1.ResourceList{claimCount: *resource.NewQuantity(1, resource.DecimalSI)}
	add := func(class string, n int64) {
		for _, name := range classNames(class, extended) {
			q := usage[name]
			q.Add(*resource.NewQuantity(n, resource.DecimalSI))
			usage[name] = q
		}
	}
	for _, req := range spec.Devices.Requests {
		switch {
		case len(req.FirstAvailable) > 0:
			most := map[string]int64{}
			for _, sub := range req.FirstAvailable {
				most[sub.DeviceClassName] = max(most[sub.DeviceClassName], devices(sub.AllocationMode, sub.Count))
			}
			for class, n := range most {
				add(class, n)
			}
		case req.Exactly != nil:
			add(req.Exactly.DeviceClassName, devices(req.Exactly.AllocationMode, req.Exactly.Count))
		}
	}
	return Charge{Usage: usage}
}

// classNames are the quota names a device of class is charged under.
func classNames(class string, extended map[string]string) []corev1.ResourceName {
	names := []corev1.ResourceName{corev1.ResourceName(class + corev1.ResourceClaimsPerClass)}
	if ext := extended[class]; ext != "" {
		names = append(names, corev1.ResourceName(corev1.ResourceImplicitExtendedClaimsPerClass+class), corev1.ResourceName(corev1.DefaultResourceRequestsPrefix+ext))
	}
	return names
}

// devices is the count the evaluator charges for one request: its count, or for All the most devices one
// claim may be allocated (the worst case); an unknown mode counts nothing.
func devices(mode resourcev1.DeviceAllocationMode, count int64) int64 {
	switch mode {
	case resourcev1.DeviceAllocationModeExactCount:
		return count
	case resourcev1.DeviceAllocationModeAll:
		return resourcev1.AllocationResultsMaxSize
	}
	return 0
}

// TemplateCharge is what a ResourceClaimTemplate costs: one object of its kind.
func TemplateCharge() Charge {
	return Charge{Usage: corev1.ResourceList{templateCount: *resource.NewQuantity(1, resource.DecimalSI)}}
}

// WorkloadCharges is what one pod the suite makes costs: the pod, each ResourceClaimTemplate it needs
// first, and the claim the API server generates from each for the pod.
func WorkloadCharges(pod *corev1.Pod, templates []*resourcev1.ResourceClaimTemplate, extended map[string]string) []Charge {
	out := []Charge{PodCharge(pod)}
	for _, t := range templates {
		out = append(out, TemplateCharge(), ClaimCharge(t.Spec.Spec, extended))
	}
	return out
}
