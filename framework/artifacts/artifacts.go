// Package artifacts writes evidence into the artifacts directory: a spec namespace's events, objects as
// YAML and pod logs, so a failure can be understood after the cluster is gone.
package artifacts

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
	"sigs.k8s.io/yaml"

	"gpuconform.io/gpuconform/framework/diagnose"
)

// SpecDir returns the directory for one spec's artifacts: <root>/specs/<sanitised spec text>.
func SpecDir(root, specText string) string {
	return filepath.Join(root, "specs", Sanitize(specText))
}

var unsafe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Sanitize makes s safe as a file name (and short enough).
func Sanitize(s string) string {
	s = strings.Trim(unsafe.ReplaceAllString(s, "_"), "_")
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

// DumpNamespace writes events, pods, jobs, claims, Kueue workloads and pod logs of namespace into dir.
// It never fails: what it cannot read becomes a line in errors.txt, because a dump is evidence and
// partial evidence beats none.
func DumpNamespace(ctx context.Context, kube kubernetes.Interface, kq kueueclient.Interface, namespace, selector, dir string) {
	var problems []string
	note := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	write := func(name string, obj any) {
		data, err := yaml.Marshal(obj)
		if err != nil {
			note("marshal %s: %v", name, err)
			return
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			note("write %s: %v", name, err)
		}
	}
	// With a selector (a shared team namespace) only the spec's objects are dumped, and only the events
	// and Workloads about them: the rest of the namespace is other people's.
	opts := metav1.ListOptions{LabelSelector: selector}
	ours := map[string]bool{}
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, opts)
	if err == nil {
		write("pods.yaml", stripManaged(pods))
		for _, p := range pods.Items {
			ours["Pod/"+p.Name] = true
			for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
				for _, previous := range []bool{false, true} {
					raw, err := kube.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, Previous: previous}).DoRaw(ctx)
					if err != nil {
						continue // no previous instance is normal
					}
					suffix := ""
					if previous {
						suffix = ".previous"
					}
					_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("logs-%s-%s%s.txt", p.Name, c.Name, suffix)), raw, 0o644)
				}
			}
		}
	} else {
		note("pods: %v", err)
	}
	if jobs, err := kube.BatchV1().Jobs(namespace).List(ctx, opts); err == nil {
		write("jobs.yaml", stripManaged(jobs))
		for _, j := range jobs.Items {
			ours["Job/"+j.Name] = true
		}
	} else {
		note("jobs: %v", err)
	}
	if claims, err := kube.ResourceV1().ResourceClaims(namespace).List(ctx, opts); err == nil {
		write("resourceclaims.yaml", stripManaged(claims))
		for _, c := range claims.Items {
			ours["ResourceClaim/"+c.Name] = true
		}
	}
	if kq != nil {
		if wls, err := kq.KueueV1beta2().Workloads(namespace).List(ctx, metav1.ListOptions{}); err == nil {
			if selector != "" {
				wls.Items = slices.DeleteFunc(wls.Items, func(w kueue.Workload) bool {
					return !slices.ContainsFunc(w.OwnerReferences, func(o metav1.OwnerReference) bool { return ours[o.Kind+"/"+o.Name] })
				})
			}
			for _, w := range wls.Items {
				ours["Workload/"+w.Name] = true
			}
			write("workloads.yaml", stripManaged(wls))
		}
		if lqs, err := kq.KueueV1beta2().LocalQueues(namespace).List(ctx, metav1.ListOptions{}); err == nil {
			write("localqueues.yaml", stripManaged(lqs))
		}
	}
	if ev, err := kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{}); err == nil {
		if selector != "" {
			ev.Items = slices.DeleteFunc(ev.Items, func(e corev1.Event) bool { return !ours[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name] })
		}
		slices.SortStableFunc(ev.Items, func(a, b corev1.Event) int { return diagnose.EventTime(a).Compare(diagnose.EventTime(b)) })
		var b strings.Builder
		for _, e := range ev.Items {
			fmt.Fprintf(&b, "%s %s %s/%s %s: %s (x%d)\n", diagnose.EventTime(e).Format("15:04:05"), e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message, max(e.Count, 1))
		}
		_ = os.WriteFile(filepath.Join(dir, "events.txt"), []byte(b.String()), 0o644)
	} else {
		note("events: %v", err)
	}
	if len(problems) > 0 {
		_ = os.WriteFile(filepath.Join(dir, "errors.txt"), []byte(strings.Join(problems, "\n")+"\n"), 0o644)
	}
}

// WriteJSON writes v as indented JSON into dir/name (dir is created) and returns the file's path.
func WriteJSON(dir, name string, v any) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, data, 0o644)
}

// stripManaged drops managedFields, which triple a dump's size and help nobody read it.
func stripManaged(list runtime.Object) runtime.Object {
	if l, ok := list.(*corev1.PodList); ok {
		for i := range l.Items {
			l.Items[i].ManagedFields = nil
		}
	}
	return list
}
