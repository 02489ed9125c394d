// Package ociarchive writes container images as OCI archives (a tar of an OCI image layout) from files on
// this machine, with go-containerregistry: no Docker, no registry, and the same bytes for the same inputs.
// Users push them with their own tools (skopeo copy oci-archive:F docker://REG/IMG:TAG, crane push); the
// local cluster imports them into its nodes' containerd.
package ociarchive

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1" //nolint:revive // goimports wants the name: it reads /v1 as a version suffix
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Spec is one image: a single layer of files, and its settings.
type Spec struct {
	// Ref names the image (registry/repository:tag) in the archive's index.
	Ref string
	// Files maps a path inside the image to a file on this machine; they are written with mode 0755.
	Files map[string]string
	// Dirs are empty directories (tmp is 1777).
	Dirs []string
	// Entrypoint, User, WorkingDir, Env and Labels are the image's settings.
	Entrypoint []string
	User       string
	WorkingDir string
	Env        []string
	Labels     map[string]string
}

// Write writes s as an OCI archive at out and returns the image's digest.
func Write(s Spec, out string) (v1.Hash, error) {
	layerTar, err := layerTar(s)
	if err != nil {
		return v1.Hash{}, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return v1.Hash{}, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return v1.Hash{}, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint, cf.Config.User, cf.Config.WorkingDir, cf.Config.Labels = s.Entrypoint, s.User, s.WorkingDir, s.Labels
	cf.Config.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, s.Env...)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	dir, err := os.MkdirTemp("", "gpuconform-oci-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	// containerd's importer names the image from io.containerd.image.name; other tools read the OCI
	// ref.name (the tag).
	_, tag, _ := strings.Cut(s.Ref[strings.LastIndex(s.Ref, "/")+1:], ":")
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name": s.Ref, "org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return v1.Hash{}, err
	}
	return digest, tarDir(dir, out)
}

// epoch is every file's time: the same inputs give the same digest.
var epoch = time.Unix(0, 0).UTC()

// layerTar is the image's single layer.
func layerTar(s Spec) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]int64{}
	addDir := func(d string, mode int64) {
		for p := d; p != "." && p != "/" && p != ""; p = filepath.Dir(p) {
			if _, ok := dirs[p]; !ok {
				dirs[p] = 0o755
			}
		}
		dirs[d] = mode
	}
	for _, d := range s.Dirs {
		mode := int64(0o755)
		if filepath.Base(d) == "tmp" {
			mode = 0o1777
		}
		addDir(strings.Trim(d, "/"), mode)
	}
	files := make([]string, 0, len(s.Files))
	for dst := range s.Files {
		dst = strings.Trim(dst, "/")
		files = append(files, dst)
		if d := filepath.Dir(dst); d != "." {
			if _, ok := dirs[d]; !ok {
				addDir(d, 0o755)
			}
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: dirs[d], ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	slices.Sort(files)
	for _, dst := range files {
		src := s.Files[dst]
		if src == "" {
			src = s.Files["/"+dst]
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Ref, err)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: dst, Mode: 0o755, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes the layout directory dir as the tar out (written next to it, then renamed).
func tarDir(dir, out string) error {
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: epoch})
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
