package config

import (
	"os"
	"path/filepath"
	"testing"
)

// A relative path is taken from the first base where it exists (the current directory, then the
// checkout's root under go test); one that exists nowhere, from the last; a bare script name stays a
// name for PATH.
func TestResolvePaths(t *testing.T) {
	wd, root := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "_output"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(root, "_output", "kubeconfig"), filepath.Join(wd, "base.json"), filepath.Join(root, "base.json")} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := Config{Kubeconfig: "_output/kubeconfig", ArtifactsDir: "_artifacts", Signoff: SignoffConfig{Baseline: "base.json"}}
	c.Faults.Command = "faults.sh"
	c.Upgrade.Command = "./upgrade.sh"
	got := c.ResolvePaths([]string{wd, root})
	want := map[string]string{
		"kubeconfig": filepath.Join(root, "_output", "kubeconfig"), "artifacts": filepath.Join(root, "_artifacts"),
		"baseline": filepath.Join(wd, "base.json"), "fault command": "faults.sh", "upgrade command": filepath.Join(root, "upgrade.sh"),
	}
	have := map[string]string{"kubeconfig": got.Kubeconfig, "artifacts": got.ArtifactsDir, "baseline": got.Signoff.Baseline,
		"fault command": got.Faults.Command, "upgrade command": got.Upgrade.Command}
	for k, w := range want {
		if have[k] != w {
			t.Errorf("%s: %q, want %q", k, have[k], w)
		}
	}
	if abs := Resolve("/etc/kubeconfig", []string{wd}); abs != "/etc/kubeconfig" {
		t.Errorf("an absolute path changed: %q", abs)
	}
}
