package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/diagnose"
)

// podStartLimit bounds the wait for the runner pod to start when no diagnosis ends it sooner.
const podStartLimit = 5 * time.Minute

// job is the runner Job: one pod, no retries, Pod Security "restricted", the suite's flags passed on.
func (r *Runner) job() *batchv1.Job {
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
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](uid), RunAsGroup: ptr.To[int64](uid),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: container, Image: r.opts.Image, Args: args,
						Env: []corev1.EnvVar{{Name: "GPUCONFORM_RUN_ID", Value: r.id}, {Name: "HOME", Value: "/tmp"}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						Resources: corev1.ResourceRequirements{
							// Requests equal limits, as every pod of the suite's, so a namespace whose quota
							// covers limits admits the runner too.
							Requests: r.resources(), Limits: r.resources()},
						VolumeMounts: []corev1.VolumeMount{{Name: "artifacts", MountPath: podArtifacts}, {Name: "tmp", MountPath: "/tmp"}},
					}},
					Volumes: []corev1.Volume{{Name: "artifacts", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
}

// runnerMemory is the runner pod's memory for one suite process, and runnerMemoryPerProc what each further
// Ginkgo process adds (--procs: the processes each hold their own clients and informers).
var runnerMemory, runnerMemoryPerProc = resource.MustParse("1Gi"), resource.MustParse("512Mi")

// resources are the runner container's requests, and its limits: 500m of CPU (the suite mostly waits on
// the cluster) and runnerMemory, plus runnerMemoryPerProc for each process beyond the first.
func (r *Runner) resources() corev1.ResourceList {
	mem := runnerMemory.DeepCopy()
	for range max(r.opts.Procs, 1) - 1 {
		mem.Add(runnerMemoryPerProc)
	}
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: mem}
}

// waitPodStarted waits for the Job's pod to run. The suite's own diagnosis of the Job ends the wait as
// soon as it is terminal (an image that can never be pulled, an admission policy refusing the pod, a
// taint or selector no node passes), as the suite's waits do; otherwise it gives up after podStartLimit
// with the diagnosis.
func (r *Runner) waitPodStarted(ctx context.Context, job string) (string, error) {
	sel := metav1.ListOptions{LabelSelector: Label + "=" + r.id}
	target := diagnose.Target{Kind: "Job", Namespace: r.ns, Name: job}
	var started, why string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, podStartLimit, true, func(ctx context.Context) (bool, error) {
		if pods, err := r.kube.CoreV1().Pods(r.ns).List(ctx, sel); err == nil {
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodPending {
					started = p.Name
					return true, nil
				}
			}
		}
		res, err := diagnose.Run(ctx, diagnose.Clients{Kube: r.kube}, target)
		switch {
		case err != nil:
			why = "no diagnosis"
		case res.Terminal:
			return false, fmt.Errorf("the runner Job %s/%s cannot start (image %s): %s", r.ns, job, r.opts.Image, res.String())
		default:
			why = res.String()
		}
		return false, nil
	})
	switch {
	case err == nil:
		return started, nil
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return "", fmt.Errorf("the runner Job %s/%s did not start within %s: %s", r.ns, job, podStartLimit, why)
	}
	return "", err
}

// waitExitCode waits for the pod to end and returns its container's exit code.
func (r *Runner) waitExitCode(ctx context.Context, pod string) (int, error) {
	code := 0
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := r.kube.CoreV1().Pods(r.ns).Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("the runner pod %s/%s vanished before it ended", r.ns, pod)
		}
		if err != nil {
			return false, nil //nolint:nilerr // any other read error is retried until the pod ends or ctx does
		}
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && cs.Name == container {
				code = int(t.ExitCode)
				return true, nil
			}
		}
		return false, nil
	})
	return code, err
}

// podState says how a pod ended, for errors.
func (r *Runner) podState(ctx context.Context, pod string) string {
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
