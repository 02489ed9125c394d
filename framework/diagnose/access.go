package diagnose

import (
	"errors"
	"fmt"
	"regexp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
)

// verdictError carries a finished verdict (Forbidden, APIMissing, NotFound)
// up from the read that discovered it, so every reader can stop the walk
// with one `return err` and Run turns it back into a Result.
type verdictError struct{ res *Result }

func (e *verdictError) Error() string { return string(e.res.Reason) }

// read describes one API read, so a failure can name what was denied or missing.
type read struct {
	verb, resource, group, version, namespace, name string
}

func (r read) groupVersion() string {
	if r.group == "" {
		return r.version
	}
	return r.group + "/" + r.version
}

func (r read) kubectlResource() string {
	if r.group == "" {
		return r.resource
	}
	return r.resource + "." + r.group
}

// forbiddenUserRE pulls the user out of the apiserver's forbidden message
// ("User %q cannot %s resource %q in API group %q ...", apiserver responsewriters).
var forbiddenUserRE = regexp.MustCompile(`User "([^"]*)" cannot`)

// classifyReadErr turns an access error into a verdict: a denied read is
// Forbidden (Layer RBAC), an unserved API is APIMissing (Layer API). Other
// errors (network, timeouts) pass through unchanged. A NotFound from a Get is
// the object missing only when the status names that object; the apiserver's
// 404 for an unserved resource carries no name, and a List never returns
// NotFound for a served resource.
func classifyReadErr(err error, r read, stage Stage) error {
	if err == nil {
		return nil
	}
	switch {
	case apierrors.IsForbidden(err):
		user := "the current user"
		if m := forbiddenUserRE.FindStringSubmatch(err.Error()); m != nil {
			user = fmt.Sprintf("user %q", m[1])
		}
		scope := "-n " + r.namespace
		if r.namespace == "" {
			scope = "(cluster scope)"
		}
		return &verdictError{&Result{
			Stage:  stage,
			Layer:  LayerRBAC,
			Reason: Forbidden,
			Messages: []string{
				fmt.Sprintf("%s may not %s %s %s", user, r.verb, r.kubectlResource(), scope),
				err.Error(),
			},
			Next: fmt.Sprintf("kubectl auth can-i %s %s %s", r.verb, r.kubectlResource(), nsFlag(r.namespace)),
		}}
	case meta.IsNoMatchError(err) || isUnservedNotFound(err, r):
		return apiMissing(r, stage, err.Error())
	}
	return err
}

// apiMissing is the verdict for an API group/version the cluster does not serve.
func apiMissing(r read, stage Stage, detail string) error {
	return &verdictError{&Result{
		Stage:  stage,
		Layer:  LayerAPI,
		Reason: APIMissing,
		Messages: []string{
			fmt.Sprintf("the API %s (resource %s) is not served by this cluster", r.groupVersion(), r.resource),
			detail,
		},
		Next: fmt.Sprintf("kubectl api-resources --api-group=%s", r.group),
	}}
}

func isUnservedNotFound(err error, r read) bool {
	if !apierrors.IsNotFound(err) {
		return false
	}
	if r.verb == "list" {
		return true
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		d := se.Status().Details
		return d == nil || d.Name == "" || d.Name != r.name
	}
	return false
}

// isObjectNotFound reports a NotFound for the named object itself (the API is served).
func isObjectNotFound(err error) bool {
	return apierrors.IsNotFound(err)
}

func nsFlag(ns string) string {
	if ns == "" {
		return ""
	}
	return "-n " + ns
}
