package ociarchive

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func TestWriteIsAReadableReproducibleOCIArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Ref: "gpuconform.local/tool:v1", Files: map[string]string{"/usr/local/bin/tool": bin}, Dirs: []string{"tmp"},
		Entrypoint: []string{"/usr/local/bin/tool"}, User: "65532:65532"}
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	da, err := Write(spec, a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Write(spec, b)
	if err != nil || da != db {
		t.Fatalf("same inputs, digests %s and %s (%v)", da, db, err)
	}
	// Unpack the archive and read it back as an OCI layout.
	out := filepath.Join(dir, "layout")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("tar", "-xf", a, "-C", out).Run(); err != nil {
		t.Skipf("no tar to unpack with: %v", err)
	}
	idx, err := layout.ImageIndexFromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("index: %+v %v", m, err)
	}
	if got := m.Manifests[0].Annotations["io.containerd.image.name"]; got != spec.Ref {
		t.Errorf("image name annotation %q", got)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	if cf.Config.User != spec.User || cf.Config.Entrypoint[0] != spec.Entrypoint[0] {
		t.Errorf("config %+v", cf.Config)
	}
	layers, _ := img.Layers()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(rc)
	found := map[string]int64{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		found[h.Name] = h.Mode
	}
	if found["usr/local/bin/tool"] != 0o755 || found["tmp/"] != 0o1777 {
		t.Errorf("layer entries %v", found)
	}
}
