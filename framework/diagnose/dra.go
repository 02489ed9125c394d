package diagnose

import (
	"fmt"
	"slices"
	"strings"

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

// claims says what the pod's ResourceClaims are: missing (a claim or a
// template that does not exist), unallocated, and one status line each.
func (v *verdict) claims(pod *corev1.Pod) (*claimState, error) {
	st := &claimState{}
	for _, pc := range pod.Spec.ResourceClaims {
		name, template := podClaim(pod, pc)
		switch {
		case template != "":
			r := getRead("resourceclaimtemplates", resourcev1.GroupName, pod.Namespace, template)
			if err := v.s.check(r, StageScheduling); err != nil {
				return nil, err
			}
			if !slices.ContainsFunc(v.s.ResourceClaimTemplates, func(t resourcev1.ResourceClaimTemplate) bool {
				return t.Namespace == pod.Namespace && t.Name == template
			}) {
				st.missing = append(st.missing, fmt.Sprintf("pod claim %s: %s", pc.Name, missingText(r)))
				continue
			}
			v.ref("ResourceClaimTemplate", pod.Namespace, template)
			st.unallocated = append(st.unallocated, pc.Name)
			st.status = append(st.status, fmt.Sprintf("pod claim %s: no ResourceClaim generated yet from template %s", pc.Name, template))
		case name != "":
			r := getRead("resourceclaims", resourcev1.GroupName, pod.Namespace, name)
			if err := v.s.check(r, StageScheduling); err != nil {
				return nil, err
			}
			i := slices.IndexFunc(v.s.ResourceClaims, func(c resourcev1.ResourceClaim) bool { return c.Namespace == pod.Namespace && c.Name == name })
			if i < 0 {
				st.missing = append(st.missing, fmt.Sprintf("pod claim %s: %s", pc.Name, missingText(r)))
				continue
			}
			claim := &v.s.ResourceClaims[i]
			v.ref("ResourceClaim", claim.Namespace, claim.Name)
			st.status = append(st.status, describeClaim(claim))
			if claim.Status.Allocation == nil {
				st.unallocated = append(st.unallocated, claim.Name)
			}
		}
	}
	return st, nil
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

// addClaims appends the pod's claim status to a DRA verdict's evidence.
func (v *verdict) addClaims(pod *corev1.Pod, res *Result) error {
	if len(pod.Spec.ResourceClaims) == 0 {
		return nil
	}
	st, err := v.claims(pod)
	if err != nil {
		return err
	}
	res.Messages = append(res.Messages, st.missing...)
	res.Messages = append(res.Messages, st.status...)
	return nil
}
