package cluster

import (
	"net/http"
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
	_, err := Connect(t.Context(), ConnectOptions{Kubeconfig: p, Context: "prod"})
	if err == nil || !strings.Contains(err.Error(), `context "prod" not in kubeconfig`) || !strings.Contains(err.Error(), "available: kind-gpuconform, staging") {
		t.Errorf("unknown context: %v", err)
	}
	_, err = Connect(t.Context(), ConnectOptions{Kubeconfig: p, Timeout: 2e9})
	if err == nil || !strings.Contains(err.Error(), "cannot reach the API server https://127.0.0.1:1") {
		t.Errorf("unreachable: %v", err)
	}
}

func TestRequestCounterCountsByKind(t *testing.T) {
	var c RequestCounter
	rt := c.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}))
	before := c.Snapshot()
	for _, r := range []struct{ method, url string }{
		{"GET", "https://api/api/v1/pods"}, {"GET", "https://api/api/v1/pods?watch=true"}, {"POST", "https://api/api/v1/namespaces"},
		{"DELETE", "https://api/api/v1/namespaces/x"}, {"GET", "https://api/version"},
	} {
		req, _ := http.NewRequest(r.method, r.url, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got := c.Since(before)
	if got["get"] != 2 || got["watch"] != 1 || got["create"] != 1 || got["delete"] != 1 || got.Total() != 5 {
		t.Errorf("counts = %v", got)
	}
	if s := got.String(); s != "5 (create 1, delete 1, get 2, watch 1)" {
		t.Errorf("String() = %q", s)
	}
}
