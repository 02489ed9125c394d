package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The local cluster's node autoscaler: Karpenter's controller with its KWOK cloud provider
// (manifests/karpenter.yaml) grows the pool AutoscalingPoolSelector by a simulated node for a pending pod
// that tolerates AutoscalingTaint and consolidates the node away once it is empty; KWOK's controller
// (manifests/kwok.yaml) is the simulated nodes' kubelet. It is what a cloud's node autoscaler is to a real
// cluster, for the cluster autoscaling scenario; selfcheck's fault scales KarpenterDeployment to zero.
const (
	AutoscalerNamespace = "karpenter"
	KarpenterDeployment = "karpenter"
	KWOKDeployment      = "kwok-controller"
	// AutoscalingNodePool is Karpenter's NodePool of the pool.
	AutoscalingNodePool = "gpuconform-gpu"
	// AutoscalingPoolValue is PoolLabel's value on the pool's nodes.
	AutoscalingPoolValue = "autoscaled"
	// AutoscalingTaint is the NoSchedule taint of the pool's nodes (value "true"): only a pod that
	// tolerates it grows the pool.
	AutoscalingTaint = "gpuconform.io/autoscaled"
	// AutoscalingPoolSelector selects the pool's nodes (the suite's --autoscaling-pool).
	AutoscalingPoolSelector = PoolLabel + "=" + AutoscalingPoolValue

	autoscalingInstanceType = "gpuconform-gpu-2x"
	autoscalingNodeClass    = "default"
	karpenterConfigMap      = "karpenter-instance-types"
	kwokConfigMap           = "kwok"
)

// AutoscalingRunArgs name the pool and its taint to a run of the suite against the local cluster (the
// Makefile's LOCAL_RUN_ARGS say the same).
var AutoscalingRunArgs = []string{"--autoscaling-pool=" + AutoscalingPoolSelector, "--autoscaling-toleration=" + AutoscalingTaint + ":NoSchedule"}

// kwokStageDirs are the directories of KWOK's module whose Stage documents the controller plays: a node
// turns Ready at once and keeps its lease; a pod turns Running and Ready at once, completes when its
// containers would, and goes when deleted.
var kwokStageDirs = []string{"kustomize/stage/node/fast", "kustomize/stage/node/heartbeat-with-lease", "kustomize/stage/pod/fast"}

// kwokConfiguration is KWOK's own configuration: manage only the nodes Karpenter's KWOK provider annotates,
// with the stages of the configuration file (no Stage CRD).
const kwokConfiguration = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodePort: 10247
  nodeLeaseParallelism: 4
  podPlayStageParallelism: 4
  nodePlayStageParallelism: 4
  enablePodsOnNodeSyncStreamWatch: true
  cidr: 10.99.0.0/24
  manageAllNodes: false
  manageNodesWithAnnotationSelector: kwok.x-k8s.io/node=fake
  nodeLeaseDurationSeconds: 40
  enableCRDs: []
`

// installNodeAutoscaler installs KWOK's controller, then Karpenter's CRDs (from its module), controller,
// node class and NodePool, and waits until the NodePool is Ready.
func (c *Cluster) installNodeAutoscaler(ctx context.Context, kwokBuild, karpenterBuild *background) error {
	kwokSrc, err := c.moduleDir(ctx, compKWOK, "sigs.k8s.io/kwok")
	if err != nil {
		return err
	}
	cfg, err := kwokConfigDoc(kwokSrc)
	if err != nil {
		return err
	}
	if err := c.installAddon(ctx, kwokBuild, keyedAddon{namespace: AutoscalerNamespace, part: "kwok", what: "KWOK's controller, its stages and RBAC",
		image: c.kwokImage, repo: kwokImageRepo, manifest: "kwok.yaml", extra: cfg,
		values: map[string]string{"Deployment": KWOKDeployment, "ConfigMap": kwokConfigMap},
		kinds:  "deployments,configmaps,serviceaccounts",
		prove: func() error {
			return c.kubectl(ctx, "rollout kwok-controller", "-n", AutoscalerNamespace, "rollout", "status", "deploy/"+KWOKDeployment, "--timeout=180s")
		}}); err != nil {
		return err
	}
	karpenterSrc, err := c.moduleDir(ctx, compKarpenter, "sigs.k8s.io/karpenter")
	if err != nil {
		return err
	}
	crds, err := concatYAML(filepath.Join(karpenterSrc, "kwok/charts/crds"), filepath.Join(karpenterSrc, "kwok/apis/crds"))
	if err != nil {
		return err
	}
	if err := c.applyManifest(ctx, "karpenter CRDs", crds); err != nil {
		return err
	}
	if err := c.kubectl(ctx, "karpenter CRDs established", "wait", "--for=condition=Established", "--timeout=60s",
		"crd/nodepools.karpenter.sh", "crd/nodeclaims.karpenter.sh", "crd/kwoknodeclasses.karpenter.kwok.sh"); err != nil {
		return err
	}
	return c.installAddon(ctx, karpenterBuild, keyedAddon{namespace: AutoscalerNamespace, part: "karpenter", what: "Karpenter's controller, node class and NodePool",
		image: c.karpenterImage, repo: karpenterImageRepo, manifest: "karpenter.yaml",
		values: map[string]string{"Deployment": KarpenterDeployment, "ConfigMap": karpenterConfigMap, "NodePool": AutoscalingNodePool,
			"NodeClass": autoscalingNodeClass, "InstanceType": autoscalingInstanceType, "ResourceName": GPUResource,
			"PoolLabel": PoolLabel, "PoolValue": AutoscalingPoolValue, "TaintKey": AutoscalingTaint},
		kinds: "deployments,configmaps,serviceaccounts",
		prove: func() error {
			if err := c.kubectl(ctx, "rollout karpenter", "-n", AutoscalerNamespace, "rollout", "status", "deploy/"+KarpenterDeployment, "--timeout=180s"); err != nil {
				return err
			}
			// KWOK's provider has no node class controller: its node class is Ready when someone says so, as
			// Karpenter's own KWOK environment does; the NodePool follows it.
			if err := c.kubectl(ctx, "kwoknodeclass Ready", "patch", "kwoknodeclass", autoscalingNodeClass, "--subresource=status", "--type=merge", "-p", nodeClassReady()); err != nil {
				return err
			}
			return c.kubectl(ctx, "nodepool Ready", "wait", "--for=condition=Ready", "--timeout=120s", "nodepool/"+AutoscalingNodePool)
		}})
}

// nodeClassReady is the status patch that marks the KWOK node class Ready.
func nodeClassReady() string {
	return fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Ready","message":"","observedGeneration":1,"lastTransitionTime":%q}]}}`,
		time.Now().UTC().Format(time.RFC3339))
}

// concatYAML joins the YAML files of dirs (kustomization.yaml aside) into one multi-document manifest.
func concatYAML(dirs ...string) ([]byte, error) {
	var docs [][]byte
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return nil, err
		}
		slices.Sort(files)
		for _, f := range files {
			if filepath.Base(f) == "kustomization.yaml" {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			docs = append(docs, bytes.TrimPrefix(bytes.TrimSpace(b), []byte("---\n")))
		}
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("no YAML files in %v", dirs)
	}
	return bytes.Join(docs, []byte("\n---\n")), nil
}

// kwokConfigDoc is the ConfigMap of KWOK's configuration file: kwokConfiguration and the stages of
// kwokStageDirs in KWOK's module at src.
func kwokConfigDoc(src string) ([]byte, error) {
	dirs := make([]string, 0, len(kwokStageDirs))
	for _, d := range kwokStageDirs {
		dirs = append(dirs, filepath.Join(src, d))
	}
	stages, err := concatYAML(dirs...)
	if err != nil {
		return nil, err
	}
	cm := corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: kwokConfigMap, Namespace: AutoscalerNamespace},
		Data:       map[string]string{"kwok.yaml": kwokConfiguration + "---\n" + string(stages) + "\n"}}
	return yaml.Marshal(cm)
}
