package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cmd"
)

// The local cluster's node-lifecycle timings: a lost node is NotReady after about 20 s instead of the
// default 50 s (kube-controller-manager --node-monitor-grace-period; kubelet nodeStatusUpdateFrequency 10 s,
// nodeLeaseDurationSeconds 40 s, leases renewed at a quarter of it). Four missed reports fit in the grace
// period, as with the defaults.
const (
	LocalNodeMonitorGracePeriod    = "20s"
	LocalNodeStatusUpdateFrequency = "4s"
	LocalNodeLeaseDurationSeconds  = 20
)

// KindConfig renders the kind cluster configuration: one control plane (more would need kind's envoy
// load-balancer image, which cannot be pulled), a GPU pool and a canary pool labelled for the suites, and
// the kubelet settings this host needs.
func KindConfig(opts Options, q HostQuirks) string {
	var b strings.Builder
	b.WriteString("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\n")
	// The kubelets report status and renew their leases more often than by default, so that a node lost
	// (the failure scenario stops one) is NotReady within the controller-manager's shorter grace period
	// below: local waits only, a real cluster keeps its own (the record lists the grace period it runs with).
	// kubeadm uploads the init node's KubeletConfiguration to the kubelet-config ConfigMap workers join with.
	fmt.Fprintf(&b, "kubeadmConfigPatches:\n- |\n  kind: KubeletConfiguration\n  nodeStatusUpdateFrequency: %s\n  nodeLeaseDurationSeconds: %d\n",
		LocalNodeStatusUpdateFrequency, LocalNodeLeaseDurationSeconds)
	if q.CgroupV1 {
		// Kubelets >= 1.35 refuse cgroup v1 unless told otherwise (a config-file setting, no flag).
		b.WriteString("  failCgroupV1: false\n")
	}
	// kind's ClusterConfiguration lists the controller-manager's flags (kubeadm v1beta4): a merge patch would
	// replace the list, a JSON patch appends to it.
	// A user-supplied node image older than 1.36 gets v1beta3, whose flags are a map; kind applies only the
	// patch whose version matches.
	fmt.Fprintf(&b, "kubeadmConfigPatchesJSON6902:\n- group: kubeadm.k8s.io\n  version: v1beta4\n  kind: ClusterConfiguration\n  patch: |\n    - op: add\n      path: /controllerManager/extraArgs/-\n      value: {name: node-monitor-grace-period, value: %[1]s}\n"+
		"- group: kubeadm.k8s.io\n  version: v1beta3\n  kind: ClusterConfiguration\n  patch: |\n    - op: add\n      path: /controllerManager/extraArgs/node-monitor-grace-period\n      value: %[1]s\n",
		LocalNodeMonitorGracePeriod)
	if q.MissingCapSysResource && opts.NodeImage != "" {
		// The project's node image has this in its containerd config already; a user-supplied one needs the
		// patch (it costs a containerd restart per node at create time).
		b.WriteString("containerdConfigPatches:\n- |-\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    restrict_oom_score_adj = true\n")
	}
	b.WriteString("nodes:\n- role: control-plane\n")
	worker := func(pool string, draOnly bool) {
		fmt.Fprintf(&b, "- role: worker\n  labels:\n    %s: %s\n", PoolLabel, pool)
		if draOnly {
			fmt.Fprintf(&b, "    %s: \"false\"\n", DevicePluginOffLabel)
		}
		if opts.SharedDir != "" {
			// One host directory in every worker: checkpoint storage that outlives any one node (the
			// failure and preemption scenarios resume from it on another node).
			fmt.Fprintf(&b, "  extraMounts:\n  - hostPath: %s\n    containerPath: %s\n", opts.SharedDir, NodeSharedDir)
		}
	}
	for i := range opts.GPUWorkers {
		worker(GPUPool, i >= opts.GPUWorkers-opts.DRAOnlyWorkers)
	}
	for range opts.CanaryWorkers {
		worker(CanaryPool, false)
	}
	return b.String()
}

// CanaryNodes are the names kind gives the canary workers: they follow the GPU workers, and kind numbers
// workers from the second on (<name>-worker, <name>-worker2, …).
func (o Options) CanaryNodes() []string {
	var out []string
	for i := range o.CanaryWorkers {
		n := o.GPUWorkers + i + 1
		if n == 1 {
			out = append(out, o.Name+"-worker")
			continue
		}
		out = append(out, fmt.Sprintf("%s-worker%d", o.Name, n))
	}
	return out
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
	if err := c.provider().Create(c.opts.Name,
		cluster.CreateWithRawConfig([]byte(cfg)),
		cluster.CreateWithNodeImage(nodeImage),
		cluster.CreateWithKubeconfigPath(c.Kubeconfig()),
		cluster.CreateWithDisplayUsage(false),
		cluster.CreateWithDisplaySalutation(false),
	); err != nil {
		return err
	}
	cp, err := c.controlPlane()
	if err != nil {
		return err
	}
	return cp.Command("sh", "-c", "cat > "+kindConfigMarker).SetStdin(strings.NewReader(cfg)).Run()
}

// kindConfigMarker is where the control-plane container keeps the kind configuration its cluster was
// created with: kind cannot change a node's kubelet or controller-manager settings, pools or mounts after
// creation, so a cluster made with another configuration is recreated, not revived.
const kindConfigMarker = "/kind/gpuconform-kind-config.yaml"

// controlPlane returns the cluster's control-plane node container.
func (c *Cluster) controlPlane() (nodes.Node, error) {
	ns, err := c.nodes()
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		if role, _ := n.Role(); role == "control-plane" {
			return n, nil
		}
	}
	return nil, fmt.Errorf("cluster %s has no control-plane node container", c.opts.Name)
}

// configDrift says why the running cluster was not created with the configuration wanted now, or ""
// when it was. The control-plane container must be running.
func (c *Cluster) configDrift() string {
	cp, err := c.controlPlane()
	if err != nil {
		return err.Error()
	}
	had, missing, err := readMarker(func() (string, string, error) {
		var out, errOut bytes.Buffer
		err := cp.Command("cat", kindConfigMarker).SetStdout(&out).SetStderr(&errOut).Run()
		return out.String(), errOut.String(), err
	}, time.Second)
	switch {
	case missing:
		return "it has no record of the kind configuration it was created with (" + kindConfigMarker + "; a cluster from before the record existed)"
	case err != nil:
		return "its record of the kind configuration it was created with (" + kindConfigMarker + ") could not be read: " + err.Error()
	}
	return configDiff(had, KindConfig(c.opts, c.quirks))
}

// markerReadTries is how often readMarker runs cat before it reports a failure.
const markerReadTries = 3

// readMarker reads the configuration marker with cat (run returns its stdout, stderr and error). Only cat's
// own "No such file" means the cluster has no record (missing); any other failure (an exec into a
// container that has just started, say) is tried again, up to markerReadTries times, pause apart, because
// the caller recreates the cluster on anything but a readable record.
func readMarker(run func() (stdout, stderr string, err error), pause time.Duration) (string, bool, error) {
	var err error
	for i := range markerReadTries {
		if i > 0 {
			time.Sleep(pause)
		}
		var out, errOut string
		if out, errOut, err = run(); err == nil {
			return out, false, nil
		}
		if strings.Contains(errOut, "No such file or directory") {
			return "", true, nil
		}
		if s := strings.TrimSpace(errOut); s != "" {
			err = fmt.Errorf("%w: %s", err, s)
		}
	}
	return "", false, fmt.Errorf("after %d tries: %w", markerReadTries, err)
}

// configDiff names the first line where the configuration a cluster was created with differs from the one
// wanted now, or "" when they are the same.
func configDiff(had, want string) string {
	if had == want {
		return ""
	}
	h, w := strings.Split(had, "\n"), strings.Split(want, "\n")
	for i := range max(len(h), len(w)) {
		var hl, wl string
		if i < len(h) {
			hl = h[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if hl != wl {
			return fmt.Sprintf("it was created with another kind configuration (line %d: %q, wanted %q)", i+1, strings.TrimSpace(hl), strings.TrimSpace(wl))
		}
	}
	return "it was created with another kind configuration"
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

// The controller-manager's manifest on the control plane, and where `make selfcheck`'s
// dra-no-taint-eviction fault keeps the original while its own runs (outside the manifests directory:
// the kubelet would run any manifest inside it).
const (
	KCMManifest       = "/etc/kubernetes/manifests/kube-controller-manager.yaml"
	KCMManifestBackup = "/etc/kubernetes/kube-controller-manager.yaml.gpuconform-original"
)

// restoreControlPlane puts back the controller-manager manifest a selfcheck fault replaced, when the
// selfcheck was interrupted before its undo (its original is still beside the manifests directory); the
// kubelet restarts the controller-manager with it. It reports whether it restored anything.
func (c *Cluster) restoreControlPlane() (bool, error) {
	cp, err := c.controlPlane()
	if err != nil {
		return false, err
	}
	// test fails when there is no original: nothing to restore.
	if left := cp.Command("test", "-e", KCMManifestBackup).Run() == nil; !left {
		return false, nil
	}
	var errOut bytes.Buffer
	if err := cp.Command("mv", KCMManifestBackup, KCMManifest).SetStderr(&errOut).Run(); err != nil {
		return false, fmt.Errorf("restoring %s from %s: %w: %s", KCMManifest, KCMManifestBackup, err, strings.TrimSpace(errOut.String()))
	}
	return true, nil
}
