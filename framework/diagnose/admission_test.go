package diagnose

import "testing"

// TestParseAdmissionDenial covers each refusal shape the API server writes (k8s.io/apiserver v0.37 and the
// PodSecurity plugin); the PodSecurity text was recorded on the local cluster, the others are built from
// the format strings in the API server's source.
func TestParseAdmissionDenial(t *testing.T) {
	cases := []struct {
		name, msg, by string
		denial        bool
	}{
		{"pod security (recorded)", `Error creating: pods "train-sn7ll" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true)`, `PodSecurity "restricted:latest"`, true},
		{"webhook", `Error creating: admission webhook "validate.kyverno.svc-fail" denied the request: policy require-non-root: rule failed`, `admission webhook "validate.kyverno.svc-fail"`, true},
		{"validating admission policy with binding", `Error creating: pods "p" is forbidden: ValidatingAdmissionPolicy 'restricted-pods' with binding 'restricted-pods-everywhere' denied request: containers must not run as root`, `ValidatingAdmissionPolicy "restricted-pods" (binding "restricted-pods-everywhere")`, true},
		{"validating admission policy without binding", `Error creating: ValidatingAdmissionPolicy 'no-gpu' denied request: no GPUs here`, `ValidatingAdmissionPolicy "no-gpu"`, true},
		{"resource quota", `Error creating: pods "p" is forbidden: exceeded quota: team-gpus, requested: requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8`, `ResourceQuota "team-gpus"`, true},
		{"limit range", `Error creating: pods "p" is forbidden: maximum memory usage per Container is 1Gi, but limit is 2Gi`, "LimitRange", true},
		{"other forbidden", `Error creating: pods "p" is forbidden: error looking up service account ml/trainer: serviceaccount "trainer" not found`, "admission", true},
		{"not a denial", `Error creating: Timeout: request did not complete within requested timeout - context deadline exceeded`, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := ParseAdmissionDenial(tc.msg)
			if ok != tc.denial || d.By != tc.by {
				t.Errorf("ParseAdmissionDenial = %q, %v; want %q, %v", d.By, ok, tc.by, tc.denial)
			}
		})
	}
}
