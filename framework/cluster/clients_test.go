package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
contexts:
- name: kind-gpuconform
  context: {cluster: c, user: u}
- name: staging
  context: {cluster: c, user: u}
current-context: kind-gpuconform
users:
- name: u
  user: {token: x}
`

func TestConnectErrors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Connect(context.Background(), ConnectOptions{Kubeconfig: p, Context: "prod"})
	if err == nil || !strings.Contains(err.Error(), `context "prod" not in kubeconfig`) || !strings.Contains(err.Error(), "available: kind-gpuconform, staging") {
		t.Errorf("unknown context: %v", err)
	}
	_, err = Connect(context.Background(), ConnectOptions{Kubeconfig: p, Timeout: 2e9})
	if err == nil || !strings.Contains(err.Error(), "cannot reach the API server https://127.0.0.1:1") {
		t.Errorf("unreachable: %v", err)
	}
}
