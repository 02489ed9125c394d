package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
)

// goComponent is a set of commands built with one `go build`, either in a wrapper module under
// infra/modules (its own module graph, pinned by its go.mod and go.sum) or in the project's main module.
type goComponent struct {
	// Name names the cache entry and the log.
	Name string
	// Module is the wrapper module directory relative to the repository root; empty for the main module.
	Module string
	// Packages are the main packages to build.
	Packages []string
	// Output names the binary when a single package's default name is not the one we want.
	Output string
	// LDFlags, GCFlags and Tags are passed to go build; they are part of the key.
	LDFlags, GCFlags, Tags string
}

// noDWARF leaves the compiler's debug information out of every package: the linker's -w drops it from
// the binaries anyway, and writing it is about a tenth of the compile time. Only for the wrapper modules' components: Kueue
// shares its compiled packages with the main module's build, which keeps its debug information, and the
// go command reuses a compiled package only under the same flags.
const noDWARF = "all=-dwarf=false"

// kubeLDFlags stamps the Kubernetes version: an unstamped kube-apiserver reports
// v0.0.0-master+$Format:%H$, which Kueue cannot parse and exits on at start; kubeadm also picks image tags
// from its own version.
var kubeLDFlags = strings.Join([]string{"-s -w",
	"-X k8s.io/component-base/version.gitVersion=" + KubernetesVersion,
	"-X k8s.io/component-base/version.gitMajor=1",
	"-X k8s.io/component-base/version.gitMinor=37",
	"-X k8s.io/component-base/version.gitTreeState=clean",
	"-X k8s.io/client-go/pkg/version.gitVersion=" + KubernetesVersion,
}, " ")

var (
	compKubernetes = goComponent{Name: "kubernetes", Module: "infra/modules/kubernetes", LDFlags: kubeLDFlags, GCFlags: noDWARF, Packages: []string{
		"k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager",
		"k8s.io/kubernetes/cmd/kube-proxy", "k8s.io/kubernetes/cmd/kube-scheduler",
		"k8s.io/kubernetes/cmd/kubeadm", "k8s.io/kubernetes/cmd/kubectl", "k8s.io/kubernetes/cmd/kubelet"}}
	compContainerd = goComponent{Name: "containerd", Module: "infra/modules/containerd", GCFlags: noDWARF, LDFlags: "-s -w -X github.com/containerd/containerd/v2/version.Version=" + ContainerdVersion,
		Tags: "no_btrfs no_devmapper no_zfs", Packages: []string{
			"github.com/containerd/containerd/v2/cmd/containerd", "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
			"github.com/containerd/containerd/v2/cmd/ctr"}}
	compEtcd = goComponent{Name: "etcd", Module: "infra/modules/etcd", LDFlags: "-s -w", GCFlags: noDWARF, Output: "etcd", Packages: []string{"go.etcd.io/etcd/server/v3"}}
	// compCoreDNS is CoreDNS with a cluster DNS's plugins only (infra/modules/coredns/cmd/coredns).
	compCoreDNS = goComponent{Name: "coredns", Module: "infra/modules/coredns", LDFlags: "-s -w", GCFlags: noDWARF, Packages: []string{"gpuconform.io/infra/coredns/cmd/coredns"}}
	compCrictl  = goComponent{Name: "crictl", Module: "infra/modules/crictl", LDFlags: "-s -w", GCFlags: noDWARF, Packages: []string{"sigs.k8s.io/cri-tools/cmd/crictl"}}
	compKueue   = goComponent{Name: "kueue", Module: "infra/modules/kueue", LDFlags: "-s -w", Output: "manager", Packages: []string{"sigs.k8s.io/kueue/cmd/kueue"}}
	// compPrometheus is Prometheus with its Kubernetes service discovery only (the build tags of its
	// plugins/ directory), the local cluster's monitoring system.
	compPrometheus = goComponent{Name: "prometheus", Module: "infra/modules/prometheus", Output: "prometheus",
		Tags: "remove_all_sd enable_kubernetes_sd", LDFlags: "-s -w -X github.com/prometheus/common/version.Version=" + PrometheusVersion,
		Packages: []string{"github.com/prometheus/prometheus/cmd/prometheus"}}
	// compMetricsAdapter is prometheus-adapter, which serves the custom metrics API (custom.metrics.k8s.io)
	// from the local Prometheus, the way a platform gives the HPA its workloads' own metrics.
	compMetricsAdapter = goComponent{Name: "prometheus-adapter", Module: "infra/modules/prometheus-adapter", Output: "adapter", LDFlags: "-s -w", GCFlags: noDWARF,
		Packages: []string{"sigs.k8s.io/prometheus-adapter/cmd/adapter"}}
	// compKarpenter is Karpenter's controller with its KWOK cloud provider, the local node autoscaler; it
	// shares the main module's graph (withMain), so it compiles on what `make build` compiled.
	compKarpenter = goComponent{Name: "karpenter", Module: "infra/modules/karpenter", Output: "controller", LDFlags: "-s -w",
		Packages: []string{"sigs.k8s.io/karpenter/kwok"}}
	// compKWOK is KWOK's controller, the kubelet of the node autoscaler's simulated nodes.
	compKWOK = goComponent{Name: "kwok", Module: "infra/modules/kwok", Output: "kwok", LDFlags: "-s -w", GCFlags: noDWARF,
		Packages: []string{"sigs.k8s.io/kwok/cmd/kwok"}}
	// compTraefik is Traefik Proxy, the local cluster's Gateway API implementation (controller and data
	// plane in one process).
	compTraefik = goComponent{Name: "traefik", Module: "infra/modules/traefik", Output: "traefik", LDFlags: "-s -w", GCFlags: noDWARF,
		Packages: []string{"github.com/traefik/traefik/v3/cmd/traefik"}}
	compDRA = goComponent{Name: "dra-example-driver", Module: "infra/modules/dra-example-driver", LDFlags: "-s -w", GCFlags: noDWARF, Packages: []string{
		"sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin"}}
	// compRuntime is the capability-stripping runc wrapper for the project's own dockerd (host.go).
	compRuntime = goComponent{Name: "gpuconform-runc", LDFlags: "-s -w", Packages: []string{"./cmd/gpuconform-runc"}}
	// compTools are the project's own in-cluster programs, shipped in one image.
	compTools = goComponent{Name: "tools", LDFlags: "-s -w", Packages: []string{"./cmd/fake-device-plugin", "./cmd/gpu-workload", "./cmd/gpuconform-net", "./cmd/nvidia-smi"}}
)

// moduleDir is the directory, in the module cache, of module as comp's wrapper module selects it: where a
// component's data (manifests, CRDs, C sources) is read from.
func (c *Cluster) moduleDir(ctx context.Context, comp goComponent, module string) (string, error) {
	dir, err := output(ctx, "go", "-C", filepath.Join(c.opts.RepoRoot, comp.Module), "list", "-m", "-f", "{{.Dir}}", module)
	if err != nil {
		return "", fmt.Errorf("locating %s in %s: %w", module, comp.Module, err)
	}
	return dir, nil
}

func isTestFile(rel string) bool { return strings.HasSuffix(rel, "_test.go") }

// key derives the component's content key.
func (c *Cluster) componentKey(ctx context.Context, comp goComponent) (string, error) {
	k := NewKey("go:"+comp.Name).
		Value("go", runtime.Version()).Value("arch", runtime.GOARCH).
		Value("packages", strings.Join(comp.Packages, " ")).Value("output", comp.Output).
		Value("ldflags", comp.LDFlags).Value("gcflags", comp.GCFlags).Value("tags", comp.Tags).Value("goflags", "-mod=readonly -buildvcs=false")
	if comp.Module != "" {
		dir := filepath.Join(c.opts.RepoRoot, comp.Module)
		err := k.Dir("module", dir, func(rel string) bool { return !isTestFile(rel) })
		return k.Sum(), err
	}
	// Main module: the sources of every package of this module that the commands import.
	dirs, err := c.listMainDeps(ctx, comp.Packages)
	if err != nil {
		return "", err
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := k.File(f, filepath.Join(c.opts.RepoRoot, f)); err != nil {
			return "", err
		}
	}
	for d := range strings.FieldsSeq(dirs) {
		rel, _ := filepath.Rel(c.opts.RepoRoot, d)
		err := k.Dir(rel, d, func(r string) bool {
			return !strings.Contains(r, string(filepath.Separator)) && strings.HasSuffix(r, ".go") && !isTestFile(r)
		})
		if err != nil {
			return "", err
		}
	}
	// Files embedded with go:embed live beside the sources (yaml, templates): include them too.
	for d := range strings.FieldsSeq(dirs) {
		rel, _ := filepath.Rel(c.opts.RepoRoot, d)
		_ = k.Dir(rel+"#embed", d, func(r string) bool {
			return !strings.HasSuffix(r, ".go")
		})
	}
	return k.Sum(), nil
}

// listMainDeps lists the directories of the main module's packages that pkgs import (themselves included).
// `go list` costs over a second here on every bring-up, and its answer changes only with the module's Go
// files, go.mod or the build environment: it is remembered under their stat fingerprint (mainModuleStat)
// and asked again when that differs.
func (c *Cluster) listMainDeps(ctx context.Context, pkgs []string) (string, error) {
	memo := filepath.Join(c.opts.CacheDir, "golist", NewKey("go list -deps").Value("packages", strings.Join(pkgs, " ")).Sum())
	fp, fpErr := mainModuleStat(c.opts.RepoRoot)
	if fpErr == nil {
		if b, err := os.ReadFile(memo); err == nil {
			if got, dirs, ok := strings.Cut(string(b), "\n"); ok && got == fp {
				return dirs, nil
			}
		}
	}
	args := append([]string{"-C", c.opts.RepoRoot, "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}"}, pkgs...)
	dirs, err := output(ctx, "go", args...)
	if err == nil && fpErr == nil && os.MkdirAll(filepath.Dir(memo), 0o755) == nil {
		_ = writeFileAtomic(memo, []byte(fp+"\n"+dirs), 0o644)
	}
	return dirs, err
}

// mainModuleStat fingerprints what `go list -deps` reads of the main module: the name, size and
// modification time of every Go file in its package directories (nested modules, _output, testdata and
// hidden directories are not part of it), go.mod, go.sum, and the Go version and build environment.
// Stat, not content: it is taken on every bring-up, and an edit changes the modification time.
func mainModuleStat(root string) (string, error) {
	k := NewKey("main module stat").Value("go", runtime.Version()).Value("arch", runtime.GOARCH)
	for _, v := range []string{"GOOS", "GOARCH", "GOFLAGS", "CGO_ENABLED", "GOEXPERIMENT"} {
		k.Value("env "+v, os.Getenv(v))
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || exists(filepath.Join(p, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") && rel != "go.mod" && rel != "go.sum" {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		k.Value(filepath.ToSlash(rel), fmt.Sprintf("%d %d", info.Size(), info.ModTime().UnixNano()))
		return nil
	})
	return k.Sum(), err
}

// buildGo builds a component into the cache (or finds it there) and returns the directory of its binaries.
func (c *Cluster) buildGo(ctx context.Context, comp goComponent) (string, error) {
	key, err := c.componentKey(ctx, comp)
	if err != nil {
		return "", fmt.Errorf("key for %s: %w", comp.Name, err)
	}
	dir, hit, err := c.buildGoKeyed(ctx, comp, key)
	if hit {
		c.logf("  %s: cached (%s)", comp.Name, key)
	}
	return dir, err
}

// buildGoStep is buildGo as the step "build <name>", which says up front whether the build is cached.
func (c *Cluster) buildGoStep(ctx context.Context, comp goComponent) (string, error) {
	var key, dir string
	probe := func() (string, bool, error) {
		k, err := c.componentKey(ctx, comp)
		if err != nil {
			return "", false, fmt.Errorf("key for %s: %w", comp.Name, err)
		}
		key = k
		return k, exists(c.goCacheDir(comp, k)), nil
	}
	err := c.cachedStep("build "+comp.Name, comp.what(), probe, func() error {
		var err error
		dir, _, err = c.buildGoKeyed(ctx, comp, key)
		return err
	})
	return dir, err
}

// what describes the component's build for progress lines.
func (comp goComponent) what() string {
	names := make([]string, len(comp.Packages))
	for i, p := range comp.Packages {
		names[i] = path.Base(p)
	}
	if comp.Output != "" && len(names) == 1 {
		names[0] = comp.Output
	}
	from := "the main module"
	if comp.Module != "" {
		from = comp.Module
	}
	return fmt.Sprintf("go build of %s (%s)", strings.Join(names, ", "), from)
}

// goCacheDir is where the component's binaries of that key are cached.
func (c *Cluster) goCacheDir(comp goComponent, key string) string {
	return filepath.Join(c.opts.CacheDir, "bin", comp.Name, key)
}

// buildGoKeyed builds the component under a key already computed, unless it is cached.
func (c *Cluster) buildGoKeyed(ctx context.Context, comp goComponent, key string) (string, bool, error) {
	dir, hit, err := c.cachedDir("bin/"+comp.Name, key, func(out string) error {
		modDir := c.opts.RepoRoot
		if comp.Module != "" {
			modDir = filepath.Join(c.opts.RepoRoot, comp.Module)
		}
		target := out + string(filepath.Separator)
		if comp.Output != "" {
			target = filepath.Join(out, comp.Output)
		}
		args := []string{"build", "-trimpath", "-ldflags", comp.LDFlags, "-o", target}
		if comp.GCFlags != "" {
			args = append(args, "-gcflags", comp.GCFlags)
		}
		if comp.Tags != "" {
			args = append(args, "-tags", comp.Tags)
		}
		args = append(args, comp.Packages...)
		// Static binaries: they run in FROM-scratch images and in the node rootfs alike. -mod=readonly: the
		// wrapper modules' go.sum pins every dependency, so a build never edits them. -buildvcs=false: the
		// git revision stamped into our own binaries would change their bytes (and so every image key that
		// hashes them) at each commit, although the key of their sources did not change.
		return c.runIn(ctx, modDir, []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false"}, "go build "+comp.Name, "go", args...)
	})
	if err != nil {
		return "", false, err
	}
	c.setBuilt(comp.Name, dir)
	return dir, hit, nil
}

// buildRuntimeWrapper builds gpuconform-runc and returns the path of a stable copy that dockerd's
// configuration can name.
func (c *Cluster) buildRuntimeWrapper(ctx context.Context) (string, error) {
	dir, err := c.buildGo(ctx, compRuntime)
	if err != nil {
		return "", err
	}
	// dockerd's configuration names this path for as long as the daemon runs, so it must not move when the
	// cache entry is superseded: install a copy at a stable place.
	stable := filepath.Join(c.opts.CacheDir, "dockerd", "gpuconform-runc")
	if err := os.MkdirAll(filepath.Dir(stable), 0o755); err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, "gpuconform-runc"))
	if err != nil {
		return "", err
	}
	tmp := stable + ".new"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return "", err
	}
	return stable, os.Rename(tmp, stable)
}

// binary returns the path of a built binary, failing loudly when a step was skipped.
func (c *Cluster) binary(comp, name string) string {
	c.builtMu.Lock()
	defer c.builtMu.Unlock()
	return filepath.Join(c.built[comp], name)
}

// setBuilt records where a build step of this run left its outputs.
func (c *Cluster) setBuilt(comp, dir string) {
	c.builtMu.Lock()
	defer c.builtMu.Unlock()
	c.built[comp] = dir
}

// Kubectl is where Up places the cluster's own kubectl build, next to the kubeconfig's directory: scripts
// (fixtures/upgrade/local-fake.sh) and people reach the cluster with it on a machine without kubectl.
func (c *Cluster) Kubectl() string { return filepath.Join(c.opts.OutputDir, "bin", "kubectl") }

// installKubectl places the kubectl of the kubernetes build at Kubectl(), only when it changed.
func (c *Cluster) installKubectl() error {
	changed, err := installFile(c.binary("kubernetes", "kubectl"), c.Kubectl())
	if err != nil {
		return fmt.Errorf("place kubectl at %s: %w", c.Kubectl(), err)
	}
	if changed {
		c.logf("  kubectl: %s", c.Kubectl())
	}
	return nil
}

// installFile makes dst a copy of the executable src and reports whether it had to: a hard link where src
// and dst share a file system (the cache entry is immutable), else a copy; nothing when dst already has
// src's bytes. dst is replaced by a rename, so a kubectl running from it is not disturbed.
func installFile(src, dst string) (bool, error) {
	srcInfo, err := os.Stat(src)
	if err != nil {
		return false, err
	}
	if dstInfo, err := os.Stat(dst); err == nil && (os.SameFile(srcInfo, dstInfo) || sameContent(src, dst, srcInfo, dstInfo)) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return false, err
	}
	tmp := dst + ".new"
	_ = os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		if err := copyFile(src, tmp, 0o755); err != nil {
			_ = os.Remove(tmp)
			return false, err
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return false, err
	}
	return true, nil
}

// sameContent reports whether two files of these infos hold the same bytes.
func sameContent(a, b string, aInfo, bInfo os.FileInfo) bool {
	if aInfo.Size() != bInfo.Size() {
		return false
	}
	aBytes, err := os.ReadFile(a)
	if err != nil {
		return false
	}
	bBytes, err := os.ReadFile(b)
	return err == nil && bytes.Equal(aBytes, bBytes)
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ControlPlaneBinaries builds (or finds in the cache) kube-apiserver, kubectl and etcd and returns a
// directory holding links to the three under the names envtest looks for: a throwaway API server for
// checks that need only API objects (the scale check's simulated 5,000-node cluster).
func (c *Cluster) ControlPlaneBinaries(ctx context.Context) (string, error) {
	kube, err := c.buildGoStep(ctx, compKubernetes)
	if err != nil {
		return "", err
	}
	etcd, err := c.buildGoStep(ctx, compEtcd)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(c.opts.OutputDir, "controlplane-bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for name, from := range map[string]string{"kube-apiserver": kube, "kubectl": kube, "etcd": etcd} {
		link := filepath.Join(dir, name)
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(from, name), link); err != nil {
			return "", err
		}
	}
	return dir, nil
}
