package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

// nodeImageComponents are the wrapper modules buildAll builds for the node image, in its order.
var nodeImageComponents = []goComponent{compContainerd, compEtcd, compCoreDNS, compCrictl, compKueue, compDRA}

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
// With an empty module cache the fetch alone took 11-22 s per component here (Kueue 22 s, crictl 15 s, etcd
// and CoreDNS 11 s); a cold bring-up with it (stop 42) built each component in the time one without it
// took (the builds are compile-bound on two cores), so it saves little where the module proxy is fast.
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
