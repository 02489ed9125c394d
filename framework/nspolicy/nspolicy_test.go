package nspolicy

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func list(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// gpuPod is the shape of the suite's pod: one container with CPU and memory requests = limits, and on
// the device-plugin path one nvidia.com/gpu; an init probe as sidecars make it.
func gpuPod(gpus string) *corev1.Pod {
	limits := list("cpu", "100m", "memory", "128Mi")
	if gpus != "" {
		limits["nvidia.com/gpu"] = resource.MustParse(gpus)
	}
	return &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: list("cpu", "100m", "memory", "128Mi"), Limits: list("cpu", "100m", "memory", "128Mi")}}},
		Containers:     []corev1.Container{{Name: "workload", Resources: corev1.ResourceRequirements{Requests: limits.DeepCopy(), Limits: limits}}},
	}}
}

func claimSpec(class string, count int64) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpus",
		Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count}}}}}
}

func quota(name string, hard, used corev1.ResourceList) corev1.ResourceQuota {
	return corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard},
		Status: corev1.ResourceQuotaStatus{Hard: hard, Used: used}}
}

// The pod evaluator's names: the counts, each compute resource as requests (and bare) and limits, an
// extended resource as requests.<name> only; an init container is folded in as the scheduler does.
func TestPodCharge(t *testing.T) {
	got := PodCharge(gpuPod("1")).Usage
	want := list("pods", "1", "count/pods", "1", "cpu", "100m", "requests.cpu", "100m", "limits.cpu", "100m",
		"memory", "128Mi", "requests.memory", "128Mi", "limits.memory", "128Mi", "requests.nvidia.com/gpu", "1")
	if len(got) != len(want) {
		t.Errorf("usage %v, want %v", got, want)
	}
	for name, q := range want {
		if g, ok := got[name]; !ok || g.Cmp(q) != 0 {
			t.Errorf("%s = %s, want %s", name, g.String(), q.String())
		}
	}
	if _, ok := got["limits.nvidia.com/gpu"]; ok {
		t.Error("an extended resource is charged as requests.<name> only")
	}
}

// The claim evaluator's names (v1.37): the claim count and <class>.deviceclass.resource.k8s.io/devices;
// All counts the most a claim may get; alternatives count their largest per class; a class with an
// extended resource name is charged under the implicit names too.
func TestClaimCharge(t *testing.T) {
	for _, c := range []struct {
		name     string
		spec     resourcev1.ResourceClaimSpec
		extended map[string]string
		want     corev1.ResourceList
	}{
		{"exact count", claimSpec("gpu.example.com", 2), nil,
			list("count/resourceclaims.resource.k8s.io", "1", "gpu.example.com.deviceclass.resource.k8s.io/devices", "2")},
		{"all", resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "r",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "c", AllocationMode: resourcev1.DeviceAllocationModeAll}}}}}, nil,
			list("count/resourceclaims.resource.k8s.io", "1", "c.deviceclass.resource.k8s.io/devices", "32")},
		{"first available", resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "r",
			FirstAvailable: []resourcev1.DeviceSubRequest{
				{Name: "a", DeviceClassName: "c", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1},
				{Name: "b", DeviceClassName: "c", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 3},
			}}}}}, nil,
			list("count/resourceclaims.resource.k8s.io", "1", "c.deviceclass.resource.k8s.io/devices", "3")},
		{"class with an extended resource name", claimSpec("gpu.nvidia.com", 1), map[string]string{"gpu.nvidia.com": "nvidia.com/gpu"},
			list("count/resourceclaims.resource.k8s.io", "1", "gpu.nvidia.com.deviceclass.resource.k8s.io/devices", "1",
				"requests.deviceclass.resource.kubernetes.io/gpu.nvidia.com", "1", "requests.nvidia.com/gpu", "1")},
	} {
		got := ClaimCharge(c.spec, c.extended).Usage
		if len(got) != len(c.want) {
			t.Errorf("%s: usage %v, want %v", c.name, got, c.want)
			continue
		}
		for name, q := range c.want {
			if g := got[name]; g.Cmp(q) != 0 {
				t.Errorf("%s: %s = %s, want %s", c.name, name, g.String(), q.String())
			}
		}
	}
}

func TestShortfalls(t *testing.T) {
	dra := &resourcev1.ResourceClaimTemplate{Spec: resourcev1.ResourceClaimTemplateSpec{Spec: claimSpec("gpu.example.com", 1)}}
	plain := WorkloadCharges(gpuPod(""), []*resourcev1.ResourceClaimTemplate{dra}, nil)
	devicePlugin := WorkloadCharges(gpuPod("1"), nil, nil)
	for _, c := range []struct {
		name    string
		quotas  []corev1.ResourceQuota
		charges []Charge
		want    []string
	}{
		{"fits", []corev1.ResourceQuota{quota("compute", list("limits.cpu", "1", "pods", "10"), list("limits.cpu", "500m", "pods", "3"))}, plain, nil},
		{"limits.cpu below one pod", []corev1.ResourceQuota{quota("compute-quota", list("limits.cpu", "50m"), list("limits.cpu", "0"))}, devicePlugin,
			[]string{"ResourceQuota compute-quota: limits.cpu hard 50m, used 0, needed 100m"}},
		{"used up by others", []corev1.ResourceQuota{quota("compute", list("requests.memory", "1Gi"), list("requests.memory", "960Mi"))}, devicePlugin,
			[]string{"ResourceQuota compute: requests.memory hard 1Gi, used 960Mi, needed 128Mi"}},
		{"usage not yet recorded counts as none", []corev1.ResourceQuota{quota("fresh", list("pods", "1"), nil)}, devicePlugin, nil},
		{"spec.hard before the controller wrote status", []corev1.ResourceQuota{{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Spec: corev1.ResourceQuotaSpec{Hard: list("requests.nvidia.com/gpu", "0")}}},
			devicePlugin, []string{"ResourceQuota new: requests.nvidia.com/gpu hard 0, used 0, needed 1"}},
		{"the device-plugin GPU quota does not charge a DRA pod", []corev1.ResourceQuota{quota("gpus", list("requests.nvidia.com/gpu", "0"), list("requests.nvidia.com/gpu", "0"))}, plain, nil},
		{"DRA devices and claim count, sorted", []corev1.ResourceQuota{quota("dra", list("gpu.example.com.deviceclass.resource.k8s.io/devices", "4", "count/resourceclaims.resource.k8s.io", "2"),
			list("gpu.example.com.deviceclass.resource.k8s.io/devices", "4", "count/resourceclaims.resource.k8s.io", "2"))}, plain,
			[]string{"ResourceQuota dra: count/resourceclaims.resource.k8s.io hard 2, used 2, needed 1", "ResourceQuota dra: gpu.example.com.deviceclass.resource.k8s.io/devices hard 4, used 4, needed 1"}},
		{"a BestEffort-scoped quota does not charge the suite's pods", []corev1.ResourceQuota{scoped(quota("be", list("pods", "0"), list("pods", "0")), corev1.ResourceQuotaScopeBestEffort)}, devicePlugin, nil},
		{"a NotTerminating-scoped quota does", []corev1.ResourceQuota{scoped(quota("nt", list("pods", "0"), list("pods", "0")), corev1.ResourceQuotaScopeNotTerminating)}, devicePlugin,
			[]string{"ResourceQuota nt: pods hard 0, used 0, needed 1"}},
		{"a scoped quota never charges claims", []corev1.ResourceQuota{scoped(quota("s", list("count/resourceclaims.resource.k8s.io", "0"), nil), corev1.ResourceQuotaScopeNotBestEffort)}, plain, nil},
	} {
		var got []string
		for _, s := range Shortfalls(c.quotas, c.charges...) {
			got = append(got, s.String())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func scoped(q corev1.ResourceQuota, scopes ...corev1.ResourceQuotaScope) corev1.ResourceQuota {
	q.Spec.Scopes = scopes
	return q
}

// The pod evaluator's scopes, on the suite's pod and on pods it does not make.
func TestPodInScope(t *testing.T) {
	suite := gpuPod("1")
	deadline := gpuPod("1")
	deadline.Spec.ActiveDeadlineSeconds = ptr.To[int64](60)
	classed := gpuPod("1")
	classed.Spec.PriorityClassName = "high"
	empty := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	sel := func(name corev1.ResourceQuotaScope, op corev1.ScopeSelectorOperator, values ...string) corev1.ScopedResourceSelectorRequirement {
		return corev1.ScopedResourceSelectorRequirement{ScopeName: name, Operator: op, Values: values}
	}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		sel  corev1.ScopedResourceSelectorRequirement
		want bool
	}{
		{"not terminating", suite, sel(corev1.ResourceQuotaScopeNotTerminating, corev1.ScopeSelectorOpExists), true},
		{"terminating", deadline, sel(corev1.ResourceQuotaScopeTerminating, corev1.ScopeSelectorOpExists), true},
		{"not best effort", suite, sel(corev1.ResourceQuotaScopeNotBestEffort, corev1.ScopeSelectorOpExists), true},
		{"best effort", empty, sel(corev1.ResourceQuotaScopeBestEffort, corev1.ScopeSelectorOpExists), true},
		{"priority class exists, none set", suite, sel(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpExists), false},
		{"priority class not in, none set", suite, sel(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpNotIn, "high"), true},
		{"priority class in", classed, sel(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpIn, "high"), true},
		{"priority class does not exist, set", classed, sel(corev1.ResourceQuotaScopePriorityClass, corev1.ScopeSelectorOpDoesNotExist), false},
		{"cross-namespace affinity", suite, sel(corev1.ResourceQuotaScopeCrossNamespacePodAffinity, corev1.ScopeSelectorOpExists), false},
	} {
		if got := podInScope(c.pod, c.sel); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// The LimitRanger's rules, in its words, after its defaults.
func TestViolations(t *testing.T) {
	lr := func(name string, items ...corev1.LimitRangeItem) corev1.LimitRange {
		return corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.LimitRangeSpec{Limits: items}}
	}
	for _, c := range []struct {
		name   string
		ranges []corev1.LimitRange
		pod    *corev1.Pod
		want   []string
	}{
		{"within bounds", []corev1.LimitRange{lr("ok", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Min: list("cpu", "10m"), Max: list("cpu", "2"),
			MaxLimitRequestRatio: list("cpu", "1", "memory", "1")})}, gpuPod("1"), nil},
		{"container max below the pod's limit, once for two containers", []corev1.LimitRange{lr("small", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: list("cpu", "50m")})}, gpuPod("1"),
			[]string{"LimitRange small: maximum cpu usage per Container is 50m, but limit is 100m"}},
		{"container min above the request", []corev1.LimitRange{lr("big", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Min: list("memory", "256Mi")})}, gpuPod("1"),
			[]string{"LimitRange big: minimum memory usage per Container is 256Mi, but request is 128Mi"}},
		{"pod max on the sum", []corev1.LimitRange{lr("pod", corev1.LimitRangeItem{Type: corev1.LimitTypePod, Max: list("cpu", "150m")})},
			&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{gpuPod("").Spec.Containers[0], gpuPod("").Spec.Containers[0]}}},
			[]string{"LimitRange pod: maximum cpu usage per Pod is 150m, but limit is 200m"}},
		{"no GPU per container on this namespace", []corev1.LimitRange{lr("no-gpu", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: list("nvidia.com/gpu", "0"), Default: list("nvidia.com/gpu", "0")})},
			gpuPod("1"), []string{"LimitRange no-gpu: maximum nvidia.com/gpu usage per Container is 0, but limit is 1"}},
		{"a maximum without a default on a resource the pod does not set", []corev1.LimitRange{lr("eph", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: list("ephemeral-storage", "1Gi")})},
			gpuPod(""), []string{"LimitRange eph: maximum ephemeral-storage usage per Container is 1Gi.  No limit is specified"}},
		{"the default fills it", []corev1.LimitRange{lr("eph", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: list("ephemeral-storage", "1Gi"), Default: list("ephemeral-storage", "1Gi")})},
			gpuPod(""), nil},
		{"ratio", []corev1.LimitRange{lr("ratio", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, MaxLimitRequestRatio: list("cpu", "1")})},
			&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: list("cpu", "100m"), Limits: list("cpu", "200m")}}}}},
			[]string{"LimitRange ratio: cpu max limit to request ratio per Container is 1, but provided ratio is 2.000000"}},
	} {
		var got []string
		for _, v := range Violations(c.ranges, c.pod) {
			got = append(got, v.String())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
