package localcluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// KeyBuilder derives a content key for a build step: the hash of everything the step's output depends on
// (file contents, versions, flags, host quirks). Two builds with the same key produce interchangeable
// outputs, so a key that is already in the cache is never rebuilt.
type KeyBuilder struct {
	entries map[string]string
}

// NewKey starts a key for a step; the step name is part of the key.
func NewKey(step string) *KeyBuilder {
	return &KeyBuilder{entries: map[string]string{"step": step}}
}

// Value adds a named value (a version, a flag set, a quirk list).
func (k *KeyBuilder) Value(name, value string) *KeyBuilder {
	k.entries["v:"+name] = value
	return k
}

// File adds the content of one file under a name that does not depend on where the checkout lives.
func (k *KeyBuilder) File(name, path string) error {
	sum, err := fileSum(path)
	if err != nil {
		return err
	}
	k.entries["f:"+name] = sum
	return nil
}

// Dir adds every regular file below root (relative names and contents) for which keep returns true.
func (k *KeyBuilder) Dir(name, root string, keep func(rel string) bool) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if keep != nil && !keep(rel) {
			return nil
		}
		sum, err := fileSum(p)
		if err != nil {
			return err
		}
		k.entries["d:"+name+"/"+filepath.ToSlash(rel)] = sum
		return nil
	})
}

// Sum returns the key: a short hex digest, stable whatever the order of the calls that built it.
func (k *KeyBuilder) Sum() string {
	names := make([]string, 0, len(k.entries))
	for n := range k.entries {
		names = append(names, n)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%d:%s=%d:%s\n", len(n), n, len(k.entries[n]), k.entries[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// cachedDir returns the cache directory for kind/key, building it with build (into a temporary directory
// that is renamed into place only on success, so an interrupted build never leaves a half-filled entry).
func (c *Cluster) cachedDir(kind, key string, build func(dir string) error) (string, bool, error) {
	final := filepath.Join(c.opts.CacheDir, kind, key)
	if st, err := os.Stat(final); err == nil && st.IsDir() {
		return final, true, nil
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return "", false, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(final), "."+key+"-")
	if err != nil {
		return "", false, err
	}
	if err := build(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return "", false, err
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.RemoveAll(tmp)
		return "", false, err
	}
	// Older entries of the same kind are superseded; keep the cache from growing without bound.
	entries, _ := os.ReadDir(filepath.Dir(final))
	for _, e := range entries {
		if e.Name() != key && e.IsDir() && e.Name()[0] != '.' {
			_ = os.RemoveAll(filepath.Join(filepath.Dir(final), e.Name()))
		}
	}
	return final, false, nil
}
