package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// imageSpec is a container image assembled from files on this machine: FROM scratch (or a local base),
// never pulled.
type imageSpec struct {
	// Ref is the name the image must have (inside the nodes, kubeadm and the manifests refer to it).
	Ref string
	// From is the base image; "scratch" when empty.
	From string
	// Files maps a path inside the image to a file on this machine (copied with mode 0755).
	Files map[string]string
	// Dirs are empty directories to create (mode 1777 for tmp dirs).
	Dirs []string
	// Entrypoint, User and Env are image settings.
	Entrypoint []string
	User       string
	Env        []string
}

// key hashes what the image is made of.
func (s imageSpec) key() (string, error) {
	k := NewKey("image:"+s.Ref).Value("from", s.From).Value("entrypoint", strings.Join(s.Entrypoint, "\x00")).
		Value("user", s.User).Value("env", strings.Join(s.Env, "\x00")).Value("dirs", strings.Join(s.Dirs, " "))
	for dst, src := range s.Files {
		if err := k.File(dst, src); err != nil {
			return "", err
		}
	}
	return k.Sum(), nil
}

// dockerfile renders the image's Dockerfile for a build context laid out by buildImage.
func (s imageSpec) dockerfile() string {
	var b strings.Builder
	from := s.From
	if from == "" {
		from = "scratch"
	}
	fmt.Fprintf(&b, "FROM %s\n", from)
	b.WriteString("COPY rootfs/ /\n")
	if s.User != "" {
		fmt.Fprintf(&b, "USER %s\n", s.User)
	}
	env := append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, s.Env...)
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		fmt.Fprintf(&b, "ENV %s=%q\n", k, v)
	}
	if len(s.Entrypoint) > 0 {
		q := make([]string, len(s.Entrypoint))
		for i, a := range s.Entrypoint {
			q[i] = fmt.Sprintf("%q", a)
		}
		fmt.Fprintf(&b, "ENTRYPOINT [%s]\n", strings.Join(q, ", "))
	}
	return b.String()
}

// imageLabel marks every image the project builds with its content key.
const imageLabel = "io.gpuconform.key"

// imageKey returns the content key recorded on a local image, or "" when the image is absent.
func imageKey(ctx context.Context, ref string) string {
	out, err := output(ctx, "docker", "image", "inspect", "--format", "{{index .Config.Labels \""+imageLabel+"\"}}", ref)
	if err != nil {
		return ""
	}
	return out
}

// buildImage builds the image unless a local image of that name already carries the same content key.
func (c *Cluster) buildImage(ctx context.Context, s imageSpec) error {
	key, err := s.key()
	if err != nil {
		return fmt.Errorf("key for image %s: %w", s.Ref, err)
	}
	return c.buildImageKeyed(ctx, s, key)
}

// imagesState returns the content key of each image, one key over them all, and whether every image is
// already built with its key.
func imagesState(ctx context.Context, specs []imageSpec) (keys map[string]string, all string, built bool, err error) {
	keys = map[string]string{}
	k := NewKey("images")
	built = true
	for _, s := range specs {
		key, err := s.key()
		if err != nil {
			return nil, "", false, fmt.Errorf("key for image %s: %w", s.Ref, err)
		}
		keys[s.Ref] = key
		k.Value(s.Ref, key)
		if built && imageKey(ctx, s.Ref) != key {
			built = false
		}
	}
	return keys, k.Sum(), built, nil
}

// buildImageKeyed is buildImage with the image's key already computed.
func (c *Cluster) buildImageKeyed(ctx context.Context, s imageSpec, key string) error {
	if imageKey(ctx, s.Ref) == key {
		c.logf("  %s: cached (%s)", s.Ref, key)
		return nil
	}
	ctxDir, err := os.MkdirTemp("", "gpuconform-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ctxDir)
	root := filepath.Join(ctxDir, "rootfs")
	for _, d := range s.Dirs {
		mode := os.FileMode(0o755)
		if filepath.Base(d) == "tmp" {
			mode = 0o1777
		}
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(root, d), mode); err != nil {
			return err
		}
	}
	for dst, src := range s.Files {
		if err := copyFile(src, filepath.Join(root, dst), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	df := s.dockerfile() + fmt.Sprintf("LABEL %s=%q\n", imageLabel, key)
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(df), 0o644); err != nil {
		return err
	}
	return c.dockerBuild(ctx, "image "+s.Ref, ctxDir, s.Ref)
}

// dockerBuild runs the classic builder: it builds FROM scratch and FROM local images with no registry and
// no buildx plugin.
func (c *Cluster) dockerBuild(ctx context.Context, what, dir, ref string) error {
	return c.runIn(ctx, dir, []string{"DOCKER_BUILDKIT=0"}, "docker build "+what, "docker", "build", "--network=none", "-t", ref, ".")
}

// copyFile copies a regular file, creating parent directories.
func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// pruneImages removes the local tags of repo other than keep: superseded content-keyed images would
// otherwise pile up (a node image is 1.7 GB). Images still used by a container are left alone by Docker.
func (c *Cluster) pruneImages(ctx context.Context, repo, keep string) {
	out, err := output(ctx, "docker", "images", "--format", "{{.Repository}}:{{.Tag}}", repo)
	if err != nil {
		return
	}
	for ref := range strings.FieldsSeq(out) {
		if ref != keep {
			if _, err := output(ctx, "docker", "rmi", ref); err == nil {
				c.logf("  removed superseded image %s", ref)
			}
		}
	}
}
