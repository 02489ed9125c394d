package diagnose

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseAdmissionDenial covers each refusal shape the API server writes (k8s.io/apiserver v0.37, the
// PodSecurity plugin, and the ResourceQuota and LimitRanger plugins of k8s.io/kubernetes v1.37); the
// PodSecurity text was recorded on the local cluster, the others are built from the format strings in
// the components' source.
func TestParseAdmissionDenial(t *testing.T) {
	cases := []struct {
		name, msg, by string
		denial        bool
		policy, quota string
		resources     []ResourceRefusal
		final         bool
	}{
		{name: "pod security (recorded)", msg: `Error creating: pods "train-sn7ll" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true)`,
			by: `PodSecurity "restricted:latest"`, denial: true, final: true},
		{name: "webhook", msg: `Error creating: admission webhook "validate.kyverno.svc-fail" denied the request: policy require-non-root: rule failed`,
			by: `admission webhook "validate.kyverno.svc-fail"`, denial: true, final: true},
		{name: "validating admission policy with binding", msg: `Error creating: pods "p" is forbidden: ValidatingAdmissionPolicy 'restricted-pods' with binding 'restricted-pods-everywhere' denied request: containers must not run as root`,
			by: `ValidatingAdmissionPolicy "restricted-pods" (binding "restricted-pods-everywhere")`, denial: true, final: true},
		{name: "validating admission policy without binding", msg: `Error creating: ValidatingAdmissionPolicy 'no-gpu' denied request: no GPUs here`,
			by: `ValidatingAdmissionPolicy "no-gpu"`, denial: true, final: true},
		{name: "quota exceeded above its hard limit", msg: `Error creating: pods "p" is forbidden: exceeded quota: team-gpus, requested: requests.nvidia.com/gpu=9, used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=8`,
			by: `ResourceQuota "team-gpus"`, denial: true, policy: PolicyResourceQuota, quota: "team-gpus", final: true,
			resources: []ResourceRefusal{{Resource: "requests.nvidia.com/gpu", Requested: "9", Used: "0", Limited: "8"}}},
		{name: "quota exceeded beside other usage, two resources", msg: `Error creating: pods "train-abc" is forbidden: exceeded quota: team-quota, requested: limits.cpu=2,limits.memory=1Gi, used: limits.cpu=7,limits.memory=15Gi, limited: limits.cpu=8,limits.memory=16Gi`,
			by: `ResourceQuota "team-quota"`, denial: true, policy: PolicyResourceQuota, quota: "team-quota",
			resources: []ResourceRefusal{
				{Resource: "limits.cpu", Requested: "2", Used: "7", Limited: "8"},
				{Resource: "limits.memory", Requested: "1Gi", Used: "15Gi", Limited: "16Gi"},
			}},
		{name: "quota requires limits the containers do not set", msg: `Error creating: pods "x" is forbidden: failed quota: team-quota: must specify limits.cpu for: workload; limits.memory for: init,workload`,
			by: `ResourceQuota "team-quota"`, denial: true, policy: PolicyResourceQuota, quota: "team-quota", final: true,
			resources: []ResourceRefusal{
				{Resource: "limits.cpu", Containers: []string{"workload"}},
				{Resource: "limits.memory", Containers: []string{"init", "workload"}},
			}},
		{name: "quota usage not computed yet", msg: `Error creating: pods "x" is forbidden: status unknown for quota: team-quota, resources: limits.cpu,limits.memory`,
			by: `ResourceQuota "team-quota"`, denial: true, policy: PolicyResourceQuota, quota: "team-quota",
			resources: []ResourceRefusal{{Resource: "limits.cpu"}, {Resource: "limits.memory"}}},
		{name: "no covering quota", msg: `Error creating: pods "x" is forbidden: insufficient quota to consume: requests.nvidia.com/gpu`,
			by: "ResourceQuota", denial: true, policy: PolicyResourceQuota, final: true,
			resources: []ResourceRefusal{{Resource: "requests.nvidia.com/gpu"}}},
		{name: "limit range maximum", msg: `Error creating: pods "p" is forbidden: maximum memory usage per Container is 1Gi, but limit is 2Gi`,
			by: "LimitRange", denial: true, policy: PolicyLimitRange, final: true,
			resources: []ResourceRefusal{{Resource: "memory", Rule: "maximum memory usage per Container is 1Gi, but limit is 2Gi"}}},
		{name: "limit range aggregate: minimum without a request, and a ratio", msg: `Error creating: pods "p" is forbidden: [minimum cpu usage per Container is 100m.  No request is specified, memory max limit to request ratio per Pod is 2, but provided ratio is 4.000000]`,
			by: "LimitRange", denial: true, policy: PolicyLimitRange, final: true,
			resources: []ResourceRefusal{
				{Resource: "cpu", Rule: "minimum cpu usage per Container is 100m.  No request is specified"},
				{Resource: "memory", Rule: "memory max limit to request ratio per Pod is 2, but provided ratio is 4.000000"},
			}},
		{name: "a LimitRange default below the request", msg: `Error creating: Pod "p" is invalid: spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1`,
			by: "LimitRange", denial: true, policy: PolicyLimitRange, final: true,
			resources: []ResourceRefusal{{Resource: "cpu", Rule: "must be less than or equal to cpu limit of 1"}}},
		{name: "other forbidden", msg: `Error creating: pods "p" is forbidden: error looking up service account ml/trainer: serviceaccount "trainer" not found`,
			by: "admission", denial: true, final: true},
		{name: "not a denial", msg: `Error creating: Timeout: request did not complete within requested timeout - context deadline exceeded`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := ParseAdmissionDenial(tc.msg)
			if ok != tc.denial || d.By != tc.by || d.Policy != tc.policy || d.Quota != tc.quota {
				t.Fatalf("ParseAdmissionDenial = %q, %v, policy %q, quota %q; want %q, %v, policy %q, quota %q", d.By, ok, d.Policy, d.Quota, tc.by, tc.denial, tc.policy, tc.quota)
			}
			if !reflect.DeepEqual(d.Resources, tc.resources) {
				t.Errorf("resources %+v, want %+v", d.Resources, tc.resources)
			}
			if !ok {
				return
			}
			final, why := d.Final()
			if final != tc.final || why == "" || final == strings.HasPrefix(why, "not final") {
				t.Errorf("Final = %v, %q; want %v with a reason", final, why, tc.final)
			}
		})
	}
}

// TestResourceRefusalString: each refusal reads as one phrase naming the resource.
func TestResourceRefusalString(t *testing.T) {
	for r, want := range map[*ResourceRefusal]string{
		{Resource: "limits.cpu", Requested: "2", Used: "7", Limited: "8"}:               "limits.cpu requested 2, used 7, limited 8",
		{Resource: "limits.cpu", Containers: []string{"init", "workload"}}:              "limits.cpu not set by container(s) init, workload",
		{Resource: "cpu", Rule: "maximum cpu usage per Container is 2, but limit is 4"}: "maximum cpu usage per Container is 2, but limit is 4",
		{Resource: "limits.memory"}: "limits.memory",
	} {
		if got := r.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

// "status unknown for quota" passes by itself while the quota controller is counting; repeated for
// QuotaStatusGrace it is final. No other refusal is judged by how long it lasted.
func TestStatusUnknownFinalAfterGrace(t *testing.T) {
	unknown, _ := ParseAdmissionDenial(`pods "p" is forbidden: status unknown for quota: team-quota, resources: limits.cpu,limits.memory`)
	exceeded, _ := ParseAdmissionDenial(`pods "p" is forbidden: exceeded quota: q, requested: limits.cpu=2, used: limits.cpu=7, limited: limits.cpu=8`)
	if !unknown.StatusUnknown() || exceeded.StatusUnknown() {
		t.Fatalf("StatusUnknown: %v for the unknown status, %v for an exceeded quota", unknown.StatusUnknown(), exceeded.StatusUnknown())
	}
	for _, c := range []struct {
		name  string
		d     AdmissionDenial
		span  time.Duration
		final bool
		says  string
	}{
		{"just refused", unknown, 0, false, "not final"},
		{"within the grace", unknown, QuotaStatusGrace - time.Second, false, "final after 30s"},
		{"past the grace", unknown, QuotaStatusGrace, true, `ResourceQuota "team-quota" has had no usage recorded for limits.cpu,limits.memory for 30s`},
		{"an exceeded quota that fits its hard limit stays passing", exceeded, time.Hour, false, "not final"},
	} {
		final, why := c.d.FinalAfter(c.span)
		if final != c.final || !strings.Contains(why, c.says) {
			t.Errorf("%s: FinalAfter = %v, %q; want %v saying %q", c.name, final, why, c.final, c.says)
		}
	}
}

// TestTopologyGated: Kueue's topology-aware not-fit message, in its own format (notFitMessage and
// formatReasons, v0.17), is final only when a gate excludes every node of a pod set and no resource does.
func TestTopologyGated(t *testing.T) {
	head := `couldn't assign flavors to pod set main: topology "gpuconform-local" doesn't allow to fit any of 2 pod(s). `
	for _, tc := range []struct {
		msg  string
		want Reason
	}{
		{head + `Total nodes: 5; excluded: taint "nvidia.com/gpu=present:NoSchedule": 5`, UntoleratedTaint},
		{head + `Total nodes: 5; excluded: affinity: 1, nodeSelector: 2, taint "dedicated=ml:NoSchedule": 2`, NodeSelectorMismatch},
		{head + `Total nodes: 5; excluded: taint "nvidia.com/gpu=present:NoSchedule": 4`, ""},                                                    // one node is not excluded: capacity
		{head + `Total nodes: 5; excluded: resource "nvidia.com/gpu": 2, taint "nvidia.com/gpu=present:NoSchedule": 3`, ""},                      // two lack devices
		{head + `Total nodes: 5; excluded: topologyDomain: 5`, ""},                                                                               // unlabelled nodes: no gate
		{`couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor gpu, request > maximum capacity (4 > 2)`, ""}, // no topology
		{`couldn't assign flavors to pod set launcher: topology "t" allows to fit only 1 out of 2 pod(s); couldn't assign flavors to pod set workers: topology "t" doesn't allow to fit any of 4 pod(s). Total nodes: 3; excluded: taint "a=b:NoSchedule": 3`, UntoleratedTaint},
	} {
		got, why := topologyGated(tc.msg)
		if got != tc.want || (got != "") != (why != "") {
			t.Errorf("%s\n  gate %q (%s), want %q", tc.msg, got, why, tc.want)
		}
	}
}
