package diagnose

import (
	"context"
	"fmt"
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

func claimRead(ns, resource, name string) read {
	return read{verb: "get", resource: resource, group: resourcev1.GroupName, version: "v1", namespace: ns, name: name}
}

// readClaims resolves each spec.resourceClaims entry to its ResourceClaim:
// a named claim directly, a template-based one through
// status.resourceClaimStatuses (where the resourceclaim controller records
// the generated name). A template entry with no generated claim yet is
// checked against its ResourceClaimTemplate.
func (d *diagnosis) readClaims(ctx context.Context, pod *corev1.Pod) (*claimState, error) {
	st := &claimState{}
	generated := map[string]*string{}
	for _, s := range pod.Status.ResourceClaimStatuses {
		generated[s.Name] = s.ResourceClaimName
	}
	for _, pc := range pod.Spec.ResourceClaims {
		var name string
		switch {
		case pc.ResourceClaimName != nil:
			name = *pc.ResourceClaimName
		case pc.ResourceClaimTemplateName != nil:
			gen, ok := generated[pc.Name]
			if ok && gen == nil {
				continue // the controller decided no claim is needed
			}
			if !ok {
				msg, err := d.checkTemplate(ctx, pod.Namespace, *pc.ResourceClaimTemplateName)
				if err != nil {
					return nil, err
				}
				if msg != "" {
					st.missing = append(st.missing, fmt.Sprintf("pod claim %s: %s", pc.Name, msg))
				} else {
					st.unallocated = append(st.unallocated, pc.Name)
					st.status = append(st.status, fmt.Sprintf("pod claim %s: no ResourceClaim generated yet from template %s", pc.Name, *pc.ResourceClaimTemplateName))
				}
				continue
			}
			name = *gen
		default:
			continue
		}
		r := claimRead(pod.Namespace, "resourceclaims", name)
		claim, err := d.c.Kube.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if err = classifyReadErr(err, r, StageScheduling); isObjectNotFound(err) {
				st.missing = append(st.missing, fmt.Sprintf("pod claim %s: %v", pc.Name, err))
				continue
			}
			return nil, err
		}
		d.ref("ResourceClaim", claim.Namespace, claim.Name)
		st.status = append(st.status, describeClaim(claim))
		if claim.Status.Allocation == nil {
			st.unallocated = append(st.unallocated, claim.Name)
		}
	}
	return st, nil
}

// checkTemplate returns the NotFound text when the template is missing, "" when it exists.
func (d *diagnosis) checkTemplate(ctx context.Context, ns, name string) (string, error) {
	r := claimRead(ns, "resourceclaimtemplates", name)
	_, err := d.c.Kube.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if err = classifyReadErr(err, r, StageScheduling); isObjectNotFound(err) {
			return err.Error(), nil
		}
		return "", err
	}
	d.ref("ResourceClaimTemplate", ns, name)
	return "", nil
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
	s := fmt.Sprintf("ResourceClaim %s/%s: allocated %s", c.Namespace, c.Name, strings.Join(devs, ", "))
	for _, dv := range c.Status.Devices {
		for _, cond := range dv.Conditions {
			if cond.Status != metav1.ConditionTrue {
				s += fmt.Sprintf("; device %s condition %s=%s: %s", dv.Device, cond.Type, cond.Status, cond.Message)
			}
		}
	}
	return s
}

// addClaims appends the pod's claim status to a DRA verdict's evidence.
func (d *diagnosis) addClaims(ctx context.Context, pod *corev1.Pod, res *Result) error {
	if len(pod.Spec.ResourceClaims) == 0 {
		return nil
	}
	st, err := d.readClaims(ctx, pod)
	if err != nil {
		return err
	}
	res.Messages = append(res.Messages, st.missing...)
	res.Messages = append(res.Messages, st.status...)
	return nil
}
