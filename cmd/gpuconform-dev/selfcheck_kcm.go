package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/infra/localcluster"
)

// kube-controller-manager on the local (kubeadm) control plane: a static pod whose manifest the kubelet
// watches; the fault's copy of the original sits beside the manifests directory, so an interrupted
// selfcheck's fault is undone by the next one, or by `make cluster` (localcluster restoreControlPlane).
const (
	kcmManifest       = localcluster.KCMManifest
	kcmOriginal       = localcluster.KCMManifestBackup
	kcmControllerFlag = "--controllers="
	// taintEvictionController and hpaController are the controllers' names in kube-controller-manager's
	// --controllers (cmd/kube-controller-manager/names: DeviceTaintEvictionController,
	// HorizontalPodAutoscalerController).
	taintEvictionController = "device-taint-eviction-controller"
	hpaController           = "horizontal-pod-autoscaler-controller"
)

// kcmWithout restarts kube-controller-manager with controller disabled; the undo restarts it with the
// manifest it had. Without the device-taint-eviction-controller, device taints still keep new pods off a
// device, but nothing evicts the pods on a device tainted NoExecute; without the
// horizontal-pod-autoscaler-controller, HPAs are accepted and never act.
func kcmWithout(ctx context.Context, kube kubernetes.Interface, controller string) (func(context.Context) error, error) {
	node, err := controlPlaneNode(ctx, kube)
	if err != nil {
		return nil, err
	}
	if _, err := nodeExec(ctx, node, nil, "test", "-e", kcmOriginal); err == nil {
		// An interrupted selfcheck left the fault on: put the original back first.
		if err := restoreKCM(ctx, kube, node); err != nil {
			return nil, fmt.Errorf("restoring kube-controller-manager after an interrupted selfcheck: %w", err)
		}
	}
	before, err := nodeExec(ctx, node, nil, "cat", kcmManifest)
	if err != nil {
		return nil, err
	}
	after, err := withoutController(before, controller)
	if err != nil {
		return nil, err
	}
	if _, err := nodeExec(ctx, node, nil, "cp", kcmManifest, kcmOriginal); err != nil {
		return nil, err
	}
	if err := restartKCMWith(ctx, kube, node, after); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return restoreKCM(ctx, kube, node) }, nil
}

// withoutController adds -controller to the manifest's --controllers flag (kubeadm writes
// "--controllers=*,bootstrapsigner,tokencleaner"), or adds the flag with every default controller but it.
func withoutController(manifest []byte, controller string) ([]byte, error) {
	off := ",-" + controller
	lines := strings.Split(string(manifest), "\n")
	for i, l := range lines {
		if strings.Contains(l, kcmControllerFlag) && strings.HasPrefix(strings.TrimSpace(l), "- ") {
			lines[i] = l + off
			return []byte(strings.Join(lines, "\n")), nil
		}
	}
	for i, l := range lines {
		if indent, ok := strings.CutSuffix(l, "- kube-controller-manager"); ok && strings.TrimSpace(indent) == "" {
			lines = slices.Insert(lines, i+1, indent+"- "+kcmControllerFlag+"*"+off)
			return []byte(strings.Join(lines, "\n")), nil
		}
	}
	return nil, errors.New("kube-controller-manager's manifest has no command to add --controllers to")
}

// restoreKCM puts the original manifest back, restarts kube-controller-manager with it and removes the copy.
func restoreKCM(ctx context.Context, kube kubernetes.Interface, node string) error {
	orig, err := nodeExec(ctx, node, nil, "cat", kcmOriginal)
	if err != nil {
		return err
	}
	if err := restartKCMWith(ctx, kube, node, orig); err != nil {
		return err
	}
	_, err = nodeExec(ctx, node, nil, "rm", "-f", kcmOriginal)
	return err
}

// restartKCMWith writes manifest as kube-controller-manager's (through a file outside the manifests
// directory, renamed in) and waits until its mirror pod shows the new manifest's hash and is Ready.
func restartKCMWith(ctx context.Context, kube kubernetes.Interface, node string, manifest []byte) error {
	pod := "kube-controller-manager-" + node
	old := ""
	if p, err := kube.CoreV1().Pods("kube-system").Get(ctx, pod, metav1.GetOptions{}); err == nil {
		old = p.Annotations["kubernetes.io/config.hash"]
	}
	tmp := "/etc/kubernetes/.kube-controller-manager.yaml.gpuconform"
	if _, err := nodeExec(ctx, node, manifest, "sh", "-c", "cat > "+tmp+" && mv "+tmp+" "+kcmManifest); err != nil {
		return err
	}
	last := "no mirror pod"
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := kube.CoreV1().Pods("kube-system").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // the mirror pod is recreated with the static pod: wait for it
		}
		hash := p.Annotations["kubernetes.io/config.hash"]
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		last = fmt.Sprintf("config hash %s (was %s), ready %v", hash, old, ready)
		return hash != "" && hash != old && ready, nil
	})
	if err != nil {
		return fmt.Errorf("kube-controller-manager on %s did not restart with the new manifest (%s): %w", node, last, err)
	}
	return nil
}

// controlPlaneNode is the local cluster's control-plane node (its container has the node's name).
func controlPlaneNode(ctx context.Context, kube kubernetes.Interface) (string, error) {
	l, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "node-role.kubernetes.io/control-plane"})
	if err != nil {
		return "", err
	}
	if len(l.Items) != 1 {
		return "", fmt.Errorf("want one control-plane node, found %d", len(l.Items))
	}
	return l.Items[0].Name, nil
}

// nodeExec runs a command in a local node's container, stdin from in, and returns its stdout.
func nodeExec(ctx context.Context, node string, in []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "docker", append([]string{"exec", "-i", node}, args...)...)
	if in != nil {
		cmd.Stdin = bytes.NewReader(in)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("docker exec %s %s: %w: %s", node, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
