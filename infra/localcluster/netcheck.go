package localcluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// netCheckLabel marks the network self-test's namespaces (one per run, deleted in the background).
const netCheckLabel = "gpuconform.io/netcheck"

// checkNetwork proves pod networking and DNS across nodes: a server pod on one GPU worker behind a Service,
// and a client pod on another worker that fetches from it by Service name and reaches the API server as
// kubernetes.default. The namespace is removed afterwards.
func (c *Cluster) checkNetwork(ctx context.Context) error {
	out, err := c.kubectlOut(ctx, "get", "nodes", "-l", PoolLabel, "-o", "jsonpath={.items[*].metadata.name}")
	if err != nil {
		return err
	}
	workers := strings.Fields(out)
	if len(workers) < 2 {
		return fmt.Errorf("need two workers for the cross-node check, have %v", workers)
	}
	server, client := workers[0], workers[len(workers)-1]
	// A fresh namespace each time: waiting for the previous one to terminate would cost seconds.
	netCheckNamespace := fmt.Sprintf("gpuconform-netcheck-%d", time.Now().UnixNano()%1_000_000_000)
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
  labels: {%[5]s: "true"}
---
apiVersion: v1
kind: Pod
metadata:
  name: server
  namespace: %[1]s
  labels: {app: netcheck}
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
  name: echo
  namespace: %[1]s
spec:
  selector: {app: netcheck}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: %[1]s
spec:
  nodeName: %[3]s
  restartPolicy: Never
  containers:
  - name: client
    image: %[4]s
    imagePullPolicy: IfNotPresent
    command: ["/usr/local/bin/gpuconform-net", "check", "get", "--retry-for=90s",
      "http://echo.%[1]s.svc.cluster.local/", "https://kubernetes.default.svc/version"]
`, netCheckNamespace, server, client, ImageWorkload, netCheckLabel)
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
		_ = c.kubectl(context.Background(), "netcheck cleanup", "delete", "namespace", "-l", netCheckLabel, "--wait=false")
	}()
	var phase string
	err = poll(ctx, 150*time.Second, func() (bool, string) {
		phase, _ = c.kubectlOut(ctx, "-n", netCheckNamespace, "get", "pod", "client", "-o", "jsonpath={.status.phase}")
		return phase == "Succeeded" || phase == "Failed", "client pod phase " + phase
	})
	logs, _ := c.kubectlOut(ctx, "-n", netCheckNamespace, "logs", "client")
	if err != nil || phase != "Succeeded" {
		return fmt.Errorf("the cross-node network check failed (client on %s, server on %s): %v\n%s", client, server, err, logs)
	}
	c.logf("  %s", strings.ReplaceAll(strings.TrimSpace(logs), "\n", "\n  "))
	return nil
}
