// Package faults injects the faults the resilience checks need into nodes and devices of the configured
// GPU pool: a device turning unhealthy, a kubelet restarting. It is the fault layer of the architecture
// (framework/nodes in ARCHITECTURE.md). One interface, one provider per kind of cluster; today the local
// kind cluster's (the fake GPU agent's health annotation, `docker exec` into the node container). A real
// cluster gets "not exercised" for the checks that need an injector until a provider for it exists.
package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Undo reverts one injected fault. Callers register it with DeferCleanup right after the fault is injected.
type Undo func(ctx context.Context) error

// Injector injects faults.
type Injector interface {
	// Name identifies the provider in reports.
	Name() string
	// MarkDeviceUnhealthy makes one device of node unhealthy as the node's GPU stack sees it; device is
	// the identity the container sees (a GPU UUID).
	MarkDeviceUnhealthy(ctx context.Context, node, device string) (Undo, error)
	// RestartKubelet restarts the kubelet of node and returns once the restart was issued.
	RestartKubelet(ctx context.Context, node string) error
}

// Local node labels and annotations of the project's fake GPU agent (internal/fakeplugin); repeated here
// because the framework must not import the fake.
const (
	localAgentLabel         = "gpuconform.io/fake-device-plugin-version"
	localUnhealthyDevices   = "gpuconform.io/unhealthy-devices"
	localFaultRunAnnotation = "gpuconform.io/fault-run"
)

// Detect returns the injector the cluster supports, or nil and why none does. The local provider is chosen
// when every node of the pool runs the project's fake GPU agent and `docker` reaches the node containers.
func Detect(kube kubernetes.Interface, pool []corev1.Node, runID string) (Injector, string) {
	if len(pool) == 0 {
		return nil, "the GPU pool has no nodes"
	}
	for _, n := range pool {
		if _, ok := n.Labels[localAgentLabel]; !ok {
			return nil, fmt.Sprintf("no fault provider for this cluster: node %s does not run the project's fake GPU agent, and no provider for real clusters (a command, DeviceTaintRule) is configured", n.Name)
		}
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return nil, "the local cluster's nodes are containers, but `docker` is not on PATH to reach them"
	}
	return &Local{Kube: kube, RunID: runID}, ""
}

// Local is the provider of the project's kind cluster.
type Local struct {
	Kube  kubernetes.Interface
	RunID string
}

// Name implements Injector.
func (l *Local) Name() string { return "local (fake GPU agent, docker)" }

// MarkDeviceUnhealthy implements Injector through the fake GPU agent's health annotation (the same source
// the agent reports on both allocation paths). The node also carries the run ID, so an interrupted run's
// fault is found.
func (l *Local) MarkDeviceUnhealthy(ctx context.Context, node, device string) (Undo, error) {
	if err := l.setUnhealthy(ctx, node, device, true); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return l.setUnhealthy(ctx, node, device, false) }, nil
}

func (l *Local) setUnhealthy(ctx context.Context, node, device string, on bool) error {
	n, err := l.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var list []string
	for _, e := range strings.Split(n.Annotations[localUnhealthyDevices], ",") {
		if e = strings.TrimSpace(e); e != "" && e != device {
			list = append(list, e)
		}
	}
	if on {
		list = append(list, device)
	}
	annotations := map[string]any{localUnhealthyDevices: nil, localFaultRunAnnotation: nil}
	if len(list) > 0 {
		slices.Sort(list)
		annotations[localUnhealthyDevices] = strings.Join(list, ",")
		annotations[localFaultRunAnnotation] = l.RunID
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	_, err = l.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// RestartKubelet implements Injector: the node is a container of the local Docker engine.
func (l *Local) RestartKubelet(ctx context.Context, node string) error {
	out, err := exec.CommandContext(ctx, "docker", "exec", node, "systemctl", "restart", "kubelet").CombinedOutput()
	if err != nil {
		return fmt.Errorf("restart the kubelet of %s: %w: %s", node, err, strings.TrimSpace(string(out)))
	}
	return nil
}
