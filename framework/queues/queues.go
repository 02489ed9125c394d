// Package queues holds the Kueue side of a spec: creating a spec's own flavor and queues (or naming the
// configured existing LocalQueue) and waiting on workloads.
package queues

import (
	"context"
	"fmt"
	"strconv"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/constants"
	"sigs.k8s.io/yaml"

	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/wait"
)

// SetupInput describes the queues a spec needs.
type SetupInput struct {
	// Namespace is the spec namespace (the LocalQueue lives there; the ClusterQueue admits only from it).
	Namespace string
	// ExistingLocalQueue, when set, is used instead of creating queues.
	ExistingLocalQueue string
	// Quota is the nominal quota per resource, e.g. {nvidia.com/gpu: 4, cpu: 4, memory: 4Gi}.
	Quota map[corev1.ResourceName]string
	// Name distinguishes several queues of one spec (default "gpu").
	Name string
	// WithinClusterQueue and ReclaimWithinCohort are the ClusterQueue's preemption policies (default: none).
	WithinClusterQueue, ReclaimWithinCohort kueue.PreemptionPolicy
	// Cohort puts the ClusterQueue in a cohort.
	Cohort string
	// Flavor is an existing ResourceFlavor to use (queues of one cohort borrow per flavor); default: a new one.
	Flavor string
	// Topology makes the new flavor topology-aware over this Kueue Topology, on the nodes with
	// TopologyNodeLabels (a TAS flavor needs at least one).
	Topology           string
	TopologyNodeLabels map[string]string
}

// Setup returns the LocalQueue to submit to: the existing one, or a new ResourceFlavor, ClusterQueue and
// LocalQueue (names carry the namespace) that are Active before it returns.
func Setup(ctx context.Context, env *testenv.Env, in SetupInput) string {
	ginkgo.GinkgoHelper()
	if in.ExistingLocalQueue != "" {
		waitLocalQueueActive(ctx, env, in.Namespace, in.ExistingLocalQueue)
		return in.ExistingLocalQueue
	}
	f := env.Factory
	name := in.Name
	if name == "" {
		name = "gpu"
	}
	flavor := in.Flavor
	if flavor == "" {
		rf := f.ResourceFlavor(name, in.Namespace)
		if in.Topology != "" {
			rf.Topology(in.Topology).NodeLabels(in.TopologyNodeLabels)
		}
		flavor = env.Create(ctx, rf.Obj()).GetName()
	}
	cqw := f.ClusterQueue(name, in.Namespace).Flavor(flavor, in.Quota)
	if in.WithinClusterQueue != "" || in.ReclaimWithinCohort != "" {
		cqw.Preemption(in.WithinClusterQueue, in.ReclaimWithinCohort)
	}
	if in.Cohort != "" {
		cqw.Cohort(in.Cohort)
	}
	cq := env.Create(ctx, cqw.Obj())
	lq := env.Create(ctx, f.LocalQueue(name, in.Namespace).ClusterQueue(cq.GetName()).Obj())
	// One wait: Kueue's LocalQueue controller sets the LocalQueue Active (reason Ready) only while its
	// ClusterQueue is Active, and reconciles it on every change of the ClusterQueue's conditions.
	waitLocalQueueActive(ctx, env, in.Namespace, lq.GetName())
	return lq.GetName()
}

// waitLocalQueueActive waits until LocalQueue ns/name is Active. The spec's informers watch its
// namespace's LocalQueues, so the wait reads it from them again when Kueue changes it. While it is not Active
// because of its ClusterQueue, the failure names the ClusterQueue's conditions.
func waitLocalQueueActive(ctx context.Context, env *testenv.Env, ns, name string) {
	ginkgo.GinkgoHelper()
	env.Wait.For(ctx, fmt.Sprintf("LocalQueue %s/%s to be Active", ns, name), wait.Target{}, env.Timeouts.QueueActive, func(g gomega.Gomega) {
		got, err := env.GetLocalQueue(ctx, ns, name)
		g.Expect(err).NotTo(gomega.HaveOccurred(), "LocalQueue %s/%s", ns, name)
		if meta.IsStatusConditionTrue(got.Status.Conditions, kueue.LocalQueueActive) {
			return
		}
		cqState := ""
		if c := meta.FindStatusCondition(got.Status.Conditions, kueue.LocalQueueActive); c != nil && c.Reason == localQueueCQInactiveReason {
			cq, err := env.Clients.Kueue.KueueV1beta2().ClusterQueues().Get(ctx, string(got.Spec.ClusterQueue), metav1.GetOptions{})
			if err == nil {
				cqState = fmt.Sprintf("\nClusterQueue %s conditions:\n%s", cq.Name, toYAML(cq.Status.Conditions))
			}
		}
		g.Expect(false).To(gomega.BeTrue(), "LocalQueue %s/%s is not Active; conditions:\n%s%s", ns, name, toYAML(got.Status.Conditions), cqState)
	})
}

// localQueueCQInactiveReason is the reason of a LocalQueue's Active=False condition while its
// ClusterQueue is not Active (Kueue's LocalQueue controller; not exported by Kueue).
const localQueueCQInactiveReason = "ClusterQueueIsInactive"

// WorkloadFor returns the Workload Kueue created for the Job (found by Kueue's job-UID label), or nil.
func WorkloadFor(ctx context.Context, env *testenv.Env, job *batchv1.Job) (*kueue.Workload, error) {
	if job.UID == "" {
		return nil, fmt.Errorf("job %s/%s has no UID: pass the Job as created", job.Namespace, job.Name)
	}
	sel := labels.SelectorFromSet(labels.Set{constants.JobUIDLabel: string(job.UID)}).String()
	list, err := env.Clients.Kueue.KueueV1beta2().Workloads(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil || len(list.Items) == 0 {
		return nil, err
	}
	return &list.Items[0], nil
}

// WaitingWorkloadFor is WorkloadFor inside a wait: from the spec's informers where they have it
// (testenv.Env.ListWorkloads), whose changes wake the wait.
func WaitingWorkloadFor(ctx context.Context, env *testenv.Env, job *batchv1.Job) (*kueue.Workload, error) {
	if job.UID == "" {
		return nil, fmt.Errorf("job %s/%s has no UID: pass the Job as created", job.Namespace, job.Name)
	}
	list, err := env.ListWorkloads(ctx, job.Namespace, labels.SelectorFromSet(labels.Set{constants.JobUIDLabel: string(job.UID)}))
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return &list[0], nil
}

// ExpectAdmitted waits until the Job's Workload is Admitted and returns it. quotaResource and count, when
// set, are checked against the admission's resource usage, so a path whose devices Kueue does not count
// (e.g. a missing deviceClassMapping) fails here with the usage it did record.
func ExpectAdmitted(ctx context.Context, env *testenv.Env, job *batchv1.Job, quotaResource corev1.ResourceName, count int) *kueue.Workload {
	ginkgo.GinkgoHelper()
	var wl *kueue.Workload
	env.Wait.ForProgress(ctx, fmt.Sprintf("Kueue to admit the Workload of Job %s/%s", job.Namespace, job.Name),
		wait.Target{Kind: "Job", Namespace: job.Namespace, Name: job.Name}, env.Timeouts.Admission, func(g gomega.Gomega) {
			var err error
			wl, err = WaitingWorkloadFor(ctx, env, job)
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(wl).NotTo(gomega.BeNil(), "Kueue has not created a Workload for Job %s/%s (is the Job integration enabled and the queue label set?)", job.Namespace, job.Name)
			g.Expect(meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)).To(gomega.BeTrue(),
				"Workload %s is not Admitted; conditions:\n%s", wl.Name, toYAML(wl.Status.Conditions))
		})
	if quotaResource != "" && count > 0 {
		gomega.Expect(wl.Status.Admission).NotTo(gomega.BeNil(), "admitted Workload %s has no status.admission", wl.Name)
		var usage []string
		found := false
		for _, psa := range wl.Status.Admission.PodSetAssignments {
			for name, q := range psa.ResourceUsage {
				usage = append(usage, string(name)+"="+q.String())
				if name == quotaResource && q.Value() == int64(count) {
					found = true
				}
			}
		}
		gomega.Expect(found).To(gomega.BeTrue(), "Kueue admitted Workload %s without charging %s=%d to quota; recorded usage: %v",
			wl.Name, quotaResource, count, usage)
	}
	return wl
}

// QuotaFor returns a quota map: devices of the path's resource, plus generous CPU and memory so only
// devices constrain admission.
func QuotaFor(resource corev1.ResourceName, devices int) map[corev1.ResourceName]string {
	return map[corev1.ResourceName]string{
		resource:              strconv.Itoa(devices),
		corev1.ResourceCPU:    "8",
		corev1.ResourceMemory: "16Gi",
	}
}

func toYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}
