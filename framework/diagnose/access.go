package diagnose

import (
	"errors"
	"fmt"
	"regexp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func (r Read) groupVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

func (r Read) kubectlResource() string {
	if r.Group == "" {
		return r.Resource
	}
	return r.Resource + "." + r.Group
}

// forbiddenUserRE pulls the user out of the apiserver's forbidden message
// ("User %q cannot %s resource %q in API group %q ...", apiserver responsewriters).
var forbiddenUserRE = regexp.MustCompile(`User "([^"]*)" cannot`)

// classifyReadErr turns an access error into a verdict: a denied read is
// Forbidden (Layer RBAC), an unserved API (or no client for it) is APIMissing
// (Layer API). Other errors (network, timeouts) are returned as errors.
func classifyReadErr(err error, r Read, stage Stage) (*Result, error) {
	if err == nil {
		return nil, nil
	}
	switch {
	case apierrors.IsForbidden(err):
		user := "the current user"
		if m := forbiddenUserRE.FindStringSubmatch(err.Error()); m != nil {
			user = fmt.Sprintf("user %q", m[1])
		}
		scope := "-n " + r.Namespace
		if r.Namespace == "" {
			scope = "(cluster scope)"
		}
		return &Result{
			Stage:  stage,
			Layer:  LayerRBAC,
			Reason: Forbidden,
			Messages: []string{
				fmt.Sprintf("%s may not %s %s %s", user, r.Verb, r.kubectlResource(), scope),
				err.Error(),
			},
			Next: fmt.Sprintf("kubectl auth can-i %s %s %s", r.Verb, r.kubectlResource(), nsFlag(r.Namespace)),
		}, nil
	case meta.IsNoMatchError(err) || isUnservedNotFound(err, r) || errors.Is(err, errNoKueue):
		return apiMissing(r, stage, err.Error()), nil
	}
	return nil, err
}

// apiMissing is the verdict for an API group/version the cluster does not serve.
func apiMissing(r Read, stage Stage, detail string) *Result {
	return &Result{
		Stage:  stage,
		Layer:  LayerAPI,
		Reason: APIMissing,
		Messages: []string{
			fmt.Sprintf("the API %s (resource %s) is not served by this cluster", r.groupVersion(), r.Resource),
			detail,
		},
		Next: fmt.Sprintf("kubectl api-resources --api-group=%s", r.Group),
	}
}

// isUnservedNotFound tells the apiserver's 404 for an unserved resource, which
// names no object, from a get's NotFound for the object itself; a list never
// returns NotFound for a served resource.
func isUnservedNotFound(err error, r Read) bool {
	if !apierrors.IsNotFound(err) {
		return false
	}
	if r.Verb == "list" {
		return true
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		d := se.Status().Details
		return d == nil || d.Name == "" || d.Name != r.Name
	}
	return false
}

// isObjectMissing reports a get's NotFound for the named object itself (the API is served).
func isObjectMissing(err error, r Read) bool {
	return apierrors.IsNotFound(err) && !isUnservedNotFound(err, r)
}

// missingText is the API server's NotFound message for the object r names, for an object Collect found
// absent (or a recorded snapshot lacks).
func missingText(r Read) string {
	return apierrors.NewNotFound(schema.GroupResource{Group: r.Group, Resource: r.Resource}, r.Name).Error()
}

// notFound is the verdict for a target that does not exist; resource is what kubectl lists it as.
func notFound(r Read, resource string) *Result {
	return &Result{Stage: StageUnknown, Layer: LayerAPI, Reason: NotFound,
		Messages: []string{missingText(r)},
		Next:     fmt.Sprintf("kubectl get %s -n %s", resource, r.Namespace)}
}

func nsFlag(ns string) string {
	if ns == "" {
		return ""
	}
	return "-n " + ns
}
