package diagnose

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"gpuconform.io/gpuconform/internal/resname"
)

// The scheduler says only "cannot allocate all claims" when a claim's DeviceClass selects none of the
// published devices, the same words as for devices that are all in use. The DeviceClasses the claims ask
// for and the ResourceSlices tell the two apart (MatchDeviceClass); a class that selects nothing is
// final, since no device will be freed for it.

// deviceClassesOf names the DeviceClasses the pod's claims ask for, in request order: from each claim
// read, or its template while no claim has been generated.
func deviceClassesOf(pod *corev1.Pod, claims []resourcev1.ResourceClaim, templates []resourcev1.ResourceClaimTemplate, classes []resourcev1.DeviceClass) []string {
	var out []string
	add := func(dc resourcev1.DeviceClaim) {
		for _, r := range dc.Requests {
			if r.Exactly != nil {
				out = appendUnique(out, r.Exactly.DeviceClassName)
			}
			for _, sub := range r.FirstAvailable {
				out = appendUnique(out, sub.DeviceClassName)
			}
		}
	}
	for _, pc := range pod.Spec.ResourceClaims {
		name, template := podClaim(pod, pc)
		if c := named(claims, pod.Namespace, name); name != "" && c != nil {
			add(c.Spec.Devices)
		}
		if t := named(templates, pod.Namespace, template); template != "" && t != nil {
			add(t.Spec.Spec.Devices)
		}
	}
	for _, dc := range classes {
		if mapsRequest(&dc, pod) != "" {
			out = appendUnique(out, dc.Name)
		}
	}
	return out
}

// mapsRequest is the extended resource of pod's requests that class serves through DRA (its
// spec.extendedResourceName, or the implicit deviceclass.resource.kubernetes.io/<class> the scheduler gives
// every class), "" when it serves none of them.
func mapsRequest(class *resourcev1.DeviceClass, pod *corev1.Pod) string {
	for _, name := range extendedRequests(pod) {
		if class.Spec.ExtendedResourceName != nil && *class.Spec.ExtendedResourceName == string(name) || string(name) == resourcev1.ResourceDeviceClassPrefix+class.Name {
			return string(name)
		}
	}
	return ""
}

// extendedRequests are the extended resources (a domain-prefixed name outside kubernetes.io) the pod's
// containers ask for, sorted: what a device plugin, or a DeviceClass mapping the name, may serve.
func extendedRequests(pod *corev1.Pod) []corev1.ResourceName {
	var out []corev1.ResourceName
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for name, q := range c.Resources.Limits {
			if !q.IsZero() && resname.Extended(name) && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// allocationFailed reports a pod the scheduler cannot place because its claims cannot be allocated (the
// primary cause of its message is DRA's).
func allocationFailed(pod *corev1.Pod, evs []corev1.Event) bool {
	if pod.Spec.NodeName != "" || len(pod.Spec.ResourceClaims) == 0 && len(extendedRequests(pod)) == 0 {
		return false
	}
	c, ok := ParseSchedulerMessage(schedulerSaid(pod, evs)).PrimaryCause()
	return ok && classify(c.Text) == classDRA
}

// readDeviceClasses reads, for a pod whose claims cannot be allocated, the DeviceClasses they ask for
// (and, for a pod asking for extended resources, the classes that serve one of them through DRA: the claim
// the scheduler would create for them) and the ResourceSlices (of the drivers the classes name, when they
// name one). It reads nothing after a failed read of the claims.
func (col *collector) readDeviceClasses(ctx context.Context) {
	pod, evs := col.waitingPod()
	if pod == nil || !allocationFailed(pod, evs) ||
		slices.ContainsFunc(col.s.Errors, func(e ReadError) bool { return e.Group == resourcev1.GroupName }) {
		return
	}
	rc := col.c.Kube.ResourceV1()
	var drivers []string
	anyDriver := false // a class that names no driver may select any driver's devices
	keep := func(dc *resourcev1.DeviceClass) {
		col.s.DeviceClasses = append(col.s.DeviceClasses, *dc)
		named := ClassDrivers(dc)
		anyDriver = anyDriver || len(named) == 0
		drivers = appendUnique(drivers, named...)
	}
	for _, name := range deviceClassesOf(pod, col.s.ResourceClaims, col.s.ResourceClaimTemplates, col.s.DeviceClasses) {
		dc, err := rc.DeviceClasses().Get(ctx, name, metav1.GetOptions{})
		if col.got(getRead("deviceclasses", resourcev1.GroupName, "", name), err) {
			keep(dc)
		}
	}
	if len(extendedRequests(pod)) > 0 {
		list, err := rc.DeviceClasses().List(ctx, metav1.ListOptions{})
		if col.got(listRead("deviceclasses", resourcev1.GroupName, ""), err) {
			for i := range list.Items {
				if mapsRequest(&list.Items[i], pod) != "" && !slices.ContainsFunc(col.s.DeviceClasses, func(d resourcev1.DeviceClass) bool { return d.Name == list.Items[i].Name }) {
					keep(&list.Items[i])
				}
			}
		}
	}
	if len(col.s.DeviceClasses) == 0 {
		return
	}
	opts := metav1.ListOptions{}
	if !anyDriver && len(drivers) == 1 {
		opts.FieldSelector = fields.OneTermEqualSelector(resourcev1.ResourceSliceSelectorDriver, drivers[0]).String()
	}
	list, err := rc.ResourceSlices().List(ctx, opts)
	if col.got(listRead("resourceslices", resourcev1.GroupName, ""), err) {
		col.s.ResourceSlices = list.Items
	}
}

// classesSelect adds to an allocation failure, for each DeviceClass the pod's claims ask for, how many
// of the published devices it selects, and makes the verdict final when one selects none. What could not
// be read is said, never guessed.
func classesSelect(pod *corev1.Pod, classes []classRead, published got[[]resourcev1.ResourceSlice], res *Result) {
	for _, c := range classes {
		name, class := c.name, c.class
		if c.err != nil {
			res.Messages = append(res.Messages, fmt.Sprintf("DeviceClass %s could not be read (%v), so whether it selects any published device was not checked", name, c.err))
			continue
		}
		if class == nil {
			continue // not read, or missing: the scheduler's message names a missing class itself
		}
		res.rests("DeviceClass", "", name)
		if published.err != nil {
			res.Messages = append(res.Messages, fmt.Sprintf("ResourceSlices could not be read (%v), so whether DeviceClass %s selects any published device was not checked", published.err, name))
			continue
		}
		// Decide reads no API; each evaluation is bounded by the API's CEL cost limit.
		m := MatchDeviceClass(context.Background(), class, published.val)
		why := m.SelectsNothing()
		if name := mapsRequest(class, pod); name != "" {
			res.Messages = append(res.Messages, fmt.Sprintf("the pod's %s is served through DRA by DeviceClass %s (spec.extendedResourceName) on nodes where no device plugin advertises it: the scheduler creates a claim for it once a node fits", name, class.Name))
		}
		if why == "" {
			res.Messages = append(res.Messages, m.Summary())
			continue
		}
		res.Messages = append(res.Messages, why)
		res.Next = fmt.Sprintf("kubectl get deviceclass %s -o yaml; kubectl get resourceslices -o yaml (the devices' attributes)", name)
		res.terminal(fmt.Sprintf("DeviceClass %s selects none of the devices published for it: no claim of the class can be allocated until the class's selectors or the driver's attributes change", name))
	}
}
