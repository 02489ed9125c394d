package localcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PluginDaemonSet is the fake GPU agent's DaemonSet in SystemNamespace (manifests/fake-device-plugin.yaml),
// the device plugin the plugin-restart hardening row restarts.
const PluginDaemonSet = "fake-device-plugin"

// pluginRestartTimeout bounds each wait of the plugin-restart row: the deletion taking effect, and the
// DaemonSet available again (its pods have terminationGracePeriodSeconds 10 and their image on the node).
const pluginRestartTimeout = 90 * time.Second

// ApplyPluginRestart deletes the fake device plugin's pods, as a node agent's rollout or crash would, so
// that the run that follows starts while they re-register: the suite must wait for them (its settling)
// and sign off GO, not call the path broken. It returns as soon as the DaemonSet shows the restart (fewer
// pods available than desired, or the old pods gone), before the new pods can be Ready, so the run's first
// look finds them restarting. The undo waits until the DaemonSet is fully available again.
func ApplyPluginRestart(ctx context.Context, kube kubernetes.Interface) (Undo, error) {
	return restartPlugin(ctx, kube, pluginRestartTimeout)
}

func restartPlugin(ctx context.Context, kube kubernetes.Interface, timeout time.Duration) (Undo, error) {
	dss, pods := kube.AppsV1().DaemonSets(SystemNamespace), kube.CoreV1().Pods(SystemNamespace)
	ds, err := dss.Get(ctx, PluginDaemonSet, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading DaemonSet %s/%s: %w", SystemNamespace, PluginDaemonSet, err)
	}
	if why := daemonSetUnavailable(ds); why != "" {
		return nil, fmt.Errorf("the fake device plugin must be settled before it is restarted: %s", why)
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("DaemonSet %s/%s: %w", SystemNamespace, PluginDaemonSet, err)
	}
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of DaemonSet %s/%s: %w", SystemNamespace, PluginDaemonSet, err)
	}
	old := map[types.UID]bool{}
	for _, p := range list.Items {
		if !metav1.IsControlledBy(&p, ds) {
			continue
		}
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(p.UID))}); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("deleting plugin pod %s: %w", p.Name, err)
		}
		old[p.UID] = true
	}
	if len(old) == 0 {
		return nil, fmt.Errorf("DaemonSet %s/%s has no pods to restart", SystemNamespace, PluginDaemonSet)
	}
	// unavailable says why the DaemonSet is not fully available ("" when it is); an API error is a reason.
	unavailable := func(ctx context.Context) string {
		ds, err := dss.Get(ctx, PluginDaemonSet, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return daemonSetUnavailable(ds)
	}
	// restarting reports whether the DaemonSet counts fewer pods available than desired.
	restarting := func(ctx context.Context) bool {
		ds, err := dss.Get(ctx, PluginDaemonSet, metav1.GetOptions{})
		return err == nil && daemonSetUnavailable(ds) != ""
	}
	// oldGone reports whether none of the deleted pods is left (false when the pods cannot be read).
	oldGone := func(ctx context.Context) bool {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		return err == nil && !slices.ContainsFunc(list.Items, func(p corev1.Pod) bool { return old[p.UID] })
	}
	undo := func(ctx context.Context) error {
		var why string
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			why = unavailable(ctx)
			return why == "", nil
		})
		if err != nil {
			return fmt.Errorf("the fake device plugin did not come back within %s: %s", timeout, why)
		}
		return nil
	}
	// Polled often: the run must start before the new pods are Ready (a few seconds).
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return restarting(ctx) || oldGone(ctx), nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("the deleted plugin pods did not go within %s: %w", timeout, err), undo(ctx))
	}
	return undo, nil
}

// daemonSetUnavailable says why a DaemonSet is not fully available ("" when it is): its controller has
// not seen its spec yet, or some node lacks an updated, available pod.
func daemonSetUnavailable(ds *appsv1.DaemonSet) string {
	st := ds.Status
	switch {
	case st.ObservedGeneration < ds.Generation:
		return fmt.Sprintf("DaemonSet %s/%s: generation %d not observed yet", ds.Namespace, ds.Name, ds.Generation)
	case st.DesiredNumberScheduled == 0:
		return fmt.Sprintf("DaemonSet %s/%s schedules no pod", ds.Namespace, ds.Name)
	case st.NumberAvailable < st.DesiredNumberScheduled || st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
		return fmt.Sprintf("DaemonSet %s/%s: %d of %d pods available, %d updated", ds.Namespace, ds.Name, st.NumberAvailable, st.DesiredNumberScheduled, st.UpdatedNumberScheduled)
	}
	return ""
}
