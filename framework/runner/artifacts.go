package runner

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
)

// fetch copies the pod's artifacts into the local artifacts directory, then tells the pod to exit.
func (r *Runner) fetch(ctx context.Context, pod string) error {
	var tarball, errOut bytes.Buffer
	if err := r.exec(ctx, pod, []string{Binary, "artifacts", "pack", podArtifacts}, &tarball, &errOut); err != nil {
		return fmt.Errorf("copying the artifacts: %w: %s", err, errOut.String())
	}
	n, err := Unpack(&tarball, r.opts.Artifacts)
	if err != nil {
		return fmt.Errorf("unpacking the artifacts into %s: %w", r.opts.Artifacts, err)
	}
	fmt.Fprintf(r.out, "gpuconform-runner: %d artifact files copied into %s\n", n, r.opts.Artifacts)
	errOut.Reset()
	if err := r.exec(ctx, pod, []string{Binary, "artifacts", "release", podArtifacts}, io.Discard, &errOut); err != nil {
		return fmt.Errorf("releasing the runner pod: %w: %s", err, errOut.String())
	}
	return nil
}

// exec runs command in the runner container.
func (r *Runner) exec(ctx context.Context, pod string, command []string, stdout, stderr io.Writer) error {
	req := r.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(r.ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(r.rest, "POST", req.URL())
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
}

// Pack is the pod's side of the copy (`gpuconform artifacts pack DIR`): it writes dir's files as a tar.
func Pack(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || path == dir || !info.Mode().IsRegular() && !info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == fetchedFile {
			return nil
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Release tells the pod waiting in Hold (`gpuconform artifacts release DIR`) that its artifacts were
// copied.
func Release(dir string) error {
	return os.WriteFile(filepath.Join(dir, fetchedFile), nil, 0o644)
}

// Hold is the end of a run in the runner pod: say the artifacts in dir are ready and wait, up to hold,
// for the runner to copy them.
func Hold(ctx context.Context, dir string, code int, hold time.Duration, out io.Writer) {
	fmt.Fprintf(out, "%s in %s (exit code %d); waiting up to %s for them to be copied\n", ReadyMarker, dir, code, hold)
	err := wait.PollUntilContextTimeout(ctx, time.Second, hold, true, func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join(dir, fetchedFile))
		return err == nil, nil
	})
	if err != nil {
		fmt.Fprintf(out, "gpuconform-runner: nobody copied the artifacts within %s\n", hold)
	}
}

// Unpack unpacks a tar stream into dir over what is there, refusing paths that leave it; it returns the
// number of files written.
func Unpack(r io.Reader, dir string) (int, error) {
	tr := tar.NewReader(r)
	n := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		clean := filepath.Clean(h.Name)
		if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return n, fmt.Errorf("refusing %q: outside the artifacts directory", h.Name)
		}
		dst := filepath.Join(dir, clean)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return n, err
			}
		case tar.TypeReg:
			if err := writeFile(dst, tr); err != nil {
				return n, err
			}
			n++
		}
	}
}

func writeFile(dst string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}
