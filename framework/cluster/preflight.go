package cluster

import (
	"context"
	"fmt"
	"strings"

	authv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Permission is one verb on one resource the suite needs.
type Permission struct {
	Verb, Group, Resource string
	// Why is shown when the permission is missing.
	Why string
}

func (p Permission) String() string {
	g := p.Group
	if g == "" {
		g = "core"
	}
	return fmt.Sprintf("%s %s (%s)", p.Verb, p.Resource, g)
}

// PreflightNeeds lists what the non-disruptive level needs. Kueue objects are included only when the
// suite will create them, DRA objects only when the DRA path is exercised.
func PreflightNeeds(kueueOwnQueues, kueueUsed, dra bool) []Permission {
	perms := []Permission{
		{"list", "", "nodes", "discover GPU nodes and pools"},
		{"create", "", "namespaces", "run each spec in its own namespace"},
		{"delete", "", "namespaces", "clean up each spec's namespace"},
		{"list", "", "namespaces", "leak audit and leftover check"},
		{"create", "batch", "jobs", "submit GPU jobs"},
		{"create", "", "pods", "run probe and podresources helper pods"},
		{"get", "", "pods/log", "read probe output"},
		{"list", "", "events", "diagnose failures"},
	}
	if dra {
		perms = append(perms,
			Permission{"create", "resource.k8s.io", "resourceclaimtemplates", "ask for DRA devices"},
			Permission{"list", "resource.k8s.io", "resourceclaims", "read which devices a pod was given"},
			Permission{"list", "resource.k8s.io", "resourceslices", "discover DRA capacity"},
			Permission{"list", "resource.k8s.io", "deviceclasses", "discover DRA device classes"},
		)
	}
	if kueueUsed {
		perms = append(perms, Permission{"list", "kueue.x-k8s.io", "workloads", "check admission"})
	}
	if kueueOwnQueues {
		for _, r := range []string{"resourceflavors", "clusterqueues", "localqueues", "workloadpriorityclasses"} {
			perms = append(perms,
				Permission{"create", "kueue.x-k8s.io", r, "create each spec's own queues"},
				Permission{"delete", "kueue.x-k8s.io", r, "clean up each spec's queues"})
		}
	}
	return perms
}

// Preflight asks the API server, through SelfSubjectAccessReviews, whether the caller holds every
// permission, and returns one error listing all that are missing with the reason each is needed.
func Preflight(ctx context.Context, kube kubernetes.Interface, perms []Permission) error {
	var missing []string
	for _, p := range perms {
		review := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authv1.ResourceAttributes{Verb: p.Verb, Group: p.Group, Resource: baseResource(p.Resource), Subresource: subresource(p.Resource)},
		}}
		res, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("RBAC preflight: cannot create a SelfSubjectAccessReview (%v); the suite cannot check its permissions", err)
		}
		if !res.Status.Allowed {
			missing = append(missing, fmt.Sprintf("%s: needed to %s", p, p.Why))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("RBAC preflight: the current user lacks %d permission(s) for the non-disruptive level:\n  - %s\napply fixtures/rbac/non-disruptive.yaml and bind it to this user",
			len(missing), strings.Join(missing, "\n  - "))
	}
	return nil
}

func baseResource(r string) string { b, _, _ := strings.Cut(r, "/"); return b }
func subresource(r string) string  { _, s, _ := strings.Cut(r, "/"); return s }
