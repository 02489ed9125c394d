package cluster

import (
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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

func TestRequestCounterCountsByVerbAndResource(t *testing.T) {
	var c RequestCounter
	rt := c.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}))
	before := c.Snapshot()
	for _, r := range []struct{ method, url string }{
		{"GET", "https://api/api/v1/pods"}, {"GET", "https://api/api/v1/pods?watch=true"}, {"POST", "https://api/api/v1/namespaces"},
		{"DELETE", "https://api/api/v1/namespaces/x"}, {"GET", "https://api/version"},
		{"GET", "https://api/api/v1/namespaces/ns/pods/p/log"}, {"GET", "https://api/api/v1/namespaces/ns/pods/q/log?container=c"},
		{"GET", "https://api/apis/resource.k8s.io/v1/resourceslices?labelSelector=x"},
		{"PATCH", "https://api/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/w/status"},
		{"GET", "https://api/api/v1/namespaces/ns"},
	} {
		req, _ := http.NewRequest(r.method, r.url, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got := c.Since(before)
	want := Counts{"list pods": 1, "watch pods": 1, "create namespaces": 1, "delete namespaces": 1, "get /version": 1,
		"get pods/log": 2, "list resourceslices": 1, "patch workloads/status": 1, "get namespaces": 1}
	if !maps.Equal(got, want) {
		t.Errorf("counts = %v, want %v", got, want)
	}
	if s := got.String(); s != "10 (create 1, delete 1, get 4, list 2, patch 1, watch 1)" {
		t.Errorf("String() = %q", s)
	}
	if top := got.Top(2); !slices.Equal(top, []string{"get pods/log", "create namespaces"}) {
		t.Errorf("Top(2) = %v, want the most requests first, ties by name", top)
	}
}
