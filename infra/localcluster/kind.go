package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cmd"
)

// KindConfig renders the kind cluster configuration: one control plane (more would need kind's envoy
// load-balancer image, which cannot be pulled), a GPU pool and a canary pool labelled for the suites, and
// the kubelet settings this host needs.
func KindConfig(opts Options, q HostQuirks) string {
	var b strings.Builder
	b.WriteString("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\n")
	if q.CgroupV1 {
		// Kubelets >= 1.35 refuse cgroup v1 unless told otherwise (a config-file setting, no flag). kubeadm
		// uploads the init node's KubeletConfiguration to the kubelet-config ConfigMap that workers join with.
		b.WriteString("kubeadmConfigPatches:\n- |\n  kind: KubeletConfiguration\n  failCgroupV1: false\n")
	}
	if q.MissingCapSysResource && opts.NodeImage != "" {
		// The project's node image has this in its containerd config already; a user-supplied one needs the
		// patch (it costs a containerd restart per node at create time).
		b.WriteString("containerdConfigPatches:\n- |-\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    restrict_oom_score_adj = true\n")
	}
	b.WriteString("nodes:\n- role: control-plane\n")
	worker := func(pool string) {
		fmt.Fprintf(&b, "- role: worker\n  labels:\n    %s: %s\n", PoolLabel, pool)
		if opts.SharedDir != "" {
			// One host directory in every worker: checkpoint storage that outlives any one node (the
			// failure and preemption scenarios resume from it on another node).
			fmt.Fprintf(&b, "  extraMounts:\n  - hostPath: %s\n    containerPath: %s\n", opts.SharedDir, NodeSharedDir)
		}
	}
	for range opts.GPUWorkers {
		worker(GPUPool)
	}
	for range opts.CanaryWorkers {
		worker(CanaryPool)
	}
	return b.String()
}

// provider returns kind's cluster provider on Docker, logging through kind's own logger.
func (c *Cluster) provider() *cluster.Provider {
	return cluster.NewProvider(cluster.ProviderWithDocker(), cluster.ProviderWithLogger(cmd.NewLogger()))
}

// clusterExists reports whether kind knows the cluster (its node containers exist, running or not).
func (c *Cluster) clusterExists() (bool, error) {
	names, err := c.provider().List()
	if err != nil {
		return false, err
	}
	return slices.Contains(names, c.opts.Name), nil
}

// createCluster runs kind's create with the project's node image and configuration.
func (c *Cluster) createCluster(nodeImage string) error {
	// kind copies proxy variables into every node; this cluster never talks to the outside.
	for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"} {
		_ = os.Unsetenv(v)
	}
	cfg := KindConfig(c.opts, c.quirks)
	if err := os.WriteFile(c.logFile("kind-config.yaml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	return c.provider().Create(c.opts.Name,
		cluster.CreateWithRawConfig([]byte(cfg)),
		cluster.CreateWithNodeImage(nodeImage),
		cluster.CreateWithKubeconfigPath(c.Kubeconfig()),
		cluster.CreateWithDisplayUsage(false),
		cluster.CreateWithDisplaySalutation(false),
	)
}

// nodes lists the cluster's node containers.
func (c *Cluster) nodes() ([]nodes.Node, error) {
	return c.provider().ListNodes(c.opts.Name)
}

// Down deletes the cluster (its node containers and its kubeconfig entry) and nothing else: images and
// caches stay, so the next bring-up is warm.
func (c *Cluster) Down(ctx context.Context) error {
	if !dockerAnswers(ctx) {
		return fmt.Errorf("no Docker engine answers, so there is no cluster %q to delete", c.opts.Name)
	}
	return c.step("delete cluster "+c.opts.Name, "delete the node containers and the kubeconfig entry (images and caches stay)", func() error {
		if err := c.provider().Delete(c.opts.Name, c.Kubeconfig()); err != nil {
			return err
		}
		_ = os.Remove(c.Kubeconfig())
		return nil
	})
}

// Logs collects node, kubelet, containerd and control-plane logs (kind's own collection) into dir.
func (c *Cluster) Logs(ctx context.Context, dir string) error {
	if !dockerAnswers(ctx) {
		return errors.New("no Docker engine answers: no cluster logs to collect")
	}
	return c.provider().CollectLogs(c.opts.Name, dir)
}
