// Package faults injects the node and device faults the failure scenario needs, inside the configured GPU
// pool only, and only with --disruptive (the suite decides; this package refuses nodes outside the pool).
// It is the fault layer of the architecture (framework/nodes in ARCHITECTURE.md): one Injector, with a
// provider for node faults and one for device faults, chosen per cluster:
//
//   - local: the project's kind cluster. A node is stopped and started as its container (`docker stop`);
//     a device turns unhealthy through the fake GPU agent's health annotation, which the agent reports on
//     both allocation paths.
//   - command: the user's script, called as `SCRIPT ACTION NODE [DEVICE]` (ACTION one of stop-node,
//     start-node, restart-kubelet, device-unhealthy, device-healthy): a cloud CLI that stops the VM, a
//     script that makes the driver report a GPU lost.
//   - kubelet-stop: a privileged helper pod on the node freezes the kubelet (SIGSTOP) for a bounded time;
//     the node stops heartbeating, exactly as when its machine is gone, and the helper thaws it when the
//     time is up even if the suite is gone.
//   - device-taint-rule (DRA): a DeviceTaintRule taints exactly the device, through the API; with effect
//     NoExecute the cluster evicts the pods using it.
//
// Every fault is recorded on its node before it is injected (annotations FaultRunAnnotation and
// FaultsAnnotation) so that an interrupted run's fault is found by the next run's leftover check and
// undone (Restore); DeviceTaintRules carry the run label.
package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Action is one thing a provider is asked to do; the names are the command provider's first argument.
type Action string

// The actions.
const (
	StopNode        Action = "stop-node"
	StartNode       Action = "start-node"
	RestartKubelet  Action = "restart-kubelet"
	DeviceUnhealthy Action = "device-unhealthy"
	DeviceHealthy   Action = "device-healthy"
	// OutOfService is not a provider action: the suite puts Kubernetes' out-of-service taint on a
	// stopped node (framework/faults records it like the others so that it is never left behind).
	OutOfService Action = "out-of-service"
)

// Node annotations that record the faults a run injected.
const (
	// FaultRunAnnotation names the run that injected the node's faults.
	FaultRunAnnotation = "gpuconform.io/fault-run"
	// FaultsAnnotation lists the node's active faults: "stop-node", "out-of-service",
	// "device-unhealthy=<device>", comma-separated.
	FaultsAnnotation = "gpuconform.io/faults"
)

// Device names one device. ID is what the container sees (a GPU UUID); Driver, Pool and Name are its
// identity in ResourceSlices when it was allocated through DRA.
type Device struct {
	Node, ID           string
	Driver, Pool, Name string
}

func (d Device) String() string {
	if d.Name != "" {
		return fmt.Sprintf("%s (%s/%s/%s on %s)", d.ID, d.Driver, d.Pool, d.Name, d.Node)
	}
	return d.ID + " on " + d.Node
}

// Undo reverts one injected fault. Callers register it with DeferCleanup right after the fault is injected.
type Undo func(ctx context.Context) error

// NodeProvider stops and starts nodes.
type NodeProvider interface {
	// Name identifies the provider in reports.
	Name() string
	// StopNode makes node stop serving, as when its machine is gone; it returns once the stop is issued.
	StopNode(ctx context.Context, node string) error
	// StartNode brings node back; it returns once the start is issued (the node may take a while).
	StartNode(ctx context.Context, node string) error
	// RestartKubelet restarts the kubelet of node; it returns once the restart is issued.
	RestartKubelet(ctx context.Context, node string) error
	// ShutsDown reports whether StopNode really stops the machine (its containers stop). Only then may the
	// node be put out of service; a stopped kubelet leaves the pods' containers running.
	ShutsDown() bool
}

// DeviceProvider turns devices unhealthy and healthy again.
type DeviceProvider interface {
	// Name identifies the provider in reports.
	Name() string
	// SetHealth marks dev unhealthy (healthy false) or healthy again.
	SetHealth(ctx context.Context, dev Device, healthy bool) error
	// Evicts reports whether an unhealthy mark also evicts the pods using the device (a NoExecute taint),
	// rather than only withholding the device from new allocations.
	Evicts() bool
}

// Injector is a run's fault layer: a node provider and a device provider for each allocation path, each
// nil with the reason when the cluster has none. It records every fault on its node first.
type Injector struct {
	Kube  kubernetes.Interface
	RunID string
	// Pool are the nodes faults may be injected into.
	Pool []string

	Nodes    NodeProvider
	NodesWhy string
	// Devices injects device faults on the device-plugin path; DRADevices on the DRA path.
	Devices       DeviceProvider
	DevicesWhy    string
	DRADevices    DeviceProvider
	DRADevicesWhy string
	// DRAEvict is the DRA device provider whose fault evicts the pods using the device (a NoExecute
	// DeviceTaintRule), for the running-workload spec; nil where the API does not serve it.
	DRAEvict    DeviceProvider
	DRAEvictWhy string
	// UpgradeRollback moves a node that an interrupted upgrade rehearsal left on the new driver back to
	// version from (the run's upgrade provider); nil where the run has none. DriverVersionLabel is the node
	// label the rehearsal reads the driver version from: a node that reads from again is rolled back.
	UpgradeRollback    func(ctx context.Context, node, from string) error
	DriverVersionLabel string
	// DRAUpgradeRollback moves the DRA kubelet plugin of a node that an interrupted DRA driver rehearsal
	// left on the new version back to from (the run's DRA upgrade provider); nil where the run has none.
	DRAUpgradeRollback func(ctx context.Context, node, from string) error
	// RollbackTimeout bounds the wait for a rolled-back node's version (default 5 minutes).
	RollbackTimeout time.Duration
}

// DevicesFor returns the device provider of a path (claimBased: DRA), or nil and why there is none.
func (i *Injector) DevicesFor(claimBased bool) (DeviceProvider, string) {
	if i == nil {
		return nil, "no fault injector"
	}
	if claimBased {
		return i.DRADevices, i.DRADevicesWhy
	}
	return i.Devices, i.DevicesWhy
}

func (i *Injector) inPool(node string) error {
	if !slices.Contains(i.Pool, node) {
		return fmt.Errorf("refusing to inject a fault into %s: it is not in the configured GPU pool %v", node, i.Pool)
	}
	return nil
}

// StopNode stops node through the node provider and returns the Undo that starts it again.
func (i *Injector) StopNode(ctx context.Context, node string) (Undo, error) {
	if i.Nodes == nil {
		return nil, fmt.Errorf("no node fault provider: %s", i.NodesWhy)
	}
	if err := i.inPool(node); err != nil {
		return nil, err
	}
	if err := Mark(ctx, i.Kube, node, i.RunID, string(StopNode), true); err != nil {
		return nil, err
	}
	if err := i.Nodes.StopNode(ctx, node); err != nil {
		_ = Mark(ctx, i.Kube, node, i.RunID, string(StopNode), false)
		return nil, fmt.Errorf("%s: stop %s: %w", i.Nodes.Name(), node, err)
	}
	return func(ctx context.Context) error {
		if err := i.Nodes.StartNode(ctx, node); err != nil {
			return fmt.Errorf("%s: start %s: %w", i.Nodes.Name(), node, err)
		}
		return Mark(ctx, i.Kube, node, i.RunID, string(StopNode), false)
	}, nil
}

// RestartKubelet restarts the kubelet of node through the node provider.
func (i *Injector) RestartKubelet(ctx context.Context, node string) error {
	if i.Nodes == nil {
		return fmt.Errorf("no node fault provider: %s", i.NodesWhy)
	}
	if err := i.inPool(node); err != nil {
		return err
	}
	return i.Nodes.RestartKubelet(ctx, node)
}

// MarkDeviceUnhealthy turns dev unhealthy through provider p (one of the injector's) and returns the
// Undo that makes it healthy again.
func (i *Injector) MarkDeviceUnhealthy(ctx context.Context, p DeviceProvider, dev Device) (Undo, error) {
	if p == nil {
		return nil, errors.New("no device fault provider")
	}
	if err := i.inPool(dev.Node); err != nil {
		return nil, err
	}
	mark := deviceMark(p, dev)
	if err := Mark(ctx, i.Kube, dev.Node, i.RunID, mark, true); err != nil {
		return nil, err
	}
	if err := p.SetHealth(ctx, dev, false); err != nil {
		_ = Mark(ctx, i.Kube, dev.Node, i.RunID, mark, false)
		return nil, fmt.Errorf("%s: mark %s unhealthy: %w", p.Name(), dev, err)
	}
	return func(ctx context.Context) error {
		if err := p.SetHealth(ctx, dev, true); err != nil {
			return fmt.Errorf("%s: mark %s healthy: %w", p.Name(), dev, err)
		}
		return Mark(ctx, i.Kube, dev.Node, i.RunID, mark, false)
	}, nil
}

// deviceMark records a device fault so that Restore can undo it with the same provider:
// "device-unhealthy=<provider>/<id>[/<driver>/<pool>/<name>]".
func deviceMark(p DeviceProvider, dev Device) string {
	m := string(DeviceUnhealthy) + "=" + providerKey(p.Name()) + "/" + dev.ID
	if dev.Name != "" {
		m += "/" + dev.Driver + "/" + dev.Pool + "/" + dev.Name
	}
	return m
}

func providerKey(name string) string {
	if i := strings.IndexByte(name, ' '); i > 0 {
		return name[:i]
	}
	return name
}

// Mark adds (on) or removes one fault in the node's FaultsAnnotation, with the run in
// FaultRunAnnotation; both annotations go when the last fault is removed.
func Mark(ctx context.Context, kube kubernetes.Interface, node, runID, fault string, on bool) error {
	return updateNodeAnnotations(ctx, kube, node, func(ann map[string]string) map[string]any {
		list := ParseMarks(ann[FaultsAnnotation])
		list = slices.DeleteFunc(list, func(s string) bool { return s == fault })
		if on {
			list = append(list, fault)
		}
		slices.Sort(list)
		out := map[string]any{FaultsAnnotation: nil, FaultRunAnnotation: nil}
		if len(list) > 0 {
			out[FaultsAnnotation] = strings.Join(list, ",")
			out[FaultRunAnnotation] = runID
		}
		return out
	})
}

// updateNodeAnnotations sets the annotations change computes from the node's current ones (nil removes
// one). The patch carries the resourceVersion it was computed from, and a conflict computes it again: two
// specs marking faults on one node at once (specs of two paths, --procs) must not drop each other's mark.
func updateNodeAnnotations(ctx context.Context, kube kubernetes.Interface, node string, change func(map[string]string) map[string]any) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": change(n.Annotations)}})
		_, err = kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// ParseMarks splits a FaultsAnnotation value.
func ParseMarks(v string) []string {
	var out []string
	for e := range strings.SplitSeq(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
