package faults

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// Local node labels and annotations of the project's fake GPU agent (internal/fakeplugin); repeated here
// because the framework must not import the fake.
const (
	localAgentLabel       = "gpuconform.io/fake-device-plugin-version"
	localUnhealthyDevices = "gpuconform.io/unhealthy-devices"
	kindProviderPrefix    = "kind://"
)

// Local is the provider of the project's kind cluster: nodes are containers of the local Docker engine,
// devices are the fake GPU agent's.
type Local struct {
	Kube kubernetes.Interface
	// Docker is the docker CLI (default "docker").
	Docker string
}

// Name implements NodeProvider and DeviceProvider.
func (l *Local) Name() string { return "local (docker, fake GPU agent)" }

func (l *Local) docker(ctx context.Context, args ...string) error {
	bin := l.Docker
	if bin == "" {
		bin = "docker"
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// StopNode implements NodeProvider: the node's container stops, as a machine that lost power (its
// processes get SIGTERM, then SIGKILL after docker's grace period).
func (l *Local) StopNode(ctx context.Context, node string) error { return l.docker(ctx, "stop", node) }

// ShutsDown implements NodeProvider: the node container and everything in it stop.
func (l *Local) ShutsDown() bool { return true }

// StartNode implements NodeProvider.
func (l *Local) StartNode(ctx context.Context, node string) error {
	return l.docker(ctx, "start", node)
}

// RestartKubelet implements NodeProvider.
func (l *Local) RestartKubelet(ctx context.Context, node string) error {
	return l.docker(ctx, "exec", node, "systemctl", "restart", "kubelet")
}

// SetHealth implements DeviceProvider through the fake GPU agent's health annotation, the source the
// agent reports on both allocation paths (device plugin: ListAndWatch health; DRA: the slice).
func (l *Local) SetHealth(ctx context.Context, dev Device, healthy bool) error {
	return updateNodeAnnotations(ctx, l.Kube, dev.Node, func(ann map[string]string) map[string]any {
		list := slices.DeleteFunc(ParseMarks(ann[localUnhealthyDevices]), func(s string) bool { return s == dev.ID })
		if !healthy {
			list = append(list, dev.ID)
		}
		var v any
		if len(list) > 0 {
			slices.Sort(list)
			v = strings.Join(list, ",")
		}
		return map[string]any{localUnhealthyDevices: v}
	})
}

// Evicts implements DeviceProvider: the fake agent withholds an unhealthy device, as NVIDIA's device plugin
// does (ListAndWatch Unhealthy) and as NVIDIA's DRA driver does on a critical XID (a NoSchedule device
// taint in its slice); neither evicts the pod using it.
func (l *Local) Evicts() bool { return false }

// Command is the provider that runs the user's script: `SCRIPT ACTION NODE [DEVICE]`, with the device's
// identity also in the environment (GPUCONFORM_DEVICE_ID, _DRIVER, _POOL, _NAME) and the run in
// GPUCONFORM_RUN_ID. Exit status 0 means done; anything else fails the step with the script's output.
type Command struct {
	Path  string
	RunID string
	// DeviceEvicts is the user's statement that the script's device fault also evicts pods (e.g. it
	// makes the driver report the GPU lost and a remediation controller drains it).
	DeviceEvicts bool
}

// Name implements NodeProvider and DeviceProvider.
func (c *Command) Name() string { return "command (" + c.Path + ")" }

func (c *Command) run(ctx context.Context, action Action, node string, dev *Device) error {
	args := []string{string(action), node}
	env := append(os.Environ(), "GPUCONFORM_RUN_ID="+c.RunID, "GPUCONFORM_ACTION="+string(action), "GPUCONFORM_NODE="+node)
	if dev != nil {
		args = append(args, dev.ID)
		env = append(env, "GPUCONFORM_DEVICE_ID="+dev.ID, "GPUCONFORM_DEVICE_DRIVER="+dev.Driver, "GPUCONFORM_DEVICE_POOL="+dev.Pool, "GPUCONFORM_DEVICE_NAME="+dev.Name)
	}
	cmd := exec.CommandContext(ctx, c.Path, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", c.Path, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// StopNode implements NodeProvider.
func (c *Command) StopNode(ctx context.Context, node string) error {
	return c.run(ctx, StopNode, node, nil)
}

// ShutsDown implements NodeProvider: the contract of stop-node is that the machine stops.
func (c *Command) ShutsDown() bool { return true }

// StartNode implements NodeProvider.
func (c *Command) StartNode(ctx context.Context, node string) error {
	return c.run(ctx, StartNode, node, nil)
}

// RestartKubelet implements NodeProvider.
func (c *Command) RestartKubelet(ctx context.Context, node string) error {
	return c.run(ctx, RestartKubelet, node, nil)
}

// SetHealth implements DeviceProvider.
func (c *Command) SetHealth(ctx context.Context, dev Device, healthy bool) error {
	a := DeviceUnhealthy
	if healthy {
		a = DeviceHealthy
	}
	return c.run(ctx, a, dev.Node, &dev)
}

// Evicts implements DeviceProvider.
func (c *Command) Evicts() bool { return c.DeviceEvicts }
