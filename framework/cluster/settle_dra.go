package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/internal/podcond"
)

// A DRA driver's kubelet plugin that restarts (a new pod, a driver upgrade, a kubelet restart that makes
// it register again) publishes its node's ResourceSlices anew: the kubelet wipes the slices of a plugin
// that stayed unregistered past its wiping delay (30 s, see SettledFor), and the new plugin publishes
// them once it runs. A run that starts in that gap finds the DRA path on fewer nodes than it has, and
// every spec that needs two nodes with devices is left unexercised while the cluster is only settling.
// CheckDRA waits for such nodes within the same window as the device plugins.

// CheckDRA is one poll of the stack-ready wait for the DRA path whose drivers are given: nil when no
// node's kubelet plugin of those drivers is (re)publishing, else an error naming the nodes. A node is
// waited for when it publishes no device of a driver while a pod of that driver's plugin DaemonSet on it
// is being deleted, not Ready, or started within the window, and the node is a GPU node (a GPU label)
// or published the driver's devices at an earlier poll of this run. Once the window has passed nothing
// settles.
func (s *Settle) CheckDRA(ctx context.Context, kube kubernetes.Interface, snap Snapshot, drivers []string, now time.Time) error {
	elapsed := now.Sub(s.start)
	published := publishingNodes(snap.ResourceSlices)
	for _, d := range drivers {
		for _, n := range published[d] {
			s.published[draKey(d, n)] = true
		}
	}
	var settling map[string]string
	if elapsed < s.window {
		settling = s.inspectDRA(ctx, kube, snap, drivers, published, now)
	}
	s.recordDRA(published, settling, elapsed)
	if len(settling) == 0 {
		return nil
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(settling)) {
		driver, node, _ := strings.Cut(k, "\x00")
		parts = append(parts, fmt.Sprintf("%s on %s (%s)", driver, node, settling[k]))
	}
	return fmt.Errorf("DRA driver publishing its devices again: %s; the dra path is judged %s after the run started at the latest",
		strings.Join(firstN(parts, 3), ", "), s.window)
}

// draKey names one driver on one node in Settle's maps.
func draKey(driver, node string) string { return driver + "\x00" + node }

// inspectDRA lists the DaemonSets once and, for each that runs a plugin of one of drivers, its pods
// (one request each), and returns the driver/node keys that are settling with why.
func (s *Settle) inspectDRA(ctx context.Context, kube kubernetes.Interface, snap Snapshot, drivers []string, published map[string][]string, now time.Time) map[string]string {
	list, err := kube.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		s.note("dra-daemonsets", fmt.Sprintf("cannot list DaemonSets to find the DRA drivers' kubelet plugins (%v): nodes whose plugin was restarting were judged as they stood", err))
		return nil
	}
	gpuNode := map[string]bool{}
	for _, n := range snap.Nodes {
		gpuNode[n.Name] = labelledGPU(n)
	}
	settling := map[string]string{}
	for _, ds := range list.Items {
		var mine []string
		for _, d := range drivers {
			if mountsPlugin(ds.Spec.Template.Spec, d) {
				mine = append(mine, d)
			}
		}
		if len(mine) == 0 {
			continue
		}
		pods, err := daemonSetPods(ctx, kube, ds)
		if err != nil {
			s.note("dra-pods/"+ds.Namespace+"/"+ds.Name, fmt.Sprintf("cannot list the pods of DaemonSet %s/%s, a DRA kubelet plugin (%v): nodes whose plugin was restarting were judged as they stood", ds.Namespace, ds.Name, err))
			continue
		}
		for _, p := range pods {
			node := p.Spec.NodeName
			if node == "" {
				continue
			}
			for _, d := range mine {
				key := draKey(d, node)
				if slices.Contains(published[d], node) || !gpuNode[node] && !s.published[key] {
					continue
				}
				if why := restartingWhy(p, now, s.window); why != "" {
					settling[key] = why
				}
			}
		}
	}
	return settling
}

// restartingWhy says why a plugin pod is still coming up: being deleted, not Ready, or started within
// the window; "" when it is none of these.
func restartingWhy(p corev1.Pod, now time.Time, window time.Duration) string {
	name := p.Namespace + "/" + p.Name
	age := now.Sub(podStarted(p))
	switch {
	case p.DeletionTimestamp != nil:
		return fmt.Sprintf("pod %s was being deleted", name)
	case !podcond.Ready(&p):
		return fmt.Sprintf("pod %s was not Ready, %s old", name, age.Round(time.Second))
	case age < window:
		return fmt.Sprintf("pod %s was Ready, %s old, and the node published none of its devices", name, age.Round(time.Second))
	}
	return ""
}

// daemonSetPods lists the pods ds controls, by its selector and owner.
func daemonSetPods(ctx context.Context, kube kubernetes.Interface, ds appsv1.DaemonSet) ([]corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("its selector: %w", err)
	}
	list, err := kube.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "DaemonSet" && ref.Name == ds.Name {
			out = append(out, p)
		}
	}
	return out, nil
}

// recordDRA updates the DRA waits from one poll: a driver/node settling now is waited for; one that
// publishes again is done.
func (s *Settle) recordDRA(published map[string][]string, settling map[string]string, elapsed time.Duration) {
	for _, k := range slices.Sorted(maps.Keys(settling)) {
		w := s.waits[k]
		if w == nil {
			driver, node, _ := strings.Cut(k, "\x00")
			w = &settleWait{first: settling[k], driver: driver, node: node}
			s.waits[k] = w
			s.order = append(s.order, k)
		}
		w.done = false
	}
	for _, k := range s.order {
		w := s.waits[k]
		if w.driver == "" {
			continue
		}
		w.last = elapsed
		if w.done {
			continue
		}
		if slices.Contains(published[w.driver], w.node) {
			w.done, w.after, w.state = true, elapsed, ""
		} else if why, still := settling[k]; still {
			w.state = why
		}
	}
}

// draNote is what the record says of one DRA wait.
func (w *settleWait) draNote() string {
	if w.done {
		return fmt.Sprintf("DRA driver %s on %s published its devices again %s after the run started (when first seen, %s); discovery waited for it instead of leaving the node out of the dra path",
			w.driver, w.node, w.after.Round(time.Second), w.first)
	}
	return fmt.Sprintf("DRA driver %s on %s had published no device %s after the run started (when first seen, %s; at the last look, %s): the dra path was judged without the node",
		w.driver, w.node, w.last.Round(time.Second), w.first, w.state)
}
