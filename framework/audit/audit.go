// Package audit finds what the suite left behind. At the end of a run, anything carrying this run's label
// is a leak and fails the run; at the start, anything carrying another run's label is a leftover and
// the run refuses to start unless told to clean it.
package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/faults"
)

// Node marks the disruptive specs leave (and must remove).
const (
	// NodeTaintPrefix prefixes every taint the suite puts on nodes.
	NodeTaintPrefix = "gpuconform.io/"
	// UnhealthyDevicesAnnotation tells the fake device plugin that devices are unhealthy.
	UnhealthyDevicesAnnotation = "gpuconform.io/unhealthy-devices"
	// FaultRunAnnotation names the run that injected a fault on the node (framework/faults).
	FaultRunAnnotation = faults.FaultRunAnnotation
)

// Finding is one labelled object (or node mark) found on the cluster.
type Finding struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Run is the run label value ("" when the mark carries no run).
	Run string `json:"run"`
	// Detail says what exactly was found (e.g. a taint).
	Detail string `json:"detail,omitempty"`
}

func (f Finding) String() string {
	s := f.Kind + " "
	if f.Namespace != "" {
		s += f.Namespace + "/"
	}
	s += f.Name
	if f.Run != "" {
		s += " (run " + f.Run + ")"
	}
	if f.Detail != "" {
		s += ": " + f.Detail
	}
	return s
}

// Result is one audit.
type Result struct {
	// RunID is the run audited for.
	RunID string `json:"runID"`
	// Ours are objects of this run.
	Ours []Finding `json:"ours"`
	// Others are objects of other runs (or unattributed marks): leftovers.
	Others []Finding `json:"others"`
	// Errors are kinds that could not be listed (absent APIs are not errors).
	Errors []string `json:"errors,omitempty"`
}

// Clean reports whether nothing of this run is left.
func (r Result) Clean() bool { return len(r.Ours) == 0 }

// Summary renders findings for a failure message.
func Summary(fs []Finding) string {
	lines := make([]string, len(fs))
	for i, f := range fs {
		lines[i] = "  - " + f.String()
	}
	return strings.Join(lines, "\n")
}

// Objects lists and deletes objects of any kind: e2e-framework's klient in a run (For), a fake in tests.
type Objects interface {
	// List fills list (an unstructured list naming its kind) from namespace; "" lists all namespaces
	// or a cluster-scoped kind.
	List(ctx context.Context, namespace string, list k8s.ObjectList, opts ...resources.ListOption) error
	// Delete deletes obj (its kind, namespace and name).
	Delete(ctx context.Context, obj k8s.Object, opts ...resources.DeleteOption) error
}

// Auditor finds and deletes what runs left behind.
type Auditor struct {
	// Objects lists and deletes the kinds the suite creates.
	Objects Objects
	// Kube reads and updates nodes: the suite's marks on them are fields, not objects.
	Kube kubernetes.Interface
	// Kueue says whether Kueue's API is served; its kinds are listed only then.
	Kueue bool
	// Owner, when set, audits another creator's objects instead of the suite's.
	Owner *Owner
}

// Owner is a creator other than the suite (the in-cluster runner, whose objects the suite inside must
// not count as its leaks): the label whose value names its run, and the kinds it labels. An audit for
// it lists those kinds only, not the suite's kinds or node marks.
type Owner struct {
	Label string
	// Cluster kinds are listed cluster-wide, Namespaced kinds in RunIn's namespace ("" for all).
	Cluster, Namespaced []schema.GroupVersionKind
}

// For audits through c's klient, which shares the counted connection of c's typed clients.
func For(c *cluster.Clients, kueuePresent bool) Auditor {
	return Auditor{Objects: klientObjects{c}, Kube: c.Kube, Kueue: kueuePresent}
}

type klientObjects struct{ c *cluster.Clients }

func (k klientObjects) List(ctx context.Context, ns string, list k8s.ObjectList, opts ...resources.ListOption) error {
	return k.c.ResourcesIn(ns).List(ctx, list, opts...)
}

func (k klientObjects) Delete(ctx context.Context, obj k8s.Object, opts ...resources.DeleteOption) error {
	return k.c.Resources.Delete(ctx, obj, opts...)
}

// The kinds the suite creates, by the names findings carry. DeviceTaintRule is resource.k8s.io/v1 as
// framework/faults creates it; client-go has no v1 type for it yet, hence unstructured lists.
var (
	podKind                   = corev1.SchemeGroupVersion.WithKind("Pod")
	jobKind                   = batchv1.SchemeGroupVersion.WithKind("Job")
	pvcKind                   = corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim")
	serviceKind               = corev1.SchemeGroupVersion.WithKind("Service")
	deploymentKind            = appsv1.SchemeGroupVersion.WithKind("Deployment")
	hpaKind                   = autoscalingv2.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler")
	claimTemplateKind         = resourcev1.SchemeGroupVersion.WithKind("ResourceClaimTemplate")
	claimKind                 = resourcev1.SchemeGroupVersion.WithKind("ResourceClaim")
	namespaceKind             = corev1.SchemeGroupVersion.WithKind("Namespace")
	pvKind                    = corev1.SchemeGroupVersion.WithKind("PersistentVolume")
	deviceClassKind           = resourcev1.SchemeGroupVersion.WithKind("DeviceClass")
	deviceTaintRuleKind       = resourcev1.SchemeGroupVersion.WithKind("DeviceTaintRule")
	clusterQueueKind          = kueue.GroupVersion.WithKind("ClusterQueue")
	resourceFlavorKind        = kueue.GroupVersion.WithKind("ResourceFlavor")
	workloadPriorityClassKind = kueue.GroupVersion.WithKind("WorkloadPriorityClass")

	// namespacedKinds are listed in a team namespace.
	namespacedKinds = []schema.GroupVersionKind{podKind, jobKind, pvcKind, serviceKind, claimTemplateKind, claimKind, deploymentKind, hpaKind}
	// clusterKinds are listed when the suite creates its own namespaces (claims across all of them).
	clusterKinds = []schema.GroupVersionKind{namespaceKind, claimKind, pvKind, deviceClassKind}
	// kueueKinds are listed where Kueue is installed.
	kueueKinds = []schema.GroupVersionKind{clusterQueueKind, resourceFlavorKind, workloadPriorityClassKind}
	// deletable are the kinds Delete removes as objects, by finding kind.
	deletable = kindsByName(namespacedKinds, clusterKinds, kueueKinds, []schema.GroupVersionKind{deviceTaintRuleKind})
)

func kindsByName(groups ...[]schema.GroupVersionKind) map[string]schema.GroupVersionKind {
	out := map[string]schema.GroupVersionKind{}
	for _, g := range groups {
		for _, k := range g {
			out[k.Kind] = k
		}
	}
	return out
}

// Run lists every kind the suite creates and sorts labelled objects into this run's and others'.
func (a Auditor) Run(ctx context.Context, runID string) Result {
	return a.RunIn(ctx, runID, "", "")
}

// RunIn is Run for team-namespace mode when namespace is set: the suite created no namespace and no
// cluster-scoped object, so it lists the namespaced kinds it creates (pods, Jobs, claim templates,
// claims) in that namespace, and the node marks. helperNamespace, when set, is where the suite's helper
// pods run outside the spec namespaces; its labelled pods are listed too.
func (a Auditor) RunIn(ctx context.Context, runID, namespace, helperNamespace string) Result {
	res := Result{RunID: runID}
	label := fixtures.RunLabel
	if a.Owner != nil {
		label = a.Owner.Label
	}
	add := func(f Finding) {
		if f.Run == runID {
			res.Ours = append(res.Ours, f)
		} else {
			res.Others = append(res.Others, f)
		}
	}
	fail := func(what string, err error) {
		if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) && !isNoMatch(err) {
			res.Errors = append(res.Errors, fmt.Sprintf("listing %s: %v", what, err))
		}
	}
	list := func(gvk schema.GroupVersionKind, ns, what, detail string) {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := a.Objects.List(ctx, ns, l, resources.WithLabelSelector(label)); err != nil {
			fail(what, err)
			return
		}
		for _, o := range l.Items {
			d := cmp.Or(detail, objectDetail(gvk, o))
			add(Finding{Kind: gvk.Kind, Namespace: o.GetNamespace(), Name: o.GetName(), Run: o.GetLabels()[label], Detail: d})
		}
	}
	if a.Owner != nil {
		for _, k := range a.Owner.Cluster {
			list(k, "", resourceName(k), "")
		}
		for _, k := range a.Owner.Namespaced {
			list(k, namespace, resourceName(k), "")
		}
		sortFindings(res.Ours)
		sortFindings(res.Others)
		return res
	}

	if helperNamespace != "" && helperNamespace != namespace {
		list(podKind, helperNamespace, "pods in "+helperNamespace, "helper")
	}
	kinds := namespacedKinds
	if namespace == "" {
		kinds = clusterKinds
		if a.Kueue {
			kinds = slices.Concat(kinds, kueueKinds)
		}
		kinds = append(kinds, deviceTaintRuleKind)
	}
	for _, k := range kinds {
		list(k, namespace, resourceName(k), "")
	}
	listNodeMarks(ctx, a.Kube, runID, &res, fail)
	sortFindings(res.Ours)
	sortFindings(res.Others)
	return res
}

// objectDetail is what a finding of kind says besides its name: a terminating namespace, a
// PersistentVolume's phase.
func objectDetail(gvk schema.GroupVersionKind, o unstructured.Unstructured) string {
	switch gvk {
	case namespaceKind:
		if o.GetDeletionTimestamp() != nil {
			return "terminating"
		}
	case pvKind:
		phase, _, _ := unstructured.NestedString(o.Object, "status", "phase")
		return phase
	}
	return ""
}

// resourceName is the kind's resource, for messages ("resourceclaims").
func resourceName(gvk schema.GroupVersionKind) string {
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural.Resource
}

// Delete removes the findings: objects are deleted, node marks are removed. It returns one error
// naming every failure. Only objects carrying the run label are ever found, so only those are deleted.
func (a Auditor) Delete(ctx context.Context, fs []Finding) error {
	var errs []string
	for _, f := range fs {
		isMark, err := deleteNodeMark(ctx, a.Kube, f)
		if !isMark {
			err = a.deleteObject(ctx, f)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Sprintf("%s: %v", f, err))
		}
	}
	return joinDeleteErrors(errs)
}

func (a Auditor) deleteObject(ctx context.Context, f Finding) error {
	gvk, ok := deletable[f.Kind]
	if a.Owner != nil {
		gvk, ok = kindsByName(a.Owner.Cluster, a.Owner.Namespaced)[f.Kind]
	}
	if !ok {
		return fmt.Errorf("unknown kind %s", f.Kind)
	}
	if gvk.Group == kueue.GroupVersion.Group && !a.Kueue {
		return errors.New("the Kueue API is not served")
	}
	o := &unstructured.Unstructured{}
	o.SetGroupVersionKind(gvk)
	o.SetNamespace(f.Namespace)
	o.SetName(f.Name)
	return a.Objects.Delete(ctx, o, resources.WithDeletePropagation(string(metav1.DeletePropagationBackground)))
}

// deleteNodeMark removes a node mark; isMark is false for any other finding.
func deleteNodeMark(ctx context.Context, kube kubernetes.Interface, f Finding) (isMark bool, err error) {
	switch f.Kind {
	case "NodeFault":
		// The finding's detail is the marks as listed; a restore (the leftover check's, before it deletes)
		// may have undone and removed some since, so the node's marks now decide.
		n, err := kube.CoreV1().Nodes().Get(ctx, f.Name, metav1.GetOptions{})
		if err != nil {
			return true, err
		}
		marks := faults.ParseMarks(n.Annotations[faults.FaultsAnnotation])
		if slices.Contains(marks, string(faults.StopNode)) {
			return true, fmt.Errorf("node %s was stopped by run %s: start it (a run with the same fault provider and --cleanup-leftovers does), then clear the mark", f.Name, f.Run)
		}
		if slices.Contains(marks, string(faults.OutOfService)) {
			if err := faults.RemoveOutOfService(ctx, kube, f.Name); err != nil {
				return true, err
			}
		}
		return true, clearNode(ctx, kube, f.Name)
	case "NodeTaint", "NodeCordon", "NodeAnnotation", "NodeLabel":
		return true, clearNode(ctx, kube, f.Name)
	}
	return false, nil
}

func joinDeleteErrors(errs []string) error {
	if len(errs) > 0 {
		return fmt.Errorf("could not delete %d leftover(s):\n  - %s", len(errs), strings.Join(errs, "\n  - "))
	}
	return nil
}

func listNodeMarks(ctx context.Context, kube kubernetes.Interface, runID string, res *Result, fail func(string, error)) {
	l, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fail("nodes", err)
		return
	}
	for _, n := range l.Items {
		for _, f := range nodeMarks(n) {
			if f.Run == runID {
				res.Ours = append(res.Ours, f)
			} else {
				res.Others = append(res.Others, f)
			}
		}
	}
}

// nodeMarks returns what the suite may have left on a node: its taints, a cordon it made (recorded by
// the run label on the node), the unhealthy-devices annotation.
func nodeMarks(n corev1.Node) []Finding {
	run := cmp.Or(n.Labels[fixtures.RunLabel], n.Annotations[fixtures.RunLabel], n.Annotations[FaultRunAnnotation])
	var out []Finding
	for _, t := range n.Spec.Taints {
		if strings.HasPrefix(t.Key, NodeTaintPrefix) {
			out = append(out, Finding{Kind: "NodeTaint", Name: n.Name, Run: run, Detail: fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)})
		}
	}
	if n.Spec.Unschedulable && run != "" {
		out = append(out, Finding{Kind: "NodeCordon", Name: n.Name, Run: run, Detail: "cordoned by the suite"})
	}
	if v := n.Annotations[faults.FaultsAnnotation]; v != "" {
		out = append(out, Finding{Kind: "NodeFault", Name: n.Name, Run: run, Detail: v})
	}
	if v, ok := n.Annotations[UnhealthyDevicesAnnotation]; ok {
		out = append(out, Finding{Kind: "NodeAnnotation", Name: n.Name, Run: run, Detail: UnhealthyDevicesAnnotation + "=" + v})
	}
	if run != "" && len(out) == 0 {
		out = append(out, Finding{Kind: "NodeLabel", Name: n.Name, Run: run, Detail: "run label left on node"})
	}
	return out
}

func sortFindings(fs []Finding) {
	slices.SortFunc(fs, func(a, b Finding) int { return strings.Compare(a.String(), b.String()) })
}

func isNoMatch(err error) bool {
	s := err.Error()
	return strings.Contains(s, "could not find the requested resource") || strings.Contains(s, "no matches for kind")
}

// clearNode removes the suite's taints, its cordon, the unhealthy-devices annotation and the run marks.
func clearNode(ctx context.Context, kube kubernetes.Interface, name string) error {
	n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	run := n.Labels[fixtures.RunLabel] + n.Annotations[fixtures.RunLabel]
	var taints []corev1.Taint
	for _, t := range n.Spec.Taints {
		if !strings.HasPrefix(t.Key, NodeTaintPrefix) {
			taints = append(taints, t)
		}
	}
	n.Spec.Taints = taints
	if run != "" {
		n.Spec.Unschedulable = false // only a cordon the suite recorded as its own
	}
	delete(n.Annotations, UnhealthyDevicesAnnotation)
	delete(n.Annotations, FaultRunAnnotation)
	delete(n.Annotations, faults.FaultsAnnotation)
	delete(n.Annotations, fixtures.RunLabel)
	delete(n.Labels, fixtures.RunLabel)
	_, err = kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	return err
}
