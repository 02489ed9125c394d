package localcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// The gpu-agent-scheduled-nowhere hardening row: the fake GPU agent's DaemonSet given a nodeSelector no
// node matches, as a GPU operator's label migration that the nodes did not follow leaves it. The nodes
// keep their nvidia.com/gpu capacity with nothing allocatable and the kubelet wipes the DRA slices; the
// run must stop in setup at once, naming the DaemonSet, why it runs nowhere and the fix, instead of
// waiting out its StackReady budget.

// AgentNowhereLabel is the node label the row's nodeSelector asks for: no node of the local cluster has it.
const AgentNowhereLabel = "gpuconform.io/hardening-scheduled-nowhere"

// agentGPUResource is the device plugin resource the fake agent advertises (manifests/fake-device-plugin.yaml).
const agentGPUResource corev1.ResourceName = "nvidia.com/gpu"

// agentNowhere is the row's set-up, its waits adjustable for tests.
type agentNowhere struct {
	kube kubernetes.Interface
	// poll, gone and back: how often to look, how long the agent's pods, devices and slices may take to
	// go (the pods' grace period, a node status update, the kubelet's wipe of the slices: kubeletWipeDelay
	// and wipeMargin), and how long the undo's roll back may take (agentRollout).
	poll, gone, back time.Duration
}

// ApplyAgentScheduledNowhere patches the fake agent's DaemonSet to a nodeSelector on AgentNowhereLabel
// and returns once its controller schedules it nowhere, its pods are gone, no node that served devices
// serves any and no node that published DRA slices does. The undo takes the nodeSelector away and waits
// until the DaemonSet is available again and those nodes serve and publish their devices again.
func ApplyAgentScheduledNowhere(ctx context.Context, kube kubernetes.Interface) (Undo, error) {
	return agentNowhere{kube: kube, poll: 2 * time.Second, gone: kubeletWipeDelay + wipeMargin + time.Minute, back: agentRollout}.apply(ctx)
}

func (a agentNowhere) apply(ctx context.Context) (Undo, error) {
	dss, err := agentDaemonSets(ctx, a.kube)
	if err != nil {
		return nil, err
	}
	for _, ds := range dss {
		if _, ok := ds.Spec.Template.Spec.NodeSelector[AgentNowhereLabel]; ok {
			return nil, fmt.Errorf("DaemonSet %s/%s already selects nodes by %s: a previous run was not undone", SystemNamespace, ds.Name, AgentNowhereLabel)
		}
		if why := daemonSetUnavailable(&ds); why != "" {
			return nil, fmt.Errorf("the fake agent must be settled before it is scheduled nowhere: %s", why)
		}
	}
	serving, err := a.servingNodes(ctx)
	if err != nil {
		return nil, err
	}
	publishing, err := draUnregistered{kube: a.kube}.publishingNodes(ctx)
	if err != nil {
		return nil, err
	}
	if len(serving) == 0 {
		return nil, fmt.Errorf("no node serves %s: is the fake agent running?", agentGPUResource)
	}
	if err := a.patchSelector(ctx, `"true"`); err != nil {
		return nil, err
	}
	undo := func(ctx context.Context) error {
		if err := a.patchSelector(ctx, "null"); err != nil {
			return err
		}
		var why string
		err := wait.PollUntilContextTimeout(ctx, a.poll, a.back, true, func(ctx context.Context) (bool, error) {
			why = a.notBack(ctx, serving, publishing)
			return why == "", nil
		})
		if err != nil {
			return fmt.Errorf("the fake agent's nodeSelector is restored, but it did not come back within %s: %s", a.back, why)
		}
		return nil
	}
	var why string
	err = wait.PollUntilContextTimeout(ctx, a.poll, a.gone, true, func(ctx context.Context) (bool, error) {
		why = a.notGone(ctx, serving, publishing)
		return why == "", nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("the fake agent scheduled nowhere had not gone within %s: %s", a.gone, why), undo(ctx))
	}
	return undo, nil
}

// patchSelector sets the nodeSelector entry AgentNowhereLabel of the agent's pod template to value (a
// JSON value; null removes it), leaving the template's other entries.
func (a agentNowhere) patchSelector(ctx context.Context, value string) error {
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:%s}}}}}`, AgentNowhereLabel, value)
	dss, err := agentDaemonSets(ctx, a.kube)
	if err != nil {
		return err
	}
	for _, ds := range dss {
		if _, err := a.kube.AppsV1().DaemonSets(SystemNamespace).Patch(ctx, ds.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("patching the nodeSelector of DaemonSet %s/%s: %w", SystemNamespace, ds.Name, err)
		}
	}
	return nil
}

// servingNodes are the nodes with allocatable agentGPUResource, sorted.
func (a agentNowhere) servingNodes(ctx context.Context) ([]string, error) {
	nodes, err := a.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var out []string
	for _, n := range nodes.Items {
		if q, ok := n.Status.Allocatable[agentGPUResource]; ok && q.Value() > 0 {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// notGone says what of the agent is still there ("" when nothing is): its controller schedules pods, a
// pod of it is left, a node of serving serves devices, or one of publishing publishes slices.
func (a agentNowhere) notGone(ctx context.Context, serving, publishing []string) string {
	dss, err := agentDaemonSets(ctx, a.kube)
	if err != nil {
		return err.Error()
	}
	for _, ds := range dss {
		if st := ds.Status; st.ObservedGeneration < ds.Generation || st.DesiredNumberScheduled > 0 {
			return fmt.Sprintf("DaemonSet %s/%s: generation %d observed %d, %d pods desired", SystemNamespace, ds.Name, ds.Generation, st.ObservedGeneration, st.DesiredNumberScheduled)
		}
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil {
			return err.Error()
		}
		pods, err := a.kube.CoreV1().Pods(SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return err.Error()
		}
		if n := len(pods.Items); n > 0 {
			return fmt.Sprintf("%d pod(s) of DaemonSet %s/%s left", n, SystemNamespace, ds.Name)
		}
	}
	now, err := a.servingNodes(ctx)
	if err != nil {
		return err.Error()
	}
	if still := slices.DeleteFunc(now, func(n string) bool { return !slices.Contains(serving, n) }); len(still) > 0 {
		return fmt.Sprintf("node(s) %s still serve %s", strings.Join(still, ", "), agentGPUResource)
	}
	published, err := draUnregistered{kube: a.kube}.publishingNodes(ctx)
	if err != nil {
		return err.Error()
	}
	if still := slices.DeleteFunc(published, func(n string) bool { return !slices.Contains(publishing, n) }); len(still) > 0 {
		return fmt.Sprintf("node(s) %s still publish ResourceSlices of %s (the kubelet wipes them %s after the plugin went)", strings.Join(still, ", "), DRADriverName, kubeletWipeDelay)
	}
	return ""
}

// notBack says what of the agent has not come back ("" when all has): the DaemonSet fully available, the
// nodes it served on serving devices again, those it published on publishing slices again.
func (a agentNowhere) notBack(ctx context.Context, serving, publishing []string) string {
	dss, err := agentDaemonSets(ctx, a.kube)
	if err != nil {
		return err.Error()
	}
	for _, ds := range dss {
		if why := daemonSetUnavailable(&ds); why != "" {
			return why
		}
	}
	now, err := a.servingNodes(ctx)
	if err != nil {
		return err.Error()
	}
	if missing := missingNodes(serving, now); len(missing) > 0 {
		return fmt.Sprintf("node(s) %s serve no %s yet", strings.Join(missing, ", "), agentGPUResource)
	}
	published, err := draUnregistered{kube: a.kube}.publishingNodes(ctx)
	if err != nil {
		return err.Error()
	}
	if missing := missingNodes(publishing, published); len(missing) > 0 {
		return fmt.Sprintf("node(s) %s publish no ResourceSlice of %s yet", strings.Join(missing, ", "), DRADriverName)
	}
	return ""
}

// agentDaemonSets are the fake agent's DaemonSets in SystemNamespace (GPUStackOptions.Agents): the GPU
// pool's, which must exist, and the canary pool's where the cluster has it (one brought up before the
// canary's own DaemonSet runs the agent in one).
func agentDaemonSets(ctx context.Context, kube kubernetes.Interface) ([]appsv1.DaemonSet, error) {
	var out []appsv1.DaemonSet
	for _, a := range (GPUStackOptions{}).Agents() {
		ds, err := kube.AppsV1().DaemonSets(SystemNamespace).Get(ctx, a.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && a.Name != PluginDaemonSet:
			continue
		case err != nil:
			return nil, fmt.Errorf("reading DaemonSet %s/%s: %w", SystemNamespace, a.Name, err)
		}
		out = append(out, *ds)
	}
	return out, nil
}
