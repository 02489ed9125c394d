package localcluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyDependsOnContentNotOrderOrLocation(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	for _, d := range []string{dirA, dirB} {
		if err := os.WriteFile(filepath.Join(d, "go.mod"), []byte("module x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k1 := NewKey("bin").Value("version", "v1")
	if err := k1.File("go.mod", filepath.Join(dirA, "go.mod")); err != nil {
		t.Fatal(err)
	}
	k2 := NewKey("bin")
	if err := k2.File("go.mod", filepath.Join(dirB, "go.mod")); err != nil {
		t.Fatal(err)
	}
	k2.Value("version", "v1")
	if k1.Sum() != k2.Sum() {
		t.Errorf("same inputs in another place or order gave %s and %s", k1.Sum(), k2.Sum())
	}
	if err := os.WriteFile(filepath.Join(dirB, "go.mod"), []byte("module y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k3 := NewKey("bin").Value("version", "v1")
	_ = k3.File("go.mod", filepath.Join(dirB, "go.mod"))
	if k3.Sum() == k1.Sum() {
		t.Error("changed file content kept the key")
	}
	if NewKey("bin").Value("version", "v2").Sum() == NewKey("bin").Value("version", "v1").Sum() {
		t.Error("changed value kept the key")
	}
	if NewKey("a").Sum() == NewKey("b").Sum() {
		t.Error("step name not part of the key")
	}
	// Ambiguous concatenations must not collide.
	if NewKey("s").Value("ab", "c").Sum() == NewKey("s").Value("a", "bc").Sum() {
		t.Error("name/value boundary not encoded")
	}
}

func TestKeyDirFilter(t *testing.T) {
	d := t.TempDir()
	_ = os.WriteFile(filepath.Join(d, "a.go"), []byte("package a"), 0o644)
	_ = os.WriteFile(filepath.Join(d, "a_test.go"), []byte("package a"), 0o644)
	keep := func(rel string) bool { return filepath.Ext(rel) == ".go" && !isTestFile(rel) }
	k1 := NewKey("x")
	if err := k1.Dir("src", d, keep); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(d, "a_test.go"), []byte("package a // changed"), 0o644)
	k2 := NewKey("x")
	_ = k2.Dir("src", d, keep)
	if k1.Sum() != k2.Sum() {
		t.Error("a filtered-out file changed the key")
	}
	_ = os.WriteFile(filepath.Join(d, "a.go"), []byte("package a // changed"), 0o644)
	k3 := NewKey("x")
	_ = k3.Dir("src", d, keep)
	if k3.Sum() == k1.Sum() {
		t.Error("a kept file changed without changing the key")
	}
}

func TestCachedDirBuildsOnceAndNeverKeepsFailures(t *testing.T) {
	c := &Cluster{opts: Options{CacheDir: t.TempDir()}}
	builds := 0
	build := func(dir string) error {
		builds++
		return os.WriteFile(filepath.Join(dir, "out"), []byte("ok"), 0o644)
	}
	dir, hit, err := c.cachedDir("bin", "k1", build)
	if err != nil || hit {
		t.Fatalf("first: hit=%v err=%v", hit, err)
	}
	if _, hit, _ := c.cachedDir("bin", "k1", build); !hit || builds != 1 {
		t.Fatalf("second call rebuilt (builds=%d)", builds)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out")); string(b) != "ok" {
		t.Errorf("output = %q", b)
	}
	_, _, err = c.cachedDir("bin", "k2", func(dir string) error { return errors.New("boom") })
	if err == nil {
		t.Fatal("failure not reported")
	}
	if _, err := os.Stat(filepath.Join(c.opts.CacheDir, "bin", "k2")); !os.IsNotExist(err) {
		t.Error("failed build left a cache entry")
	}
	// A new key supersedes the old entry.
	if _, _, err := c.cachedDir("bin", "k3", build); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Error("superseded entry kept")
	}
}

func TestFindRepoRootFromRelativeSubdir(t *testing.T) {
	root, err := FindRepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "infra", "localcluster")); err != nil {
		t.Errorf("FindRepoRoot(.) = %s, not the checkout", root)
	}
	if _, err := FindRepoRoot(t.TempDir()); err == nil {
		t.Error("a directory outside any checkout was accepted")
	}
}

// kubectl is placed once per change of the build: a link or a copy of the cache entry, replaced when the
// build changes, left alone when it has not.
func TestInstallFileOnlyWhenChanged(t *testing.T) {
	cache, out := t.TempDir(), filepath.Join(t.TempDir(), "bin")
	src, dst := filepath.Join(cache, "kubectl"), filepath.Join(out, "kubectl")
	if err := os.WriteFile(src, []byte("kubectl v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		changed, err := installFile(src, dst)
		if err != nil || changed != want {
			t.Fatalf("install %d: changed %v, %v; want %v", i+1, changed, err, want)
		}
	}
	if b, _ := os.ReadFile(dst); string(b) != "kubectl v1" {
		t.Errorf("placed %q", b)
	}
	if info, err := os.Stat(dst); err != nil || info.Mode().Perm()&0o100 == 0 {
		t.Errorf("placed kubectl not executable: %v %v", info, err)
	}

	// A new build is a new cache entry; a copy with the same bytes counts as placed.
	src2 := filepath.Join(cache, "kubectl-2")
	if err := os.WriteFile(src2, []byte("kubectl v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if changed, err := installFile(src2, dst); err != nil || !changed {
		t.Fatalf("new build: changed %v, %v", changed, err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "kubectl v2" {
		t.Errorf("after the new build: %q", b)
	}
	if err := os.Remove(dst); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(src2, dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if changed, err := installFile(src2, dst); err != nil || changed {
		t.Errorf("same bytes: changed %v, %v", changed, err)
	}
	if _, err := os.Stat(dst + ".new"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("left a temporary file: %v", err)
	}
}

// The main module's dependency list is remembered under a stat fingerprint: asked of `go list` once,
// answered from the memo while no Go file of the module changes, asked again after an edit. Files go list
// does not read (outside the module's packages, nested modules, _output) leave the memo in force.
func TestListMainDepsIsRememberedUntilAGoFileChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	root := t.TempDir()
	write := func(rel, body string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.test/m\n\ngo 1.24\n")
	write("cmd/a/main.go", "package main\n\nimport _ \"example.test/m/lib\"\n\nfunc main() {}\n")
	write("lib/lib.go", "package lib\n")
	write("other/other.go", "package other\n")
	c := &Cluster{opts: Options{RepoRoot: root, CacheDir: t.TempDir()}}
	ctx := t.Context()
	first, err := c.listMainDeps(ctx, []string{"./cmd/a"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first, filepath.Join(root, "lib")) || strings.Contains(first, "other") {
		t.Fatalf("go list -deps answered %q", first)
	}
	// Plant a sentinel in the memo: while the module is unchanged, the memo (not go list) answers.
	memos, _ := filepath.Glob(filepath.Join(c.opts.CacheDir, "golist", "*"))
	if len(memos) != 1 {
		t.Fatalf("memo files: %v", memos)
	}
	b, _ := os.ReadFile(memos[0])
	fp, _, _ := strings.Cut(string(b), "\n")
	if err := os.WriteFile(memos[0], []byte(fp+"\nsentinel"), 0o644); err != nil {
		t.Fatal(err)
	}
	write("_output/x.go", "package x\n")
	write("nested/go.mod", "module example.test/nested\n")
	write("nested/n.go", "package n\n")
	write("README.md", "words\n")
	if got, _ := c.listMainDeps(ctx, []string{"./cmd/a"}); got != "sentinel" {
		t.Fatalf("unchanged module: go list was asked again (%q)", got)
	}
	// An edit that adds an import: go list is asked again and sees it.
	write("cmd/a/main.go", "package main\n\nimport (\n\t_ \"example.test/m/lib\"\n\t_ \"example.test/m/other\"\n)\n\nfunc main() {}\n")
	got, err := c.listMainDeps(ctx, []string{"./cmd/a"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, filepath.Join(root, "other")) {
		t.Fatalf("after an edit the memo answered %q", got)
	}
}
