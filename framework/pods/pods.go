// Package pods waits on the suite's Jobs and Pods and reads the workload image's reports from them.
package pods

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/wait"
)

// OfJob lists the Job's pods (by the controller's job-name label).
func OfJob(ctx context.Context, env *testenv.Env, job *batchv1.Job) ([]corev1.Pod, error) {
	l, err := env.Clients.Kube.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job.Name})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// ExpectJobPodStarted waits until the Job has a pod bound to a node with its workload container started
// (running or already terminated) and returns it. It reads the Job's current pods at every check, not the
// first one it saw: a pod the Job controller (or Kueue's eviction) replaced is left for its successor,
// and the wait's failure names the pods that went and how, so that "not found" is never the answer.
func ExpectJobPodStarted(ctx context.Context, env *testenv.Env, job *batchv1.Job) *corev1.Pod {
	ginkgo.GinkgoHelper()
	var pod *corev1.Pod
	gone := map[string]string{} // pods of the Job seen before that are no longer current, and how they went
	env.Wait.ForProgress(ctx, fmt.Sprintf("a pod of Job %s/%s to start", job.Namespace, job.Name),
		wait.Target{Kind: "Job", Namespace: job.Namespace, Name: job.Name}, env.Timeouts.PodStart, func(g gomega.Gomega) {
			list, err := env.ListPods(ctx, job.Namespace, labels.SelectorFromSet(labels.Set{batchv1.JobNameLabel: job.Name}))
			g.Expect(err).NotTo(gomega.HaveOccurred())
			p, replaced := CurrentJobPod(list, gone)
			g.Expect(p).NotTo(gomega.BeNil(), "Job %s/%s has no current pod%s", job.Namespace, job.Name, replaced)
			pod = p
			g.Expect(p.Spec.NodeName).NotTo(gomega.BeEmpty(), "pod %s is not scheduled%s", p.Name, replaced)
			g.Expect(workloadStarted(p)).To(gomega.BeTrue(), "pod %s: container %s has not started (phase %s%s)%s",
				p.Name, fixtures.WorkloadContainer, p.Status.Phase, waitingReason(p), replaced)
		})
	return pod
}

// CurrentJobPod is the Job's pod a wait should follow among list: a started one first, then the newest
// that is neither being deleted nor failed (a failed pod of a Job with retries left is replaced); with
// none such, the newest failed one, which is then the answer. gone keeps the pods seen before that are no
// longer current, with how they went; replaced says so for a failure message ("" when none went).
func CurrentJobPod(list []corev1.Pod, gone map[string]string) (*corev1.Pod, string) {
	var live, failed []*corev1.Pod
	for i := range list {
		p := &list[i]
		switch {
		case p.DeletionTimestamp != nil:
			gone[p.Name] = "being deleted" + waitingReason(p)
		case p.Status.Phase == corev1.PodFailed:
			failed = append(failed, p)
		default:
			live = append(live, p)
		}
	}
	newestFirst := func(a, b *corev1.Pod) int { return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) }
	slices.SortFunc(failed, newestFirst)
	if len(live) > 0 {
		for _, p := range failed {
			gone[p.Name] = "failed: " + cmp.Or(p.Status.Reason, "its container exited non-zero")
		}
	} else if len(failed) > 0 {
		live = failed[:1]
	}
	slices.SortFunc(live, func(a, b *corev1.Pod) int {
		if sa, sb := workloadStarted(a), workloadStarted(b); sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		return newestFirst(a, b)
	})
	replaced := ""
	if len(gone) > 0 {
		var went []string
		for _, name := range slices.Sorted(maps.Keys(gone)) {
			went = append(went, name+" "+gone[name])
		}
		replaced = "; replaced before it: " + strings.Join(went, ", ")
	}
	if len(live) == 0 {
		return nil, replaced
	}
	return live[0], replaced
}

// waitingReason is ", <reason>: <message>" of the workload container's waiting state (ErrImagePull, …).
func waitingReason(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			if w.Message == "" {
				return ", " + w.Reason
			}
			return ", " + w.Reason + ": " + w.Message
		}
	}
	return ""
}

// ExpectPodRunning waits until the pod runs on a node and returns it fresh.
func ExpectPodRunning(ctx context.Context, env *testenv.Env, ns, name string) *corev1.Pod {
	ginkgo.GinkgoHelper()
	var pod *corev1.Pod
	env.Wait.ForProgress(ctx, fmt.Sprintf("pod %s/%s to run", ns, name), wait.Target{Kind: "Pod", Namespace: ns, Name: name}, env.Timeouts.PodStart, func(g gomega.Gomega) {
		var err error
		pod, err = env.GetPod(ctx, ns, name)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(pod.Spec.NodeName).NotTo(gomega.BeEmpty(), "pod is not scheduled")
		g.Expect(pod.Status.Phase).To(gomega.Equal(corev1.PodRunning), "pod phase")
	})
	return pod
}

// ExpectPodFinished waits until the pod (restart policy Never) has started on a node, within PodStart, and
// then until it has succeeded or failed, within JobRun, and returns it fresh. Either outcome ends the wait at
// once: the caller judges it (a failed pod is the answer, not a reason to wait on).
func ExpectPodFinished(ctx context.Context, env *testenv.Env, ns, name string) *corev1.Pod {
	ginkgo.GinkgoHelper()
	var pod *corev1.Pod
	get := func(g gomega.Gomega) {
		var err error
		pod, err = env.GetPod(ctx, ns, name)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(pod.Spec.NodeName).NotTo(gomega.BeEmpty(), "pod is not scheduled")
	}
	target := wait.Target{Kind: "Pod", Namespace: ns, Name: name}
	env.Wait.ForProgress(ctx, fmt.Sprintf("pod %s/%s to start", ns, name), target, env.Timeouts.PodStart, func(g gomega.Gomega) {
		get(g)
		g.Expect(pod.Status.Phase).To(gomega.BeElementOf(corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed), "pod phase")
	})
	env.Wait.ForProgress(ctx, fmt.Sprintf("pod %s/%s to finish", ns, name), target, env.Timeouts.JobRun, func(g gomega.Gomega) {
		get(g)
		g.Expect(pod.Status.Phase).To(gomega.BeElementOf(corev1.PodSucceeded, corev1.PodFailed), "pod phase")
	})
	return pod
}

// LogTail is the last n non-empty lines of a container's log (all of them when it has fewer).
func LogTail(ctx context.Context, env *testenv.Env, ns, name, container string, n int) ([]string, error) {
	raw, err := env.Clients.Kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the log of container %s of pod %s/%s: %w", container, ns, name, err)
	}
	var lines []string
	for l := range strings.SplitSeq(string(raw), "\n") {
		if l = strings.TrimRight(l, "\r"); strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines[max(0, len(lines)-n):], nil
}

// Terminated is how a container of the pod last ended; nil when it has not.
func Terminated(pod *corev1.Pod, container string) *corev1.ContainerStateTerminated {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != container {
			continue
		}
		if cs.State.Terminated != nil {
			return cs.State.Terminated
		}
		return cs.LastTerminationState.Terminated
	}
	return nil
}

// ExpectJobComplete waits for the Job's Complete condition.
func ExpectJobComplete(ctx context.Context, env *testenv.Env, job *batchv1.Job) {
	ginkgo.GinkgoHelper()
	env.Wait.ForProgress(ctx, fmt.Sprintf("Job %s/%s to complete", job.Namespace, job.Name), wait.Target{Kind: "Job", Namespace: job.Namespace, Name: job.Name},
		env.Timeouts.JobRun, func(g gomega.Gomega) {
			got, err := env.GetJob(ctx, job.Namespace, job.Name)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			for _, c := range got.Status.Conditions {
				g.Expect(c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue).To(gomega.BeFalse(), "Job failed: %s: %s", c.Reason, c.Message)
			}
			complete := false
			for _, c := range got.Status.Conditions {
				complete = complete || (c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue)
			}
			g.Expect(complete).To(gomega.BeTrue(), "Job not complete: active=%d succeeded=%d failed=%d", got.Status.Active, got.Status.Succeeded, got.Status.Failed)
		})
}

// ExpectProbeReport waits until the pod's workload container has printed its probe report (termination
// message of the current or last run, else logs) and returns it.
func ExpectProbeReport(ctx context.Context, env *testenv.Env, ns, name string) gpu.ProbeReport {
	ginkgo.GinkgoHelper()
	return ExpectContainerProbeReport(ctx, env, ns, name, fixtures.WorkloadContainer)
}

// ExpectContainerProbeReport waits for the probe report of one container (init containers included) of
// pod ns/name: from its termination message when it has finished, else from its log.
func ExpectContainerProbeReport(ctx context.Context, env *testenv.Env, ns, name, container string) gpu.ProbeReport {
	ginkgo.GinkgoHelper()
	var report gpu.ProbeReport
	env.Wait.ForProgress(ctx, fmt.Sprintf("the probe report of container %s of pod %s/%s", container, ns, name), wait.Target{Kind: "Pod", Namespace: ns, Name: name}, env.Timeouts.JobRun, func(g gomega.Gomega) {
		pod, err := env.GetPod(ctx, ns, name)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		report, err = probeReport(ctx, env, pod, container)
		g.Expect(err).NotTo(gomega.HaveOccurred())
	})
	return report
}

// ExpectJobProbeReport is ExpectProbeReport for a pod of job: when that pod goes (the Job controller or
// Kueue's eviction replaced it), the wait follows the Job's current pod instead of reading a pod that is
// not found, and says which pod replaced which and why. It returns the pod the report came from.
func ExpectJobProbeReport(ctx context.Context, env *testenv.Env, job *batchv1.Job, first *corev1.Pod) (*corev1.Pod, gpu.ProbeReport) {
	ginkgo.GinkgoHelper()
	var report gpu.ProbeReport
	pod, gone := first, map[string]string{}
	env.Wait.ForProgress(ctx, fmt.Sprintf("the probe report of a pod of Job %s/%s", job.Namespace, job.Name), wait.Target{Kind: "Job", Namespace: job.Namespace, Name: job.Name}, env.Timeouts.JobRun, func(g gomega.Gomega) {
		cur, err := env.GetPod(ctx, job.Namespace, pod.Name)
		if apierrors.IsNotFound(err) || err == nil && cur.DeletionTimestamp != nil {
			gone[pod.Name] = "deleted"
			list, lerr := env.ListPods(ctx, job.Namespace, labels.SelectorFromSet(labels.Set{batchv1.JobNameLabel: job.Name}))
			g.Expect(lerr).NotTo(gomega.HaveOccurred())
			next, replaced := CurrentJobPod(list, gone)
			g.Expect(next).NotTo(gomega.BeNil(), "pod %s of Job %s/%s went and the Job has no current pod%s", pod.Name, job.Namespace, job.Name, replaced)
			pod, cur, err = next, next, nil
			g.Expect(workloadStarted(cur)).To(gomega.BeTrue(), "pod %s: container %s has not started (phase %s%s)%s",
				cur.Name, fixtures.WorkloadContainer, cur.Status.Phase, waitingReason(cur), replaced)
		}
		g.Expect(err).NotTo(gomega.HaveOccurred())
		pod = cur
		report, err = probeReport(ctx, env, cur, fixtures.WorkloadContainer)
		g.Expect(err).NotTo(gomega.HaveOccurred())
	})
	return pod, report
}

// probeReport reads a container's probe report: its termination message when it has finished, else its log.
func probeReport(ctx context.Context, env *testenv.Env, pod *corev1.Pod, container string) (gpu.ProbeReport, error) {
	for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		if cs.Name != container {
			continue
		}
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil && t.Message != "" {
				if r, err := gpu.ParseProbe(t.Message); err == nil && !r.Truncated {
					return r, nil
				}
			}
		}
	}
	return reportFromLog(ctx, env.Clients.Kube, pod.Namespace, pod.Name, container, followFor)
}

// followFor bounds one follow of a container's log for its probe report (reportFromLog): the wait's
// diagnosis runs between two follows, so a probe that never reports is judged at least this often.
const followFor = 10 * time.Second

// reportFromLog reads the probe report from the log of a container (one that has started), following the
// log for up to within while the report has not come: it returns as soon as the report's line is whole.
// One request, however long the probe takes to print; a poll would read the whole log again at each try,
// and see the report only at its next try after it came (up to the wait's fallback, 2 s, later). The log
// ending first (the container exited) or within passing is an error with what the container printed.
func reportFromLog(ctx context.Context, cs kubernetes.Interface, ns, name, container string, within time.Duration) (gpu.ProbeReport, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	stream, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: container, Follow: true}).Stream(ctx)
	if err != nil {
		return gpu.ProbeReport{}, fmt.Errorf("reading the log of container %s of pod %s/%s: %w", container, ns, name, err)
	}
	defer stream.Close()
	var text bytes.Buffer
	buf := make([]byte, 32*1024)
	for {
		n, readErr := stream.Read(buf)
		text.Write(buf[:n])
		if bytes.IndexByte(buf[:n], '\n') >= 0 || readErr != nil {
			if r, err := gpu.ParseProbe(text.String()); err == nil {
				return r, nil
			} else if readErr != nil {
				if !errors.Is(readErr, io.EOF) {
					err = fmt.Errorf("%w (the log stopped: %w)", err, readErr)
				}
				return gpu.ProbeReport{}, err
			}
		}
	}
}

// workloadStarted reports whether the workload container has started (running or already terminated).
func workloadStarted(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == fixtures.WorkloadContainer {
			return cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil
		}
	}
	return false
}
