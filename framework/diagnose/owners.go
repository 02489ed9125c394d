package diagnose

import (
	"context"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// ownerKinds are the workload kinds beyond Job, Workload and Pod that a diagnosis accepts: the built-in
// controllers and the kinds Kueue integrates (its integrations list, v0.17). They are diagnosed through
// owner references: the target's pods are those whose controller chain (pod → ReplicaSet or Job →
// target) reaches it, its Workload the one Kueue created for it or for its pods.
var ownerKinds = map[string]string{
	"deployment": "Deployment", "deploy": "Deployment",
	"statefulset": "StatefulSet", "sts": "StatefulSet",
	"replicaset": "ReplicaSet", "rs": "ReplicaSet",
	"jobset":          "JobSet",
	"leaderworkerset": "LeaderWorkerSet", "lws": "LeaderWorkerSet",
	"rayjob": "RayJob", "raycluster": "RayCluster",
	"pytorchjob": "PyTorchJob", "tfjob": "TFJob", "mpijob": "MPIJob", "xgboostjob": "XGBoostJob",
	"paddlejob": "PaddleJob", "jaxjob": "JAXJob", "trainjob": "TrainJob", "appwrapper": "AppWrapper",
}

// ownerKind returns the canonical kind for a (lower-case, singular or plural, group-less) name.
func ownerKind(k string) (string, bool) {
	if kind, ok := ownerKinds[k]; ok {
		return kind, true
	}
	if kind, ok := ownerKinds[strings.TrimSuffix(k, "s")]; ok {
		return kind, true
	}
	return "", false
}

// owned is what a diagnosis found under an owner: its pods, the intermediate controllers (ReplicaSets,
// Jobs) whose events say why pods are missing, and the Workload.
type owned struct {
	pods          []corev1.Pod
	intermediates []metav1.Object
	kinds         map[string]string // intermediate name → kind
	wl            *kueue.Workload
}

// diagnoseOwner diagnoses a workload of another kind than Job, Workload or Pod.
func (d *diagnosis) diagnoseOwner(ctx context.Context) (*Result, error) {
	kind, name := d.t.Kind, d.t.Name
	if err := d.checkOwnerExists(ctx, kind, name); err != nil {
		return nil, err
	}
	o, err := d.collectOwned(ctx, kind, name)
	if err != nil {
		return nil, err
	}
	if len(o.pods) > 0 || (o.wl != nil && !isTrue(o.wl.Status.Conditions, kueue.WorkloadAdmitted)) {
		return d.decide(ctx, nil, o.wl, o.pods)
	}
	// No pods: the controllers that should have created them say why in their events.
	var evs []corev1.Event
	evKind, evName := kind, name
	for _, obj := range o.intermediates {
		k := o.kinds[obj.GetName()]
		e, err := d.events(ctx, k, obj.GetName(), obj.GetUID())
		if err != nil {
			return nil, err
		}
		if latestEvent(e, "FailedCreate") != nil {
			evs, evKind, evName = e, k, obj.GetName()
			break
		}
	}
	if evs == nil {
		if evs, err = d.events(ctx, kind, name, ""); err != nil {
			return nil, err
		}
	}
	if o.wl != nil {
		d.ref("Workload", o.wl.Namespace, o.wl.Name)
	}
	return d.noPodsYet(evs, evKind, d.ns(), evName), nil
}

// checkOwnerExists reads the target when it is a built-in kind; other kinds (JobSet, RayJob, ...) are
// custom resources this package has no typed client for, and are known by what they own.
func (d *diagnosis) checkOwnerExists(ctx context.Context, kind, name string) error {
	var err error
	var r read
	switch kind {
	case "Deployment":
		r = read{verb: "get", resource: "deployments", group: "apps", version: "v1", namespace: d.ns(), name: name}
		_, err = d.c.Kube.AppsV1().Deployments(d.ns()).Get(ctx, name, metav1.GetOptions{})
	case "StatefulSet":
		r = read{verb: "get", resource: "statefulsets", group: "apps", version: "v1", namespace: d.ns(), name: name}
		_, err = d.c.Kube.AppsV1().StatefulSets(d.ns()).Get(ctx, name, metav1.GetOptions{})
	case "ReplicaSet":
		r = read{verb: "get", resource: "replicasets", group: "apps", version: "v1", namespace: d.ns(), name: name}
		_, err = d.c.Kube.AppsV1().ReplicaSets(d.ns()).Get(ctx, name, metav1.GetOptions{})
	default:
		return nil
	}
	if err != nil {
		if err = classifyReadErr(err, r, StageUnknown); isObjectNotFound(err) {
			return d.notFound(strings.ToLower(kind)+"s", name, err)
		}
		return err
	}
	return nil
}

// collectOwned finds the target's pods through their controller chain, the ReplicaSets and Jobs it
// controls, and its Workload (owned by the target, or by one of its pods under Kueue's pod integration).
func (d *diagnosis) collectOwned(ctx context.Context, kind, name string) (owned, error) {
	o := owned{kinds: map[string]string{}}
	controls := func(obj metav1.Object) bool {
		c := metav1.GetControllerOf(obj)
		return c != nil && c.Kind == kind && c.Name == name
	}
	mid := map[string]bool{} // "Kind/name" of intermediates the target controls
	if kind == "Deployment" {
		rs, err := d.c.Kube.AppsV1().ReplicaSets(d.ns()).List(ctx, metav1.ListOptions{})
		if err != nil {
			return o, classifyReadErr(err, read{verb: "list", resource: "replicasets", group: "apps", version: "v1", namespace: d.ns()}, StageUnknown)
		}
		sort.Slice(rs.Items, func(i, j int) bool { return rs.Items[j].CreationTimestamp.Before(&rs.Items[i].CreationTimestamp) })
		for i := range rs.Items {
			if controls(&rs.Items[i]) {
				mid["ReplicaSet/"+rs.Items[i].Name] = true
				o.intermediates = append(o.intermediates, &rs.Items[i])
				o.kinds[rs.Items[i].Name] = "ReplicaSet"
				d.ref("ReplicaSet", d.ns(), rs.Items[i].Name)
			}
		}
	} else if kind != "StatefulSet" && kind != "ReplicaSet" {
		jobs, err := d.c.Kube.BatchV1().Jobs(d.ns()).List(ctx, metav1.ListOptions{})
		if err != nil {
			return o, classifyReadErr(err, read{verb: "list", resource: "jobs", group: "batch", version: "v1", namespace: d.ns()}, StageUnknown)
		}
		for i := range jobs.Items {
			if controls(&jobs.Items[i]) {
				mid["Job/"+jobs.Items[i].Name] = true
				o.intermediates = append(o.intermediates, &jobs.Items[i])
				o.kinds[jobs.Items[i].Name] = "Job"
				d.ref("Job", d.ns(), jobs.Items[i].Name)
			}
		}
	}
	pods, err := d.c.Kube.CoreV1().Pods(d.ns()).List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, classifyReadErr(err, read{verb: "list", resource: "pods", version: "v1", namespace: d.ns()}, StageUnknown)
	}
	podNames := map[string]bool{}
	for _, p := range pods.Items {
		c := metav1.GetControllerOf(&p)
		if c == nil {
			continue
		}
		if (c.Kind == kind && c.Name == name) || mid[c.Kind+"/"+c.Name] {
			o.pods = append(o.pods, p)
			podNames[p.Name] = true
		}
	}
	if d.c.Kueue == nil {
		return o, nil
	}
	wls, err := d.c.Kueue.KueueV1beta2().Workloads(d.ns()).List(ctx, metav1.ListOptions{})
	if err != nil {
		r := readWorkloads
		r.namespace = d.ns()
		if err = classifyReadErr(err, r, StageQueued); isAPIMissing(err) {
			return o, nil
		}
		return o, err
	}
	var found []kueue.Workload
	for _, wl := range wls.Items {
		for _, ref := range wl.OwnerReferences {
			if (ref.Kind == kind && ref.Name == name) || (ref.Kind == "Pod" && podNames[ref.Name]) || mid[ref.Kind+"/"+ref.Name] {
				found = append(found, wl)
				break
			}
		}
	}
	// The one that still waits matters: unadmitted first, then the newest.
	sort.SliceStable(found, func(i, j int) bool {
		ai, aj := isTrue(found[i].Status.Conditions, kueue.WorkloadAdmitted), isTrue(found[j].Status.Conditions, kueue.WorkloadAdmitted)
		if ai != aj {
			return !ai
		}
		return found[j].CreationTimestamp.Before(&found[i].CreationTimestamp)
	})
	if len(found) > 0 {
		o.wl = &found[0]
		d.ref("Workload", o.wl.Namespace, o.wl.Name)
	}
	return o, nil
}

// Compile-time reminders of the intermediates' types.
var (
	_ metav1.Object = (*appsv1.ReplicaSet)(nil)
	_ metav1.Object = (*batchv1.Job)(nil)
)

func unsupportedKind(s string) error {
	return fmt.Errorf("unsupported kind %q: use job, workload, pod, deployment, statefulset, replicaset, or a Kueue-integrated kind (jobset, leaderworkerset, rayjob, raycluster, pytorchjob, tfjob, mpijob, xgboostjob, paddlejob, jaxjob, trainjob, appwrapper)", s)
}
