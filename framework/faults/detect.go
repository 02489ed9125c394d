package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/framework/config"
)

// Options are what New needs to choose the providers.
type Options struct {
	Kube  kubernetes.Interface
	RunID string
	// Pool are the GPU pool's nodes as discovery read them.
	Pool   []corev1.Node
	Config config.FaultsConfig
	// HelperNamespace is where the kubelet-stop helper may run privileged.
	HelperNamespace string
	// Image is the workload image (the kubelet-stop helper runs it).
	Image string
	// Resources are the helper's CPU and memory, requests equal to limits (fixtures.Factory.Resources);
	// empty: the fixtures' defaults.
	Resources corev1.ResourceRequirements
	// ServesDeviceTaintRules: the API server serves resource.k8s.io/v1 DeviceTaintRules.
	ServesDeviceTaintRules bool
	// LookPath finds the docker CLI (exec.LookPath; tests replace it).
	LookPath func(string) (string, error)
}

// New chooses the providers the configuration asks for, resolving "auto" from the cluster: the local
// provider on the project's kind cluster, the command provider when a script is given, DeviceTaintRules
// for DRA devices where served. Each missing provider comes with the reason the report shows.
func New(o Options) *Injector {
	c := o.Config
	inj := &Injector{Kube: o.Kube, RunID: o.RunID}
	for _, n := range o.Pool {
		inj.Pool = append(inj.Pool, n.Name)
	}
	lookPath := o.LookPath
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	localWhy := localProblem(o.Pool, lookPath)
	local := &Local{Kube: o.Kube}
	command := &Command{Path: c.Command, RunID: o.RunID, DeviceEvicts: c.CommandDeviceEvicts}

	switch resolve(c.NodeProvider, c.Command, localWhy) {
	case config.FaultProviderLocal:
		if localWhy != "" {
			inj.NodesWhy = "the local provider was chosen, but " + localWhy
		} else {
			inj.Nodes = local
		}
	case config.FaultProviderCommand:
		inj.Nodes = command
	case config.FaultProviderKubeletStop:
		if o.HelperNamespace == "" {
			inj.NodesWhy = "the kubelet-stop provider runs a privileged pod; name a namespace that admits it with --helper-namespace"
		} else {
			inj.Nodes = &KubeletStop{Kube: o.Kube, RunID: o.RunID, Namespace: o.HelperNamespace, Image: o.Image, Resources: o.Resources, StopFor: c.KubeletStopFor.Duration}
		}
	case config.FaultProviderNone:
		inj.NodesWhy = "node faults are switched off (faults.nodeProvider: none)"
	default:
		inj.NodesWhy = "no node fault provider for this cluster (" + localWhy + "): give --fault-command SCRIPT (it is called as SCRIPT stop-node|start-node|restart-kubelet NODE, e.g. with a cloud CLI that stops the VM) or --fault-provider=kubelet-stop with --helper-namespace"
	}

	device := func(choice string) (DeviceProvider, string) {
		switch resolve(choice, c.Command, localWhy) {
		case config.FaultProviderLocal:
			if strings.Contains(localWhy, "fake GPU agent") {
				return nil, "the local provider was chosen, but " + localWhy
			}
			return local, ""
		case config.FaultProviderCommand:
			return command, ""
		case config.FaultProviderNone:
			return nil, "device faults are switched off (none)"
		default:
			return nil, "no device fault provider for this cluster: give --fault-command SCRIPT (called as SCRIPT device-unhealthy|device-healthy NODE DEVICE-UUID)"
		}
	}
	inj.Devices, inj.DevicesWhy = device(c.DeviceProvider)
	switch {
	case c.DRADeviceProvider == config.FaultProviderTaintRule && !o.ServesDeviceTaintRules:
		inj.DRADevicesWhy = "the device-taint-rule provider was chosen, but the API server does not serve resource.k8s.io/v1 DeviceTaintRules (feature gate DRADeviceTaints)"
	case c.DRADeviceProvider == config.FaultProviderTaintRule,
		c.DRADeviceProvider == config.FaultProviderAuto && o.ServesDeviceTaintRules && localWhy != "" && c.Command == "":
		inj.DRADevices = &TaintRule{Kube: o.Kube, RunID: o.RunID}
	default:
		inj.DRADevices, inj.DRADevicesWhy = device(c.DRADeviceProvider)
	}
	if o.ServesDeviceTaintRules && c.DRADeviceProvider != config.FaultProviderNone {
		inj.DRAEvict = &TaintRule{Kube: o.Kube, RunID: o.RunID, Effect: "NoExecute"}
	} else {
		inj.DRAEvictWhy = "the API server does not serve resource.k8s.io/v1 DeviceTaintRules"
	}
	return inj
}

// resolve turns "auto" into a provider: the command when a script is given, else local when the
// cluster is the project's, else "".
func resolve(choice, command, localWhy string) string {
	if choice != config.FaultProviderAuto && choice != "" {
		return choice
	}
	switch {
	case command != "":
		return config.FaultProviderCommand
	case localWhy == "":
		return config.FaultProviderLocal
	}
	return ""
}

// localProblem says why the local provider cannot serve the pool ("" when it can): every node must run
// the project's fake GPU agent, be a kind node, and docker must be on PATH.
func localProblem(pool []corev1.Node, lookPath func(string) (string, error)) string {
	if len(pool) == 0 {
		return "the GPU pool has no nodes"
	}
	for _, n := range pool {
		if _, ok := n.Labels[localAgentLabel]; !ok {
			return fmt.Sprintf("node %s does not run the project's fake GPU agent", n.Name)
		}
	}
	for _, n := range pool {
		if !strings.HasPrefix(n.Spec.ProviderID, kindProviderPrefix) {
			return fmt.Sprintf("node %s is not a kind node (providerID %q)", n.Name, n.Spec.ProviderID)
		}
	}
	if _, err := lookPath("docker"); err != nil {
		return "the local cluster's nodes are containers, but `docker` is not on PATH to reach them"
	}
	return ""
}

// Restore undoes the faults recorded on node (an interrupted run's, found by the leftover check) with
// this injector's providers, then removes the records.
func (i *Injector) Restore(ctx context.Context, node string) error {
	n, err := i.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	run := n.Annotations[FaultRunAnnotation]
	var errs []error
	for _, m := range ParseMarks(n.Annotations[FaultsAnnotation]) {
		var err error
		switch {
		case m == string(StopNode):
			if i.Nodes == nil {
				err = fmt.Errorf("node %s was stopped by run %s and no node provider is configured to start it (%s)", node, run, i.NodesWhy)
			} else {
				err = i.Nodes.StartNode(ctx, node)
			}
		case m == string(OutOfService):
			err = RemoveOutOfService(ctx, i.Kube, node)
		case strings.HasPrefix(m, "upgraded-from="):
			err = i.restoreUpgrade(ctx, node, run, strings.TrimPrefix(m, "upgraded-from="))
		case strings.HasPrefix(m, DRAUpgradedMark):
			from := strings.TrimPrefix(m, DRAUpgradedMark)
			if i.DRAUpgradeRollback == nil {
				err = fmt.Errorf("run %s rolled the DRA kubelet plugin of %s from %s and was interrupted, and this run has no DRA upgrade provider to roll it back (--dra-upgrade-command): roll it back by hand, then --cleanup-leftovers clears the mark", run, node, from)
			} else if err = i.DRAUpgradeRollback(ctx, node, from); err != nil {
				err = fmt.Errorf("rolling the DRA kubelet plugin of %s back to %s (run %s rolled it and was interrupted): %w", node, from, run, err)
			}
		case strings.HasPrefix(m, string(DeviceUnhealthy)+"="):
			err = i.restoreDevice(ctx, node, strings.TrimPrefix(m, string(DeviceUnhealthy)+"="))
		default:
			err = fmt.Errorf("unknown fault record %q", m)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", node, m, err))
			continue
		}
		if err := Mark(ctx, i.Kube, node, run, m, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DRAUpgradedMark starts the fault record of a node whose DRA kubelet plugin a DRA driver rehearsal rolled
// ("dra-upgraded-from=<version>"), removed once it is rolled back.
const DRAUpgradedMark = "dra-upgraded-from="

// restoreUpgrade undoes what an interrupted upgrade rehearsal left on node: nothing is left to do once
// its driver version reads from again (rolled back by hand, or by the provider); otherwise the run's
// upgrade provider rolls it back and the version is waited for.
func (i *Injector) restoreUpgrade(ctx context.Context, node, run, from string) error {
	version := func(ctx context.Context) (string, error) {
		n, err := i.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return n.Labels[i.DriverVersionLabel], nil
	}
	if i.DriverVersionLabel != "" {
		v, err := version(ctx)
		if err != nil {
			return err
		}
		if v == from {
			return nil
		}
	}
	if i.UpgradeRollback == nil {
		return fmt.Errorf("run %s upgraded the driver of %s from %s and was interrupted, and this run has no upgrade provider to roll it back: roll the node back (e.g. the upgrade command's rollback); once its %s reads %s, --cleanup-leftovers clears the mark", run, node, from, cmp.Or(i.DriverVersionLabel, "driver-version label"), from)
	}
	if err := i.UpgradeRollback(ctx, node, from); err != nil {
		return fmt.Errorf("rolling %s back to driver %s (run %s upgraded it and was interrupted): %w", node, from, run, err)
	}
	if i.DriverVersionLabel == "" {
		return nil
	}
	last := ""
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, cmp.Or(i.RollbackTimeout, 5*time.Minute), true, func(ctx context.Context) (bool, error) {
		v, err := version(ctx)
		last = v
		return err == nil && v == from, nil
	})
	if err != nil {
		return fmt.Errorf("rolled %s back to driver %s, but its %s still reads %q: %w", node, from, i.DriverVersionLabel, last, err)
	}
	return nil
}

func (i *Injector) restoreDevice(ctx context.Context, node, rec string) error {
	parts := strings.Split(rec, "/")
	if len(parts) < 2 {
		return fmt.Errorf("malformed device record %q", rec)
	}
	dev := Device{Node: node, ID: parts[1]}
	if len(parts) >= 5 {
		dev.Driver, dev.Pool, dev.Name = parts[2], parts[3], strings.Join(parts[4:], "/")
	}
	for _, p := range []DeviceProvider{i.Devices, i.DRADevices, i.DRAEvict} {
		if p != nil && providerKey(p.Name()) == parts[0] {
			return p.SetHealth(ctx, dev, true)
		}
	}
	return fmt.Errorf("device %s was marked unhealthy by the %s provider, which this run does not have", dev, parts[0])
}
