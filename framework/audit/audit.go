// Package audit finds what the suite left behind. At the end of a run, anything carrying this run's label
// is a leak and fails the run; at the start, anything carrying another run's label is a leftover and
// the run refuses to start unless told to clean it.
package audit

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	"gpuconform.io/gpuconform/fixtures"
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

// Run lists every kind the suite creates and sorts labelled objects into this run's and others'. kq may
// be nil when Kueue is absent.
func Run(ctx context.Context, kube kubernetes.Interface, kq kueueclient.Interface, runID string) Result {
	return RunIn(ctx, kube, kq, runID, "", "")
}

// RunIn is Run for team-namespace mode when namespace is set: the suite created no namespace and no
// cluster-scoped object, so it lists the namespaced kinds it creates (pods, Jobs, claim templates,
// claims) in that namespace, and the node marks. helperNamespace, when set, is where the suite's helper
// pods run outside the spec namespaces; its labelled pods are listed too.
func RunIn(ctx context.Context, kube kubernetes.Interface, kq kueueclient.Interface, runID, namespace, helperNamespace string) Result {
	res := Result{RunID: runID}
	sel := metav1.ListOptions{LabelSelector: fixtures.RunLabel}
	add := func(kind, ns, name string, lbls map[string]string, detail string) {
		f := Finding{Kind: kind, Namespace: ns, Name: name, Run: lbls[fixtures.RunLabel], Detail: detail}
		if f.Run == runID {
			res.Ours = append(res.Ours, f)
		} else {
			res.Others = append(res.Others, f)
		}
	}
	fail := func(kind string, err error) {
		if err != nil && !apierrors.IsNotFound(err) && !isNoMatch(err) {
			res.Errors = append(res.Errors, fmt.Sprintf("listing %s: %v", kind, err))
		}
	}

	if helperNamespace != "" && helperNamespace != namespace {
		if l, err := kube.CoreV1().Pods(helperNamespace).List(ctx, sel); err == nil {
			for _, o := range l.Items {
				add("Pod", o.Namespace, o.Name, o.Labels, "helper")
			}
		} else {
			fail("pods in "+helperNamespace, err)
		}
	}
	if namespace != "" {
		listNamespaced(ctx, kube, namespace, sel, add, fail)
		listNodeMarks(ctx, kube, runID, &res, fail)
		sortFindings(res.Ours)
		sortFindings(res.Others)
		return res
	}
	if l, err := kube.CoreV1().Namespaces().List(ctx, sel); err == nil {
		for _, o := range l.Items {
			detail := ""
			if o.DeletionTimestamp != nil {
				detail = "terminating"
			}
			add("Namespace", "", o.Name, o.Labels, detail)
		}
	} else {
		fail("namespaces", err)
	}
	if l, err := kube.ResourceV1().ResourceClaims("").List(ctx, sel); err == nil {
		for _, o := range l.Items {
			add("ResourceClaim", o.Namespace, o.Name, o.Labels, "")
		}
	} else {
		fail("resourceclaims", err)
	}
	if l, err := kube.CoreV1().PersistentVolumes().List(ctx, sel); err == nil {
		for _, o := range l.Items {
			add("PersistentVolume", "", o.Name, o.Labels, string(o.Status.Phase))
		}
	} else {
		fail("persistentvolumes", err)
	}
	if l, err := kube.ResourceV1().DeviceClasses().List(ctx, sel); err == nil {
		for _, o := range l.Items {
			add("DeviceClass", "", o.Name, o.Labels, "")
		}
	} else {
		fail("deviceclasses", err)
	}
	if kq != nil {
		if l, err := kq.KueueV1beta2().ClusterQueues().List(ctx, sel); err == nil {
			for _, o := range l.Items {
				add("ClusterQueue", "", o.Name, o.Labels, "")
			}
		} else {
			fail("clusterqueues", err)
		}
		if l, err := kq.KueueV1beta2().ResourceFlavors().List(ctx, sel); err == nil {
			for _, o := range l.Items {
				add("ResourceFlavor", "", o.Name, o.Labels, "")
			}
		} else {
			fail("resourceflavors", err)
		}
		if l, err := kq.KueueV1beta2().WorkloadPriorityClasses().List(ctx, sel); err == nil {
			for _, o := range l.Items {
				add("WorkloadPriorityClass", "", o.Name, o.Labels, "")
			}
		} else {
			fail("workloadpriorityclasses", err)
		}
	}
	if rules, err := faults.ListTaintRules(ctx, kube); err == nil {
		for name, run := range rules {
			add("DeviceTaintRule", "", name, map[string]string{fixtures.RunLabel: run}, "")
		}
	} else {
		fail("devicetaintrules", err)
	}
	listNodeMarks(ctx, kube, runID, &res, fail)
	sortFindings(res.Ours)
	sortFindings(res.Others)
	return res
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

// listNamespaced lists the namespaced kinds the suite creates in one namespace.
func listNamespaced(ctx context.Context, kube kubernetes.Interface, ns string, sel metav1.ListOptions,
	add func(kind, ns, name string, lbls map[string]string, detail string), fail func(string, error)) {
	if l, err := kube.CoreV1().Pods(ns).List(ctx, sel); err == nil {
		for _, o := range l.Items {
			add("Pod", o.Namespace, o.Name, o.Labels, "")
		}
	} else {
		fail("pods", err)
	}
	if l, err := kube.BatchV1().Jobs(ns).List(ctx, sel); err == nil {
		for _, o := range l.Items {
			add("Job", o.Namespace, o.Name, o.Labels, "")
		}
	} else {
		fail("jobs", err)
	}
	if l, err := kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, sel); err == nil {
		for _, o := range l.Items {
			add("PersistentVolumeClaim", o.Namespace, o.Name, o.Labels, "")
		}
	} else {
		fail("persistentvolumeclaims", err)
	}
	if l, err := kube.ResourceV1().ResourceClaimTemplates(ns).List(ctx, sel); err == nil {
		for _, o := range l.Items {
			add("ResourceClaimTemplate", o.Namespace, o.Name, o.Labels, "")
		}
	} else {
		fail("resourceclaimtemplates", err)
	}
	if l, err := kube.ResourceV1().ResourceClaims(ns).List(ctx, sel); err == nil {
		for _, o := range l.Items {
			add("ResourceClaim", o.Namespace, o.Name, o.Labels, "")
		}
	} else {
		fail("resourceclaims", err)
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
	sort.Slice(fs, func(i, j int) bool { return fs[i].String() < fs[j].String() })
}

func isNoMatch(err error) bool {
	s := err.Error()
	return strings.Contains(s, "could not find the requested resource") || strings.Contains(s, "no matches for kind")
}

// Delete removes the findings: objects are deleted, node marks are removed. It returns one error
// naming every failure. Only objects carrying the run label are ever found, so only those are deleted.
func Delete(ctx context.Context, kube kubernetes.Interface, kq kueueclient.Interface, fs []Finding) error {
	var errs []string
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	for _, f := range fs {
		var err error
		switch f.Kind {
		case "Namespace":
			err = kube.CoreV1().Namespaces().Delete(ctx, f.Name, opts)
		case "ResourceClaim":
			err = kube.ResourceV1().ResourceClaims(f.Namespace).Delete(ctx, f.Name, opts)
		case "ResourceClaimTemplate":
			err = kube.ResourceV1().ResourceClaimTemplates(f.Namespace).Delete(ctx, f.Name, opts)
		case "Pod":
			err = kube.CoreV1().Pods(f.Namespace).Delete(ctx, f.Name, opts)
		case "Job":
			err = kube.BatchV1().Jobs(f.Namespace).Delete(ctx, f.Name, opts)
		case "DeviceClass":
			err = kube.ResourceV1().DeviceClasses().Delete(ctx, f.Name, opts)
		case "ClusterQueue", "ResourceFlavor", "WorkloadPriorityClass":
			if kq == nil {
				err = fmt.Errorf("no Kueue client")
				break
			}
			switch f.Kind {
			case "ClusterQueue":
				err = kq.KueueV1beta2().ClusterQueues().Delete(ctx, f.Name, opts)
			case "ResourceFlavor":
				err = kq.KueueV1beta2().ResourceFlavors().Delete(ctx, f.Name, opts)
			default:
				err = kq.KueueV1beta2().WorkloadPriorityClasses().Delete(ctx, f.Name, opts)
			}
		case "PersistentVolume":
			err = kube.CoreV1().PersistentVolumes().Delete(ctx, f.Name, opts)
		case "PersistentVolumeClaim":
			err = kube.CoreV1().PersistentVolumeClaims(f.Namespace).Delete(ctx, f.Name, opts)
		case "DeviceTaintRule":
			err = faults.DeleteTaintRule(ctx, kube, f.Name)
		case "NodeFault":
			if slices.Contains(faults.ParseMarks(f.Detail), string(faults.StopNode)) {
				err = fmt.Errorf("node %s was stopped by run %s: start it (a run with the same fault provider and --cleanup-leftovers does), then clear the mark", f.Name, f.Run)
				break
			}
			if slices.Contains(faults.ParseMarks(f.Detail), string(faults.OutOfService)) {
				if err = faults.RemoveOutOfService(ctx, kube, f.Name); err != nil {
					break
				}
			}
			err = clearNode(ctx, kube, f.Name)
		case "NodeTaint", "NodeCordon", "NodeAnnotation", "NodeLabel":
			err = clearNode(ctx, kube, f.Name)
		default:
			err = fmt.Errorf("unknown kind %s", f.Kind)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Sprintf("%s: %v", f, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("could not delete %d leftover(s):\n  - %s", len(errs), strings.Join(errs, "\n  - "))
	}
	return nil
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
