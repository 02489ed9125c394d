package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/framework/diagnose"
)

func TestDiagnoseCommandUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"no target":       {},
		"no slash":        {"train"},
		"bad kind":        {"node/train"},
		"bad output":      {"job/train", "-o", "yaml"},
		"unknown flag":    {"job/train", "--watch"},
		"too many":        {"job/a", "job/b", "job/c"},
		"empty name":      {"job/"},
		"empty namespace": {"-n", "", "job/train"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := diagnoseCommand(t.Context(), args, &stdout, &stderr); code != diagnoseExitUsage {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, diagnoseExitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), "Usage: gpuconform diagnose") {
				t.Errorf("stderr lacks usage:\n%s", stderr.String())
			}
		})
	}
}

func TestDiagnoseCommandUnreachable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := diagnoseCommand(t.Context(), []string{"job/train", "--kubeconfig", filepath.Join(t.TempDir(), "missing")}, &stdout, &stderr)
	if code != diagnoseExitUnreachable || !strings.Contains(stderr.String(), "--kubeconfig") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// fakeAPIServer answers the few reads a Running, queue-less Job needs, and
// 404s the rest (including Kueue's group, so the client is left nil).
func fakeAPIServer(t *testing.T) *httptest.Server {
	t.Helper()
	routes := map[string]string{
		"/version": `{"major":"1","minor":"37","gitVersion":"v1.37.2"}`,
		"/apis/batch/v1/namespaces/ml/jobs/train": `{"apiVersion":"batch/v1","kind":"Job",
			"metadata":{"name":"train","namespace":"ml","uid":"u1"},
			"spec":{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"main","image":"x"}]}}}}`,
		"/api/v1/namespaces/ml/pods": `{"apiVersion":"v1","kind":"PodList","metadata":{},"items":[{
			"metadata":{"name":"train-abcde","namespace":"ml","labels":{"batch.kubernetes.io/job-name":"train"}},
			"spec":{"nodeName":"gpu-worker-1","containers":[{"name":"main","image":"x"}]},
			"status":{"phase":"Running","containerStatuses":[{"name":"main","image":"x","imageID":"","ready":true,"restartCount":0,
				"state":{"running":{"startedAt":"2026-04-10T10:00:00Z"}}}]}}]}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			t.Errorf("diagnose made a %s request to %s", r.Method, r.URL.Path)
		}
		w.Header().Set("Content-Type", "application/json")
		if body, ok := routes[r.URL.Path]; ok {
			_, _ = w.Write([]byte(body))
			return
		}
		w.WriteHeader(http.StatusNotFound)
		if name, ok := strings.CutPrefix(r.URL.Path, "/apis/batch/v1/namespaces/ml/jobs/"); ok {
			// A served resource's 404 names the object, as the real apiserver does.
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"jobs.batch \"` + name +
				`\" not found","reason":"NotFound","details":{"name":"` + name + `","group":"batch","kind":"jobs"},"code":404}`))
			return
		}
		// An unserved API's 404 names nothing.
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "` + server + `"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: other, context: {cluster: c, user: u}}, {name: fake, context: {cluster: c, user: u}}]
current-context: other
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDiagnoseCommandJSON(t *testing.T) {
	srv := fakeAPIServer(t)
	kubeconfig := writeKubeconfig(t, srv.URL)
	var stdout, stderr bytes.Buffer
	// Flags after the target, kubectl style, and --context overriding current-context.
	code := diagnoseCommand(t.Context(), []string{"jobs/train", "-n", "ml", "--kubeconfig", kubeconfig, "--context", "fake", "-o", "json"}, &stdout, &stderr)
	if code != diagnoseExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	var res diagnose.Result
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("decoding JSON: %v", err)
	}
	if res.Stage != diagnose.StageRunning || res.Layer != diagnose.LayerNone || res.Reason != diagnose.ReasonRunning || res.Next == "" {
		t.Errorf("got %+v", res)
	}
	if len(res.Objects) < 2 || res.Objects[0] != (diagnose.ObjectRef{Kind: "Job", Namespace: "ml", Name: "train"}) {
		t.Errorf("objects %+v", res.Objects)
	}
	var raw map[string]any
	b, _ := json.Marshal(res)
	_ = json.Unmarshal(b, &raw)
	for _, k := range []string{"stage", "layer", "reason", "messages", "objects", "next"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
}

func TestDiagnoseCommandNotFound(t *testing.T) {
	srv := fakeAPIServer(t)
	var stdout, stderr bytes.Buffer
	code := diagnoseCommand(t.Context(), []string{"job", "nope", "--namespace=ml", "--kubeconfig=" + writeKubeconfig(t, srv.URL)}, &stdout, &stderr)
	if code != diagnoseExitUnreachable {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "not found; check the name") {
		t.Errorf("stderr: %s", stderr.String())
	}
}
