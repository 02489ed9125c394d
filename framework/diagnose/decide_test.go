package diagnose

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// snapshotOf loads a recorded file straight into a Snapshot, no client involved: every object into its
// list, and the target, when it is a Deployment, StatefulSet or ReplicaSet, as the Owner.
func snapshotOf(t *testing.T, file string, target Target) *Snapshot {
	t.Helper()
	tg, err := normalise(target)
	if err != nil {
		t.Fatal(err)
	}
	s := &Snapshot{Target: target}
	for _, obj := range fixtureObjects(t, file) {
		switch o := obj.(type) {
		case *batchv1.Job:
			s.Jobs = append(s.Jobs, *o)
		case *appsv1.ReplicaSet:
			s.ReplicaSets = append(s.ReplicaSets, *o)
		case *corev1.Pod:
			s.Pods = append(s.Pods, *o)
		case *corev1.Event:
			s.Events = append(s.Events, *o)
		case *corev1.Node:
			s.Nodes = append(s.Nodes, *o)
		case *kueue.Workload:
			s.Workloads = append(s.Workloads, *o)
		case *kueue.LocalQueue:
			s.LocalQueues = append(s.LocalQueues, *o)
		case *kueue.ClusterQueue:
			s.ClusterQueues = append(s.ClusterQueues, *o)
		case *resourcev1.ResourceClaim:
			s.ResourceClaims = append(s.ResourceClaims, *o)
		case *resourcev1.ResourceClaimTemplate:
			s.ResourceClaimTemplates = append(s.ResourceClaimTemplates, *o)
		case *resourcev1.DeviceClass:
			s.DeviceClasses = append(s.DeviceClasses, *o)
		case *resourcev1.ResourceSlice:
			s.ResourceSlices = append(s.ResourceSlices, *o)
		}
		if m, err := meta.Accessor(obj); err == nil && obj.GetObjectKind().GroupVersionKind().Kind == tg.Kind && m.GetName() == tg.Name {
			if _, ok := ownerRead(tg); ok {
				s.Owner = meta.AsPartialObjectMetadata(m)
				s.Owner.Kind = tg.Kind
			}
		}
	}
	return s
}

// TestDecide classifies every table case from its recorded file alone, its failed read given as a
// ReadError, and requires the verdict Run reaches over fake clients of the same file, to the last
// message and object.
func TestDecide(t *testing.T) {
	for _, tc := range runCases() {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshotOf(t, tc.file, tc.target)
			if tc.fault != nil {
				s.Errors = append(s.Errors, *tc.fault)
			}
			res, err := Decide(s)
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			checkResult(t, tc, res)
			c, _, _ := caseClients(t, tc)
			run, err := Run(t.Context(), c, tc.target)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !reflect.DeepEqual(res, run) {
				t.Errorf("Decide from the file and Run over the same file differ:\n--- Decide\n%s--- Run\n%s", res, run)
			}
		})
	}
}

// TestDecideFailedReads: a failed read matters only where the verdict needs it; a denied one is a
// verdict, an unreachable server an error.
func TestDecideFailedReads(t *testing.T) {
	down := errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
	cases := []struct {
		name   string
		file   string
		target Target
		fault  ReadError
		reason Reason // "" when Decide must fail
	}{
		{"a running pod needs no events", "running.yaml", pod(podName),
			ReadError{Read: eventsRead("ml", "Pod", podName), Err: forbidden("list", "events")}, ReasonRunning},
		{"a queue Kueue explains needs no LocalQueue", "queue-quota-exhausted.yaml", job("train"),
			ReadError{Read: queueRead("localqueues", "ml", "gpu-queue"), Err: forbidden("get", "localqueues")}, QueueQuotaExhausted},
		{"an unschedulable pod's events are needed", "insufficient-device.yaml", job("train"),
			ReadError{Read: eventsRead("ml", "Pod", "train-x7k2p"), Err: down}, ""},
		{"a Workload Kueue has not explained needs its queues", "queue-pending.yaml", workload(wlName),
			ReadError{Read: queueRead("localqueues", "ml", "gpu-queue"), Err: forbidden("get", "localqueues")}, Forbidden},
		{"the target itself", "running.yaml", pod(podName),
			ReadError{Read: getRead("pods", "", "ml", podName), Err: down}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshotOf(t, tc.file, tc.target)
			s.Errors = append(s.Errors, tc.fault)
			res, err := Decide(s)
			switch {
			case tc.reason == "" && err == nil:
				t.Fatalf("Decide = %s, want an error", res)
			case tc.reason == "" && !errors.Is(err, down):
				t.Fatalf("Decide error %v, want %v", err, down)
			case tc.reason != "" && err != nil:
				t.Fatalf("Decide: %v", err)
			case tc.reason != "" && res.Reason != tc.reason:
				t.Fatalf("reason %s, want %s\n%s", res.Reason, tc.reason, res)
			}
		})
	}
}

// TestDecideAbsentIsNotFound: what a snapshot lacks was not found, with the API server's own wording.
func TestDecideAbsentIsNotFound(t *testing.T) {
	for _, tc := range []struct {
		target Target
		want   string
	}{
		{job("gone"), `jobs.batch "gone" not found`},
		{pod("gone"), `pods "gone" not found`},
		{workload("gone"), `workloads.kueue.x-k8s.io "gone" not found`},
		{Target{Kind: "deployment", Namespace: "ml", Name: "gone"}, `deployments.apps "gone" not found`},
	} {
		res, err := Decide(&Snapshot{Target: tc.target})
		if err != nil {
			t.Fatalf("%s: %v", tc.target, err)
		}
		if res.Reason != NotFound || !containsText(res.Messages, tc.want) {
			t.Errorf("%s: %s %q, want NotFound %q", tc.target, res.Reason, res.Messages, tc.want)
		}
	}
	if _, err := Decide(&Snapshot{Target: Target{Kind: "node", Name: "x"}}); err == nil || !strings.Contains(err.Error(), "unsupported kind") {
		t.Errorf("Decide of a node: %v, want unsupported kind", err)
	}
}

// TestDecideAdmittedWithoutPods: an admitted Job with no pods is explained by the Job controller's
// FailedCreate when there is one; without one, or when the Job's events cannot be read, the Workload's
// verdict stands, as before the Job's events were consulted.
func TestDecideAdmittedWithoutPods(t *testing.T) {
	withEvents := snapshotOf(t, "quota-unset.yaml", job("train"))
	noEvents := snapshotOf(t, "quota-unset.yaml", job("train"))
	noEvents.Events = nil
	unreadable := snapshotOf(t, "quota-unset.yaml", job("train"))
	unreadable.Errors = append(unreadable.Errors, ReadError{Read: eventsRead("ml", "Job", "train"), Err: forbidden("list", "events")})
	suspended := snapshotOf(t, "quota-unset.yaml", job("train"))
	suspended.Jobs[0].Spec.Suspend = new(true)
	for _, tc := range []struct {
		name     string
		s        *Snapshot
		reason   Reason
		terminal bool
	}{
		{"FailedCreate from the quota", withEvents, QuotaExceeded, true},
		{"no FailedCreate", noEvents, SchedulingPending, false},
		{"events unreadable", unreadable, SchedulingPending, false},
		{"suspended again: the Workload decides", suspended, SchedulingPending, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Decide(tc.s)
			if err != nil {
				t.Fatal(err)
			}
			if res.Reason != tc.reason || res.Terminal != tc.terminal {
				t.Errorf("%s terminal=%v, want %s terminal=%v\n%s", res.Reason, res.Terminal, tc.reason, tc.terminal, res)
			}
			if tc.reason == SchedulingPending && !containsText(res.Messages, "Workload ml/job-train-5b7c9 is admitted; no pods exist yet") {
				t.Errorf("messages %q lack the Workload's verdict", res.Messages)
			}
		})
	}
}

// A Job whose pods meet "status unknown for quota" is QuotaExceeded naming the quota and the resources,
// passing while its FailedCreate events span less than QuotaStatusGrace and final once they span it
// (one event per pod name, the earliest's first time to the newest's last).
func TestDecideQuotaStatusUnknown(t *testing.T) {
	at := func(s string) metav1.Time {
		tm, err := time.Parse(time.RFC3339, "2026-04-10T10:00:"+s+"Z")
		if err != nil {
			t.Fatal(err)
		}
		return metav1.NewTime(tm)
	}
	event := func(pod, first, last string) corev1.Event {
		e := snapshotOf(t, "quota-unset.yaml", job("train")).Events[0]
		e.Name, e.FirstTimestamp, e.LastTimestamp = "train."+pod, at(first), at(last)
		e.Message = `Error creating: pods "` + pod + `" is forbidden: status unknown for quota: team-quota, resources: limits.cpu,limits.memory`
		return e
	}
	other := event("train-zz", "00", "10")
	other.Message = `Error creating: pods "train-zz" is forbidden: status unknown for quota: another-quota, resources: pods`
	for _, tc := range []struct {
		name     string
		events   []corev1.Event
		terminal bool
	}{
		{"one refusal, repeated for 10 s", []corev1.Event{event("train-a", "01", "11")}, false},
		{"refusals of two pods spanning 34 s", []corev1.Event{event("train-a", "01", "05"), event("train-b", "20", "35")}, true},
		{"another quota's older refusal does not count", []corev1.Event{other, event("train-b", "20", "35")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshotOf(t, "quota-unset.yaml", job("train"))
			s.Events = tc.events
			res, err := Decide(s)
			if err != nil {
				t.Fatal(err)
			}
			if res.Reason != QuotaExceeded || res.Terminal != tc.terminal || !containsText(res.Messages, `refused by ResourceQuota "team-quota": limits.cpu; limits.memory`) {
				t.Errorf("%s terminal=%v, want QuotaExceeded terminal=%v naming the quota and resources\n%s", res.Reason, res.Terminal, tc.terminal, res)
			}
		})
	}
}

// TestDecideGatedPodsWaitOnTheQueue: the queue pass comes first. A Job's pod held by a scheduling gate
// while its Workload has no quota waits on Kueue, not on the scheduler; the same pod without a gate is the
// scheduler's.
func TestDecideGatedPodsWaitOnTheQueue(t *testing.T) {
	pod := func(gated bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-0", Namespace: "ml", Labels: map[string]string{batchv1.JobNameLabel: "train"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train"}}}}
		if gated {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/topology"}}
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated}}
		}
		return p
	}
	for _, tc := range []struct {
		gated bool
		want  Reason
	}{{true, QueueQuotaExhausted}, {false, SchedulingPending}} {
		s := snapshotOf(t, "queue-quota-exhausted.yaml", job("train"))
		s.Pods = append(s.Pods, pod(tc.gated))
		res, err := Decide(s)
		if err != nil {
			t.Fatalf("gated %v: %v", tc.gated, err)
		}
		if res.Reason != tc.want {
			t.Errorf("gated %v: reason %s, want %s\n%s", tc.gated, res.Reason, tc.want, res)
		}
	}
}

// TestDecideFailedJobMakesItsPodFinal: a Job's pod that exited in error is no final verdict while the Job
// may replace it; once the Job's Failed condition is True the same pod's verdict is final and quotes it.
func TestDecideFailedJobMakesItsPodFinal(t *testing.T) {
	crashed := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-0", Namespace: "ml", Labels: map[string]string{batchv1.JobNameLabel: "train"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", Controller: new(true)}}},
		Spec: corev1.PodSpec{NodeName: "gpu-1", RestartPolicy: corev1.RestartPolicyNever},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "main",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}}}}}}
	for _, failed := range []bool{false, true} {
		j := batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml"}}
		if failed {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}}
		}
		res, err := Decide(&Snapshot{Target: job("train"), Jobs: []batchv1.Job{j}, Pods: []corev1.Pod{crashed}})
		if err != nil {
			t.Fatalf("failed %v: %v", failed, err)
		}
		if res.Reason != ApplicationError || res.Stage != StageFailed || res.Terminal != failed {
			t.Errorf("failed Job %v: reason %s stage %s terminal %v, want ApplicationError, Failed, terminal %v\n%s", failed, res.Reason, res.Stage, res.Terminal, failed, res)
		}
		if quoted := slices.ContainsFunc(res.Messages, func(m string) bool { return strings.Contains(m, "BackoffLimitExceeded") }); quoted != failed {
			t.Errorf("failed Job %v: the Job's condition quoted %v\n%s", failed, quoted, res)
		}
	}
}

// TestDecideUnregisteredOutages: the failures of the pods a Job replaced on a node count toward its pod's
// only while they lead up to it; one that ended more than outageGap before is an earlier outage.
func TestDecideUnregisteredOutages(t *testing.T) {
	for _, tc := range []struct {
		before   time.Duration // how long before its successor's failure the replaced pod failed
		terminal bool
	}{{40 * time.Second, true}, {outageGap + 40*time.Second, false}} {
		s := snapshotOf(t, "dra-not-registered-replaced.yaml", job("train"))
		for i, e := range s.Events {
			if e.InvolvedObject.Name == "train-ffg7x" {
				at := metav1.NewTime(s.Events[0].FirstTimestamp.Add(-tc.before))
				s.Events[i].FirstTimestamp, s.Events[i].LastTimestamp = at, at
			}
		}
		res, err := Decide(s)
		if err != nil {
			t.Fatal(err)
		}
		if res.Terminal != tc.terminal || containsText(res.Messages, "replaced before it") != tc.terminal {
			t.Errorf("replaced pod's failure %s before: terminal %v, want %v\n%s", tc.before, res.Terminal, tc.terminal, res)
		}
	}
}

// TestDecideTopologyGatesEveryNode: a Workload whose pod set Kueue's topology-aware scheduling cannot place
// because a taint excludes every node waits on that taint, for good; one node left out is capacity, not
// final.
func TestDecideTopologyGatesEveryNode(t *testing.T) {
	for _, tc := range []struct {
		excluded string
		reason   Reason
		terminal bool
	}{{"5", UntoleratedTaint, true}, {"4", QueueNoMatchingFlavor, false}} {
		s := snapshotOf(t, "queue-quota-exhausted.yaml", job("train"))
		s.Workloads[0].Status.Conditions[0].Message = `couldn't assign flavors to pod set main: topology "racks" doesn't allow to fit any of 2 pod(s). ` +
			`Total nodes: 5; excluded: taint "nvidia.com/gpu=present:NoSchedule": ` + tc.excluded
		res, err := Decide(s)
		if err != nil {
			t.Fatal(err)
		}
		if res.Reason != tc.reason || res.Terminal != tc.terminal || res.Stage != StageQueued {
			t.Errorf("%s of 5 nodes excluded: %s terminal %v, want %s terminal %v\n%s", tc.excluded, res.Reason, res.Terminal, tc.reason, tc.terminal, res)
		}
	}
}

// TestDecideSchedulerEventsOnly: where the pod's PodScheduled condition has no message, the scheduler's
// word is its newest FailedScheduling event from the pod's own scheduler; a node autoscaler's newer event
// of that reason (Karpenter's words) is neither parsed nor quoted.
func TestDecideSchedulerEventsOnly(t *testing.T) {
	const karpenter = "Failed to schedule pod, node selector term with matchFields is not supported"
	for _, tc := range []struct {
		by     corev1.EventSource
		quoted bool
	}{{corev1.EventSource{Component: "karpenter"}, false}, {corev1.EventSource{}, true}} {
		s := snapshotOf(t, "insufficient-cpu.yaml", pod("train-0-x7k2p"))
		s.Pods[0].Status.Conditions[0].Message = ""
		e := *s.Events[0].DeepCopy()
		e.Name, e.Source, e.Message = "train-0-x7k2p.karpenter", tc.by, karpenter
		e.FirstTimestamp = metav1.NewTime(e.LastTimestamp.Add(time.Minute))
		e.LastTimestamp = e.FirstTimestamp
		s.Events = append(s.Events, e)
		res, err := Decide(s)
		if err != nil {
			t.Fatal(err)
		}
		if quoted := containsText(res.Messages, karpenter); quoted != tc.quoted || (!tc.quoted && res.Reason != InsufficientCPU) {
			t.Errorf("FailedScheduling by %q: reason %s, quoted %v, want quoted %v\n%s", tc.by.Component, res.Reason, quoted, tc.quoted, res)
		}
	}
}

// TestDecideClaimMissingLasts: a claim template the pod names and nobody created is final once the pod
// has waited claimMissingFinal for it, not before (it may be created just after the pod).
func TestDecideClaimMissingLasts(t *testing.T) {
	for _, tc := range []struct {
		age      time.Duration
		terminal bool
	}{{10 * time.Second, false}, {claimMissingFinal + 10*time.Second, true}} {
		s := snapshotOf(t, "dra-claim-missing.yaml", pod(podName))
		created := s.Events[0].LastTimestamp.Add(-time.Second)
		s.Pods[0].CreationTimestamp = metav1.NewTime(created)
		s.ReadAt = created.Add(tc.age)
		res, err := Decide(s)
		if err != nil {
			t.Fatal(err)
		}
		if res.Reason != DRAClaimMissing || res.Terminal != tc.terminal {
			t.Errorf("template missing %s into the pod's life: %s terminal %v, want DRAClaimMissing terminal %v\n%s", tc.age, res.Reason, res.Terminal, tc.terminal, res)
		}
	}
}
