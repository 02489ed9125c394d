package localcluster

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The fetch runs `go list -deps` of each component that is not cached, in its wrapper module and under its
// build tags, and skips the cached ones and the main module's.
func TestFetchModulesListsWhatIsNotCached(t *testing.T) {
	root := t.TempDir()
	for _, m := range []string{"a", "b"} {
		dir := filepath.Join(root, "infra", "modules", m)
		must(t, os.MkdirAll(filepath.Join(dir, "cmd", m), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.test/"+m+"\n\ngo 1.24\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(dir, "cmd", m, "main.go"), []byte("package main\n\nimport _ \"strings\"\n\nfunc main() {}\n"), 0o644))
		// A file only the component's tags build: listed only when the fetch passes them.
		must(t, os.WriteFile(filepath.Join(dir, "cmd", m, "tagged.go"), []byte("//go:build onlytagged\n\npackage main\n\nimport _ \"bufio\"\n"), 0o644))
	}
	a := goComponent{Name: "a", Module: "infra/modules/a", Tags: "onlytagged", Packages: []string{"example.test/a/cmd/a"}}
	b := goComponent{Name: "b", Module: "infra/modules/b", Packages: []string{"example.test/b/cmd/b"}}
	main := goComponent{Name: "net", Packages: []string{"./cmd/gpuconform-net"}}
	var log bytes.Buffer
	c := &Cluster{opts: Options{RepoRoot: root, CacheDir: t.TempDir(), Log: &log}, logDir: t.TempDir()}
	ctx := t.Context()
	keyB, err := c.componentKey(ctx, b)
	must(t, err)
	must(t, os.MkdirAll(c.goCacheDir(b, keyB), 0o755)) // b's binaries are cached

	if got := c.toFetch(ctx, []goComponent{a, b, main}); len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("to fetch: %v, want only a (b is cached, net is the main module's)", got)
	}
	c.fetchModules(ctx, []goComponent{a, b, main})
	listed, err := os.ReadFile(c.logFile("go modules a"))
	must(t, err)
	for _, pkg := range []string{"example.test/a/cmd/a", "strings", "bufio"} {
		if !slices.Contains(strings.Fields(string(listed)), pkg) {
			t.Errorf("go list -deps of a did not list %s:\n%s", pkg, listed)
		}
	}
	if _, err := os.Stat(c.logFile("go modules b")); err == nil {
		t.Error("b is cached, and was fetched")
	}
	if !strings.Contains(log.String(), "▶ go modules: download the Go modules of a (go list -deps)") || !strings.Contains(log.String(), "✓ go modules in ") {
		t.Errorf("progress:\n%s", log.String())
	}

	// Nothing to fetch: no step at all.
	log.Reset()
	c.fetchModules(ctx, []goComponent{b})
	if log.Len() != 0 {
		t.Errorf("a fetch with nothing to do printed:\n%s", log.String())
	}
}

// A fetch that fails is a note, not a failure: the component's build fetches its modules itself and
// reports a real failure there.
func TestFetchModulesFailureIsANote(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "infra", "modules", "x")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.test/x\n\ngo 1.24\n"), 0o644))
	var log bytes.Buffer
	c := &Cluster{opts: Options{RepoRoot: root, CacheDir: t.TempDir(), Log: &log}, logDir: t.TempDir()}
	x := goComponent{Name: "x", Module: "infra/modules/x", Packages: []string{"example.test/x/cmd/missing"}}
	c.fetchModules(t.Context(), []goComponent{x})
	if !strings.Contains(log.String(), "note: fetching the modules of x failed") || !strings.Contains(log.String(), "✓ go modules in ") {
		t.Errorf("progress:\n%s", log.String())
	}
}

// The wrapper modules in the tree require every module they share at one version: a module one version
// apart compiles everything that imports it a second time on a cold bring-up.
func TestWrapperModulesShareVersions(t *testing.T) {
	root, err := FindRepoRoot(".")
	must(t, err)
	skew, err := WrapperVersionSkew(root)
	must(t, err)
	if len(skew) > 0 {
		t.Errorf("wrapper modules require shared modules at different versions (go run ./cmd/gpuconform-dev align-modules raises them):\n%s", strings.Join(skew, "\n"))
	}
	files, err := readWrapperModules(root)
	must(t, err)
	if len(files) < 5 || len(sharedVersions(files)) < 50 {
		t.Errorf("read %d wrapper modules sharing %d modules: the check looked at too little", len(files), len(sharedVersions(files)))
	}
	// Kueue's check against the main module's go.mod compares enough modules to mean something.
	withFiles, _, err := mainModuleSkew(root)
	must(t, err)
	mainMod, err := readGoMod(root)
	must(t, err)
	both := 0
	for path := range requiredVersions(withFiles["kueue"]) {
		if _, ok := requiredVersions(mainMod)[path]; ok {
			both++
		}
	}
	if both < 50 {
		t.Errorf("kueue and the main module require %d modules in common: the check looked at too little", both)
	}
}

// The skew check finds a module one wrapper requires below another's version, reads a replace that keeps the
// path as the version built, and ignores a module only one wrapper requires and the wrappers that keep their
// release's graph; a wrapper that shares the main module's graph is compared with the main module's go.mod.
func TestWrapperVersionSkewFindsALowerRequire(t *testing.T) {
	root := t.TempDir()
	write := func(name, gomod string) {
		dir := filepath.Join(root, wrapperModulesDir, name)
		must(t, os.MkdirAll(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	}
	write("kube", "module x/kube\n\ngo 1.26\n\nrequire (\n\tk8s.io/api v0.0.0\n\tgolang.org/x/sys v0.49.0\n\tonly.kube/mod v1.0.0\n)\n\nreplace k8s.io/api => k8s.io/api v0.37.2\n")
	write("dra", "module x/dra\n\ngo 1.26\n\nrequire (\n\tk8s.io/api v0.37.2\n\tgolang.org/x/sys v0.41.0\n\tonly.dra/mod v1.2.0\n)\n")
	must(t, os.MkdirAll(filepath.Join(root, wrapperModulesDir, "not-a-module"), 0o755))
	// The DRA driver keeps its release's graph (ownGraph): its lower versions are not skew.
	write("dra-example-driver", "module x/drv\n\ngo 1.26\n\nrequire (\n\tk8s.io/api v0.36.0\n\tgolang.org/x/sys v0.30.0\n)\n")
	// Kueue shares the main module's graph (withMain): below the main module's version is skew, the other
	// wrappers' higher k8s.io/api is not, and above the main module's is allowed (a note when aligning).
	must(t, os.WriteFile(filepath.Join(root, "go.mod"), []byte("module x/main\n\ngo 1.26\n\nrequire (\n\tk8s.io/api v0.35.3\n\tgolang.org/x/sys v0.49.0\n\tgolang.org/x/net v0.61.0\n)\n"), 0o644))
	write("kueue", "module x/kueue\n\ngo 1.26\n\nrequire (\n\tk8s.io/api v0.35.3\n\tgolang.org/x/sys v0.40.0\n\tgolang.org/x/net v0.62.0\n)\n")
	// Every withMain wrapper has its go.mod; this one agrees with the main module.
	write("karpenter", "module x/karpenter\n\ngo 1.26\n\nrequire k8s.io/api v0.35.3\n")
	skew, err := WrapperVersionSkew(root)
	must(t, err)
	if want := []string{"dra: golang.org/x/sys@v0.41.0 < v0.49.0", "kueue: golang.org/x/sys@v0.40.0 < v0.49.0 (the main module's)"}; !slices.Equal(skew, want) {
		t.Errorf("skew %q, want %q", skew, want)
	}
	withFiles, _, err := mainModuleSkew(root)
	must(t, err)
	if got, want := aboveMain(root, withFiles), []string{"kueue requires golang.org/x/net@v0.62.0, the main module v0.61.0"}; !slices.Equal(got, want) {
		t.Errorf("above the main module: %q, want %q", got, want)
	}
	// Aligned, nothing is reported.
	write("dra", "module x/dra\n\ngo 1.26\n\nrequire (\n\tk8s.io/api v0.37.2\n\tgolang.org/x/sys v0.49.0\n)\n")
	write("kueue", "module x/kueue\n\ngo 1.26\n\nrequire (\n\tk8s.io/api v0.35.3\n\tgolang.org/x/sys v0.49.0\n)\n")
	if skew, err := WrapperVersionSkew(root); err != nil || len(skew) != 0 {
		t.Errorf("aligned modules: skew %q, %v", skew, err)
	}
	// A replaced module below another's version is not go get's to raise: the error names it.
	write("dra", "module x/dra\n\ngo 1.26\n\nrequire (\n\tk8s.io/api v0.38.0\n\tgolang.org/x/sys v0.49.0\n)\n")
	err = AlignWrapperModules(t.Context(), root, t.Logf)
	if err == nil || !strings.Contains(err.Error(), "kube replaces k8s.io/api; move its replace to v0.38.0") {
		t.Errorf("align with a replaced module behind: %v", err)
	}
}
