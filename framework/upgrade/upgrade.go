// Package upgrade changes exactly one layer, the GPU driver (and the plugin that comes with it), on the
// canary pool only: the upgrade layer of the architecture. A rehearsal (scenarios/upgrade.go) applies it,
// proves workloads still get devices there and that nothing else moved, and rolls it back. Providers:
//
//   - local (the project's kind cluster): the fake GPU agent reads a per-node driver version
//     (fakeplugin.DriverVersionAnnotation) when it starts; the provider sets it on the canary nodes and
//     restarts their agents only, as a GPU operator's per-pool driver (an NVIDIADriver with a node
//     selector) rolls a new driver onto one pool. The node labels and the DRA driverVersion attribute follow.
//   - command (any cluster): the user's script, `SCRIPT upgrade|rollback VERSION NODE...` (a Helm upgrade,
//     an NVIDIADriver for that node selector, an image change), run with the suite's kubeconfig, bounded
//     by a timeout and logged (Command; examples in fixtures/upgrade); the readiness criterion is the
//     suite's: every node reports VERSION in the driver-version label and advertises its devices again.
//
// Every upgraded node is recorded (faults.Mark, "upgraded-from=<version>") so an interrupted rehearsal is
// found by the next run's leftover check.
package upgrade

import (
	"context"
	"encoding/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// DriverVersionLabel is the node label NVIDIA's GPU feature discovery publishes the driver version in
// (the fake agent publishes it too); the rehearsal reads versions from it unless configured otherwise.
const DriverVersionLabel = "nvidia.com/cuda.driver-version.full"

// VerdictEntry names the Ginkgo report entry in which the rehearsal states the upgrade's verdict
// ("upgrade from X to Y on pool P: GO" or NO-GO); the signoff puts it at the top.
const VerdictEntry = "upgrade verdict"

// Provider changes the driver of a set of nodes.
type Provider interface {
	// Name identifies the provider in reports.
	Name() string
	// Apply starts moving nodes to driver version target; it returns once the change is issued.
	Apply(ctx context.Context, nodes []string, target string) error
	// Rollback starts moving nodes back to from.
	Rollback(ctx context.Context, nodes []string, from string) error
}

// Local node annotation and labels of the project's fake GPU agent; repeated because the framework must
// not import the fake.
const (
	localVersionAnnotation = "gpuconform.io/fake-driver-version"
	localAgentLabel        = "gpuconform.io/fake-device-plugin-version"
	localAgentSelector     = "app.kubernetes.io/name=fake-device-plugin"
)

// LocalNamespace is where the project's local cluster runs the fake GPU agent (localcluster.SystemNamespace).
const LocalNamespace = "gpuconform-system"

// Local is the provider of the project's kind cluster.
type Local struct {
	Kube kubernetes.Interface
	// Namespace is where the fake GPU agent's DaemonSet runs.
	Namespace string
}

// Name implements Provider.
func (l *Local) Name() string {
	return "local (per-node fake driver version, agents restarted on the pool only)"
}

// Apply implements Provider.
func (l *Local) Apply(ctx context.Context, nodes []string, target string) error {
	return l.set(ctx, nodes, &target)
}

// Rollback implements Provider: the node goes back to the DaemonSet's configured version.
func (l *Local) Rollback(ctx context.Context, nodes []string, _ string) error {
	return l.set(ctx, nodes, nil)
}

func (l *Local) set(ctx context.Context, nodes []string, version *string) error {
	for _, n := range nodes {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{localVersionAnnotation: version}}})
		if _, err := l.Kube.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		// The agent reads the version when it starts: restart the one on this node (its DaemonSet makes a
		// new one), and nothing on any other node.
		pods, err := l.Kube.CoreV1().Pods(l.Namespace).List(ctx, metav1.ListOptions{LabelSelector: localAgentSelector, FieldSelector: "spec.nodeName=" + n})
		if err != nil {
			return err
		}
		// No agent there right now (being recreated) is fine: a new one reads the version when it starts.
		for _, p := range pods.Items {
			if p.Spec.NodeName != n {
				continue // never another node's, whatever the list returned
			}
			if err := l.Kube.CoreV1().Pods(l.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}

// localTargetAnnotation is where the fake GPU agent's DaemonSet says which driver version its stack can
// be upgraded to.
const localTargetAnnotation = "gpuconform.io/fake-driver-upgrade-to"

// LocalTarget is the driver version the local cluster's fake stack can be upgraded to, as its DaemonSet
// declares it ("" when it declares none): the rehearsal's target there when --upgrade-to is not given.
func (l *Local) LocalTarget(ctx context.Context) (string, error) {
	ds, err := l.Kube.AppsV1().DaemonSets(l.Namespace).Get(ctx, "fake-device-plugin", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return ds.Annotations[localTargetAnnotation], nil
}

// LocalServes reports whether the local provider can upgrade these nodes: every one runs the fake agent.
func LocalServes(labels []map[string]string) bool {
	if len(labels) == 0 {
		return false
	}
	for _, l := range labels {
		if _, ok := l[localAgentLabel]; !ok {
			return false
		}
	}
	return true
}
