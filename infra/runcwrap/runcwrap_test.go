package runcwrap

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestTargets(t *testing.T) {
	cases := []struct {
		args            []string
		bundle, process string
	}{
		{[]string{"--root", "/r", "create", "--bundle", "/b", "id"}, "/b", ""},
		{[]string{"create", "-b", "/b2", "id"}, "/b2", ""},
		{[]string{"exec", "--process=/p.json", "--detach", "id"}, "", "/p.json"},
		{[]string{"exec", "-p", "/p2.json", "id"}, "", "/p2.json"},
		{[]string{"--version"}, "", ""},
	}
	for _, c := range cases {
		b, p := Targets(c.args)
		if b != c.bundle || p != c.process {
			t.Errorf("Targets(%v) = %q,%q; want %q,%q", c.args, b, p, c.bundle, c.process)
		}
	}
}

func TestPrepareStripsBundleAndProcess(t *testing.T) {
	dir := t.TempDir()
	caps := map[string]any{
		"bounding":  []string{"CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"},
		"effective": []string{"CAP_SYS_RESOURCE"},
		"permitted": []string{"CAP_CHOWN"},
	}
	cfg := map[string]any{"ociVersion": "1.0.2", "process": map[string]any{"capabilities": caps, "cwd": "/"}}
	write := func(name string, v any) string {
		p := filepath.Join(dir, name)
		b, _ := json.Marshal(v)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("config.json", cfg)
	proc := write("process.json", map[string]any{"capabilities": caps, "args": []string{"sh"}})
	drop := map[string]bool{"CAP_SYS_RESOURCE": true}
	if err := Prepare([]string{"create", "--bundle", dir, "x"}, drop); err != nil {
		t.Fatal(err)
	}
	if err := Prepare([]string{"exec", "--process", proc, "x"}, drop); err != nil {
		t.Fatal(err)
	}
	var gotCfg struct {
		OCIVersion string `json:"ociVersion"`
		Process    struct {
			Capabilities map[string][]string `json:"capabilities"`
			Cwd          string              `json:"cwd"`
		} `json:"process"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(b, &gotCfg); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"bounding": {"CAP_CHOWN", "CAP_SYS_ADMIN"}, "effective": {}, "permitted": {"CAP_CHOWN"}}
	if !reflect.DeepEqual(gotCfg.Process.Capabilities, want) {
		t.Errorf("bundle caps = %v, want %v", gotCfg.Process.Capabilities, want)
	}
	if gotCfg.OCIVersion != "1.0.2" || gotCfg.Process.Cwd != "/" {
		t.Errorf("other fields changed: %+v", gotCfg)
	}
	var gotProc struct {
		Capabilities map[string][]string `json:"capabilities"`
		Args         []string            `json:"args"`
	}
	b, _ = os.ReadFile(proc)
	if err := json.Unmarshal(b, &gotProc); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotProc.Capabilities, want) || len(gotProc.Args) != 1 {
		t.Errorf("process = %+v", gotProc)
	}
}

func TestPrepareLeavesUnprivilegedSpecAlone(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	orig := []byte(`{"process":{"args":["sh"]}}`)
	if err := os.WriteFile(p, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Prepare([]string{"run", "--bundle", dir}, map[string]bool{"CAP_SYS_RESOURCE": true}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if string(got) != string(orig) {
		t.Errorf("file rewritten without need: %s", got)
	}
}
