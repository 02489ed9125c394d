package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/fixtures/rbac"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/diagnose"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/reports"
)

// The in-cluster runner: `gpuconform run --in-cluster --image IMG` runs this binary's suite as a Job (as
// hydrophone and sonobuoy run the Kubernetes conformance suite), under a ServiceAccount bound to the
// shipped role of the level, streams the Job's log, copies /artifacts back with an exec of this binary
// in the pod (`gpuconform artifacts pack`), and deletes everything it created.
const (
	// RunnerLabel marks every object the runner creates; its value is the runner's run ID. It is not the
	// suite's run label: the suite inside would count the runner's own objects as its leaks.
	RunnerLabel = "gpuconform.io/runner"
	// runnerContainer is the Job's one container.
	runnerContainer = "runner"
	// podArtifacts is where the suite in the pod writes (an emptyDir).
	podArtifacts = "/artifacts"
	// readyMarker is the line the pod prints when its artifacts are complete.
	readyMarker = "gpuconform-runner: artifacts ready"
	// fetchedFile tells the pod its artifacts were copied: it exits.
	fetchedFile = ".gpuconform-fetched"
)

// runnerOptions are the runner's own flags; every other flag goes to the suite in the pod.
type runnerOptions struct {
	Image, Kubeconfig, Context, Namespace, Artifacts string
	Disruptive                                       bool
	Hold, Timeout                                    time.Duration
	SuiteArgs                                        []string
}

// parseRunnerArgs splits the runner's flags from the suite's. --kubeconfig and --context are the
// client's (the pod uses its ServiceAccount); --artifacts is the local directory the artifacts come to;
// --namespace picks the team-namespace level and is passed on.
func parseRunnerArgs(args []string) (runnerOptions, error) {
	o := runnerOptions{Hold: 10 * time.Minute, Timeout: 90 * time.Minute, Artifacts: cmp.Or(os.Getenv("ARTIFACTS"), "_artifacts")}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		take := func() (string, error) {
			if hasValue {
				return value, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("flag --%s needs a value", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch {
		case !strings.HasPrefix(a, "-"):
			return o, fmt.Errorf("unexpected argument %q: the suite takes only flags", a)
		case name == "in-cluster":
		case name == "image":
			o.Image, err = take()
		case name == "kubeconfig":
			o.Kubeconfig, err = take()
		case name == "context":
			o.Context, err = take()
		case name == "artifacts":
			o.Artifacts, err = take()
		case name == "hold-artifacts":
			var v string
			if v, err = take(); err == nil {
				o.Hold, err = time.ParseDuration(v)
			}
		case name == "timeout":
			var v string
			if v, err = take(); err == nil {
				o.Timeout, err = time.ParseDuration(v)
				o.SuiteArgs = append(o.SuiteArgs, "--timeout="+v)
			}
		case name == "namespace":
			if o.Namespace, err = take(); err == nil {
				o.SuiteArgs = append(o.SuiteArgs, "--namespace="+o.Namespace)
			}
		case name == "config":
			return o, errors.New("--config names a local file the pod cannot read: give its settings as flags")
		case name == "disruptive":
			o.Disruptive = !hasValue || value == "true"
			o.SuiteArgs = append(o.SuiteArgs, a)
		default:
			o.SuiteArgs = append(o.SuiteArgs, a)
		}
		if err != nil {
			return o, err
		}
	}
	if o.Image == "" {
		return o, errors.New("--in-cluster needs --image REGISTRY/gpuconform:TAG, the runner image `make images` writes (push it where the cluster pulls from); the workload image is --workload-image")
	}
	return o, nil
}

// level is the shipped role the runner's ServiceAccount gets.
func (o runnerOptions) levels() []string {
	switch {
	case o.Namespace != "":
		return []string{rbac.LevelTeam}
	case o.Disruptive:
		return []string{rbac.LevelNonDisruptive, rbac.LevelDisruptive}
	}
	return []string{rbac.LevelNonDisruptive}
}

// runner holds what one in-cluster run created, for its cleanup.
type runner struct {
	opts    runnerOptions
	kube    kubernetes.Interface
	rest    *rest.Config
	id      string
	out     io.Writer
	ns      string // the Job's namespace
	ownNS   bool   // created by the runner
	created []func(context.Context) error
	closing string // the report's closing lines
}

// labels are every runner object's.
func (r *runner) labels() map[string]string {
	return map[string]string{RunnerLabel: r.id, fixtures.ManagedByLabel: fixtures.ManagedByValue}
}

func (r *runner) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: r.ns, Labels: r.labels()}
}

// inClusterCommand is `gpuconform run --in-cluster`.
func inClusterCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseRunnerArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform run --in-cluster: %v\n", err)
		return 2
	}
	c, err := cluster.Connect(ctx, cluster.ConnectOptions{Kubeconfig: opts.Kubeconfig, Context: opts.Context, Timeout: 30 * time.Second})
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform run --in-cluster: %v\n", err)
		return 2
	}
	r := &runner{opts: opts, kube: c.Kube, rest: c.REST, id: run.NewID(time.Now()), out: stdout}
	code := r.runAndClean(ctx, stderr)
	// The closing lines come last, after the cleanup's.
	if _, err := os.Stat(filepath.Join(opts.Artifacts, reports.RecordFile)); err == nil {
		fmt.Fprint(stderr, r.closing)
	}
	return code
}

// runAndClean runs and then cleans up, even after an interrupt; a cleanup that leaves something behind
// fails the run (the cluster is dirtier than before).
func (r *runner) runAndClean(ctx context.Context, stderr io.Writer) (code int) {
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		defer cancel()
		if err := r.cleanup(cctx); err != nil {
			fmt.Fprintf(stderr, "gpuconform run --in-cluster: cleanup: %v\n", err)
			if code == reports.ExitGo {
				code = reports.ExitNoGo
			}
		}
	}()
	opts := r.opts
	code, err := r.run(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform run --in-cluster: %v\n", err)
		if code == 0 {
			code = reports.ExitNoGo
		}
		return code
	}
	// The artifacts must be this run's, and their verdict the pod's; rendered here as after a local run.
	rec, err := reports.ReadRecord(filepath.Join(opts.Artifacts, reports.RecordFile))
	if err != nil || rec.RunID != r.id {
		fmt.Fprintf(stderr, "gpuconform run --in-cluster: the artifacts copied into %s are not run %s's (%v)\n", opts.Artifacts, r.id, err)
		return reports.ExitNoGo
	}
	var closing bytes.Buffer
	if rc := reportCommand(ctx, []string{opts.Artifacts}, io.Discard, &closing); rc != code {
		fmt.Fprintf(stderr, "gpuconform run --in-cluster: the pod exited %d, its artifacts say %d\n", code, rc)
		code = max(code, rc)
	}
	r.closing = closing.String()
	return code
}

// run creates the runner's objects, follows the Job and copies the artifacts; it returns the pod's exit
// code (the verdict's).
func (r *runner) run(ctx context.Context) (int, error) {
	if err := r.refuseLeftovers(ctx); err != nil {
		return 2, err
	}
	if err := r.setup(ctx); err != nil {
		return 2, err
	}
	job, err := r.kube.BatchV1().Jobs(r.ns).Create(ctx, r.job(), metav1.CreateOptions{})
	if err != nil {
		return 2, fmt.Errorf("creating the runner Job: %w", err)
	}
	fmt.Fprintf(r.out, "gpuconform-runner: Job %s/%s (image %s, ServiceAccount %s bound to %s)\n", r.ns, job.Name, r.opts.Image, r.saName(), strings.Join(r.opts.levels(), ", "))
	pod, err := r.waitPodStarted(ctx, job.Name)
	if err != nil {
		return reports.ExitNoGo, err
	}
	fetched, err := r.follow(ctx, pod)
	if err != nil {
		return reports.ExitNoGo, err
	}
	if !fetched {
		return reports.ExitNoGo, fmt.Errorf("pod %s/%s ended before its artifacts were ready: %s", r.ns, pod, r.podState(ctx, pod))
	}
	return r.waitExitCode(ctx, pod)
}

// refuseLeftovers stops a run while an earlier runner's objects are still on the cluster.
func (r *runner) refuseLeftovers(ctx context.Context) error {
	sel := metav1.ListOptions{LabelSelector: RunnerLabel}
	var left []string
	if nss, err := r.kube.CoreV1().Namespaces().List(ctx, sel); err == nil {
		for _, n := range nss.Items {
			left = append(left, "Namespace "+n.Name)
		}
	}
	if crbs, err := r.kube.RbacV1().ClusterRoleBindings().List(ctx, sel); err == nil {
		for _, b := range crbs.Items {
			left = append(left, "ClusterRoleBinding "+b.Name)
		}
	}
	if r.opts.Namespace != "" {
		if jobs, err := r.kube.BatchV1().Jobs(r.opts.Namespace).List(ctx, sel); err == nil {
			for _, j := range jobs.Items {
				left = append(left, "Job "+r.opts.Namespace+"/"+j.Name)
			}
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("an earlier in-cluster run left %s (label %s); delete them first (kubectl delete ns,clusterrolebinding,clusterrole,job,sa,rolebinding -l %s)",
			strings.Join(left, ", "), RunnerLabel, RunnerLabel)
	}
	return nil
}

func (r *runner) saName() string { return "gpuconform-runner-" + r.id }

// setup creates the namespace (cluster level), the ServiceAccount, the shipped roles the cluster lacks,
// and their bindings. Each creation registers its undo.
func (r *runner) setup(ctx context.Context) error {
	if r.opts.Namespace != "" {
		r.ns = r.opts.Namespace
	} else {
		ns, err := r.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gpuconform-runner-",
			Labels: merge(r.labels(), map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating the runner's namespace: %w", err)
		}
		r.ns, r.ownNS = ns.Name, true
		r.undo(func(ctx context.Context) error { return r.deleteNamespace(ctx, ns.Name) })
	}
	sa, err := r.kube.CoreV1().ServiceAccounts(r.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: r.meta(r.saName())}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating ServiceAccount %s/%s: %w", r.ns, r.saName(), err)
	}
	if !r.ownNS {
		r.undo(func(ctx context.Context) error {
			return ignoreNotFound(r.kube.CoreV1().ServiceAccounts(r.ns).Delete(ctx, sa.Name, metav1.DeleteOptions{}))
		})
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: r.ns}}
	for _, level := range r.opts.levels() {
		roles, err := rbac.Load(level)
		if err != nil {
			return err
		}
		for _, cr := range roles.ClusterRoles {
			if err := r.ensureClusterRole(ctx, cr); err != nil {
				return err
			}
			name := cr.Name + "-" + r.id
			if _, err := r.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: r.labels()},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("binding ClusterRole %s: %w", cr.Name, err)
			}
			r.undo(func(ctx context.Context) error {
				return ignoreNotFound(r.kube.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}))
			})
		}
		for _, role := range roles.Roles {
			if err := r.ensureRole(ctx, role); err != nil {
				return err
			}
			name := role.Name + "-" + r.id
			if _, err := r.kube.RbacV1().RoleBindings(r.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: r.meta(name),
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("binding Role %s/%s: %w", r.ns, role.Name, err)
			}
			if !r.ownNS {
				r.undo(func(ctx context.Context) error {
					return ignoreNotFound(r.kube.RbacV1().RoleBindings(r.ns).Delete(ctx, name, metav1.DeleteOptions{}))
				})
			}
		}
	}
	// The pod may read its own pods' logs and exec: not needed; it needs nothing beyond the level.
	return nil
}

// ensureClusterRole creates the shipped ClusterRole when the cluster lacks it (and deletes it after); an
// installed one is used as it is, so an administrator's copy is what the run exercises.
func (r *runner) ensureClusterRole(ctx context.Context, cr rbacv1.ClusterRole) error {
	if _, err := r.kube.RbacV1().ClusterRoles().Get(ctx, cr.Name, metav1.GetOptions{}); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading ClusterRole %s: %w", cr.Name, err)
	}
	cr.Labels = merge(cr.Labels, r.labels())
	if _, err := r.kube.RbacV1().ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the shipped ClusterRole %s (the cluster has none; apply fixtures/rbac or give the runner's user the right to create it): %w", cr.Name, err)
	}
	r.undo(func(ctx context.Context) error {
		return ignoreNotFound(r.kube.RbacV1().ClusterRoles().Delete(ctx, cr.Name, metav1.DeleteOptions{}))
	})
	return nil
}

// ensureRole is ensureClusterRole for the team level's Role in the namespace.
func (r *runner) ensureRole(ctx context.Context, role rbacv1.Role) error {
	if _, err := r.kube.RbacV1().Roles(r.ns).Get(ctx, role.Name, metav1.GetOptions{}); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading Role %s/%s: %w", r.ns, role.Name, err)
	}
	role.Namespace, role.Labels = r.ns, merge(role.Labels, r.labels())
	if _, err := r.kube.RbacV1().Roles(r.ns).Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the shipped Role %s/%s: %w", r.ns, role.Name, err)
	}
	if !r.ownNS {
		r.undo(func(ctx context.Context) error {
			return ignoreNotFound(r.kube.RbacV1().Roles(r.ns).Delete(ctx, role.Name, metav1.DeleteOptions{}))
		})
	}
	return nil
}

func (r *runner) undo(f func(context.Context) error) { r.created = append(r.created, f) }

// job is the runner Job: one pod, no retries, Pod Security "restricted", the suite's flags passed on.
func (r *runner) job() *batchv1.Job {
	args := append([]string{"run", "--artifacts=" + podArtifacts, "--hold-artifacts=" + r.opts.Hold.String()}, r.opts.SuiteArgs...)
	deadline := int64((r.opts.Timeout + r.opts.Hold + 5*time.Minute).Seconds())
	return &batchv1.Job{
		ObjectMeta: r.meta("gpuconform-runner-" + r.id),
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0), ActiveDeadlineSeconds: &deadline,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: r.labels()},
				Spec: corev1.PodSpec{
					ServiceAccountName: r.saName(), RestartPolicy: corev1.RestartPolicyNever,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: runnerContainer, Image: r.opts.Image, Args: args,
						Env: []corev1.EnvVar{{Name: "GPUCONFORM_RUN_ID", Value: r.id}, {Name: "HOME", Value: "/tmp"}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}},
						VolumeMounts: []corev1.VolumeMount{{Name: "artifacts", MountPath: podArtifacts}, {Name: "tmp", MountPath: "/tmp"}},
					}},
					Volumes: []corev1.Volume{{Name: "artifacts", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
}

// podStartLimit bounds the wait for the runner pod to start when no diagnosis ends it sooner.
const podStartLimit = 5 * time.Minute

// waitPodStarted waits for the Job's pod to run. The suite's own diagnosis of the Job ends the wait as
// soon as it is terminal (an image that can never be pulled, an admission policy refusing the pod, a
// taint or selector no node passes), as the suite's waits do; otherwise it gives up after podStartLimit
// with the diagnosis.
func (r *runner) waitPodStarted(ctx context.Context, job string) (string, error) {
	sel := metav1.ListOptions{LabelSelector: RunnerLabel + "=" + r.id}
	target := diagnose.Target{Kind: "Job", Namespace: r.ns, Name: job}
	deadline := time.Now().Add(podStartLimit)
	for {
		if pods, err := r.kube.CoreV1().Pods(r.ns).List(ctx, sel); err == nil {
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodPending {
					return p.Name, nil
				}
			}
		}
		res, err := diagnose.Run(ctx, diagnose.Clients{Kube: r.kube}, target)
		switch {
		case err == nil && res.Terminal:
			return "", fmt.Errorf("the runner Job %s/%s cannot start (image %s): %s", r.ns, job, r.opts.Image, res.String())
		case time.Now().After(deadline):
			why := "no diagnosis"
			if err == nil {
				why = res.String()
			}
			return "", fmt.Errorf("the runner Job %s/%s did not start within %s: %s", r.ns, job, podStartLimit, why)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// follow streams the pod's log to the runner's output until the pod says its artifacts are ready, then
// copies them; the stream is reopened if the connection drops.
func (r *runner) follow(ctx context.Context, pod string) (bool, error) {
	var since *metav1.Time
	for {
		opts := &corev1.PodLogOptions{Container: runnerContainer, Follow: true, SinceTime: since}
		stream, err := r.kube.CoreV1().Pods(r.ns).GetLogs(pod, opts).Stream(ctx)
		if err != nil {
			return false, fmt.Errorf("following the runner's log: %w", err)
		}
		sc := bufio.NewScanner(stream)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		ready := false
		for sc.Scan() {
			fmt.Fprintln(r.out, sc.Text())
			if strings.HasPrefix(sc.Text(), readyMarker) {
				ready = true
				break
			}
		}
		stream.Close()
		if ready {
			return true, r.fetch(ctx, pod)
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		p, err := r.kube.CoreV1().Pods(r.ns).Get(ctx, pod, metav1.GetOptions{})
		if err == nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
			return false, nil
		}
		since = &metav1.Time{Time: time.Now()}
	}
}

// fetch copies the pod's artifacts into the local artifacts directory, then tells the pod to exit.
func (r *runner) fetch(ctx context.Context, pod string) error {
	var tarball, errOut bytes.Buffer
	if err := r.exec(ctx, pod, []string{RunnerBinary, "artifacts", "pack", podArtifacts}, &tarball, &errOut); err != nil {
		return fmt.Errorf("copying the artifacts: %v: %s", err, errOut.String())
	}
	n, err := untar(&tarball, r.opts.Artifacts)
	if err != nil {
		return fmt.Errorf("unpacking the artifacts into %s: %w", r.opts.Artifacts, err)
	}
	fmt.Fprintf(r.out, "gpuconform-runner: %d artifact files copied into %s\n", n, r.opts.Artifacts)
	errOut.Reset()
	if err := r.exec(ctx, pod, []string{RunnerBinary, "artifacts", "release", podArtifacts}, io.Discard, &errOut); err != nil {
		return fmt.Errorf("releasing the runner pod: %v: %s", err, errOut.String())
	}
	return nil
}

// exec runs command in the runner container.
func (r *runner) exec(ctx context.Context, pod string, command []string, stdout, stderr io.Writer) error {
	req := r.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(r.ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: runnerContainer, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(r.rest, "POST", req.URL())
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
}

// waitExitCode waits for the pod to end and returns its container's exit code.
func (r *runner) waitExitCode(ctx context.Context, pod string) (int, error) {
	for {
		p, err := r.kube.CoreV1().Pods(r.ns).Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return reports.ExitNoGo, fmt.Errorf("the runner pod %s/%s vanished before it ended", r.ns, pod)
		}
		if err == nil {
			for _, cs := range p.Status.ContainerStatuses {
				if t := cs.State.Terminated; t != nil && cs.Name == runnerContainer {
					return int(t.ExitCode), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return reports.ExitNoGo, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// podState says how a pod ended, for errors.
func (r *runner) podState(ctx context.Context, pod string) string {
	p, err := r.kube.CoreV1().Pods(r.ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("phase %s, exit code %d, reason %s %s", p.Status.Phase, t.ExitCode, t.Reason, t.Message)
		}
	}
	return "phase " + string(p.Status.Phase) + " " + p.Status.Message
}

// cleanup deletes what the runner created, newest first, and then checks that nothing with its label is
// left.
func (r *runner) cleanup(ctx context.Context) error {
	var errs []error
	if r.ns != "" {
		bg := metav1.DeletePropagationBackground
		sel := metav1.ListOptions{LabelSelector: RunnerLabel + "=" + r.id}
		if err := r.kube.BatchV1().Jobs(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, sel); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
		if err := r.kube.CoreV1().Pods(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, sel); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	for i := len(r.created) - 1; i >= 0; i-- {
		if err := r.created[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if left := r.leftovers(ctx); len(left) > 0 {
		errs = append(errs, fmt.Errorf("left on the cluster: %s", strings.Join(left, ", ")))
	} else if len(errs) == 0 {
		fmt.Fprintf(r.out, "gpuconform-runner: cleaned up; nothing labelled %s=%s is left\n", RunnerLabel, r.id)
	}
	return errors.Join(errs...)
}

// leftovers lists the runner's objects still on the cluster (pods still terminating count).
func (r *runner) leftovers(ctx context.Context) []string {
	sel := metav1.ListOptions{LabelSelector: RunnerLabel + "=" + r.id}
	var left []string
	add := func(kind string, names []string) {
		for _, n := range names {
			left = append(left, kind+" "+n)
		}
	}
	if l, err := r.kube.CoreV1().Namespaces().List(ctx, sel); err == nil {
		add("Namespace", itemNames(l.Items, func(n corev1.Namespace) string { return n.Name }))
	}
	if l, err := r.kube.RbacV1().ClusterRoleBindings().List(ctx, sel); err == nil {
		add("ClusterRoleBinding", itemNames(l.Items, func(b rbacv1.ClusterRoleBinding) string { return b.Name }))
	}
	if l, err := r.kube.RbacV1().ClusterRoles().List(ctx, sel); err == nil {
		add("ClusterRole", itemNames(l.Items, func(b rbacv1.ClusterRole) string { return b.Name }))
	}
	if r.ns != "" && !r.ownNS {
		if l, err := r.kube.CoreV1().Pods(r.ns).List(ctx, sel); err == nil {
			add("Pod", itemNames(l.Items, func(p corev1.Pod) string { return r.ns + "/" + p.Name }))
		}
		if l, err := r.kube.BatchV1().Jobs(r.ns).List(ctx, sel); err == nil {
			add("Job", itemNames(l.Items, func(j batchv1.Job) string { return r.ns + "/" + j.Name }))
		}
		if l, err := r.kube.CoreV1().ServiceAccounts(r.ns).List(ctx, sel); err == nil {
			add("ServiceAccount", itemNames(l.Items, func(s corev1.ServiceAccount) string { return r.ns + "/" + s.Name }))
		}
		if l, err := r.kube.RbacV1().RoleBindings(r.ns).List(ctx, sel); err == nil {
			add("RoleBinding", itemNames(l.Items, func(b rbacv1.RoleBinding) string { return r.ns + "/" + b.Name }))
		}
		if l, err := r.kube.RbacV1().Roles(r.ns).List(ctx, sel); err == nil {
			add("Role", itemNames(l.Items, func(b rbacv1.Role) string { return r.ns + "/" + b.Name }))
		}
	}
	return left
}

// deleteNamespace deletes the runner's namespace and waits until it is gone.
func (r *runner) deleteNamespace(ctx context.Context, name string) error {
	if err := ignoreNotFound(r.kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})); err != nil {
		return err
	}
	for {
		if _, err := r.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s still terminating: %w", name, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func itemNames[T any](items []T, name func(T) string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = name(it)
	}
	return out
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// merge is a copy of a with b's entries added.
func merge(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

// untar unpacks a tar stream into dir (replacing the files of an earlier run), refusing paths that
// leave it.
func untar(r io.Reader, dir string) (int, error) {
	reports.RemoveRunArtifacts(dir)
	tr := tar.NewReader(r)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		clean := filepath.Clean(h.Name)
		if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return n, fmt.Errorf("refusing %q: outside the artifacts directory", h.Name)
		}
		dst := filepath.Join(dir, clean)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return n, err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return n, err
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return n, err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return n, err
			}
			n++
		}
	}
}

// artifactsCommand is the pod's side of the copy: `gpuconform artifacts pack DIR` writes DIR as a tar to
// stdout; `gpuconform artifacts release DIR` tells the waiting run it may exit.
func artifactsCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || (args[0] != "pack" && args[0] != "release") {
		fmt.Fprintln(stderr, "usage: gpuconform artifacts pack|release DIR")
		return 2
	}
	dir := args[1]
	if args[0] == "release" {
		if err := os.WriteFile(filepath.Join(dir, fetchedFile), nil, 0o644); err != nil {
			fmt.Fprintf(stderr, "gpuconform artifacts release: %v\n", err)
			return 1
		}
		return 0
	}
	tw := tar.NewWriter(stdout)
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || path == dir || !info.Mode().IsRegular() && !info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == fetchedFile {
			return nil
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform artifacts pack: %v\n", err)
		return 1
	}
	return 0
}

// holdArtifacts is the end of a run in the runner pod: say the artifacts are ready and wait, up to hold,
// for the runner to copy them.
func holdArtifacts(dir string, code int, hold time.Duration, stdout io.Writer) {
	fmt.Fprintf(stdout, "%s in %s (exit code %d); waiting up to %s for them to be copied\n", readyMarker, dir, code, hold)
	deadline := time.Now().Add(hold)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(dir, fetchedFile)); err == nil {
			return
		}
		time.Sleep(time.Second)
	}
	fmt.Fprintf(stdout, "gpuconform-runner: nobody copied the artifacts within %s\n", hold)
}
