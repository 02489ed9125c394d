package scenarios

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/timeouts"
	"gpuconform.io/gpuconform/framework/upgrade"
	"gpuconform.io/gpuconform/framework/wait"
)

// UpgradeLoad is the rehearsal's representative load (config.UpgradeLoadConfig, defaults applied).
type UpgradeLoad struct {
	// Image and Command: the load; an empty Image is the workload image's training loop.
	Image    string
	Command  []string
	Duration time.Duration
	MinRatio float64
}

// The default load: the training loop with a short step, a progress line every loadEvery steps.
const (
	loadStepTime = 100 * time.Millisecond
	loadEvery    = 5
	loadSteps    = 1_000_000
)

// builtin reports whether the load is the workload image's own training loop.
func (l UpgradeLoad) builtin() bool { return l.Image == "" && len(l.Command) == 0 }

func (l UpgradeLoad) describe() string {
	if l.builtin() {
		return fmt.Sprintf("the training loop (%s steps)", loadStepTime)
	}
	return strings.TrimSpace(cmp.Or(l.Image, "the workload image") + " " + strings.Join(l.Command, " "))
}

// loadOf is the run's representative load: the configured one, defaults applied (2 minutes on a real
// cluster, 30 seconds on the local one; a minimum ratio of config.DefaultLoadMinRatio).
func loadOf(r *suite.Run) UpgradeLoad {
	c := r.Config.Upgrade.Load
	d := c.Duration.Duration
	if d == 0 {
		d = 2 * time.Minute
		if r.Config.TimeoutProfile == timeouts.ProfileLocal {
			d = 30 * time.Second
		}
	}
	return UpgradeLoad{Image: c.Image, Command: c.Command, Duration: d, MinRatio: cmp.Or(c.MinRatio, config.DefaultLoadMinRatio)}
}

// representativeLoad runs the same load on the upgraded canary and on a known-good node at the same time,
// measures each one's progress over the same window (after both reported a first step, so start-up does
// not count), reads the clocks of both loads' GPUs at the window's start and end, and requires the canary
// to keep MinRatio of the known-good's GPU throughput (its step rate where the load reports none) and its
// GPU to run as the known-good's does (upgrade.Load.Failure).
func representativeLoad(ctx context.Context, in UpgradeInput, path gpu.Path) upgrade.Load {
	ginkgo.GinkgoHelper()
	env := in.Env
	ns := env.NewNamespace(ctx, "upgrade-load").Name
	canaryNode := firstWith(path, in.Canary)
	goodNode, free, held := freestNode(ctx, env, path, in.GoodForPods)
	gomega.Expect(free).To(gomega.BeNumerically(">", 0),
		"no known-good node has a free device on the %s path for the load's reference copy (%s)", path.Name(), held)
	res := upgrade.Load{Workload: in.Load.describe(), CanaryNode: canaryNode, KnownGoodNode: goodNode, MinRatio: in.Load.MinRatio}
	start := func(name, node string) *corev1.Pod {
		w := env.Factory.GPUJob(name, ns).Path(path).Devices(1).OnNodes(node).BackoffLimit(0)
		if in.Load.builtin() {
			dir := trainDir + "/" + name
			w.ScratchDir("checkpoints", trainDir).Args("train", "--steps", strconv.Itoa(loadSteps), "--step-duration", loadStepTime.String(),
				"--checkpoint-every", strconv.Itoa(loadEvery), "--checkpoint-dir", dir, "--work-id", ns+"-"+name)
		} else {
			if in.Load.Image != "" {
				w.Image(in.Load.Image)
			}
			if len(in.Load.Command) > 0 {
				w.Command(in.Load.Command...)
			}
		}
		for _, pre := range w.Prerequisites() {
			env.Create(ctx, pre)
		}
		return pods.ExpectJobPodStarted(ctx, env, env.Create(ctx, w.Obj()).(*batchv1.Job))
	}
	ginkgo.By(fmt.Sprintf("running %s on the upgraded canary %s and on the known-good %s side by side", res.Workload, canaryNode, goodNode))
	canary, good := start("load-canary", canaryNode), start("load-known-good", goodNode)
	for _, p := range []*corev1.Pod{canary, good} {
		env.Wait.For(ctx, fmt.Sprintf("the load %s on %s to report a first step", p.Name, p.Spec.NodeName), wait.Target{Kind: "Pod", Namespace: ns, Name: p.Name}, env.Timeouts.JobRun,
			func(g gomega.Gomega) {
				n, err := loadProgress(ctx, env, ns, p.Name)
				g.Expect(err).NotTo(gomega.HaveOccurred())
				g.Expect(n).To(gomega.BeNumerically(">", 0), "no JSON line with a numeric \"step\" on its stdout yet")
			})
	}
	read := func(p *corev1.Pod) (loadLog, time.Time) {
		l, err := readLoadLog(ctx, env, ns, p.Name)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		return l, time.Now()
	}
	clocks := func() {
		if res.ClocksNotCompared != "" {
			return
		}
		s, why := readClocks(ctx, env, ns, canary, good)
		if why != "" {
			res.ClocksNotCompared, res.Clocks = why, nil
			return
		}
		res.Clocks = append(res.Clocks, s)
	}
	c1, tc1 := read(canary)
	g1, tg1 := read(good)
	clocks()
	select {
	case <-ctx.Done():
		ginkgo.Fail("the run ended while the representative load ran")
	case <-time.After(in.Load.Duration):
	}
	c2, tc2 := read(canary)
	g2, tg2 := read(good)
	clocks()
	for _, p := range []*corev1.Pod{canary, good} {
		now, err := env.Clients.Kube.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		gomega.Expect(now.Status.Phase).To(gomega.Equal(corev1.PodRunning),
			"the load %s on %s stopped during the measurement: %s", p.Name, p.Spec.NodeName, terminationOf(now))
	}
	res.CanarySteps, res.KnownGoodSteps, res.Window = c2.maxStep-c1.maxStep, g2.maxStep-g1.maxStep, tc2.Sub(tc1)
	res.CanaryRate = float64(res.CanarySteps) / tc2.Sub(tc1).Seconds()
	res.GoodRate = float64(res.KnownGoodSteps) / tg2.Sub(tg1).Seconds()
	res.CanaryGFLOPS, res.GoodGFLOPS = c2.medianGFLOPS(c1.maxStep, c2.maxStep), g2.medianGFLOPS(g1.maxStep, g2.maxStep)
	res.CanaryStandIn, res.GoodStandIn = c2.standIn, g2.standIn
	ginkgo.AddReportEntry(upgrade.LoadEntry, res.String())
	if !res.Throughput() && cmp.Or(res.CanaryStandIn, res.GoodStandIn) != "" {
		ginkgo.AddReportEntry(run.StandInPrefix+"representative load on the "+path.Name()+" path", run.StandIn{Did: res.Compared(),
			Fix: "give GPU containers NVIDIA's CUDA driver library (NVIDIA_DRIVER_CAPABILITIES=compute) so the training loop's steps run the FMA and copy kernels, or pass --upgrade-load-image with a load of your own"})
	}
	if f := res.Failure(); f != "" {
		ginkgo.Fail(f)
	}
	deleteAllJobs(ctx, env, ns)
	return res
}

// clockReadTimeout bounds one nvidia-smi query in a load container: the tool answers in well under a
// second; a wedged driver or runtime must not hold the rehearsal.
const clockReadTimeout = 30 * time.Second

// readClocks reads the clocks of both loads' GPUs with nvidia-smi run in their containers. Exec into the
// running load, not a pod of its own: it reads the very GPU the load's progress is measured on, under that
// load (an idle GPU drops its clocks whatever its driver), and needs no free device on either node. why
// says why the clocks cannot be compared ("" when they can): a container without nvidia-smi (an image of
// the team's own, or NVIDIA_DRIVER_CAPABILITIES without utility), a tool that failed, or exec refused.
func readClocks(ctx context.Context, env *testenv.Env, ns string, canary, good *corev1.Pod) (upgrade.ClockSample, string) {
	var s upgrade.ClockSample
	for _, side := range []struct {
		pod *corev1.Pod
		out *[]upgrade.GPUClocks
	}{{canary, &s.Canary}, {good, &s.KnownGood}} {
		gpus, err := loadClocks(ctx, env, ns, side.pod.Name)
		if err != nil {
			return s, fmt.Sprintf("nvidia-smi in the load's container %s on %s could not answer (%v); a container without the tool (an image of its own, or NVIDIA_DRIVER_CAPABILITIES without utility) cannot show its GPU's clocks",
				side.pod.Name, side.pod.Spec.NodeName, err)
		}
		*side.out = gpus
	}
	return s, ""
}

// loadClocks runs upgrade.ClockQuery in the pod's workload container, again with the reasons' name from
// before R535 when the driver refuses the current one.
func loadClocks(ctx context.Context, env *testenv.Env, ns, pod string) ([]upgrade.GPUClocks, error) {
	run := func(legacy bool) (string, error) {
		qctx, cancel := context.WithTimeout(ctx, clockReadTimeout)
		defer cancel()
		stdout, stderr, err := pods.Exec(qctx, env, ns, pod, fixtures.WorkloadContainer, upgrade.ClockQuery(legacy))
		if err != nil {
			if said := strings.TrimSpace(stdout + stderr); said != "" {
				err = fmt.Errorf("%w: %s", err, said)
			}
		}
		return stdout, err
	}
	out, err := run(false)
	if err != nil && upgrade.RefusedField(err.Error(), upgrade.ReasonsField) {
		out, err = run(true)
	}
	if err != nil {
		return nil, err
	}
	return upgrade.ParseClocks(out)
}

// loadProgress is the largest "step" of the JSON lines the pod printed so far.
func loadProgress(ctx context.Context, env *testenv.Env, ns, pod string) (int64, error) {
	l, err := readLoadLog(ctx, env, ns, pod)
	return l.maxStep, err
}

// readLoadLog reads and parses the pod's workload log.
func readLoadLog(ctx context.Context, env *testenv.Env, ns, pod string) (loadLog, error) {
	raw, err := env.Clients.Kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: fixtures.WorkloadContainer}).DoRaw(ctx)
	if err != nil {
		return loadLog{}, fmt.Errorf("reading the log of %s/%s: %w", ns, pod, err)
	}
	return parseLoadLog(string(raw)), nil
}

// loadLog is what the load's JSON lines say: its progress, its GPU throughput per step where it measures
// one, and whether its GPU work is a stand-in. Lines that are not JSON objects, or lack a field, are
// passed over.
type loadLog struct {
	maxStep int64
	// steps are the lines with a numeric "step" and "gflops", in log order.
	steps []stepThroughput
	// standIn is why the GPU work is a stand-in, from a {"event":"gpu","mode":"stand-in"} line.
	standIn string
}

type stepThroughput struct {
	step   int64
	gflops float64
}

func parseLoadLog(log string) loadLog {
	var l loadLog
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var ev struct {
			Event   string   `json:"event"`
			Mode    string   `json:"mode"`
			StandIn string   `json:"stand_in"`
			Step    *float64 `json:"step"`
			GFLOPS  *float64 `json:"gflops"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		if ev.Event == "gpu" && ev.Mode == "stand-in" {
			l.standIn = cmp.Or(ev.StandIn, "the load says its GPU work is a stand-in")
		}
		if ev.Step == nil {
			continue
		}
		l.maxStep = max(l.maxStep, int64(*ev.Step))
		if ev.GFLOPS != nil && *ev.GFLOPS > 0 {
			l.steps = append(l.steps, stepThroughput{step: int64(*ev.Step), gflops: *ev.GFLOPS})
		}
	}
	return l
}

// medianGFLOPS is the median "gflops" of the steps in (from, upTo] (0 when none carries one).
func (l loadLog) medianGFLOPS(from, upTo int64) float64 {
	var v []float64
	for _, s := range l.steps {
		if s.step > from && s.step <= upTo {
			v = append(v, s.gflops)
		}
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

func terminationOf(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("container %s exited %d (%s) %s", cs.Name, t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
		}
	}
	return "phase " + string(p.Status.Phase)
}

// deleteAllJobs deletes the namespace's Jobs with their pods and waits until the pods are gone.
func deleteAllJobs(ctx context.Context, env *testenv.Env, ns string) {
	ginkgo.GinkgoHelper()
	gomega.Expect(env.Clients.Kube.BatchV1().Jobs(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}, metav1.ListOptions{})).To(gomega.Succeed())
	deleteAllPods(ctx, env, ns)
}

// servingReserve is the serving Deployment the rehearsal keeps through the drain, and its watch.
type servingReserve struct {
	name   string // the Deployment's, in the rehearsal's namespace
	mu     sync.Mutex
	res    upgrade.Reserve
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}
}

// startServingReserve starts a Deployment of replicas one-device pods that prefers the canary pool (and may
// run on the known-good one) with a PodDisruptionBudget of minAvailable, waits until every replica serves,
// and watches its available replicas until stop. nil when replicas is 0.
func startServingReserve(ctx context.Context, in UpgradeInput, ns string, path gpu.Path, replicas, minAvailable int) *servingReserve {
	ginkgo.GinkgoHelper()
	if replicas == 0 {
		return nil
	}
	env := in.Env
	w := env.Factory.GPUPod("serving", ns).Path(path).Devices(1).Args(append(fixtures.ProbeArgs(1), "--hold", holdFor)...)
	pod := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	dep := fixtures.Deployment(pod, int32(replicas))
	dep.Spec.Template.Spec.Affinity = servingAffinity(in.Canary, in.GoodForPods)
	sel := dep.Spec.Selector.MatchLabels
	pdb := &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns, Labels: pod.Labels},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(int32(minAvailable))), Selector: &metav1.LabelSelector{MatchLabels: sel}},
	}
	ginkgo.By(fmt.Sprintf("starting the serving reserve: Deployment %s/%s, %d one-device replicas preferring the canary pool, PodDisruptionBudget minAvailable %d", ns, dep.Name, replicas, minAvailable))
	env.Create(ctx, dep)
	env.Create(ctx, pdb)
	deployment := wait.Target{Kind: "Deployment", Namespace: ns, Name: dep.Name}
	env.Wait.ForProgress(ctx, fmt.Sprintf("the %d replicas of Deployment %s/%s to be available", replicas, ns, dep.Name), deployment, env.Timeouts.PodStart, func(g gomega.Gomega) {
		d, err := env.Clients.Kube.AppsV1().Deployments(ns).Get(ctx, dep.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(d.Status.AvailableReplicas).To(gomega.BeEquivalentTo(replicas))
		p, err := env.Clients.Kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, pdb.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(p.Status.ObservedGeneration).To(gomega.Equal(p.Generation), "the disruption controller has not observed the budget yet")
		g.Expect(p.Status.ExpectedPods).To(gomega.BeEquivalentTo(replicas))
	})
	list, err := env.Clients.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: fixtures.DeploymentLabel + "=" + dep.Name})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	r := &servingReserve{name: dep.Name, res: upgrade.Reserve{Deployment: ns + "/" + dep.Name, Budget: ns + "/" + pdb.Name, Replicas: int32(replicas), MinAvailable: int32(minAvailable)},
		start: time.Now(), done: make(chan struct{})}
	for _, p := range list.Items {
		for _, n := range in.Canary {
			if p.Spec.NodeName == n {
				r.res.OnCanary = append(r.res.OnCanary, p.Name+"@"+n)
			}
		}
	}
	r.sample(int32(replicas))
	wctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	go r.watch(wctx, env, ns, dep.Name)
	return r
}

// servingAffinity keeps the serving pods on the GPU pools and prefers the canary pool, so they start
// there and the drain moves them.
func servingAffinity(canary, good []string) *corev1.Affinity {
	term := func(n string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{n}}}}
	}
	var required []corev1.NodeSelectorTerm
	var preferred []corev1.PreferredSchedulingTerm
	for _, n := range canary {
		required = append(required, term(n))
		preferred = append(preferred, corev1.PreferredSchedulingTerm{Weight: 100, Preference: term(n)})
	}
	for _, n := range good {
		required = append(required, term(n))
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution:  &corev1.NodeSelector{NodeSelectorTerms: required},
		PreferredDuringSchedulingIgnoredDuringExecution: preferred,
	}}
}

func (r *servingReserve) sample(available int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.res.Samples); n > 0 && r.res.Samples[n-1].Available == available {
		return
	}
	r.res.Samples = append(r.res.Samples, upgrade.Sample{At: time.Since(r.start), Available: available})
}

// watch records the Deployment's available replicas at every change until ctx ends, through an informer
// (which lists again and resumes its watch when the server closes it).
func (r *servingReserve) watch(ctx context.Context, env *testenv.Env, ns, name string) {
	defer ginkgo.GinkgoRecover()
	defer close(r.done)
	f := informers.NewSharedInformerFactoryWithOptions(env.Clients.Kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	record := func(obj any) {
		if d, ok := obj.(*appsv1.Deployment); ok {
			r.sample(d.Status.AvailableReplicas)
		}
	}
	if _, err := f.Apps().V1().Deployments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: record, UpdateFunc: func(_, obj any) { record(obj) }}); err != nil {
		return
	}
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
}

// refused adds an eviction the budget refused and the time the drain waited for the pod.
func (r *servingReserve) refused(waited time.Duration, refusals int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Refused += refusals
	r.res.Waited += waited
}

// stop ends the watch, reports the reserve and fails when it ever went below the budget's minimum.
func (r *servingReserve) stop() upgrade.Reserve {
	ginkgo.GinkgoHelper()
	r.cancel()
	<-r.done
	r.mu.Lock()
	res := r.res
	r.mu.Unlock()
	ginkgo.AddReportEntry(upgrade.ReserveEntry, res.String())
	if len(res.OnCanary) == 0 {
		ginkgo.AddReportEntry("not exercised: serving reserve during the drain",
			fmt.Sprintf("the scheduler placed no replica of %s on the canary pool, so the drain moved none", res.Deployment))
	}
	if s, breached := res.Breach(); breached {
		ginkgo.Fail(fmt.Sprintf("serving reserve: Deployment %s had %d available replica(s) %s into the rehearsal, below its PodDisruptionBudget's minimum %d",
			res.Deployment, s.Available, s.At.Round(100*time.Millisecond), res.MinAvailable))
	}
	return res
}
