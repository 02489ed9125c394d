package localcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A bring-up that finds a part of the cluster exactly as the last successful bring-up left it does not
// redo that part: re-applying the GPU stack and Kueue, and the cross-node pod check, are most of a no-op
// `make cluster`. "Exactly as left" is a fingerprint of the live objects (their UIDs and resourceVersions,
// which any edit, rollout, restart or recreation changes; the node containers' start times) together with
// what the bring-up would apply, kept per cluster in the cache directory after the part last succeeded.
// A fingerprint that cannot be taken matches nothing: the part is redone. What proves the part works now
// (the devices advertised, Kueue's webhook answering) still runs on every bring-up.

// unlessUnchanged brings one part up: apply (re-applying, re-checking) unless its fingerprint is the one
// kept after it last came up, then prove (what shows the part works now, every time; fresh says whether
// apply was skipped), and keeps the fingerprint only after both succeeded. what names the part's objects
// in the log line of a skip.
func (c *Cluster) unlessUnchanged(part, what string, fp func() string, apply func() error, prove func(fresh bool) error) error {
	fresh := c.unchanged(part, fp())
	if fresh {
		c.logf("  %s unchanged since the last bring-up: not redone", what)
	} else {
		c.forget(part)
		if err := apply(); err != nil {
			return err
		}
	}
	if prove != nil {
		if err := prove(fresh); err != nil {
			return err
		}
	}
	if !fresh {
		c.remember(part, fp())
	}
	return nil
}

// stampFile is where the fingerprint of a part of the cluster, taken after it last came up, is kept.
func (c *Cluster) stampFile(part string) string {
	return filepath.Join(c.opts.CacheDir, "stamps", c.opts.Name, part)
}

// unchanged reports whether the part's fingerprint is the one kept after it last came up.
func (c *Cluster) unchanged(part, fingerprint string) bool {
	if fingerprint == "" {
		return false
	}
	had, err := os.ReadFile(c.stampFile(part))
	return err == nil && string(had) == fingerprint
}

// remember keeps the part's fingerprint after it came up; forget drops it (the part is redone next time).
func (c *Cluster) remember(part, fingerprint string) {
	if fingerprint == "" {
		c.forget(part)
		return
	}
	if err := os.MkdirAll(filepath.Dir(c.stampFile(part)), 0o755); err == nil {
		_ = os.WriteFile(c.stampFile(part), []byte(fingerprint), 0o644)
	}
}

func (c *Cluster) forget(part string) { _ = os.Remove(c.stampFile(part)) }

// objectsFingerprint is the fingerprint of the objects kubectl lists for args (resource types, a
// namespace) with what the bring-up would apply to them (want), or "" when they cannot be listed.
func (c *Cluster) objectsFingerprint(ctx context.Context, want string, args ...string) string {
	out, err := c.kubectlOut(ctx, append(append([]string{"get"}, args...), "-o",
		`jsonpath={range .items[*]}{.kind}/{.metadata.namespace}/{.metadata.name}={.metadata.uid}@{.metadata.resourceVersion}{"\n"}{end}`)...)
	if err != nil || strings.TrimSpace(out) == "" {
		return ""
	}
	return fingerprint(want, out)
}

// fingerprint hashes its parts, order-independently for the lines of each.
func fingerprint(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		lines := strings.Split(strings.TrimSpace(p), "\n")
		slices.Sort(lines)
		h.Write([]byte(strings.Join(lines, "\n")))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
