package main

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
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"gpuconform.io/gpuconform/fixtures/rbac"
)

func TestParseRunnerArgs(t *testing.T) {
	o, err := parseRunnerArgs([]string{"--in-cluster", "--image", "reg/gpuconform:v1", "--kubeconfig=/k", "--context", "c",
		"--artifacts=/out", "--disruptive", "--ginkgo.label-filter=scenario:allocation", "--workload-image=reg/w:v1", "--timeout=2h"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Image != "reg/gpuconform:v1" || o.Kubeconfig != "/k" || o.Context != "c" || o.Artifacts != "/out" || !o.Disruptive || o.Timeout != 2*time.Hour {
		t.Errorf("runner options: %+v", o)
	}
	// The client's connection and artifacts flags stay here; the suite's go to the pod.
	want := []string{"--disruptive", "--ginkgo.label-filter=scenario:allocation", "--workload-image=reg/w:v1", "--timeout=2h"}
	if !slices.Equal(o.SuiteArgs, want) {
		t.Errorf("suite args %q, want %q", o.SuiteArgs, want)
	}
	if !slices.Equal(o.levels(), []string{rbac.LevelNonDisruptive, rbac.LevelDisruptive}) {
		t.Errorf("levels %v", o.levels())
	}
	team, err := parseRunnerArgs([]string{"--in-cluster", "--image=x", "--namespace", "team-a"})
	if err != nil || !slices.Equal(team.levels(), []string{rbac.LevelTeam}) || !slices.Contains(team.SuiteArgs, "--namespace=team-a") {
		t.Errorf("team level: %+v %v", team, err)
	}
	for _, bad := range [][]string{{"--in-cluster"}, {"--in-cluster", "--image=x", "--config=local.yaml"}, {"--in-cluster", "--image=x", "stray"}} {
		if _, err := parseRunnerArgs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The runner pod must be admitted where Pod Security "restricted" is enforced (its own namespace
// enforces it, and a team namespace may).
func TestRunnerJobIsRestricted(t *testing.T) {
	r := &runner{opts: runnerOptions{Image: "reg/gpuconform:v1", Hold: time.Minute, Timeout: time.Hour, SuiteArgs: []string{"--disruptive"}}, id: "run-1", ns: "ns"}
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
	if !slices.Contains(c.Args, "--artifacts="+podArtifacts) || !slices.Contains(c.Args, "--disruptive") || c.Args[0] != "run" {
		t.Errorf("args %q", c.Args)
	}
	if *job.Spec.BackoffLimit != 0 || job.Labels[RunnerLabel] != "run-1" || job.Spec.Template.Labels[RunnerLabel] != "run-1" {
		t.Errorf("job %+v", job.ObjectMeta)
	}
}

// setup creates the namespace, the ServiceAccount, the missing shipped roles and the bindings; cleanup
// removes every one of them, and a role the cluster already had stays.
func TestRunnerSetupAndCleanup(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	pre, _ := rbac.Load(rbac.LevelNonDisruptive)
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &pre.ClusterRoles[0], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r := &runner{opts: runnerOptions{Image: "x", Disruptive: true}, kube: kube, id: "run-1", out: &out}
	if err := r.setup(ctx); err != nil {
		t.Fatal(err)
	}
	crbs, _ := kube.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{LabelSelector: RunnerLabel})
	if len(crbs.Items) != 2 {
		t.Fatalf("%d ClusterRoleBindings, want one per level", len(crbs.Items))
	}
	crs, _ := kube.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if len(crs.Items) != 2 {
		t.Fatalf("%d ClusterRoles, want the installed one and the created disruptive one", len(crs.Items))
	}
	// The fake API server does not finish a namespace's deletion; the cleanup's wait gives up at the deadline.
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_ = r.cleanup(cctx)
	crbs, _ = kube.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	crs, _ = kube.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if len(crbs.Items) != 0 || len(crs.Items) != 1 || crs.Items[0].Name != pre.ClusterRoles[0].Name {
		t.Errorf("after cleanup: %d bindings, ClusterRoles %v (want only the pre-installed one)", len(crbs.Items), itemNames(crs.Items, func(c rbacv1.ClusterRole) string { return c.Name }))
	}
	if nss, _ := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); len(nss.Items) != 0 {
		t.Errorf("namespace left: %v", nss.Items[0].Name)
	}
	// A second runner refuses to start while the first one's objects are there.
	kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "left", Labels: map[string]string{RunnerLabel: "old"}}}, metav1.CreateOptions{})
	if err := (&runner{kube: kube, id: "run-2"}).refuseLeftovers(ctx); err == nil || !strings.Contains(err.Error(), "Namespace left") {
		t.Errorf("leftover check: %v", err)
	}
}

// The artifacts cross from the pod as a tar; a path outside the directory is refused.
func TestArtifactsPackAndUntar(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "specs", "a"), 0o755)
	os.WriteFile(filepath.Join(src, "signoff.md"), []byte("GO"), 0o644)
	os.WriteFile(filepath.Join(src, "specs", "a", "timeline.json"), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(src, fetchedFile), nil, 0o644)
	var tarball, errs bytes.Buffer
	if rc := artifactsCommand([]string{"pack", src}, &tarball, &errs); rc != 0 {
		t.Fatal(errs.String())
	}
	dst := t.TempDir()
	n, err := untar(&tarball, dst)
	if err != nil || n != 2 {
		t.Fatalf("untar: %d files, %v", n, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "specs", "a", "timeline.json")); string(b) != "{}" {
		t.Errorf("timeline not copied: %q", b)
	}
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	tw.Write([]byte("x"))
	tw.Close()
	if _, err := untar(&evil, dst); err == nil {
		t.Error("a path leaving the directory was unpacked")
	}
	if rc := artifactsCommand([]string{"release", dst}, &tarball, &errs); rc != 0 {
		t.Fatal(errs.String())
	}
	if _, err := os.Stat(filepath.Join(dst, fetchedFile)); err != nil {
		t.Error("release wrote no marker")
	}
}

// The wait for the runner pod ends at once, with the suite's diagnosis, when the image can never be
// pulled; a pod that runs ends it with its name.
func TestRunnerPodStartEndsOnTerminalDiagnosis(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := &runner{opts: runnerOptions{Image: "reg/gpuconform:nope"}, id: "run-1", ns: "ns"}
	job := r.job()
	pod := func(phase corev1.PodPhase, waiting *corev1.ContainerStateWaiting) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runner-x", Namespace: "ns",
			Labels: map[string]string{RunnerLabel: "run-1", "batch.kubernetes.io/job-name": job.Name}},
			Spec: job.Spec.Template.Spec, Status: corev1.PodStatus{Phase: phase}}
		p.Spec.NodeName = "n1"
		if waiting != nil {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: runnerContainer, State: corev1.ContainerState{Waiting: waiting}}}
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
