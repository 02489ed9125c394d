package localcluster

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The Makefile's local runs name the same pool and taint as selfcheck's (AutoscalingRunArgs).
func TestLocalRunArgsNameTheAutoscaledPool(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^LOCAL_RUN_ARGS \?= (.*)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Makefile sets no LOCAL_RUN_ARGS")
	}
	args := strings.Fields(string(m[1]))
	for _, want := range AutoscalingRunArgs {
		if !strings.Contains(" "+strings.Join(args, " ")+" ", " "+want+" ") {
			t.Errorf("LOCAL_RUN_ARGS %q lacks %s", m[1], want)
		}
	}
}

// KWOK's stages and Karpenter's CRDs come from their modules at bring-up: the directories must hold them.
func TestConcatYAML(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"b.yaml": "---\nkind: B\n", "a.yaml": "kind: A\n", "kustomization.yaml": "resources: [a.yaml]\n", "c.txt": "no"} {
		if err := os.WriteFile(dir+"/"+name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := concatYAML(dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "kind: A\n---\nkind: B" {
		t.Errorf("concatYAML = %q", got)
	}
	if _, err := concatYAML(t.TempDir()); err == nil {
		t.Error("concatYAML of an empty directory: no error")
	}
}

// The versions the record and the image names carry are the ones the wrapper modules build.
func TestAddonVersionsAreTheWrappers(t *testing.T) {
	for dir, want := range map[string][2]string{"karpenter": {"sigs.k8s.io/karpenter", KarpenterVersion}, "kwok": {"sigs.k8s.io/kwok", KWOKVersion},
		"traefik": {"github.com/traefik/traefik/v3", TraefikVersion}} {
		f, err := readGoMod("../../" + wrapperModulesDir + "/" + dir)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range f.Require {
			if r.Mod.Path == want[0] {
				found = true
				if r.Mod.Version != want[1] {
					t.Errorf("%s requires %s %s; versions.go says %s", dir, want[0], r.Mod.Version, want[1])
				}
			}
		}
		if !found {
			t.Errorf("%s does not require %s", dir, want[0])
		}
	}
}
