package localcluster

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// netCheckLabel marks the network self-test's objects (deleted in the background after each check).
const netCheckLabel = "gpuconform.io/netcheck"

// checkNetwork proves pod networking and DNS across nodes: a server pod on one GPU worker behind a Service,
// and a client pod on another worker that fetches from it by Service name and reaches the API server as
// kubernetes.default. Its objects are removed afterwards. It is not repeated while the node containers
// have not restarted and the cluster's network and DNS workloads (kindnet, kube-proxy, CoreDNS) are as
// the last check left them: their pods would be the same ones.
func (c *Cluster) checkNetwork(ctx context.Context) error {
	network := func() string {
		objects := c.objectsFingerprint(ctx, "", "-n", "kube-system", "daemonsets,deployments")
		started := c.nodeStartTimes(ctx)
		if objects == "" || len(started) == 0 {
			return ""
		}
		var starts []string
		for node, at := range started {
			starts = append(starts, node+"="+at.Format(time.RFC3339Nano))
		}
		return fingerprint(objects, strings.Join(starts, "\n"))
	}
	return c.unlessUnchanged("network", "node containers (not restarted), kindnet, kube-proxy and CoreDNS", network,
		func() error { return c.crossNodeCheck(ctx) }, nil)
}

// crossNodeCheck runs the server and client pods of checkNetwork.
func (c *Cluster) crossNodeCheck(ctx context.Context) error {
	out, err := c.kubectlOut(ctx, "get", "nodes", "-l", PoolLabel, "-o", "jsonpath={.items[*].metadata.name}")
	if err != nil {
		return err
	}
	workers := strings.Fields(out)
	if len(workers) < 2 {
		return fmt.Errorf("need two workers for the cross-node check, have %v", workers)
	}
	server, client := workers[0], workers[len(workers)-1]
	// The pods live in the system namespace, which Kueue's webhooks leave alone: the network must be
	// checkable before (and whether or not) Kueue answers. Fresh names each time, so nothing waits for the
	// previous check's objects to go.
	netCheckNamespace := SystemNamespace
	suffix := strconv.FormatInt(time.Now().UnixNano()%1_000_000_000, 10)
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: netcheck-server-%[6]s
  namespace: %[1]s
  labels: {%[5]s: "true", run: "%[6]s"}
spec:
  nodeName: %[2]s
  containers:
  - name: server
    image: %[4]s
    imagePullPolicy: IfNotPresent
    command: ["/usr/local/bin/gpuconform-net", "check", "serve", "--port=8080"]
---
apiVersion: v1
kind: Service
metadata:
  name: netcheck-%[6]s
  namespace: %[1]s
  labels: {%[5]s: "true"}
spec:
  selector: {run: "%[6]s"}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: v1
kind: Pod
metadata:
  name: netcheck-client-%[6]s
  namespace: %[1]s
  labels: {%[5]s: "true"}
spec:
  nodeName: %[3]s
  restartPolicy: Never
  containers:
  - name: client
    image: %[4]s
    imagePullPolicy: IfNotPresent
    command: ["/usr/local/bin/gpuconform-net", "check", "get", "--retry-for=90s",
      "http://netcheck-%[6]s.%[1]s.svc.cluster.local/", "https://kubernetes.default.svc/version"]
`, netCheckNamespace, server, client, ImageWorkload, netCheckLabel, suffix)
	f, err := os.CreateTemp("", "gpuconform-netcheck-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, _ = f.WriteString(manifest)
	f.Close()
	if err := c.kubectl(ctx, "netcheck apply", "apply", "-f", f.Name()); err != nil {
		return err
	}
	defer func() {
		_ = c.kubectl(context.Background(), "netcheck cleanup", "-n", netCheckNamespace, "delete", "pods,services", "-l", netCheckLabel, "--wait=false")
	}()
	var phase string
	err = poll(ctx, 150*time.Second, func() (bool, string) {
		phase, _ = c.kubectlOut(ctx, "-n", netCheckNamespace, "get", "pod", "netcheck-client-"+suffix, "-o", "jsonpath={.status.phase}")
		return phase == "Succeeded" || phase == "Failed", "client pod phase " + phase
	})
	logs, _ := c.kubectlOut(ctx, "-n", netCheckNamespace, "logs", "netcheck-client-"+suffix)
	if err == nil && phase != "Succeeded" {
		err = fmt.Errorf("client pod phase %s", phase)
	}
	if err != nil {
		return fmt.Errorf("the cross-node network check failed (client on %s, server on %s): %w\n%s", client, server, err, logs)
	}
	c.logf("  %s", strings.ReplaceAll(strings.TrimSpace(logs), "\n", "\n  "))
	return nil
}
