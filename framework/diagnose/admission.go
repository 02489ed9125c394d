package diagnose

import (
	"fmt"
	"regexp"
	"strings"
)

// AdmissionDenial is a create the API server refused, as the controller that tried it (Job, ReplicaSet,
// StatefulSet, DaemonSet: event reason FailedCreate) quotes the error.
type AdmissionDenial struct {
	// By names what refused: `PodSecurity "restricted:latest"`, `admission webhook "x"`,
	// `ValidatingAdmissionPolicy "p" (binding "b")`, `ResourceQuota "q"`, `LimitRange`, or `admission`
	// when the error says forbidden without naming a plugin.
	By string
	// Message is the error as quoted.
	Message string
}

// The shapes come from the API server's own source (k8s.io/apiserver v0.37 and the PodSecurity plugin):
// the webhook dispatcher's `admission webhook %q denied the request`, the validating-policy dispatcher's
// `ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s` (and the form without a binding),
// the generic policy dispatcher's `policy '%s' with binding '%s' denied request`, the ResourceQuota
// plugin's `exceeded quota: %s, requested: ...`, PodSecurity's `violates PodSecurity "%s"`, and the
// LimitRanger's `maximum ... usage per Container is ...` / `must be less than or equal to ... limit`.
var (
	podSecurityRE = regexp.MustCompile(`violates PodSecurity "([^"]+)"`)
	webhookRE     = regexp.MustCompile(`admission webhook "([^"]+)" denied the request`)
	vapRE         = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']+)'(?: with binding '([^']+)')? denied request`)
	policyRE      = regexp.MustCompile(`policy '([^']+)'(?: with binding '([^']+)')? denied request`)
	quotaRE       = regexp.MustCompile(`exceeded quota: ([^,]+),`)
	limitRangeRE  = regexp.MustCompile(`(maximum|minimum) (cpu|memory|[a-z0-9./-]+) usage per (Container|Pod) is|must be less than or equal to (cpu|memory) limit`)
)

// ParseAdmissionDenial recognises an admission refusal in a FailedCreate message. A message of another
// kind (a timeout, a conflict, an unserved API) is not a denial.
func ParseAdmissionDenial(msg string) (AdmissionDenial, bool) {
	d := AdmissionDenial{Message: msg}
	switch {
	case podSecurityRE.MatchString(msg):
		d.By = fmt.Sprintf("PodSecurity %q", podSecurityRE.FindStringSubmatch(msg)[1])
	case webhookRE.MatchString(msg):
		d.By = fmt.Sprintf("admission webhook %q", webhookRE.FindStringSubmatch(msg)[1])
	case vapRE.MatchString(msg):
		m := vapRE.FindStringSubmatch(msg)
		d.By = fmt.Sprintf("ValidatingAdmissionPolicy %q", m[1])
		if m[2] != "" {
			d.By += fmt.Sprintf(" (binding %q)", m[2])
		}
	case policyRE.MatchString(msg):
		m := policyRE.FindStringSubmatch(msg)
		d.By = fmt.Sprintf("admission policy %q", m[1])
		if m[2] != "" {
			d.By += fmt.Sprintf(" (binding %q)", m[2])
		}
	case quotaRE.MatchString(msg):
		d.By = fmt.Sprintf("ResourceQuota %q", strings.TrimSpace(quotaRE.FindStringSubmatch(msg)[1]))
	case limitRangeRE.MatchString(msg):
		d.By = "LimitRange"
	case strings.Contains(msg, " is forbidden: "):
		d.By = "admission"
	default:
		return AdmissionDenial{}, false
	}
	return d, true
}
