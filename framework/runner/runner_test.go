package runner

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"gpuconform.io/gpuconform/fixtures/rbac"
	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/audit/audittest"
	"gpuconform.io/gpuconform/framework/runlease"
)

// fakeRunner is a runner on a fake cluster holding objs.
func fakeRunner(opts Options, id string, objs ...*corev1.Namespace) (*Runner, *fake.Clientset) {
	kube := fake.NewClientset()
	// The fake API server does not generate names.
	kube.PrependReactor("create", "namespaces", func(a clienttesting.Action) (bool, runtime.Object, error) {
		ns := a.(clienttesting.CreateAction).GetObject().(*corev1.Namespace)
		if ns.Name == "" {
			ns.Name = ns.GenerateName + "abcde"
		}
		return false, nil, nil
	})
	for _, o := range objs {
		_ = kube.Tracker().Add(o)
	}
	// The audit sees, through controller-runtime's fake client on the typed fake's tracker, what the runner
	// created through the typed client.
	objects := audittest.Objects{Client: crfake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjectTracker(kube.Tracker()).Build()}
	var out bytes.Buffer
	return newRunner(kube, nil, audit.Auditor{Objects: objects, Kube: kube}, opts, id, &out), kube
}

// The runner pod must be admitted where Pod Security "restricted" is enforced (its own namespace
// enforces it, and a team namespace may).
func TestRunnerJobIsRestricted(t *testing.T) {
	r, _ := fakeRunner(Options{Image: "reg/gpuconform:v1", Hold: time.Minute, Timeout: time.Hour, SuiteArgs: []string{"--disruptive"}}, "run-1")
	r.ns = "ns"
	job := r.job()
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}
	if agg := policy.AggregateCheckResults(eval.EvaluatePod(restricted, &job.Spec.Template.ObjectMeta, &job.Spec.Template.Spec)); !agg.Allowed {
		t.Errorf("runner pod violates restricted: %s: %s", agg.ForbiddenReason(), agg.ForbiddenDetail())
	}
	c := job.Spec.Template.Spec.Containers[0]
	want := []string{"run", "--artifacts=" + podArtifacts, "--hold-artifacts=1m0s", "--disruptive"}
	if !slices.Equal(c.Args, want) {
		t.Errorf("args %q, want %q", c.Args, want)
	}
	if *job.Spec.BackoffLimit != 0 || job.Labels[Label] != "run-1" || job.Spec.Template.Labels[Label] != "run-1" || *job.Spec.ActiveDeadlineSeconds != int64((66*time.Minute).Seconds()) {
		t.Errorf("job %+v", job)
	}
}

// The pod's memory grows with its Ginkgo processes, and requests equal limits whatever their number.
func TestRunnerJobSizedForProcs(t *testing.T) {
	for procs, want := range map[int]string{0: "1Gi", 1: "1Gi", 3: "2Gi"} {
		r, _ := fakeRunner(Options{Image: "x", Procs: procs, SuiteArgs: []string{"--procs=3"}}, "run-1")
		res := r.job().Spec.Template.Spec.Containers[0].Resources
		if got := res.Limits.Memory(); got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("procs %d: memory limit %s, want %s", procs, got, want)
		}
		if !equality.Semantic.DeepEqual(res.Requests, res.Limits) {
			t.Errorf("procs %d: requests %v differ from limits %v", procs, res.Requests, res.Limits)
		}
	}
}

// setup creates the namespace, the ServiceAccount, the missing shipped roles and the bindings; Cleanup
// removes every one of them through the audit, and a role the cluster already had stays.
func TestRunnerSetupAndCleanup(t *testing.T) {
	ctx := t.Context()
	r, kube := fakeRunner(Options{Image: "x", Disruptive: true}, "run-1")
	pre, _ := rbac.Load(rbac.LevelNonDisruptive)
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &pre.ClusterRoles[0], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.setup(ctx); err != nil {
		t.Fatal(err)
	}
	crbs, _ := kube.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{LabelSelector: Label})
	if len(crbs.Items) != 2 {
		t.Fatalf("%d ClusterRoleBindings, want one per level", len(crbs.Items))
	}
	crs, _ := kube.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if len(crs.Items) != 2 {
		t.Fatalf("%d ClusterRoles, want the installed one and the created disruptive one", len(crs.Items))
	}
	if ours := r.audit.RunIn(ctx, r.id, r.ns, "").Ours; len(ours) != 5 {
		t.Errorf("the audit finds %d of the runner's objects, want 5 (its namespace and ServiceAccount, the created ClusterRole, two bindings):\n%s", len(ours), audit.Summary(ours))
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.Cleanup(cctx); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	crbs, _ = kube.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	crs, _ = kube.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if len(crbs.Items) != 0 || len(crs.Items) != 1 || crs.Items[0].Name != pre.ClusterRoles[0].Name {
		t.Errorf("after cleanup: %d bindings, %d ClusterRoles (want only the pre-installed %s)", len(crbs.Items), len(crs.Items), pre.ClusterRoles[0].Name)
	}
	if nss, _ := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); len(nss.Items) != 0 {
		t.Errorf("namespace left: %v", nss.Items[0].Name)
	}
	if sas, _ := kube.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{}); len(sas.Items) != 0 {
		t.Errorf("ServiceAccount left: %v", sas.Items[0].Name)
	}
	if !strings.Contains(r.out.(*bytes.Buffer).String(), "nothing labelled "+Label+"=run-1 is left") {
		t.Errorf("output: %s", r.out)
	}
}

// In a team namespace the runner creates its ServiceAccount, the team Role when missing and the
// bindings there; Cleanup deletes those and leaves the namespace.
func TestRunnerTeamSetupAndCleanup(t *testing.T) {
	ctx := t.Context()
	team := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}
	r, kube := fakeRunner(Options{Image: "x", Namespace: "team-a"}, "run-4", team)
	if err := r.setup(ctx); err != nil {
		t.Fatal(err)
	}
	roles, _ := rbac.Load(rbac.LevelTeam)
	ours := r.audit.RunIn(ctx, r.id, r.ns, "").Ours
	if want := 1 + 2*len(roles.Roles) + 2*len(roles.ClusterRoles); len(roles.Roles) == 0 || len(ours) != want {
		t.Errorf("the audit finds %d objects, want %d:\n%s", len(ours), want, audit.Summary(ours))
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.Cleanup(cctx); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if rbs, _ := kube.RbacV1().RoleBindings("team-a").List(ctx, metav1.ListOptions{}); len(rbs.Items) != 0 {
		t.Errorf("RoleBindings left: %d", len(rbs.Items))
	}
	if _, err := kube.CoreV1().Namespaces().Get(ctx, "team-a", metav1.GetOptions{}); err != nil {
		t.Errorf("the team namespace went: %v", err)
	}
}

// A second runner refuses to start while the first one's objects are there, unless it was given
// --cleanup-leftovers: then it deletes them, and only them.
func TestRunnerRefusesLeftovers(t *testing.T) {
	left := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "left", Labels: map[string]string{Label: "old"}}}
	r, _ := fakeRunner(Options{Image: "x"}, "run-2", left)
	if err := r.clearLeftovers(t.Context()); err == nil || !strings.Contains(err.Error(), "Namespace left (run old)") || !strings.Contains(err.Error(), "--cleanup-leftovers") {
		t.Errorf("leftover check: %v", err)
	}
	clean, _ := fakeRunner(Options{Image: "x"}, "run-2")
	if err := clean.clearLeftovers(t.Context()); err != nil {
		t.Errorf("clean cluster: %v", err)
	}
	user := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "users"}}
	sweep, kube := fakeRunner(Options{Image: "x", CleanupLeftovers: true}, "run-2", left.DeepCopy(), user)
	if err := sweep.clearLeftovers(t.Context()); err != nil {
		t.Fatalf("--cleanup-leftovers: %v", err)
	}
	if _, err := kube.CoreV1().Namespaces().Get(t.Context(), "left", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the earlier run's namespace is still there (%v)", err)
	}
	if _, err := kube.CoreV1().Namespaces().Get(t.Context(), "users", metav1.GetOptions{}); err != nil {
		t.Errorf("a namespace of no run went: %v", err)
	}
}

// Another in-cluster run whose lease is current is alive: its namespace is never a leftover, not even
// with --cleanup-leftovers, and the runner says it left it alone.
func TestRunnerLeavesLiveRunsAlone(t *testing.T) {
	live := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "live", Labels: map[string]string{Label: "run-1"}}}
	r, kube := fakeRunner(Options{Image: "x", CleanupLeftovers: true, LeaseNamespace: "default"}, "run-2", live)
	other, err := runlease.Acquire(t.Context(), kube, runlease.Options{Namespace: "default", RunID: "run-1", Role: runlease.RoleRunner, Host: "ci-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Release(t.Context()) }()
	if err := r.clearLeftovers(t.Context()); err != nil {
		t.Fatalf("a live run's objects are not leftovers: %v", err)
	}
	if _, err := kube.CoreV1().Namespaces().Get(t.Context(), "live", metav1.GetOptions{}); err != nil {
		t.Errorf("the live run's namespace went: %v", err)
	}
	if out := r.out.(*bytes.Buffer).String(); !strings.Contains(out, "left alone") || !strings.Contains(out, "runner of run run-1") {
		t.Errorf("the runner does not name the live run it left alone: %q", out)
	}
}

// A cleanup that cannot delete what it made says what is left when its time is up.
func TestRunnerCleanupReportsWhatIsLeft(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpuconform-runner-x", Labels: map[string]string{Label: "run-3"}, Finalizers: []string{"stuck"}}}
	r, _ := fakeRunner(Options{Image: "x"}, "run-3", ns)
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	if err := r.Cleanup(ctx); err == nil || !strings.Contains(err.Error(), "left on the cluster") || !strings.Contains(err.Error(), "Namespace gpuconform-runner-x") {
		t.Errorf("cleanup: %v", err)
	}
}

// The artifacts cross from the pod as a tar; a path outside the directory is refused.
func TestArtifactsPackAndUnpack(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "specs", "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"signoff.md": "GO", filepath.Join("specs", "a", "timeline.json"): "{}", fetchedFile: ""} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var tarball bytes.Buffer
	if err := Pack(src, &tarball); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	n, err := Unpack(&tarball, dst)
	if err != nil || n != 2 {
		t.Fatalf("unpack: %d files, %v", n, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "specs", "a", "timeline.json")); string(b) != "{}" {
		t.Errorf("timeline not copied: %q", b)
	}
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	if err := tw.WriteHeader(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	if _, err := Unpack(&evil, dst); err == nil {
		t.Error("a path leaving the directory was unpacked")
	}
	if err := Release(dst); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dst, fetchedFile)); err != nil {
		t.Error("release wrote no marker")
	}
}

// The pod's hold ends as soon as the artifacts are released, and says so when nobody copies them.
func TestHold(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	Hold(t.Context(), dir, 3, 50*time.Millisecond, &out)
	if !strings.HasPrefix(out.String(), ReadyMarker) || !strings.Contains(out.String(), "(exit code 3)") || !strings.Contains(out.String(), "nobody copied") {
		t.Errorf("unreleased hold: %q", out.String())
	}
	out.Reset()
	_ = Release(dir)
	start := time.Now()
	Hold(t.Context(), dir, 0, time.Minute, &out)
	if time.Since(start) > 10*time.Second || strings.Contains(out.String(), "nobody copied") {
		t.Errorf("released hold: %q after %s", out.String(), time.Since(start))
	}
}

// The wait for the runner pod ends at once, with the suite's diagnosis, when the image can never be
// pulled; a pod that runs ends it with its name.
func TestRunnerPodStartEndsOnTerminalDiagnosis(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r, _ := fakeRunner(Options{Image: "reg/gpuconform:nope"}, "run-1")
	r.ns = "ns"
	job := r.job()
	pod := func(phase corev1.PodPhase, waiting *corev1.ContainerStateWaiting) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runner-x", Namespace: "ns",
			Labels: map[string]string{Label: "run-1", "batch.kubernetes.io/job-name": job.Name}},
			Spec: job.Spec.Template.Spec, Status: corev1.PodStatus{Phase: phase}}
		p.Spec.NodeName = "n1"
		if waiting != nil {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: container, State: corev1.ContainerState{Waiting: waiting}}}
		}
		return p
	}
	job.Namespace = "ns"
	r.kube = fake.NewClientset(job, pod(corev1.PodPending, &corev1.ContainerStateWaiting{Reason: "ErrImagePull",
		Message: `failed to pull "reg/gpuconform:nope": reg/gpuconform:nope: not found`}))
	// Without the terminal diagnosis the wait would run into the context's deadline, a different error.
	_, err := r.waitPodStarted(ctx, job.Name)
	if err == nil || !strings.Contains(err.Error(), "ImagePullFailed") || !strings.Contains(err.Error(), "cannot start") {
		t.Fatalf("want the ImagePullFailed diagnosis, got %v", err)
	}
	r.kube = fake.NewClientset(job, pod(corev1.PodRunning, nil))
	if name, err := r.waitPodStarted(ctx, job.Name); err != nil || name != "runner-x" {
		t.Errorf("running pod: %q %v", name, err)
	}
}
