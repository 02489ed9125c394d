package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/checkpoints"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/queues"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/internal/workload/gang"
)

// The gang's training: lock-step steps (a step completes only when every worker contributed), a
// checkpoint every gangEvery steps. A worker that hears nothing from its peers for gangPeerTimeout stops.
const (
	gangSteps = 20
	// gangFailSteps outlasts the fault's own latency: a device plugin's health report reaches the node's
	// allocatable with the kubelet's next status update (10 s), and a gang that finished before its worker
	// failed proves nothing.
	gangFailSteps = 100
	// gangResumedStepTime paces the failed-worker gang once it resumed: its 100 steps must outlast the
	// fault, not run as long again after it (the restarted workers' devices are read as they start). It runs
	// at least trainResumedMinTime too: restarted worker 1's device is read from its kubelet once the whole
	// gang runs again, which can be late in a fast gang's run.
	gangResumedStepTime = 200 * time.Millisecond
	gangEvery           = 5
	gangStepTime        = 500 * time.Millisecond
	gangPeerTimeout     = 20 * time.Second
	// gangObserve is how long a gang that only partly fits is watched where Kueue's waitForPodsReady is
	// off or unknown: long enough for any admission mechanism to have withdrawn it.
	gangObserve = 60 * time.Second
	// gangRecheck is the time between two looks at a gang that only partly fits.
	gangRecheck = 2 * time.Second
)

// gangRun is one submitted gang.
type gangRun struct {
	job     *batchv1.Job
	builder *fixtures.GangJobWrapper
	workID  string
	lq      string
}

// gangShape is what a spec submits.
type gangShape struct {
	name             string
	workers, devices int
	placement        fixtures.Placement
	nodes            []string
	steps            int
	quota            int // device quota of its ClusterQueue (0: workers × devices)
	storage          checkpoints.Storage
	evictAfter       time.Duration
	resumedStep      time.Duration // the pace of a resumed attempt (0: gangStepTime)
	resumedMin       time.Duration // the least a resumed attempt runs (0: no floor)
	localQueue       string        // the user's LocalQueue to submit to ("": one of its own)
}

// submitGang creates the gang's queue and checkpoint storage, and the gang.
func submitGang(ctx context.Context, env *testenv.Env, path gpu.Path, ns string, sh gangShape) gangRun {
	ginkgo.GinkgoHelper()
	quota := sh.quota
	if quota == 0 {
		quota = sh.workers * sh.devices
	}
	lq := queues.Setup(ctx, env, queues.SetupInput{Namespace: ns, ExistingLocalQueue: sh.localQueue, Quota: queues.QuotaFor(path.QuotaResource(), quota)})
	w := env.Factory.GangJob(sh.name, ns, sh.workers).Placement(sh.placement)
	w.Path(path).Devices(sh.devices).Queue(lq).OnNodes(sh.nodes...).BackoffLimit(int32(4 * sh.workers))
	workID := ns + "-" + sh.name
	dir := trainDir + "/" + workID
	if sh.storage.None() {
		w.ScratchDir("checkpoints", trainDir)
	} else {
		created := false
		ensureCheckpointStorage(ctx, env, ns, sh.storage, &created)
		w.PersistentVolume(checkpointClaim, trainDir)
	}
	if sh.evictAfter > 0 {
		w.EvictAfter(sh.evictAfter)
	}
	args := []string{"--steps", strconv.Itoa(sh.steps), "--step-duration", gangStepTime.String(), "--checkpoint-every", strconv.Itoa(gangEvery),
		"--checkpoint-dir", dir, "--work-id", workID, "--peer-timeout", gangPeerTimeout.String()}
	if sh.resumedStep > 0 {
		args = append(args, "--resumed-step-duration", sh.resumedStep.String())
	}
	if sh.resumedMin > 0 {
		args = append(args, "--resumed-min-duration", sh.resumedMin.String())
	}
	w.Args(w.GangArgs(args...)...)
	obj := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	ginkgo.By(fmt.Sprintf("submitting gang %s: %s, through LocalQueue %s", sh.name, w, lq))
	return gangRun{job: env.Create(ctx, obj).(*batchv1.Job), builder: w, workID: workID, lq: lq}
}

// expectOneWorkload checks the gang is one Workload of one pod set counting every worker.
func expectOneWorkload(ctx context.Context, env *testenv.Env, job *batchv1.Job, workers int) *kueue.Workload {
	ginkgo.GinkgoHelper()
	wl, err := queues.WorkloadFor(ctx, env, job)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(wl).NotTo(gomega.BeNil(), "Job %s/%s has no Workload", job.Namespace, job.Name)
	count := int32(0)
	for _, ps := range wl.Spec.PodSets {
		count += ps.Count
	}
	gomega.Expect(count).To(gomega.Equal(int32(workers)), "Workload %s counts %d pods for a gang of %d workers: Kueue would admit it in parts", wl.Name, count, workers)
	return wl
}

// gangWorkers are a gang's live pods by completion index (the newest pod of each index).
func gangWorkers(ctx context.Context, env *testenv.Env, job *batchv1.Job) (map[int]*corev1.Pod, error) {
	list, err := pods.OfJob(ctx, env, job)
	if err != nil {
		return nil, err
	}
	return workersOf(list, nil), nil
}

// waitingGangWorkers is gangWorkers inside a wait: from the spec's informers (testenv.Env.ListPods).
func waitingGangWorkers(ctx context.Context, env *testenv.Env, job *batchv1.Job, skip ...string) (map[int]*corev1.Pod, error) {
	list, err := env.ListPods(ctx, job.Namespace, k8slabels.SelectorFromSet(k8slabels.Set{batchv1.JobNameLabel: job.Name}))
	if err != nil {
		return nil, err
	}
	return workersOf(list, skip), nil
}

// workersOf are the gang's workers among its Job's pods, by index: the newest pod of each index that is
// not being deleted, none of skip.
func workersOf(list []corev1.Pod, skip []string) map[int]*corev1.Pod {
	out := map[int]*corev1.Pod{}
	for i := range list {
		p := &list[i]
		if slices.Contains(skip, p.Name) || p.DeletionTimestamp != nil {
			continue
		}
		idx, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
		if err != nil {
			continue
		}
		if cur, ok := out[idx]; !ok || p.CreationTimestamp.After(cur.CreationTimestamp.Time) {
			out[idx] = p
		}
	}
	return out
}

// workerStart is when the pod's workload container started (zero when it has not).
func workerStart(p *corev1.Pod) time.Time {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != fixtures.WorkloadContainer {
			continue
		}
		switch {
		case cs.State.Running != nil:
			return cs.State.Running.StartedAt.Time
		case cs.State.Terminated != nil:
			return cs.State.Terminated.StartedAt.Time
		}
	}
	return time.Time{}
}

// expectGangStarted waits until every worker of the gang (one per completion, none of skip) has started, and returns them
// by index with the start skew (last worker's start − first's).
func expectGangStarted(ctx context.Context, env *testenv.Env, job *batchv1.Job, skip ...string) (map[int]*corev1.Pod, time.Duration) {
	ginkgo.GinkgoHelper()
	workers := int(ptr.Deref(job.Spec.Completions, 0))
	var got map[int]*corev1.Pod
	env.Wait.ForProgress(ctx, fmt.Sprintf("all %d workers of gang %s/%s to start", workers, job.Namespace, job.Name), wait.Target{Kind: "Job", Namespace: job.Namespace, Name: job.Name},
		env.Timeouts.PodStart, func(g gomega.Gomega) {
			var err error
			got, err = waitingGangWorkers(ctx, env, job, skip...)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			for i := range workers {
				p, ok := got[i]
				g.Expect(ok).To(gomega.BeTrue(), "worker %d has no pod", i)
				g.Expect(workerStart(p).IsZero()).To(gomega.BeFalse(), "worker %d (%s) has not started (phase %s, node %q)", i, p.Name, p.Status.Phase, p.Spec.NodeName)
			}
		})
	first, last := time.Time{}, time.Time{}
	for _, p := range got {
		at := workerStart(p)
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	return got, last.Sub(first)
}

// workerSummary reads a terminated worker's summary.
func workerSummary(ctx context.Context, env *testenv.Env, ns, pod string) gang.Summary {
	ginkgo.GinkgoHelper()
	var sum gang.Summary
	env.Wait.For(ctx, fmt.Sprintf("the gang summary of worker pod %s/%s", ns, pod), wait.Target{Kind: "Pod", Namespace: ns, Name: pod}, env.Timeouts.JobRun, func(g gomega.Gomega) {
		p, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		msg := ""
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == fixtures.WorkloadContainer && cs.State.Terminated != nil {
				msg = cs.State.Terminated.Message
			}
		}
		g.Expect(msg).NotTo(gomega.BeEmpty(), "worker %s has not terminated with a message", pod)
		g.Expect(json.Unmarshal([]byte(lastLine(msg)), &sum)).To(gomega.Succeed(), "termination message: %s", msg)
	})
	return sum
}

// expectWorkersDevices reads each worker's devices from the path's authority: each holds exactly its
// devices, no device is held by two workers, and the workers are placed as asked.
func expectWorkersDevices(ctx context.Context, env *testenv.Env, path gpu.Path, workers map[int]*corev1.Pod, devices int, placement fixtures.Placement) {
	ginkgo.GinkgoHelper()
	holder := map[string]string{}
	nodes := map[string]bool{}
	var lines []string
	order := slices.Sorted(maps.Keys(workers))
	ins := make([]gpu.GivenInput, len(order))
	for k, i := range order {
		ins[k] = givenInput(env, workers[i], nil)
	}
	all, err := gpu.GivenAll(ctx, path, ins)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the workers' devices from %s", path.Authority())
	for k, i := range order {
		p, given := workers[i], all[k]
		nodes[p.Spec.NodeName] = true
		gomega.Expect(given.Node).To(gomega.Equal(p.Spec.NodeName), "worker %d's devices are on %s, not on its node %s", i, given.Node, p.Spec.NodeName)
		if !given.CountOnly {
			gomega.Expect(given.Devices).To(gomega.HaveLen(devices), "worker %d (%s) holds %s, asked for %d", i, p.Name, gpu.FormatDevices(given.Devices), devices)
			for _, d := range given.Devices {
				key := p.Spec.NodeName + "/" + d
				gomega.Expect(holder).NotTo(gomega.HaveKey(key), "device %s on %s is held by worker %d and by %s", d, p.Spec.NodeName, i, holder[key])
				holder[key] = fmt.Sprintf("worker %d (%s)", i, p.Name)
			}
		}
		lines = append(lines, fmt.Sprintf("worker %d: %s on %s with %s", i, p.Name, p.Spec.NodeName, gpu.FormatDevices(given.Devices)))
	}
	ginkgo.AddReportEntry("workers", strings.Join(lines, "; "))
	switch placement {
	case fixtures.OneNode:
		gomega.Expect(nodes).To(gomega.HaveLen(1), "the gang asked for one node and runs on %d: %s", len(nodes), strings.Join(lines, "; "))
	case fixtures.AcrossNodes:
		gomega.Expect(nodes).To(gomega.HaveLen(len(workers)), "the gang asked for a node per worker and runs on %d nodes: %s", len(nodes), strings.Join(lines, "; "))
	}
}

// expectGangComplete waits for the gang to complete and checks every worker's last summary: all steps
// done, every worker with the state of an uninterrupted run of the whole gang (each step's checksum
// needs every worker, so a worker that ran alone could not have it).
func expectGangComplete(ctx context.Context, env *testenv.Env, g gangRun, steps int) map[int]gang.Summary {
	ginkgo.GinkgoHelper()
	pods.ExpectJobComplete(ctx, env, g.job)
	workers, err := gangWorkers(ctx, env, g.job)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	want := gang.Digest(g.workID, g.builder.Workers(), steps)
	out := map[int]gang.Summary{}
	for i := range g.builder.Workers() {
		p, ok := workers[i]
		gomega.Expect(ok).To(gomega.BeTrue(), "worker %d has no pod after the gang completed", i)
		sum := workerSummary(ctx, env, g.job.Namespace, p.Name)
		gomega.Expect(sum.Status).To(gomega.Equal(gang.StatusCompleted), "worker %d (%s): %+v", i, p.Name, sum)
		gomega.Expect(sum.CompletedSteps).To(gomega.Equal(steps), "worker %d's steps", i)
		gomega.Expect(sum.StateDigest).To(gomega.Equal(want), "worker %d ends with another state than an uninterrupted run of the whole gang", i)
		out[i] = sum
	}
	return out
}

func gangFits(ctx context.Context, env *testenv.Env, path gpu.Path, ns, localQueue string, placement fixtures.Placement, nodes []string) {
	const workers, devices = 2, 1
	g := submitGang(ctx, env, path, ns, gangShape{name: "gang", workers: workers, devices: devices, placement: placement, nodes: nodes, steps: gangSteps, localQueue: localQueue})
	submitted := time.Now()
	queues.ExpectAdmitted(ctx, env, g.job, path.QuotaResource(), workers*devices)
	wl := expectOneWorkload(ctx, env, g.job, workers)
	ginkgo.AddReportEntry("admission", fmt.Sprintf("one Workload %s for %d workers, %s=%d charged at once", wl.Name, workers, path.QuotaResource(), workers*devices))
	started, skew := expectGangStarted(ctx, env, g.job)
	ginkgo.AddReportEntry("gang start skew", skew.Round(10*time.Millisecond).String())
	ginkgo.AddReportEntry("created → whole gang running", since(submitted))
	expectWorkersDevices(ctx, env, path, started, devices, placement)
	expectGangComplete(ctx, env, g, gangSteps)
	ginkgo.AddReportEntry("created → gang complete", since(submitted))
}
