package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gpuconform.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFileThenFlagsFlagsWin(t *testing.T) {
	file := writeFile(t, `
kubeconfig: /from/file
context: file-ctx
namespacePrefix: filepfx
allocationPaths: [dra]
pools:
  gpu: team=ml
timeoutProfile: real
tolerations:
- key: nvidia.com/gpu
  operator: Exists
  effect: NoSchedule
`)
	cfg, err := Parse([]string{"--config", file, "--context", "flag-ctx", "--disruptive", "--toleration", "dedicated=gpu:NoExecute"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kubeconfig != "/from/file" {
		t.Errorf("kubeconfig from file lost: %q", cfg.Kubeconfig)
	}
	if cfg.Context != "flag-ctx" {
		t.Errorf("flag must win over file: context %q", cfg.Context)
	}
	if cfg.NamespacePrefix != "filepfx" || !cfg.Disruptive || cfg.TimeoutProfile != "real" {
		t.Errorf("merge wrong: %+v", cfg)
	}
	if cfg.WantsPath(PathDevicePlugin) || !cfg.WantsPath(PathDRA) {
		t.Errorf("explicit paths not honoured: %v", cfg.AllocationPaths)
	}
	if !cfg.Pools.Explicit("gpu") || cfg.Pools.Explicit("canary") {
		t.Errorf("explicit pool tracking wrong: %+v", cfg.Pools.explicit)
	}
	if len(cfg.Tolerations) != 2 || cfg.Tolerations[1].Key != "dedicated" || cfg.Tolerations[1].Effect != corev1.TaintEffectNoExecute {
		t.Errorf("tolerations: %+v", cfg.Tolerations)
	}
	local := Default()
	local.TimeoutProfile = "local"
	if cfg.Timeouts().PodStart <= local.Timeouts().PodStart {
		t.Error("real profile must wait longer than local")
	}
	if Default().TimeoutProfile != "auto" || Default().Timeouts() != cfg.Timeouts() {
		t.Error("the default profile is auto, which waits as real does until the nodes decide")
	}
}

func TestUnknownFlagAndKeyAreErrors(t *testing.T) {
	_, err := Parse([]string{"--kubecontext", "x"})
	if err == nil || !strings.Contains(err.Error(), "kubecontext") || !strings.Contains(err.Error(), "--context") {
		t.Errorf("unknown flag error should name it and list valid flags: %v", err)
	}
	file := writeFile(t, "kubeconfg: /typo\n")
	_, err = Parse([]string{"--config", file})
	if err == nil || !strings.Contains(err.Error(), "kubeconfg") {
		t.Errorf("unknown YAML key must be an error naming it: %v", err)
	}
	_, err = Parse([]string{"--config", "/does/not/exist.yaml"})
	if err == nil || !strings.Contains(err.Error(), "reading config file") {
		t.Errorf("missing file: %v", err)
	}
}
