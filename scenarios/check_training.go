package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/checkpoints"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/timeline"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/internal/workload/train"
)

// training describes one checkpointing training Job (`gpu-workload train`) of the resilience scenarios.
type training struct {
	Name string
	// Steps of StepTime each, a checkpoint every Every steps; WriteTime simulates a slow checkpoint write.
	Steps, Every        int
	StepTime, WriteTime time.Duration
	// ResumedStepTime paces an attempt that resumed from a checkpoint (0: StepTime); ResumedMinTime is the
	// least such an attempt runs (0: no floor).
	ResumedStepTime, ResumedMinTime time.Duration
	// Storage is where checkpoints go; none: an emptyDir, which a replacement pod does not see.
	Storage checkpoints.Storage
	// Queue and Priority submit it through Kueue (LocalQueue, WorkloadPriorityClass).
	Queue, Priority string
	// Grace is the pod's termination grace period (0: the fixture's default).
	Grace time.Duration
	// EvictAfter is the tolerationSeconds for the not-ready/unreachable taints (0: the API server's).
	EvictAfter time.Duration
	Nodes      []string
	Devices    int
}

// checkpointClaim is the PersistentVolumeClaim of a spec's checkpoint storage.
const checkpointClaim = "checkpoints"

// ensureCheckpointStorage creates the spec's checkpoint PersistentVolumeClaim (and for a shared directory
// its PersistentVolume) once; it returns false when there is no storage that outlives a node.
func ensureCheckpointStorage(ctx context.Context, env *testenv.Env, ns string, s checkpoints.Storage, created *bool) bool {
	ginkgo.GinkgoHelper()
	if s.None() {
		return false
	}
	if !*created {
		ginkgo.By("offering checkpoint storage that outlives a node: " + s.String())
		for _, o := range s.Objects(env.Factory, ns, checkpointClaim) {
			env.Create(ctx, o)
		}
		*created = true
	}
	return true
}

// build returns the Job builder and the work ID its checkpoints are kept under.
func (t training) build(env *testenv.Env, ns string, path gpu.Path) (*fixtures.GPUJobWrapper, string) {
	devices := max(t.Devices, 1)
	w := env.Factory.GPUJob(t.Name, ns).Path(path).Devices(devices).BackoffLimit(4)
	if len(t.Nodes) > 0 {
		w.OnNodes(t.Nodes...)
	}
	if t.EvictAfter > 0 {
		w.EvictAfter(t.EvictAfter)
	}
	if t.Grace > 0 {
		w.GracePeriod(t.Grace)
	}
	workID := ns + "-" + w.Obj().Name
	if t.Storage.None() {
		w.ScratchDir("checkpoints", trainDir)
	} else {
		w.PersistentVolume(checkpointClaim, trainDir)
	}
	args := []string{"train", "--steps", strconv.Itoa(t.Steps), "--step-duration", t.StepTime.String(), "--checkpoint-every", strconv.Itoa(t.Every),
		"--checkpoint-dir", trainDir + "/" + workID, "--work-id", workID}
	if t.WriteTime > 0 {
		args = append(args, "--checkpoint-write-time", t.WriteTime.String())
	}
	if t.ResumedStepTime > 0 {
		args = append(args, "--resumed-step-duration", t.ResumedStepTime.String())
	}
	if t.ResumedMinTime > 0 {
		args = append(args, "--resumed-min-duration", t.ResumedMinTime.String())
	}
	w.Args(args...)
	if t.Queue != "" {
		w.Queue(t.Queue)
	}
	if t.Priority != "" {
		w.PriorityClass(t.Priority)
	}
	return w, workID
}

func (t training) String() string {
	return fmt.Sprintf("%d steps of %s, a checkpoint every %d", t.Steps, t.StepTime, t.Every)
}

// The failure scenario's training job: long enough to be interrupted after a checkpoint and to finish
// soon after it resumes. Steps are seconds of simulated work; a checkpoint every trainEvery steps.
const (
	// trainSteps outlasts the fault: the device-plugin device-fault spec fails the pod only after it read
	// the pod's device (a helper pod) and saw the device withdrawn, which under load takes half a minute;
	// a job done by then would resume from its last step with nothing left to run.
	trainSteps    = 60
	trainEvery    = 5
	trainStepTime = time.Second
	// trainResumedStepTime paces the replacement once it resumed; trainResumedMinTime below is what keeps
	// it running long enough to be read.
	trainResumedStepTime = 500 * time.Millisecond
	// trainResumedMinTime is the least the replacement runs once it resumed, however late the fault landed:
	// its devices are read from its kubelet (a helper pod on its node; the kubelet lists active pods only)
	// after it is seen running, each of which takes tens of seconds on a loaded cluster.
	trainResumedMinTime = 45 * time.Second
	trainDir            = "/checkpoints"
)

// expectCheckpoint waits until the pod's training log shows a checkpoint at step atLeast or later and
// returns the newest checkpointed step.
func expectCheckpoint(ctx context.Context, env *testenv.Env, ns, pod string, atLeast int) int {
	ginkgo.GinkgoHelper()
	var step int
	env.Wait.ForProgress(ctx, fmt.Sprintf("pod %s/%s to checkpoint step %d", ns, pod, atLeast), wait.Target{Kind: "Pod", Namespace: ns, Name: pod},
		time.Duration(atLeast+trainEvery)*trainStepTime+env.Timeouts.PodStart, func(g gomega.Gomega) {
			var err error
			step, err = lastCheckpoint(ctx, env, ns, pod)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(step).To(gomega.BeNumerically(">=", atLeast), "newest checkpoint")
		})
	return step
}

// expectReplacement waits for a pod of the Job other than the lost ones to start, and returns it.
func expectReplacement(ctx context.Context, env *testenv.Env, job *batchv1.Job, lost ...string) *corev1.Pod {
	ginkgo.GinkgoHelper()
	var pod *corev1.Pod
	env.Wait.ForProgress(ctx, fmt.Sprintf("a replacement pod of Job %s/%s to start", job.Namespace, job.Name), wait.Target{Kind: "Job", Namespace: job.Namespace, Name: job.Name},
		env.Timeouts.PodStart, func(g gomega.Gomega) {
			list, err := pods.OfJob(ctx, env, job)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			pod = nil
			for i := range list {
				p := &list[i]
				if slices.Contains(lost, p.Name) || p.DeletionTimestamp != nil {
					continue
				}
				pod = p
			}
			g.Expect(pod).NotTo(gomega.BeNil(), "Job %s/%s has no pod besides %v", job.Namespace, job.Name, lost)
			g.Expect(pod.Spec.NodeName).NotTo(gomega.BeEmpty(), "replacement %s is not scheduled", pod.Name)
			started := false
			for _, cs := range pod.Status.ContainerStatuses {
				started = started || cs.Name == fixtures.WorkloadContainer && (cs.State.Running != nil || cs.State.Terminated != nil)
			}
			g.Expect(started).To(gomega.BeTrue(), "replacement %s has not started (phase %s)", pod.Name, pod.Status.Phase)
		})
	return pod
}

// trainSummary reads the training summary from the pod's termination message.
func trainSummary(ctx context.Context, env *testenv.Env, ns, pod string) train.Summary {
	ginkgo.GinkgoHelper()
	var sum train.Summary
	env.Wait.For(ctx, fmt.Sprintf("the training summary of pod %s/%s", ns, pod), wait.Target{Kind: "Pod", Namespace: ns, Name: pod}, env.Timeouts.JobRun, func(g gomega.Gomega) {
		p, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		msg := ""
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == fixtures.WorkloadContainer && cs.State.Terminated != nil {
				msg = cs.State.Terminated.Message
			}
		}
		g.Expect(msg).NotTo(gomega.BeEmpty(), "no termination message yet")
		g.Expect(json.Unmarshal([]byte(lastLine(msg)), &sum)).To(gomega.Succeed(), "termination message: %s", msg)
	})
	return sum
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }

// lastCheckpoint reads the newest checkpointed step from the pod's log.
func lastCheckpoint(ctx context.Context, env *testenv.Env, ns, pod string) (int, error) {
	raw, err := env.Clients.Kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: fixtures.WorkloadContainer}).DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	step := 0
	for _, e := range timeline.ParseProgress(pod, string(raw)) {
		if e.Kind != timeline.Checkpoint {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(e.Detail, "step %d", &n); err == nil && n > step {
			step = n
		}
	}
	return step, nil
}

// The preempted training job: long enough to be preempted after a checkpoint and to finish soon after it
// is re-admitted; the grace period leaves its SIGTERM checkpoint ample time.
const (
	preemptSteps = 30
	preemptGrace = 30 * time.Second
	// preemptStepTime keeps the preempted job short: it is not lost to a node, so its pace only sets how
	// long it runs.
	preemptStepTime = 500 * time.Millisecond
	// preemptResumedStepTime paces the re-admitted job once it resumed from its checkpoint: nothing reads
	// it while it runs, the resume is judged from its first step and its summary.
	preemptResumedStepTime = 100 * time.Millisecond
)
