package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kueueconfig "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"
)

// PodsReady is Kueue's waitForPodsReady as the cluster's Kueue runs it: all-or-nothing admission with
// requeue, what a gang of workers relies on so that one that only partly fits holds nothing.
type PodsReady struct {
	// Timeout: an admitted Workload whose pods are not all ready within it is evicted and requeued.
	Timeout time.Duration `json:"timeout"`
	// RecoveryTimeout: the same after a running Workload lost a pod (0: not checked).
	RecoveryTimeout time.Duration `json:"recoveryTimeout"`
	// BlockAdmission: no other Workload is admitted while one waits for its pods.
	BlockAdmission bool `json:"blockAdmission"`
	// BackoffBase is the first requeue delay after such an eviction.
	BackoffBase time.Duration `json:"backoffBase"`
}

// String describes it in a line.
func (p PodsReady) String() string {
	rec := "recovery not checked"
	if p.RecoveryTimeout > 0 {
		rec = "recoveryTimeout " + p.RecoveryTimeout.String()
	}
	return fmt.Sprintf("timeout %s, %s, blockAdmission %t, requeue backoff from %s", p.Timeout, rec, p.BlockAdmission, p.BackoffBase)
}

// kueueConfigKey is the file Kueue's manager reads its Configuration from, in the ConfigMap its
// Deployment mounts (Kueue's manifests and Helm chart both name it so).
const kueueConfigKey = "controller_manager_config.yaml"

// readKueueConfig reads the Configuration Kueue's controller runs with from the ConfigMap its Deployment
// mounts. It returns the document, or why it could not be read.
func readKueueConfig(ctx context.Context, kube kubernetes.Interface, d *appsv1.Deployment) (string, string) {
	var tried []string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		cm, err := kube.CoreV1().ConfigMaps(d.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
		if err != nil {
			tried = append(tried, fmt.Sprintf("ConfigMap %s/%s: %v", d.Namespace, v.ConfigMap.Name, err))
			continue
		}
		for key, doc := range cm.Data {
			if key == kueueConfigKey || strings.Contains(doc, "kind: Configuration") {
				return doc, ""
			}
		}
		tried = append(tried, fmt.Sprintf("ConfigMap %s/%s holds no Kueue Configuration", d.Namespace, v.ConfigMap.Name))
	}
	if len(tried) == 0 {
		return "", fmt.Sprintf("deployment %s/%s mounts no ConfigMap (Kueue runs on its defaults or flags)", d.Namespace, d.Name)
	}
	return "", strings.Join(tried, "; ")
}

// parsePodsReady reads waitForPodsReady from a Kueue Configuration document: nil when it is off, with the
// words the record uses. Kueue's own defaulting applies (recoveryTimeout defaults to the timeout, the
// requeue base to 60s), so what the record states is what Kueue does.
func parsePodsReady(doc string) (*PodsReady, error) {
	var cfg kueueconfig.Configuration
	if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
		return nil, fmt.Errorf("parsing Kueue's Configuration: %w", err)
	}
	w := cfg.WaitForPodsReady
	if w == nil {
		return nil, nil
	}
	p := &PodsReady{Timeout: w.Timeout.Duration, RecoveryTimeout: w.Timeout.Duration, BackoffBase: time.Duration(kueueconfig.DefaultRequeuingBackoffBaseSeconds) * time.Second}
	if w.RecoveryTimeout != nil {
		p.RecoveryTimeout = w.RecoveryTimeout.Duration
	}
	if w.BlockAdmission != nil {
		p.BlockAdmission = *w.BlockAdmission
	}
	if rs := w.RequeuingStrategy; rs != nil && rs.BackoffBaseSeconds != nil {
		p.BackoffBase = time.Duration(*rs.BackoffBaseSeconds) * time.Second
	}
	return p, nil
}

// Topology is a Kueue Topology (topology-aware scheduling): its levels, outermost first (node labels such
// as a block, a rack, kubernetes.io/hostname).
type Topology struct {
	Name   string   `json:"name"`
	Levels []string `json:"levels"`
}

// HasLevel reports whether the topology has a level of the node label.
func (t Topology) HasLevel(label string) bool { return slices.Contains(t.Levels, label) }

// readTopologies lists Kueue's Topologies, or says why they could not be read.
func readTopologies(ctx context.Context, kube kubernetes.Interface) ([]Topology, string) {
	raw, err := kube.Discovery().RESTClient().Get().AbsPath("/apis/" + KueueGroupVersion + "/topologies").DoRaw(ctx)
	if err != nil {
		return nil, err.Error()
	}
	var list kueuev1beta2.TopologyList
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, err.Error()
	}
	out := make([]Topology, 0, len(list.Items))
	for _, t := range list.Items {
		tp := Topology{Name: t.Name}
		for _, l := range t.Spec.Levels {
			tp.Levels = append(tp.Levels, l.NodeLabel)
		}
		out = append(out, tp)
	}
	return out, ""
}
