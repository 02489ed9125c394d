package suite

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuefake "sigs.k8s.io/kueue/client-go/clientset/versioned/fake"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/testenv"
)

const teamNS = "team-a"

func teamPaths() []gpu.Path {
	return []gpu.Path{
		&gpu.DevicePlugin{Resource: "nvidia.com/gpu", Allocatable: map[string]int64{"w1": 2}},
		&gpu.DRA{DeviceClass: "gpu.example.com", Driver: "gpu.example.com", KueueResource: "example.com/gpu", Devices: map[string][]string{"w1": {"gpu-0"}}},
	}
}

func counted(name string, hard corev1.ResourceList) *corev1.ResourceQuota {
	used := corev1.ResourceList{}
	for n := range hard {
		used[n] = resource.Quantity{}
	}
	return &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: teamNS}, Spec: corev1.ResourceQuotaSpec{Hard: hard},
		Status: corev1.ResourceQuotaStatus{Hard: hard, Used: used}}
}

func teamQueue(covered ...corev1.ResourceName) []runtime.Object {
	return []runtime.Object{
		&kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: "team-gpus", Namespace: teamNS}, Spec: kueue.LocalQueueSpec{ClusterQueue: "team-cq"}},
		&kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "team-cq"}, Spec: kueue.ClusterQueueSpec{ResourceGroups: []kueue.ResourceGroup{{CoveredResources: covered}}}},
	}
}

// teamRun is a prepared team-namespace run on fake clients, with the objects given in the namespace.
func teamRun(kube *fake.Clientset, kq *kueuefake.Clientset) *Run {
	cfg := config.Config{Namespace: teamNS, Queues: config.QueuesConfig{Mode: config.QueuesExisting, LocalQueue: "team-gpus"}}
	return &Run{Config: cfg, Clients: &cluster.Clients{Kube: kube, Kueue: kq}, Paths: teamPaths(), KueueUsable: true,
		Env: &testenv.Env{Factory: fixtures.NewFactory("r1")}}
}

func names(paths []gpu.Path) []string {
	var out []string
	for _, p := range paths {
		out = append(out, p.Name())
	}
	return out
}

func TestTeamPreflight(t *testing.T) {
	all := teamQueue("cpu", "memory", "nvidia.com/gpu", "example.com/gpu")
	forbidQuotas := func(kube *fake.Clientset) {
		kube.PrependReactor("list", "resourcequotas", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "resourcequotas"}, "", nil)
		})
	}
	for _, c := range []struct {
		name    string
		objects []runtime.Object
		queue   []runtime.Object
		react   func(*fake.Clientset)
		// refuse is the start of the error (none: the run goes on with paths).
		refuse  []string
		paths   []string
		skipped []string
		notes   []string
		kueue   map[string]bool
	}{
		{name: "no policy", queue: all, paths: []string{"device-plugin", "dra"}, kueue: map[string]bool{"device-plugin": true, "dra": true}},
		{name: "limits.cpu below one pod: no path fits",
			objects: []runtime.Object{counted("compute-quota", corev1.ResourceList{"limits.cpu": resource.MustParse("50m")})}, queue: all,
			refuse: []string{"refusing to start: namespace team-a cannot hold one pod with one device on any allocation path: ",
				"ResourceQuota compute-quota: limits.cpu hard 50m, used 0, needed 100m (device-plugin, dra)", "--pod-cpu"}},
		{name: "no DRA device in the quota: the DRA path is not exercised",
			objects: []runtime.Object{counted("dra", corev1.ResourceList{"gpu.example.com.deviceclass.resource.k8s.io/devices": resource.MustParse("0")})}, queue: all,
			paths:   []string{"device-plugin"},
			skipped: []string{"dra: namespace team-a cannot hold one pod with one device on this path: ResourceQuota dra: gpu.example.com.deviceclass.resource.k8s.io/devices hard 0, used 0, needed 1"},
			kueue:   map[string]bool{"device-plugin": true}},
		{name: "a LimitRange that allows no GPU per container blocks the device-plugin path",
			objects: []runtime.Object{&corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "no-gpu", Namespace: teamNS}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{
				{Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("0")}, Default: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("0")}}}}}},
			queue: all, paths: []string{"dra"},
			skipped: []string{"device-plugin: namespace team-a cannot hold one pod with one device on this path: LimitRange no-gpu: maximum nvidia.com/gpu usage per Container is 0, but limit is 1"}},
		{name: "the ClusterQueue does not cover the DRA path's Kueue resource",
			queue: teamQueue("cpu", "memory", "nvidia.com/gpu"), paths: []string{"device-plugin", "dra"},
			skipped: []string{"dra: specs submitted through Kueue: ClusterQueue team-cq does not cover example.com/gpu (covered: cpu, memory, nvidia.com/gpu); the path's other specs run"},
			kueue:   map[string]bool{"device-plugin": true, "dra": false}},
		{name: "quotas the team cannot read are noted, not refused",
			objects: []runtime.Object{counted("compute-quota", corev1.ResourceList{"limits.cpu": resource.MustParse("50m")})}, queue: all, react: forbidQuotas,
			paths: []string{"device-plugin", "dra"}, notes: []string{"not checked: cannot list resourcequotas in team-a: forbidden"}},
		{name: "a ClusterQueue the team cannot read is noted",
			queue: teamQueue()[:1], paths: []string{"device-plugin", "dra"},
			notes: []string{`not checked: cannot get ClusterQueue team-cq (of LocalQueue team-a/team-gpus): clusterqueues.kueue.x-k8s.io "team-cq" not found`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			kube := fake.NewClientset(c.objects...)
			if c.react != nil {
				c.react(kube)
			}
			r := teamRun(kube, kueuefake.NewSimpleClientset(c.queue...))
			err := r.teamPreflight(t.Context())
			if len(c.refuse) > 0 {
				if err == nil {
					t.Fatalf("no refusal; paths %v", names(r.Paths))
				}
				for _, w := range c.refuse {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("refusal %q lacks %q", err, w)
					}
				}
				if !strings.HasPrefix(err.Error(), c.refuse[0]) {
					t.Errorf("refusal %q does not start with %q", err, c.refuse[0])
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(r.Paths); !slices.Equal(got, c.paths) {
				t.Errorf("paths %v, want %v", got, c.paths)
			}
			var skipped []string
			for _, s := range r.Skipped() {
				skipped = append(skipped, s.What+": "+s.Why)
			}
			if !slices.Equal(skipped, c.skipped) {
				t.Errorf("not exercised %q, want %q", skipped, c.skipped)
			}
			if !slices.Equal(r.Notes, c.notes) {
				t.Errorf("notes %q, want %q", r.Notes, c.notes)
			}
			for path, want := range c.kueue {
				if got := r.KueueFor(path); got != want {
					t.Errorf("KueueFor(%s) = %v, want %v", path, got, want)
				}
			}
		})
	}
}

// Outside team-namespace mode the namespace's policy is not read: the suite makes its own namespaces.
func TestTeamPreflightOnlyInTeamMode(t *testing.T) {
	kube := fake.NewClientset(counted("compute-quota", corev1.ResourceList{"limits.cpu": resource.MustParse("50m")}))
	r := teamRun(kube, kueuefake.NewSimpleClientset())
	r.Config.Namespace = ""
	if err := r.teamPreflight(t.Context()); err != nil || len(r.Paths) != 2 || len(kube.Actions()) != 0 {
		t.Errorf("err %v, paths %v, %d API calls", err, names(r.Paths), len(kube.Actions()))
	}
}

// Parallel processes must decide the same paths and gaps; a difference is named.
func TestSameTeamDecision(t *testing.T) {
	a := teamRun(fake.NewClientset(), kueuefake.NewSimpleClientset())
	b := teamRun(fake.NewClientset(), kueuefake.NewSimpleClientset())
	if err := b.SameTeamDecision(2, a.TeamDecision()); err != nil {
		t.Errorf("same decision: %v", err)
	}
	b.Paths = b.Paths[:1]
	if err := b.SameTeamDecision(2, a.TeamDecision()); err == nil || !strings.Contains(err.Error(), "process 2") {
		t.Errorf("different paths: %v", err)
	}
	b.Paths, b.queueGaps = a.Paths, map[string]string{"dra": "gap"}
	if err := b.SameTeamDecision(2, a.TeamDecision()); err == nil {
		t.Error("different queue gaps went unnoticed")
	}
}
