package diagnose

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// QuotaStatusGrace is how long "status unknown for quota" may repeat before it is final. The quota
// controller counts a quota whose usage is missing at once, from its missing-usage queue, retrying a
// failed count with backoff, and recounts every quota on its full resync (kube-controller-manager's
// --resource-quota-sync-period, 5 m by default): on a working controller the refusal lasts seconds (a
// quota created with its namespace, one whose hard limits just changed). Past 30 s the controller is not
// counting (not running, or its sync failing) and the refusal will not lift within a spec's budget.
const QuotaStatusGrace = 30 * time.Second

// AdmissionDenial is a create the API server refused, as the controller that tried it (Job, ReplicaSet,
// StatefulSet, DaemonSet: event reason FailedCreate) quotes the error.
type AdmissionDenial struct {
	// By names what refused: `PodSecurity "restricted:latest"`, `admission webhook "x"`,
	// `ValidatingAdmissionPolicy "p" (binding "b")`, `ResourceQuota "q"`, `LimitRange`, or `admission`
	// when the error says forbidden without naming a plugin.
	By string
	// Message is the error as quoted.
	Message string
	// Policy is the namespace resource policy that refused: PolicyResourceQuota, PolicyLimitRange, or ""
	// when the refusal came from elsewhere.
	Policy string
	// Quota names the ResourceQuota that refused, when the message names one.
	Quota string
	// Resources are what the ResourceQuota or LimitRange refused, in the order the message gives them.
	Resources []ResourceRefusal

	// shape is which of the quota plugin's refusals this is; it decides Final.
	shape quotaShape
}

// The namespace resource policies an AdmissionDenial can name in Policy.
const (
	// PolicyResourceQuota: the ResourceQuota admission plugin refused.
	PolicyResourceQuota = "ResourceQuota"
	// PolicyLimitRange: the LimitRanger admission plugin (or the validation after its defaults) refused.
	PolicyLimitRange = "LimitRange"
)

// ResourceRefusal is one resource a ResourceQuota or a LimitRange refused, as the refusal states it.
type ResourceRefusal struct {
	// Resource is the resource as the policy names it: limits.cpu or requests.nvidia.com/gpu for a
	// quota, cpu or memory for a LimitRange.
	Resource string
	// Requested, Used and Limited are an exceeded quota's amounts: what the pod asks for, what the
	// namespace already uses, and the quota's hard limit.
	Requested, Used, Limited string
	// Containers are the containers that set no value for a resource the quota constrains.
	Containers []string
	// Rule is a LimitRange's rule as the refusal states it, e.g. "maximum cpu usage per Container is 2,
	// but limit is 4".
	Rule string
}

// String renders the refusal in one phrase.
func (r ResourceRefusal) String() string {
	switch {
	case r.Rule != "":
		return r.Rule
	case len(r.Containers) > 0:
		return fmt.Sprintf("%s not set by container(s) %s", r.Resource, strings.Join(r.Containers, ", "))
	case r.Limited != "":
		return fmt.Sprintf("%s requested %s, used %s, limited %s", r.Resource, r.Requested, r.Used, r.Limited)
	}
	return r.Resource
}

// overHard reports an exceeded quota's request that is above the hard limit by itself: no usage freed
// elsewhere in the namespace makes it fit.
func (r ResourceRefusal) overHard() bool {
	req, err1 := resource.ParseQuantity(r.Requested)
	hard, err2 := resource.ParseQuantity(r.Limited)
	return err1 == nil && err2 == nil && req.Cmp(hard) > 0
}

// quotaShape is one of the ResourceQuota plugin's refusals.
type quotaShape int

const (
	// The zero value: a refusal that is not the quota plugin's.
	_ quotaShape = iota
	// quotaExceeded: "exceeded quota: q, requested: ..., used: ..., limited: ...".
	quotaExceeded
	// quotaUnset: "failed quota: q: must specify limits.cpu for: c; ...": the pod does not set a
	// resource the quota constrains.
	quotaUnset
	// quotaFailed: "failed quota: q: ..." for another constraint.
	quotaFailed
	// quotaUncovered: "insufficient quota to consume: r": the plugin's configuration requires a covering
	// quota and none exists.
	quotaUncovered
	// quotaUnknown: "status unknown for quota: q, resources: r": the quota controller has not computed
	// the usage yet.
	quotaUnknown
)

// The shapes come from the API server's own source (k8s.io/apiserver v0.37 and k8s.io/kubernetes
// v1.37): the webhook dispatcher's `admission webhook %q denied the request`, the validating-policy
// dispatcher's `ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s` (and the form
// without a binding), the generic policy dispatcher's `policy '%s' with binding '%s' denied request`,
// PodSecurity's `violates PodSecurity "%s"`; the ResourceQuota plugin's `exceeded quota: %s, requested:
// %s, used: %s, limited: %s` (lists `name=quantity` joined by commas), `failed quota: %s: %v` (the pod
// evaluator's `must specify %s`, each `resource for: container,...` joined by "; "), `status unknown for
// quota: %s, resources: %s` and `insufficient quota to consume: %v`; the LimitRanger's `minimum|maximum %s
// usage per %s is %s, but request|limit is %s` (or `.  No request|limit is specified`) and `%s max limit
// to request ratio per %s is %s, but ...`, several joined as an aggregate `[a, b]`; and pod validation's
// `must be less than or equal to %s limit of %s` after the LimitRanger's defaults.
var (
	podSecurityRE  = regexp.MustCompile(`violates PodSecurity "([^"]+)"`)
	webhookRE      = regexp.MustCompile(`admission webhook "([^"]+)" denied the request`)
	vapRE          = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']+)'(?: with binding '([^']+)')? denied request`)
	policyRE       = regexp.MustCompile(`policy '([^']+)'(?: with binding '([^']+)')? denied request`)
	quotaRE        = regexp.MustCompile(`exceeded quota: ([^,]+), requested: (\S+?), used: (\S+?), limited: ([^\s\]]+)`)
	quotaFailedRE  = regexp.MustCompile(`failed quota: ([^:]+): (.*)$`)
	quotaUnsetRE   = regexp.MustCompile(`^must specify (.+)$`)
	quotaUnknownRE = regexp.MustCompile(`status unknown for quota: ([^,]+), resources: (\S+)`)
	uncoveredRE    = regexp.MustCompile(`insufficient quota to consume: (\S+)`)
	limitRangeRE   = regexp.MustCompile(`(?:maximum|minimum) (\S+) usage per (?:Container|Pod) is \S+?(?:\.  No (?:request|limit) is specified|, but (?:request|limit) is [^\s,\]]+)` +
		`|(\S+) max limit to request ratio per (?:Container|Pod) is \S+?, but (?:no request is specified or request is 0|no limit is specified or limit is 0|provided ratio is [0-9.]+)` +
		`|must be less than or equal to (\S+) limit of [^\s,\]]+`)
)

// ParseAdmissionDenial recognises an admission refusal in a FailedCreate message. A message of another
// kind (a timeout, a conflict, an unserved API) is not a denial. A ResourceQuota's or LimitRange's
// refusal also names the quota and the resources refused, parsed from the message.
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
		m := quotaRE.FindStringSubmatch(msg)
		d.quota(quotaExceeded, m[1])
		used, limited := amounts(m[3]), amounts(m[4])
		for r := range strings.SplitSeq(m[2], ",") {
			name, qty, _ := strings.Cut(r, "=")
			d.Resources = append(d.Resources, ResourceRefusal{Resource: name, Requested: qty, Used: used[name], Limited: limited[name]})
		}
	case quotaFailedRE.MatchString(msg):
		m := quotaFailedRE.FindStringSubmatch(msg)
		d.quota(quotaFailed, m[1])
		if u := quotaUnsetRE.FindStringSubmatch(m[2]); u != nil {
			d.shape = quotaUnset
			for item := range strings.SplitSeq(u[1], "; ") {
				name, containers, _ := strings.Cut(item, " for: ")
				d.Resources = append(d.Resources, ResourceRefusal{Resource: name, Containers: strings.Split(containers, ",")})
			}
		}
	case quotaUnknownRE.MatchString(msg):
		m := quotaUnknownRE.FindStringSubmatch(msg)
		d.quota(quotaUnknown, m[1])
		d.Resources = names(m[2])
	case uncoveredRE.MatchString(msg):
		d.quota(quotaUncovered, "")
		d.Resources = names(uncoveredRE.FindStringSubmatch(msg)[1])
	case limitRangeRE.MatchString(msg):
		d.By, d.Policy = "LimitRange", PolicyLimitRange
		for _, m := range limitRangeRE.FindAllStringSubmatch(msg, -1) {
			d.Resources = append(d.Resources, ResourceRefusal{Resource: m[1] + m[2] + m[3], Rule: m[0]})
		}
	case strings.Contains(msg, " is forbidden: "):
		d.By = "admission"
	default:
		return AdmissionDenial{}, false
	}
	return d, true
}

// quota marks d as a refusal of the ResourceQuota plugin, by the quota named (or by the plugin).
func (d *AdmissionDenial) quota(shape quotaShape, name string) {
	d.shape, d.Policy, d.Quota = shape, PolicyResourceQuota, strings.TrimSpace(name)
	d.By = "ResourceQuota"
	if d.Quota != "" {
		d.By = fmt.Sprintf("ResourceQuota %q", d.Quota)
	}
}

// StatusUnknown reports the quota plugin's "status unknown for quota: q, resources: r": the quota
// controller has not recorded the namespace's usage of those resources yet, so every create they
// constrain is refused until it has. A create that meets it may be retried for QuotaStatusGrace.
func (d AdmissionDenial) StatusUnknown() bool { return d.shape == quotaUnknown }

// FinalAfter is Final for a refusal that has repeated for span (from the first FailedCreate quoting it to
// the last): "status unknown for quota" is final once span reaches QuotaStatusGrace.
func (d AdmissionDenial) FinalAfter(span time.Duration) (bool, string) {
	if d.StatusUnknown() && span >= QuotaStatusGrace {
		return true, fmt.Sprintf("%s has had no usage recorded for %s for %s (FailedCreate events), past the %s a working quota controller takes: "+
			"the quota controller in kube-controller-manager is not counting it, and the refusal will not lift by itself", d.By, d.resourceNames(), span.Round(time.Second), QuotaStatusGrace)
	}
	return d.Final()
}

// resourceNames are the refused resources' names, comma-separated.
func (d AdmissionDenial) resourceNames() string {
	names := make([]string, len(d.Resources))
	for i, r := range d.Resources {
		names[i] = r.Resource
	}
	return strings.Join(names, ",")
}

// Final reports whether the refusal repeats on every retry until someone changes the policy or the pod
// template, and says why it does or why a retry may pass by itself: a quota whose usage is not computed
// yet, or an exceeded quota whose request fits its hard limit and waits for usage elsewhere in the
// namespace to be freed.
func (d AdmissionDenial) Final() (bool, string) {
	switch d.shape {
	case quotaUnknown:
		return false, fmt.Sprintf("not final: %s has no usage recorded yet for these resources; the quota controller records it within seconds and the controller retries the create (final after %s)", d.By, QuotaStatusGrace)
	case quotaExceeded:
		for _, r := range d.Resources {
			if r.overHard() {
				return true, fmt.Sprintf("%s: the pod's request for %s alone is above the quota's hard limit, so no usage freed in the namespace makes it fit", d.By, r.Resource)
			}
		}
		return false, fmt.Sprintf("not final: the pod's request fits the hard limit of %s; the create passes once other workloads in the namespace free enough of it", d.By)
	case quotaUnset:
		return true, fmt.Sprintf("%s constrains resources the pod template's containers do not set: the refusal repeats until the template or the quota changes", d.By)
	case quotaUncovered:
		return true, "the API server's quota configuration requires a ResourceQuota covering these resources and the namespace has none: the refusal repeats until one is created"
	}
	return true, fmt.Sprintf("admission (%s) refuses the pods; it repeats the refusal on every retry until the policy or the pod template changes", d.By)
}

// amounts parses the quota plugin's "name=quantity,name=quantity" list.
func amounts(list string) map[string]string {
	out := map[string]string{}
	for r := range strings.SplitSeq(list, ",") {
		name, qty, _ := strings.Cut(r, "=")
		out[name] = qty
	}
	return out
}

// names turns the quota plugin's comma-separated resource names into refusals that name only the
// resource.
func names(list string) []ResourceRefusal {
	var out []ResourceRefusal
	for name := range strings.SplitSeq(list, ",") {
		out = append(out, ResourceRefusal{Resource: name})
	}
	return out
}
