package localcluster

import (
	"context"
	"fmt"
	"os"

	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
)

// LoadArchives imports image archives (OCI or Docker, as `make images` writes them) into every node's
// containerd, as kind's own `kind load image-archive` does: the local cluster then runs them with no
// registry.
func (c *Cluster) LoadArchives(ctx context.Context, paths ...string) error {
	ns, err := c.nodes()
	if err != nil {
		return err
	}
	for _, p := range paths {
		for _, n := range ns {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			err = nodeutils.LoadImageArchive(n, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("loading %s into %s: %w", p, n, err)
			}
		}
		c.logf("  %s: loaded into %d nodes", p, len(ns))
	}
	return nil
}
