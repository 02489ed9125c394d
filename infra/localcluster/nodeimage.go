package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/template"

	_ "embed"
)

//go:embed files/node.Dockerfile
var nodeDockerfile string

// systemImages are the images preloaded into the node image: everything the cluster runs before our own
// tools image is loaded (control plane, etcd, pause, CoreDNS, kube-proxy and the pod network agent). They
// are built from the binaries of the build steps.
func (c *Cluster) systemImages(rootfsImage string) []imageSpec {
	k8s := func(name string) string { return c.binary("kubernetes", name) }
	cp := func(name string) imageSpec {
		return imageSpec{Ref: "registry.k8s.io/" + name + ":" + KubernetesVersion,
			Files: map[string]string{"usr/local/bin/" + name: k8s(name)}, Dirs: []string{"tmp"},
			Entrypoint: []string{"/usr/local/bin/" + name}}
	}
	return []imageSpec{
		{Ref: ImagePause, Files: map[string]string{"pause": c.binary("pause", "pause")}, Entrypoint: []string{"/pause"}},
		cp("kube-apiserver"), cp("kube-controller-manager"), cp("kube-scheduler"),
		// kube-proxy execs iptables-restore and conntrack: it runs on the node rootfs, which has both (nft
		// backend, the one kind's entrypoint selects on this kind of host).
		{Ref: ImageProxy, From: rootfsImage, Files: map[string]string{"usr/local/bin/kube-proxy": k8s("kube-proxy")},
			Entrypoint: []string{"/usr/local/bin/kube-proxy"}},
		{Ref: ImageEtcd, Files: map[string]string{"usr/local/bin/etcd": c.binary("etcd", "etcd")},
			Dirs: []string{"tmp", "var/lib/etcd"}, Entrypoint: []string{"/usr/local/bin/etcd"}},
		// kubeadm's CoreDNS Deployment passes only args: the entrypoint must be the binary.
		{Ref: ImageCoreDNS, Files: map[string]string{"coredns": c.binary("coredns", "coredns")}, Dirs: []string{"tmp"},
			Entrypoint: []string{"/coredns"}},
		{Ref: ImageNet, Files: map[string]string{"usr/local/bin/gpuconform-net": c.binary("net", "gpuconform-net")},
			Entrypoint: []string{"/usr/local/bin/gpuconform-net"}},
	}
}

// kueueImage is Kueue's manager image. It is not preloaded either: Kueue compiles beside the node image's
// later steps and the cluster's creation (Up), and loadKueue loads it into the nodes before Kueue is applied.
// Kueue's manifests run /manager as a non-root user with a read-only root filesystem.
func (c *Cluster) kueueImage() imageSpec {
	return imageSpec{Ref: ImageKueue, Files: map[string]string{"manager": c.binary("kueue", "manager")}, User: "65532:65532",
		Entrypoint: []string{"/manager"}}
}

// prometheusImage is the local monitoring system's image: the server alone (its web UI's assets are not
// built in; the HTTP API, which the suite queries, is).
func (c *Cluster) prometheusImage() imageSpec {
	return imageSpec{Ref: ImagePrometheus, Files: map[string]string{"bin/prometheus": c.binary("prometheus", "prometheus")},
		Dirs: []string{"prometheus", "tmp"}, User: "65534:65534", Entrypoint: []string{"/bin/prometheus"}}
}

// metricsAdapterImage is prometheus-adapter's image; it writes its self-signed serving certificate to /tmp.
func (c *Cluster) metricsAdapterImage() imageSpec {
	return imageSpec{Ref: ImageMetricsAdapter, Files: map[string]string{"adapter": c.binary("prometheus-adapter", "adapter")},
		Dirs: []string{"tmp"}, User: "65534:65534", Entrypoint: []string{"/adapter"}}
}

// karpenterImage is the local node autoscaler's image (Karpenter with its KWOK provider).
func (c *Cluster) karpenterImage() imageSpec {
	return imageSpec{Ref: ImageKarpenter, Files: map[string]string{"controller": c.binary("karpenter", "controller")},
		User: "65534:65534", Entrypoint: []string{"/controller"}}
}

// kwokImage is KWOK's controller's image.
func (c *Cluster) kwokImage() imageSpec {
	return imageSpec{Ref: ImageKWOK, Files: map[string]string{"kwok": c.binary("kwok", "kwok")},
		Dirs: []string{"tmp"}, User: "65534:65534", Entrypoint: []string{"/kwok"}}
}

// traefikImage is Traefik Proxy's image, the local Gateway API implementation.
func (c *Cluster) traefikImage() imageSpec {
	return imageSpec{Ref: ImageTraefik, Files: map[string]string{"traefik": c.binary("traefik", "traefik")},
		Dirs: []string{"tmp"}, User: "65534:65534", Entrypoint: []string{"/traefik"}}
}

// exampleDRAImage is the dra-example-driver's image. It is not preloaded: only a cluster brought up with
// --dra-driver=example runs it, so it is built and loaded into the nodes then (loadExampleDRADriver),
// and a bring-up with the project's own agent never compiles it.
func (c *Cluster) exampleDRAImage() imageSpec {
	return imageSpec{Ref: ImageDRADriver, Files: map[string]string{
		"usr/bin/dra-example-kubeletplugin": c.binary("dra-example-driver", "dra-example-kubeletplugin")},
		Dirs: []string{"tmp"}}
}

// buildPauseStep compiles Kubernetes' own pause.c (from the k8s.io/kubernetes module) statically, as the
// step "build pause".
func (c *Cluster) buildPauseStep(ctx context.Context) error {
	var pausec, key string
	probe := func() (string, bool, error) {
		src, err := c.moduleDir(ctx, compKubernetes, "k8s.io/kubernetes")
		if err != nil {
			return "", false, err
		}
		pausec = filepath.Join(src, "build", "pause", "linux", "pause.c")
		k := NewKey("pause")
		if err := k.File("pause.c", pausec); err != nil {
			return "", false, err
		}
		key = k.Sum()
		return key, exists(filepath.Join(c.opts.CacheDir, "bin", "pause", key)), nil
	}
	return c.cachedStep("build pause", "gcc -static of Kubernetes' pause.c", probe, func() error {
		dir, _, err := c.cachedDir("bin/pause", key, func(out string) error {
			if _, err := exec.LookPath("gcc"); err != nil {
				return errors.New("gcc is needed to build the pause image: apt-get install gcc libc6-dev")
			}
			return c.run(ctx, "gcc pause", "gcc", "-Os", "-Wall", "-static", "-DVERSION=v3.10.2", "-o", filepath.Join(out, "pause"), pausec)
		})
		c.setBuilt("pause", dir)
		return err
	})
}

// kindFilesDir locates kind's base-image files (entrypoint, kubelet and containerd units and config) in the
// kind module that go.mod pins; they are what `kind build node-image` would put in the image.
func (c *Cluster) kindFilesDir(ctx context.Context) (string, error) {
	out, err := output(ctx, "go", "-C", c.opts.RepoRoot, "mod", "download", "-json", "sigs.k8s.io/kind")
	if err != nil {
		return "", err
	}
	var m struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		return "", fmt.Errorf("locate the kind module: %w", err)
	}
	if m.Dir == "" {
		return "", errors.New("locate the kind module: go mod download named no directory")
	}
	return filepath.Join(m.Dir, "images", "base", "files"), nil
}

// ContainerdConfig adapts kind's containerd configuration to this project's node image and host.
func ContainerdConfig(kindConfig string, q HostQuirks) (string, error) {
	out := kindConfig
	const kindPause = `sandbox_image = "registry.k8s.io/pause:3.10"`
	if !strings.Contains(out, kindPause) {
		return "", fmt.Errorf("kind's containerd config no longer names %s: update the pause image handling", kindPause)
	}
	out = strings.Replace(out, kindPause, `sandbox_image = "`+ImagePause+`"`, 1)
	if q.MissingCapSysResource {
		// The CRI lowers oom_score_adj of sandboxes, which needs CAP_SYS_RESOURCE; restricting it keeps
		// runc init from failing with EACCES.
		out = strings.Replace(out, "restrict_oom_score_adj = false", "restrict_oom_score_adj = true", 1)
	}
	return out, nil
}

// overlayEntry is one file added on top of the rootfs: copied from src, or data when src is empty.
type overlayEntry struct {
	dst  string
	src  string
	data []byte
	mode os.FileMode
}

// nodeOverlay lists the files added on top of the rootfs. It reads only what it must adapt, so the node
// image's key can be computed without laying the files out.
func (c *Cluster) nodeOverlay(ctx context.Context, rootfs string) ([]overlayEntry, error) {
	kf, err := c.kindFilesDir(ctx)
	if err != nil {
		return nil, err
	}
	var files []overlayEntry
	add := func(src, dst string, mode os.FileMode) {
		files = append(files, overlayEntry{dst: dst, src: src, mode: mode})
	}
	data := func(dst string, b []byte) { files = append(files, overlayEntry{dst: dst, data: b, mode: 0o644}) }
	for _, f := range []string{"entrypoint", "clean-install"} {
		add(filepath.Join(kf, "usr/local/bin", f), "usr/local/bin/"+f, 0o755)
	}
	add(filepath.Join(kf, "kind/README.txt"), "kind/README.txt", 0o644)
	scripts, _ := filepath.Glob(filepath.Join(kf, "kind/bin/*.sh"))
	for _, s := range scripts {
		add(s, "kind/bin/"+filepath.Base(s), 0o755)
	}
	add(filepath.Join(kf, "etc/crictl.yaml"), "etc/crictl.yaml", 0o644)
	add(filepath.Join(kf, "etc/default/kubelet"), "etc/default/kubelet", 0o644)
	sysctls, _ := filepath.Glob(filepath.Join(kf, "etc/sysctl.d/*.conf"))
	for _, s := range sysctls {
		add(s, "etc/sysctl.d/"+filepath.Base(s), 0o644)
	}
	for _, u := range []string{"kubelet.service", "undo-mount-hacks.service", "kubelet.slice"} {
		add(filepath.Join(kf, "etc/systemd/system", u), "etc/systemd/system/"+u, 0o644)
	}
	dropins, _ := filepath.Glob(filepath.Join(kf, "etc/systemd/system/kubelet.service.d/*.conf"))
	for _, d := range dropins {
		add(d, "etc/systemd/system/kubelet.service.d/"+filepath.Base(d), 0o644)
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		add(c.binary("containerd", b), "usr/local/bin/"+b, 0o755)
	}
	add(c.binary("crictl", "crictl"), "usr/local/bin/crictl", 0o755)
	for _, b := range []string{"kubeadm", "kubelet", "kubectl"} {
		add(c.binary("kubernetes", b), "usr/bin/"+b, 0o755)
	}
	// Debian ships the reference CNI plugins in /usr/lib/cni; containerd looks in /opt/cni/bin.
	for _, p := range []string{"host-local", "loopback", "ptp", "portmap", "bridge"} {
		add(filepath.Join(rootfs, "usr/lib/cni", p), "opt/cni/bin/"+p, 0o755)
	}
	// containerd's unit: OOMScoreAdjust cannot be applied without CAP_SYS_RESOURCE.
	unit, err := os.ReadFile(filepath.Join(kf, "etc/systemd/system/containerd.service"))
	if err != nil {
		return nil, err
	}
	if c.quirks.MissingCapSysResource {
		var kept []string
		for l := range strings.SplitSeq(string(unit), "\n") {
			if !strings.HasPrefix(l, "OOMScoreAdjust") {
				kept = append(kept, l)
			}
		}
		unit = []byte(strings.Join(kept, "\n"))
	}
	data("etc/systemd/system/containerd.service", unit)
	kindCfg, err := os.ReadFile(filepath.Join(kf, "etc/containerd/config.toml"))
	if err != nil {
		return nil, err
	}
	cfg, err := ContainerdConfig(string(kindCfg), c.quirks)
	if err != nil {
		return nil, err
	}
	data("etc/containerd/config.toml", []byte(cfg))
	// What `kind build node-image` adds: the version file (exactly one line) and the default CNI manifest,
	// which kind applies at create time; ours is the project's small pod network agent.
	data("kind/version", []byte(KubernetesVersion+"\n"))
	data("kind/manifests/default-cni.yaml", []byte(netManifest))
	return files, nil
}

// materialize writes the overlay below dir.
func materialize(files []overlayEntry, dir string) error {
	for _, f := range files {
		dst := filepath.Join(dir, f.dst)
		if f.src == "" {
			if err := writeFile(dst, f.data, f.mode); err != nil {
				return err
			}
			continue
		}
		if err := copyFile(f.src, dst, f.mode); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, mode)
}

// nodeImagePlan is what the node image is made of, and its content key.
type nodeImagePlan struct {
	rootfsImage string
	files       []overlayEntry
	// refs are the preloaded images, sorted.
	refs     []string
	key, ref string
}

// planNodeImage lists the node image's contents and derives its key and tag.
func (c *Cluster) planNodeImage(ctx context.Context, rootfsDir, rootfsImage string, preload []imageSpec) (nodeImagePlan, error) {
	files, err := c.nodeOverlay(ctx, rootfsDir)
	if err != nil {
		return nodeImagePlan{}, err
	}
	k := NewKey("node-image").Value("rootfs", rootfsImage).Value("quirks", c.quirks.String()).Value("dockerfile", nodeDockerfile)
	for _, f := range files {
		if f.src == "" {
			k.Value("overlay:"+f.dst, fmt.Sprintf("%o:%s", f.mode, f.data))
		} else if err := k.File(fmt.Sprintf("overlay:%s:%o", f.dst, f.mode), f.src); err != nil {
			return nodeImagePlan{}, err
		}
	}
	var refs []string
	for _, s := range preload {
		ik, err := s.key()
		if err != nil {
			return nodeImagePlan{}, err
		}
		k.Value("preload:"+s.Ref, ik)
		refs = append(refs, s.Ref)
	}
	slices.Sort(refs)
	key := k.Sum()
	return nodeImagePlan{rootfsImage: rootfsImage, files: files, refs: refs, key: key,
		ref: NodeImageRepo + ":" + KubernetesVersion + "-" + key}, nil
}

// buildNodeImage assembles the node image: the base (rootfs + overlay) and then the preloaded images,
// committed together. The tag carries the content key of everything in it.
func (c *Cluster) buildNodeImage(ctx context.Context, p nodeImagePlan) (string, error) {
	files, refs, key, ref, rootfsImage := p.files, p.refs, p.key, p.ref, p.rootfsImage
	if imageKey(ctx, ref) == key {
		return ref, nil
	}
	buildCtx, err := os.MkdirTemp("", "gpuconform-node-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(buildCtx)
	if err := materialize(files, filepath.Join(buildCtx, "overlay")); err != nil {
		return "", err
	}
	var df bytes.Buffer
	if err := template.Must(template.New("df").Parse(nodeDockerfile)).Execute(&df, map[string]string{"RootfsImage": rootfsImage}); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(buildCtx, "Dockerfile"), df.Bytes(), 0o644); err != nil {
		return "", err
	}
	base := NodeImageRepo + "-base:" + key
	if err := c.dockerBuild(ctx, "node base", buildCtx, base); err != nil {
		return "", err
	}
	// Preload the images the way `kind build node-image` does, by hand: kind's own command would fetch
	// etcd, CoreDNS, pause and kindnetd from registries.
	name := "gpuconform-node-build"
	_ = exec.CommandContext(ctx, "docker", "rm", "-f", name).Run()
	if err := c.run(ctx, "node preload: start", "docker", "run", "-d", "--name", name, "--entrypoint=sleep",
		"--security-opt", "seccomp=unconfined", base, "infinity"); err != nil {
		return "", err
	}
	defer func() { _ = exec.Command("docker", "rm", "-f", "-v", name).Run() }()
	script := `nohup containerd >/var/log/containerd-build.log 2>&1 &
for i in $(seq 60); do ctr version >/dev/null 2>&1 && exit 0; sleep 1; done; cat /var/log/containerd-build.log; exit 1`
	if err := c.run(ctx, "node preload: containerd", "docker", "exec", name, "bash", "-c", script); err != nil {
		return "", err
	}
	imp := fmt.Sprintf("docker save %s | docker exec -i %s ctr -n k8s.io images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests -",
		strings.Join(refs, " "), name)
	if err := c.run(ctx, "node preload: import", "sh", "-c", imp); err != nil {
		return "", err
	}
	listed, err := output(ctx, "docker", "exec", name, "ctr", "-n", "k8s.io", "images", "ls", "-q")
	if err != nil {
		return "", err
	}
	have := map[string]bool{}
	for l := range strings.FieldsSeq(listed) {
		have[l] = true
	}
	for _, r := range refs {
		if !have[normalizeRef(r)] {
			return "", fmt.Errorf("image %s is not in the node's containerd after the import (have: %s)", r, listed)
		}
	}
	// The build container's PID 1 is sleep, which never reaps: a stopped containerd stays as a zombie, so
	// only live (non-Z) processes count.
	stop := `pkill -x containerd; for i in $(seq 30); do ps -C containerd -o stat= | grep -qv '^Z' || exit 0; sleep 1; done; ps -C containerd -o pid,stat,cmd; exit 1`
	if err := c.run(ctx, "node preload: stop containerd", "docker", "exec", name, "bash", "-c", stop); err != nil {
		return "", err
	}
	if err := c.run(ctx, "node commit", "docker", "commit",
		"--change", `ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]`, "--change", "CMD []",
		"--change", "LABEL "+imageLabel+"="+key, name, ref); err != nil {
		return "", err
	}
	// The build container holds the base image: remove it first so the base can go too.
	_ = exec.CommandContext(ctx, "docker", "rm", "-f", "-v", name).Run()
	c.pruneImages(ctx, NodeImageRepo+"-base", "")
	c.pruneImages(ctx, NodeImageRepo, ref)
	return ref, nil
}

// normalizeRef spells an image reference the way containerd lists it (docker.io/library/ for short names).
func normalizeRef(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	if !found {
		return "docker.io/library/" + ref
	}
	if !strings.ContainsAny(first, ".:") && first != "localhost" {
		return "docker.io/" + ref
	}
	return ref
}
