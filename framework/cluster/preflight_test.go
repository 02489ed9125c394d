package cluster

import (
	"slices"
	"strings"
	"testing"

	authv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// In team-namespace mode the preflight lists the reads of the team preflight (quotas, LimitRanges, the
// ClusterQueue) as advisory: the shipped role grants them, and a user without them is noted, not
// refused.
func TestPreflightAdvisoryReads(t *testing.T) {
	perms := PreflightNeeds(Needs{Kueue: true, Namespace: "team-a"})
	var advisory []string
	for _, p := range perms {
		if p.Advisory {
			advisory = append(advisory, p.String())
		}
	}
	want := []string{
		"get resourcequotas (core) in namespace team-a", "list resourcequotas (core) in namespace team-a",
		"get limitranges (core) in namespace team-a", "list limitranges (core) in namespace team-a",
		"get clusterqueues (kueue.x-k8s.io)",
	}
	slices.Sort(advisory)
	slices.Sort(want)
	if !slices.Equal(advisory, want) {
		t.Errorf("advisory %q, want %q", advisory, want)
	}
	if slices.ContainsFunc(PreflightNeeds(Needs{Kueue: true}), func(p Permission) bool { return p.Advisory }) {
		t.Error("outside team-namespace mode nothing is advisory")
	}

	kube := fake.NewClientset()
	var asked []string
	kube.PrependReactor("create", "selfsubjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		r := a.(clienttesting.CreateAction).GetObject().(*authv1.SelfSubjectAccessReview)
		asked = append(asked, r.Spec.ResourceAttributes.Resource)
		return true, &authv1.SelfSubjectAccessReview{Status: authv1.SubjectAccessReviewStatus{Allowed: false}}, nil
	})
	err := Preflight(t.Context(), kube, perms)
	if err == nil || strings.Contains(err.Error(), "resourcequotas") || strings.Contains(err.Error(), "clusterqueues") {
		t.Errorf("Preflight refused for an advisory permission, or refused nothing: %v", err)
	}
	if slices.Contains(asked, "resourcequotas") || slices.Contains(asked, "limitranges") || !slices.Contains(asked, "pods") {
		t.Errorf("asked about %v", asked)
	}
}
