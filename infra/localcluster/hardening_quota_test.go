package localcluster

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	kueuefake "sigs.k8s.io/kueue/client-go/clientset/versioned/fake"

	"gpuconform.io/gpuconform/fixtures"
)

func sizedNode(name, cpu, mem string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem),
	}}}
}

// limitRangeProblems is what the API server's LimitRanger says of a container under item, after the
// defaulting it does: a lone limit is also the request, a missing limit or request takes the default.
func limitRangeProblems(c corev1.Container, item corev1.LimitRangeItem) []string {
	var bad []string
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := c.Resources.Requests[name]
		lim, hasLim := c.Resources.Limits[name]
		if !hasReq && hasLim {
			req, hasReq = lim, true
		}
		if !hasLim {
			lim = item.Default[name]
		}
		if !hasReq {
			req = item.DefaultRequest[name]
		}
		if lo := item.Min[name]; req.Cmp(lo) < 0 {
			bad = append(bad, fmt.Sprintf("%s %s request %s below the minimum %s", c.Name, name, req.String(), lo.String()))
		}
		if hi := item.Max[name]; lim.Cmp(hi) > 0 {
			bad = append(bad, fmt.Sprintf("%s %s limit %s above the maximum %s", c.Name, name, lim.String(), hi.String()))
		}
		ratio := item.MaxLimitRequestRatio[name]
		if lim.MilliValue()*1000 > req.MilliValue()*ratio.MilliValue() {
			bad = append(bad, fmt.Sprintf("%s %s limit %s over request %s exceeds the ratio %s", c.Name, name, lim.String(), req.String(), ratio.String()))
		}
	}
	return bad
}

// The policy is sized from the biggest node, bounds containers around the suite's defaults, and admits
// every pod shape the suite makes, the shortage specs' oversized pods included; the containers the suite
// had before (a request below the limit, no CPU limit) it refuses.
func TestComputePolicy(t *testing.T) {
	nodes := []corev1.Node{*sizedNode("cp", "4", "8Gi"), *sizedNode("w1", "8", "30Gi"), *sizedNode("w2", "6", "32Gi")}
	quota, limits := ComputePolicy("team-a", nodes)
	if quota.Namespace != "team-a" || limits.Namespace != "team-a" || quota.Name != ComputeQuota || limits.Name != ContainerLimits {
		t.Fatalf("names: %s/%s %s/%s", quota.Namespace, quota.Name, limits.Namespace, limits.Name)
	}
	for name, want := range map[corev1.ResourceName]string{
		corev1.ResourcePods: "200", corev1.ResourceRequestsCPU: "32", corev1.ResourceLimitsCPU: "32",
		corev1.ResourceRequestsMemory: "128Gi", corev1.ResourceLimitsMemory: "128Gi",
	} {
		if got := quota.Spec.Hard[name]; got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("quota %s = %s, want %s", name, got.String(), want)
		}
	}
	item := limits.Spec.Limits[0]
	if item.Type != corev1.LimitTypeContainer {
		t.Fatalf("LimitRange type %s", item.Type)
	}
	if cpu, mem := item.Max[corev1.ResourceCPU], item.Max[corev1.ResourceMemory]; cpu.Cmp(resource.MustParse("16")) != 0 || mem.Cmp(resource.MustParse("64Gi")) != 0 {
		t.Errorf("max cpu %s memory %s, want 16 and 64Gi", cpu.String(), mem.String())
	}

	f := fixtures.NewFactory("r1")
	short := f.GPUPod("too-much", "team-a").Request(corev1.ResourceCPU, resource.MustParse("9")).Obj()
	shortMem := f.GPUPod("too-much-mem", "team-a").Request(corev1.ResourceMemory, resource.MustParse("33Gi")).Obj()
	pods := []*corev1.Pod{
		f.GPUPod("probe", "team-a").Args(fixtures.ProbeArgs(0)...).SidecarProbe("side", "1m").InitProbe("init").Obj(),
		{Spec: f.GPUJob("train", "team-a").ScratchDir("ckpt", "/ckpt").Obj().Spec.Template.Spec},
		short, shortMem,
	}
	used := corev1.ResourceList{}
	for _, p := range pods {
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			if bad := limitRangeProblems(c, item); len(bad) > 0 {
				t.Errorf("pod %s is refused: %v", p.Name, bad)
			}
			for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				q := used["limits."+name]
				q.Add(c.Resources.Limits[name])
				used["limits."+name] = q
			}
		}
	}
	for name, q := range used {
		if hard := quota.Spec.Hard[name]; q.Cmp(hard) > 0 {
			t.Errorf("the pods use %s %s, over the quota's %s", q.String(), name, hard.String())
		}
	}

	// The check can fail: the workload container as it was (request below limit, no CPU limit).
	old := corev1.Container{Name: "workload", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
	}}
	if bad := limitRangeProblems(old, item); len(bad) != 2 {
		t.Errorf("the old container: %v, want the CPU and the memory ratio refused", bad)
	}
}

// Without nodes (or with tiny ones) the policy still leaves room for one CPU and 1Gi per container.
func TestComputePolicyFloor(t *testing.T) {
	_, limits := ComputePolicy("ns", []corev1.Node{*sizedNode("small", "500m", "512Mi")})
	if cpu, mem := limits.Spec.Limits[0].Max[corev1.ResourceCPU], limits.Spec.Limits[0].Max[corev1.ResourceMemory]; cpu.Cmp(resource.MustParse("2")) != 0 || mem.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("max cpu %s memory %s, want 2 and 2Gi", cpu.String(), mem.String())
	}
}

// ApplyComputePolicy waits until the quota is counted; its undo deletes both objects.
func TestApplyComputePolicy(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset(sizedNode("w1", "8", "32Gi"))
	// The fake API server has no quota controller: the create answers with the usage counted.
	kube.PrependReactor("create", "resourcequotas", func(a clienttesting.Action) (bool, runtime.Object, error) {
		q := a.(clienttesting.CreateAction).GetObject().(*corev1.ResourceQuota)
		q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{}}
		for name := range q.Spec.Hard {
			q.Status.Used[name] = resource.Quantity{}
		}
		return false, nil, nil
	})
	undo, err := ApplyComputePolicy(ctx, kube, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().LimitRanges("team-a").Get(ctx, ContainerLimits, metav1.GetOptions{}); err != nil {
		t.Errorf("LimitRange: %v", err)
	}
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	qs, _ := kube.CoreV1().ResourceQuotas("team-a").List(ctx, metav1.ListOptions{})
	lrs, _ := kube.CoreV1().LimitRanges("team-a").List(ctx, metav1.ListOptions{})
	if len(qs.Items)+len(lrs.Items) != 0 {
		t.Errorf("left after the undo: %d quotas, %d LimitRanges", len(qs.Items), len(lrs.Items))
	}
}

// Every namespace carrying the run label gets the policy, its quota counted at once; others do not; the
// undo stops provisioning and removes what it made.
func TestProvisionComputePolicy(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset(sizedNode("w1", "8", "32Gi"))
	watching := make(chan struct{})
	kube.PrependWatchReactor("namespaces", func(a clienttesting.Action) (bool, watch.Interface, error) {
		w, err := kube.Tracker().Watch(a.GetResource(), a.GetNamespace())
		close(watching)
		return true, w, err
	})
	undo, err := ProvisionComputePolicy(ctx, kube)
	if err != nil {
		t.Fatal(err)
	}
	<-watching
	create := func(name string, labels map[string]string) {
		t.Helper()
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	has := func(ns string) bool {
		_, qerr := kube.CoreV1().ResourceQuotas(ns).Get(ctx, ComputeQuota, metav1.GetOptions{})
		_, lerr := kube.CoreV1().LimitRanges(ns).Get(ctx, ContainerLimits, metav1.GetOptions{})
		return qerr == nil && lerr == nil
	}
	create("someone-else", nil)
	create("gpuconform-alloc-x1", map[string]string{fixtures.RunLabel: "r1"})
	// The quota is created, then its usage recorded: wait for both, or the check below races the second.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		q, err := kube.CoreV1().ResourceQuotas("gpuconform-alloc-x1").Get(ctx, ComputeQuota, metav1.GetOptions{})
		return has("gpuconform-alloc-x1") && err == nil && counted(q), nil
	}); err != nil {
		t.Fatalf("the labelled namespace got no policy with its usage recorded: %v", err)
	}
	if has("someone-else") {
		t.Error("an unlabelled namespace got the policy")
	}
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	if has("gpuconform-alloc-x1") {
		t.Error("the undo left the policy in place")
	}
	create("gpuconform-alloc-x2", map[string]string{fixtures.RunLabel: "r1"})
	if has("gpuconform-alloc-x2") {
		t.Error("provisioning went on after the undo")
	}
}

// The team-quota row's team is a namespace of its own with its own ClusterQueue, and the policy in it;
// the undo removes the team and the policy.
func TestApplyTeamQuota(t *testing.T) {
	ctx := t.Context()
	wd, _ := os.Getwd()
	root, err := FindRepoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	kube := fake.NewClientset(sizedNode("w1", "8", "32Gi"))
	kube.PrependReactor("create", "serviceaccounts", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		return true, &authnv1.TokenRequest{Status: authnv1.TokenRequestStatus{Token: "t"}}, nil
	})
	kube.PrependReactor("create", "resourcequotas", func(a clienttesting.Action) (bool, runtime.Object, error) {
		q := a.(clienttesting.CreateAction).GetObject().(*corev1.ResourceQuota)
		q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{}}
		for name := range q.Spec.Hard {
			q.Status.Used[name] = resource.Quantity{}
		}
		return false, nil, nil
	})
	kq := kueuefake.NewSimpleClientset() // NewClientset needs Kueue's OpenAPI schema, which its fake does not carry
	team, undo, err := ApplyTeamQuota(ctx, &rest.Config{Host: "https://127.0.0.1:6443"}, kube, kq, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if team.Namespace != QuotaTeamNamespace || team.LocalQueue != TeamLocalQueue || team.Kubeconfig == "" {
		t.Errorf("team = %+v", team)
	}
	lq, err := kq.KueueV1beta2().LocalQueues(QuotaTeamNamespace).Get(ctx, TeamLocalQueue, metav1.GetOptions{})
	if err != nil || string(lq.Spec.ClusterQueue) != QuotaTeamNamespace {
		t.Errorf("LocalQueue: %v %+v; want it on ClusterQueue %s, not team-namespace's", err, lq, QuotaTeamNamespace)
	}
	if _, err := kube.CoreV1().LimitRanges(QuotaTeamNamespace).Get(ctx, ContainerLimits, metav1.GetOptions{}); err != nil {
		t.Errorf("LimitRange: %v", err)
	}
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Get(ctx, QuotaTeamNamespace, metav1.GetOptions{}); err == nil {
		t.Error("the undo left the namespace")
	}
	if _, err := kq.KueueV1beta2().ClusterQueues().Get(ctx, QuotaTeamNamespace, metav1.GetOptions{}); err == nil {
		t.Error("the undo left the ClusterQueue")
	}
}

// teamFakes are fake clients on which applyTeam succeeds: a token for the team's ServiceAccount.
func teamFakes(t *testing.T) (string, *fake.Clientset, *kueuefake.Clientset) {
	t.Helper()
	wd, _ := os.Getwd()
	root, err := FindRepoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	kube := fake.NewClientset(sizedNode("w1", "8", "32Gi"))
	kube.PrependReactor("create", "serviceaccounts", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		return true, &authnv1.TokenRequest{Status: authnv1.TokenRequestStatus{Token: "t"}}, nil
	})
	return root, kube, kueuefake.NewSimpleClientset()
}

// team-quota-too-small: a team of its own with a quota whose limits.cpu is half of one suite pod's; the
// undo removes the quota and the team.
func TestApplyTeamQuotaTooSmall(t *testing.T) {
	ctx := t.Context()
	root, kube, kq := teamFakes(t)
	team, undo, err := ApplyTeamQuotaTooSmall(ctx, &rest.Config{Host: "https://127.0.0.1:6443"}, kube, kq, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if team.Namespace != SmallQuotaTeamNamespace || team.LocalQueue != TeamLocalQueue || team.Kubeconfig == "" {
		t.Errorf("team = %+v", team)
	}
	q, err := kube.CoreV1().ResourceQuotas(SmallQuotaTeamNamespace).Get(ctx, ComputeQuota, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	one := fixtures.NewFactory("r1").Resources().Limits[corev1.ResourceCPU]
	if hard := q.Spec.Hard[corev1.ResourceLimitsCPU]; hard.Cmp(one) >= 0 || hard.IsZero() {
		t.Errorf("limits.cpu hard %s: want below one pod's %s, above zero", hard.String(), one.String())
	}
	if _, err := kube.CoreV1().LimitRanges(SmallQuotaTeamNamespace).Get(ctx, ContainerLimits, metav1.GetOptions{}); err == nil {
		t.Error("the row adds a LimitRange; only the quota is its point")
	}
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ResourceQuotas(SmallQuotaTeamNamespace).Get(ctx, ComputeQuota, metav1.GetOptions{}); err == nil {
		t.Error("the undo left the quota")
	}
	if _, err := kube.CoreV1().Namespaces().Get(ctx, SmallQuotaTeamNamespace, metav1.GetOptions{}); err == nil {
		t.Error("the undo left the namespace")
	}
}

// team-queue-without-dra: the team's ClusterQueue covers CPU, memory and the device plugin's GPUs, with
// a quota for each, and not the DRA path's Kueue resource; the undo removes the queues and the team.
func TestApplyTeamQueueWithoutDRA(t *testing.T) {
	ctx := t.Context()
	root, kube, kq := teamFakes(t)
	team, undo, err := ApplyTeamQueueWithoutDRA(ctx, &rest.Config{Host: "https://127.0.0.1:6443"}, kube, kq, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if team.Namespace != NoDRATeamNamespace || team.LocalQueue != TeamLocalQueue {
		t.Errorf("team = %+v", team)
	}
	cq, err := kq.KueueV1beta2().ClusterQueues().Get(ctx, NoDRATeamNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, GPUResource}
	rg := cq.Spec.ResourceGroups
	if len(rg) != 1 || !slices.Equal(rg[0].CoveredResources, want) || len(rg[0].Flavors) != 1 || len(rg[0].Flavors[0].Resources) != len(want) {
		t.Fatalf("resource groups %+v, want one covering %v with a quota for each", rg, want)
	}
	for i, r := range rg[0].Flavors[0].Resources {
		if r.Name != want[i] || r.NominalQuota.IsZero() {
			t.Errorf("flavor quota %d: %s %s", i, r.Name, r.NominalQuota.String())
		}
	}
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := kq.KueueV1beta2().ClusterQueues().Get(ctx, NoDRATeamNamespace, metav1.GetOptions{}); err == nil {
		t.Error("the undo left the ClusterQueue")
	}
	if _, err := kube.CoreV1().Namespaces().Get(ctx, NoDRATeamNamespace, metav1.GetOptions{}); err == nil {
		t.Error("the undo left the namespace")
	}
}

// The other team rows' ClusterQueues still cover both paths' devices.
func TestTeamQueueCoversBothPaths(t *testing.T) {
	ctx := t.Context()
	root, kube, kq := teamFakes(t)
	_, undo, err := ApplyTeamNamespace(ctx, &rest.Config{Host: "https://127.0.0.1:6443"}, kube, kq, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = undo(ctx) }()
	cq, err := kq.KueueV1beta2().ClusterQueues().Get(ctx, TeamNamespace, metav1.GetOptions{})
	if err != nil || !slices.Equal(cq.Spec.ResourceGroups[0].CoveredResources, teamCovered) || len(cq.Spec.ResourceGroups[0].Flavors[0].Resources) != 4 {
		t.Errorf("ClusterQueue %+v, %v", cq, err)
	}
}
