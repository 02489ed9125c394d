package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// nodeImageComponents are the wrapper modules buildAll builds for the node image, in its order. Kueue is
// not one: it compiles beside the later steps and is loaded after the cluster's creation (loadKueue); nor
// is the dra-example-driver, built only when a bring-up asks for it (loadExampleDRADriver).
var nodeImageComponents = []goComponent{compContainerd, compEtcd, compCoreDNS, compCrictl}

// toFetch are the components among comps whose binaries are not cached, and that build from a wrapper
// module of their own (the main module's were downloaded when the gpuconform command was built).
func (c *Cluster) toFetch(ctx context.Context, comps []goComponent) []goComponent {
	var out []goComponent
	for _, comp := range comps {
		if comp.Module == "" {
			continue
		}
		if key, err := c.componentKey(ctx, comp); err == nil && exists(c.goCacheDir(comp, key)) {
			continue
		}
		out = append(out, comp)
	}
	return out
}

// fetchArgs is the `go list -deps` that loads every package comp's build compiles, under the build's own
// tags: the go command fetches exactly the module zips `go build` would fetch before compiling, and nothing
// else (`go mod download` fetches the whole module graph: for Kubernetes 604 MB, where the build needs
// less). The packages' names are all it prints.
func fetchArgs(comp goComponent) []string {
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}"}
	if comp.Tags != "" {
		args = append(args, "-tags", comp.Tags)
	}
	return append(args, comp.Packages...)
}

// fetchModules downloads, into the machine's Go module cache that every build reads, the modules of the
// components not yet cached, beside the Kubernetes build, so that their builds need not download first.
// The builds are compile-bound on two cores, so this saves little where the module proxy is fast.
// A fetch that fails is a note: the component's build downloads what it needs itself, and reports a real
// failure there.
func (c *Cluster) fetchModules(ctx context.Context, comps []goComponent) {
	todo := c.toFetch(ctx, comps)
	if len(todo) == 0 {
		return
	}
	names := make([]string, len(todo))
	for i, comp := range todo {
		names[i] = comp.Name
	}
	what := fmt.Sprintf("download the Go modules of %s (go list -deps), beside the Kubernetes build", strings.Join(names, ", "))
	_ = c.step("go modules", what, func() error { // fetchOne fails nothing
		for _, comp := range todo {
			c.fetchOne(ctx, comp)
		}
		return nil
	})
}

// fetchOne fetches the modules of one component (fetchModules); a failure is a note, and once the
// bring-up ended or failed (ctx) it fetches nothing: its builds do not need them any more.
func (c *Cluster) fetchOne(ctx context.Context, comp goComponent) {
	if ctx.Err() != nil {
		return
	}
	err := c.runIn(ctx, filepath.Join(c.opts.RepoRoot, comp.Module), []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false"},
		"go modules "+comp.Name, "go", fetchArgs(comp)...)
	if err != nil && ctx.Err() == nil {
		c.logf("  note: fetching the modules of %s failed (%v); its build fetches them itself", comp.Name, err)
	}
}

// The wrapper modules share most of what they compile: Kueue, the DRA driver, crictl, containerd and CoreDNS
// build on the same k8s.io client libraries as Kubernetes, and all of them on grpc, protobuf, otel and
// golang.org/x. The go command's build cache reuses a compiled package only when its sources and those of
// everything it imports are the same, so one version apart anywhere below (x/sys, cbor) compiles all of
// k8s.io/api and client-go again. The wrapper modules therefore require every module they have in common at
// one version, the highest any of them needs (WrapperVersionSkew finds a module that is not;
// AlignWrapperModules raises it): a cold bring-up then compiles each shared package once. Kueue does not
// compile against the k8s.io v0.37 libraries: it shares the main module's graph instead (withMain), whose
// k8s.io v0.35 libraries `make build` has compiled by then. The DRA driver keeps its release's graph
// (ownGraph).

// wrapperModulesDir holds the wrapper modules, relative to the repository root.
const wrapperModulesDir = "infra/modules"

// ownGraph are the wrapper modules that keep their release's module graph, and why: the others' shared
// versions are not raised to theirs, nor theirs to the others'.
var ownGraph = map[string]string{
	"prometheus": "Prometheus v0.316.0 pins newer OpenTelemetry, gRPC and golang.org/x libraries than Kubernetes v1.37.2; " +
		"raising them in the shared graph would rebuild Kubernetes for a component that shares little more than client-go with it",
	"prometheus-adapter": "prometheus-adapter v0.12.0 is an aggregated API server built on custom-metrics-apiserver v1.30 and the k8s.io " +
		"v0.30 generic API server; it keeps the graph its release was tested with rather than Kubernetes v1.37.2's",
	"dra-example-driver": "dra-example-driver v0.4.0 pins k8s.io v0.36, and its CPU profile sets resource/v1 " +
		"Device.NodeAllocatableResourceMappings, an alpha field that v0.37 does not have",
	"kwok": "KWOK v0.8.0 is built on the k8s.io v0.36 libraries and controller-runtime v0.24; it plays the kubelet of the " +
		"autoscaler's simulated nodes only, so it keeps the graph its release was tested with",
	"traefik": "Traefik v3.6.12 is built on the k8s.io v0.34 libraries and Gateway API v1.4.0, with three forks its release " +
		"replaces; it is the local cluster's Gateway API implementation only, so it keeps the graph its release was tested with",
}

// withMain are the wrapper modules that share the main module's graph instead of the other wrappers', and
// why: each requires every module the main module requires at the main module's version or above
// (mainModuleSkew), so that the packages both compile are compiled once, by `make build` and the unit
// tests, before the bring-up needs them.
var withMain = map[string]string{
	"kueue": "Kueue v0.17.0 is the release whose API and clientset gpuconform itself builds on, with the same k8s.io " +
		"v0.35 libraries and controller-runtime v0.23.3: 779 of the 1,628 packages its build compiles are the main " +
		"module's, at the same versions",
	"karpenter": "Karpenter v1.13.0 (its KWOK provider, the local node autoscaler) builds on the same k8s.io v0.35 libraries " +
		"and controller-runtime v0.23 as gpuconform itself",
}

// readWrapperModules parses the go.mod of every wrapper module that shares its versions with the others (not
// ownGraph's nor withMain's), by directory name.
func readWrapperModules(root string) (map[string]*modfile.File, error) {
	dirs, err := os.ReadDir(filepath.Join(root, wrapperModulesDir))
	if err != nil {
		return nil, err
	}
	files := map[string]*modfile.File{}
	for _, d := range dirs {
		if _, own := ownGraph[d.Name()]; own {
			continue
		}
		if _, ok := withMain[d.Name()]; ok {
			continue
		}
		f, err := readGoMod(filepath.Join(root, wrapperModulesDir, d.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		files[d.Name()] = f
	}
	return files, nil
}

// readGoMod parses dir/go.mod.
func readGoMod(dir string) (*modfile.File, error) {
	p := filepath.Join(dir, "go.mod")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(p, b, nil)
}

// mainModuleSkew reads the withMain wrapper modules and lists, by name, the modules each requires below the
// version the main module (root/go.mod) requires.
func mainModuleSkew(root string) (map[string]*modfile.File, map[string][]module.Version, error) {
	mainMod, err := readGoMod(root)
	if err != nil {
		return nil, nil, err
	}
	want := requiredVersions(mainMod)
	files, below := map[string]*modfile.File{}, map[string][]module.Version{}
	for name := range withMain {
		f, err := readGoMod(filepath.Join(root, wrapperModulesDir, name))
		if err != nil {
			return nil, nil, err
		}
		files[name] = f
		for path, v := range requiredVersions(f) {
			if w, ok := want[path]; ok && semver.Compare(v, w) < 0 {
				below[name] = append(below[name], module.Version{Path: path, Version: w})
			}
		}
		slices.SortFunc(below[name], func(a, b module.Version) int { return strings.Compare(a.Path, b.Path) })
	}
	return files, below, nil
}

// aboveMain lists the modules a withMain wrapper requires above the main module's version: allowed (its own
// release needs them), but a package of such a module that both compile is compiled twice.
func aboveMain(root string, files map[string]*modfile.File) []string {
	mainMod, err := readGoMod(root)
	if err != nil {
		return nil
	}
	want := requiredVersions(mainMod)
	var out []string
	for name, f := range files {
		for path, v := range requiredVersions(f) {
			if w, ok := want[path]; ok && semver.Compare(v, w) > 0 {
				out = append(out, fmt.Sprintf("%s requires %s@%s, the main module %s", name, path, v, w))
			}
		}
	}
	slices.Sort(out)
	return out
}

// requiredVersions is what a go.mod requires of each module, where a replace that keeps the module's path
// (Kubernetes' staging modules, redirected to their published versions) names the version it builds.
func requiredVersions(f *modfile.File) map[string]string {
	out := map[string]string{}
	for _, r := range f.Require {
		out[r.Mod.Path] = r.Mod.Version
	}
	for _, r := range f.Replace {
		if _, ok := out[r.Old.Path]; ok && r.New.Path == r.Old.Path && r.New.Version != "" {
			out[r.Old.Path] = r.New.Version
		}
	}
	return out
}

// sharedVersions is, for every module two or more wrapper modules require, the highest version any requires.
func sharedVersions(files map[string]*modfile.File) map[string]string {
	highest, count := map[string]string{}, map[string]int{}
	for _, f := range files {
		for path, v := range requiredVersions(f) {
			count[path]++
			if semver.Compare(v, highest[path]) > 0 {
				highest[path] = v
			}
		}
	}
	for path, n := range count {
		if n < 2 {
			delete(highest, path)
		}
	}
	return highest
}

// versionSkew lists, by wrapper module, the modules it requires below the version another one requires.
func versionSkew(files map[string]*modfile.File) map[string][]module.Version {
	want := sharedVersions(files)
	skew := map[string][]module.Version{}
	for name, f := range files {
		for path, v := range requiredVersions(f) {
			if w, ok := want[path]; ok && w != v {
				skew[name] = append(skew[name], module.Version{Path: path, Version: w})
			}
		}
		slices.SortFunc(skew[name], func(a, b module.Version) int { return strings.Compare(a.Path, b.Path) })
	}
	return skew
}

// WrapperVersionSkew says which wrapper modules require a module below the version another one requires
// (a withMain wrapper: below the main module's), as "name: path@have < want" lines; none when they agree.
func WrapperVersionSkew(root string) ([]string, error) {
	files, err := readWrapperModules(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for name, mods := range versionSkew(files) {
		have := requiredVersions(files[name])
		for _, m := range mods {
			out = append(out, fmt.Sprintf("%s: %s@%s < %s", name, m.Path, have[m.Path], m.Version))
		}
	}
	withFiles, below, err := mainModuleSkew(root)
	if err != nil {
		return nil, err
	}
	for name, mods := range below {
		have := requiredVersions(withFiles[name])
		for _, m := range mods {
			out = append(out, fmt.Sprintf("%s: %s@%s < %s (the main module's)", name, m.Path, have[m.Path], m.Version))
		}
	}
	slices.Sort(out)
	return out, nil
}

// AlignWrapperModules raises every module a wrapper module requires below another's version to that version
// (and a withMain wrapper's below the main module's): it writes the higher requirement into the go.mod and
// lets `go mod tidy` settle the graph, which may raise others (a requirement only ever raises the selected
// version, so no two raised modules conflict), and repeats until the modules agree. It never lowers a
// version, so no wrapper builds an older component than its go.mod pinned, and it never changes the main
// module. A module whose version a replace fixes (Kubernetes' staging modules) is an error that names it,
// for a person to move the replace.
func AlignWrapperModules(ctx context.Context, root string, logf func(string, ...any)) error {
	for round := 1; round <= 8; round++ {
		files, err := readWrapperModules(root)
		if err != nil {
			return err
		}
		skew := versionSkew(files)
		withFiles, below, err := mainModuleSkew(root)
		if err != nil {
			return err
		}
		for name, mods := range below {
			files[name] = withFiles[name]
			skew[name] = mods
		}
		if len(skew) == 0 {
			logf("the %d wrapper modules agree on every module they share, and %s with the main module's (%d rounds)",
				len(files), strings.Join(slices.Sorted(maps.Keys(withMain)), ", "), round-1)
			for _, line := range aboveMain(root, withFiles) {
				logf("  note: %s", line)
			}
			return nil
		}
		for name, mods := range skew {
			f := files[name]
			for _, m := range mods {
				for _, r := range f.Replace {
					if r.Old.Path == m.Path {
						return fmt.Errorf("%s replaces %s; move its replace to %s by hand", name, m.Path, m.Version)
					}
				}
				if err := f.AddRequire(m.Path, m.Version); err != nil {
					return fmt.Errorf("%s: require %s@%s: %w", name, m.Path, m.Version, err)
				}
			}
			f.Cleanup()
			b, err := f.Format()
			if err != nil {
				return err
			}
			dir := filepath.Join(root, wrapperModulesDir, name)
			if err := os.WriteFile(filepath.Join(dir, "go.mod"), b, 0o644); err != nil {
				return err
			}
			logf("%s: raising %d modules", name, len(mods))
			if _, err := output(ctx, "go", "-C", dir, "mod", "tidy"); err != nil {
				return fmt.Errorf("go mod tidy in %s: %w", name, err)
			}
		}
	}
	return errors.New("the wrapper modules still disagree after 8 rounds")
}
