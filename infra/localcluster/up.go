package localcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/cluster/nodes"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// Up brings the cluster to the wanted state and returns when it is usable: every node Ready, the pod
// network and DNS working, the fake GPU stack advertising devices on both allocation paths, and Kueue's
// webhooks answering. On a running, healthy cluster it only re-checks (and reloads our tools image when
// the code changed). Node containers that were stopped (a restarted machine, a stopped Docker) are started
// again; a cluster that does not come back healthy is recreated.
func (c *Cluster) Up(ctx context.Context) error {
	start := time.Now()
	// The Kubernetes build is the bring-up's longest step and all compiling; the Docker engine (Debian's
	// packages) and, for a cluster to create, the node rootfs (debootstrap from Debian's mirror, then a
	// docker import) are mostly download and disk, and need nothing of it: they run beside it.
	engine, rootfs, modules := c.beside(ctx)
	defer rootfs.cancel()  // once buildAll took it, or when Up fails before
	defer modules.cancel() // its builds are done, or Up failed
	defer c.stopBuilds()
	// The host-side kubectl is needed whatever state the cluster is in; it is placed next to the kubeconfig
	// for scripts and people on a machine without one.
	_, err := c.buildGoStep(ctx, compKubernetes)
	if engineErr := engine.wait(); engineErr != nil {
		return engineErr
	}
	if err != nil {
		return err
	}
	c.logf("host quirks: %s", c.quirks)
	c.rootfs = rootfs
	if err := c.installKubectl(); err != nil {
		return err
	}
	exists, err := c.clusterExists()
	if err != nil {
		return err
	}
	if exists {
		c.rootfs.cancel() // a cluster that revives needs no rootfs; one that is recreated builds it below
		c.startBuilds(ctx, addonComponents...)
	}
	revived := false
	if exists {
		began := time.Now()
		healthy, why := c.revive(ctx)
		if revived = healthy; healthy {
			c.logf("cluster %s found: every node Ready (%s)", c.opts.Name, time.Since(began).Round(100*time.Millisecond))
			// An interrupted `make selfcheck` may have left a control-plane fault on.
			if restored, err := c.restoreControlPlane(); err != nil {
				return err
			} else if restored {
				c.logf("  kube-controller-manager's manifest restored from %s (an interrupted selfcheck's fault)", KCMManifestBackup)
			}
		}
		if !healthy {
			c.logf("cluster %s exists but is not healthy (%s): recreating it", c.opts.Name, why)
			if err := c.Down(ctx); err != nil {
				return err
			}
			exists = false
		}
	}
	if !exists {
		nodeImage := c.opts.NodeImage
		if nodeImage == "" {
			if nodeImage, err = c.buildAll(ctx); err != nil {
				return err
			}
		} else {
			c.logf("using the node image given: %s (Kueue's image is loaded after creation)", nodeImage)
			c.startBuilds(ctx, append(addonComponents, compTools)...)
		}
		if err := c.prepareSharedDir(); err != nil {
			return err
		}
		if err := c.step("kind create cluster", fmt.Sprintf("kind create with 1 control plane, %d GPU and %d canary workers", c.opts.GPUWorkers, c.opts.CanaryWorkers), func() error { return c.createCluster(nodeImage) }); err != nil {
			return err
		}
	}
	// A revived cluster's nodes were found Ready (with heartbeats newer than their containers' start) by revive.
	if !revived {
		if err := c.step("nodes Ready", "wait for every node to report Ready", func() error { return c.waitNodesReady(ctx, 300*time.Second) }); err != nil {
			return err
		}
	}
	if err := c.step("shared checkpoint directory", "annotate the workers with the shared directory's mount", func() error { return c.annotateSharedDir(ctx) }); err != nil {
		return err
	}
	var tools string
	if err := c.step("tools image", "build the project's tools image and load it into every node", func() error { tools, err = c.loadTools(ctx); return err }); err != nil {
		return err
	}
	// Applied on every bring-up: a changed setting (--replicas or --sharing, say) changes the agent's pod template, so
	// its DaemonSet rolls and the wait below holds until every node advertises the new count.
	stack := c.opts.gpuStack(tools)
	if stack.ExampleDRADriver {
		if err := c.step("dra-example-driver", "build the dra-example-driver and load its image into every node", func() error {
			stack.DRAImage, err = c.loadExampleDRADriver(ctx)
			return err
		}); err != nil {
			return err
		}
	}
	what := fmt.Sprintf("install the fake device plugin (%d GPUs × %d replicas per node, sharing %s) and DRA driver and wait for every GPU node's devices", stack.Devices, stack.Replicas, stack.Sharing)
	if stack.RenameShared {
		what += " (replicas advertised as " + stack.ResourceName + fakegpu.SharedResourceSuffix + ")"
	}
	if err := c.step("fake GPU stack", what, func() error { return c.installGPUStack(ctx, stack) }); err != nil {
		return err
	}
	if err := c.step("pod network and DNS", "check pod-to-pod traffic and cluster DNS", func() error { return c.checkNetwork(ctx) }); err != nil {
		return err
	}
	networkAt := time.Now()
	kueueBuild := c.startBuild(ctx, compKueue)
	var kueueImage string
	if err := c.step("kueue image", "wait for Kueue's build and load its image into every node", func() error {
		kueueImage, err = c.loadKueue(ctx, kueueBuild)
		return err
	}); err != nil {
		return err
	}
	if err := c.step("kueue", "install Kueue and wait for its webhooks to answer", func() error {
		c.restartKueueStartedBlind(ctx, networkAt)
		return c.installKueue(ctx, kueueImage)
	}); err != nil {
		return err
	}
	if err := c.step("monitoring", "wait for Prometheus's build, load its image and run it as the cluster's monitoring system", func() error {
		return c.installMonitoring(ctx, c.startBuild(ctx, compPrometheus))
	}); err != nil {
		return err
	}
	if err := c.step("custom metrics API", "wait for prometheus-adapter's build, load its image and serve custom.metrics.k8s.io from Prometheus", func() error {
		return c.installMetricsAdapter(ctx, c.startBuild(ctx, compMetricsAdapter))
	}); err != nil {
		return err
	}
	if err := c.step("node autoscaler", "wait for KWOK's and Karpenter's builds, load their images and run Karpenter's KWOK provider over the autoscaled GPU pool", func() error {
		return c.installNodeAutoscaler(ctx, c.startBuild(ctx, compKWOK), c.startBuild(ctx, compKarpenter))
	}); err != nil {
		return err
	}
	if err := c.step("gateway", "wait for Traefik's build, load its image, install the Gateway API and run Traefik as its implementation", func() error {
		return c.installGateway(ctx, c.startBuild(ctx, compTraefik))
	}); err != nil {
		return err
	}
	c.logf("cluster %s ready in %s; kubeconfig: %s; kubectl: %s", c.opts.Name, time.Since(start).Round(time.Second), c.Kubeconfig(), c.Kubectl())
	return nil
}

// buildAll builds every binary and image the node image holds, and the node image itself.
func (c *Cluster) buildAll(ctx context.Context) (string, error) {
	for _, comp := range nodeImageComponents {
		if _, err := c.buildGoStep(ctx, comp); err != nil {
			return "", err
		}
	}
	// Kueue and the tools are needed only once the cluster runs: they compile beside the steps that are
	// mostly disk and waiting (the system images, the node image, kind's creation, the nodes' start).
	c.startBuilds(ctx, append(addonComponents, compTools)...)
	compNet := goComponent{Name: "net", LDFlags: "-s -w", Packages: []string{"./cmd/gpuconform-net"}}
	if _, err := c.buildGoStep(ctx, compNet); err != nil {
		return "", err
	}
	if err := c.buildPauseStep(ctx); err != nil {
		return "", err
	}
	rootfsDir, rootfsImage, err := c.rootfs.result()
	if errors.Is(err, errNotBeside) {
		rootfsDir, rootfsImage, err = c.rootfsStep(ctx)
	}
	if err != nil {
		return "", err
	}
	images := c.systemImages(rootfsImage)
	var keys map[string]string
	probe := func() (string, bool, error) {
		var all string
		var built bool
		var err error
		keys, all, built, err = imagesState(ctx, images)
		return all, built, err
	}
	if err := c.cachedStep("system images", fmt.Sprintf("docker build of the %d images the node image preloads", len(images)), probe, func() error {
		for _, s := range images {
			if err := c.buildImageKeyed(ctx, s, keys[s.Ref]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return "", err
	}
	var plan nodeImagePlan
	probe = func() (string, bool, error) {
		var err error
		if plan, err = c.planNodeImage(ctx, rootfsDir, rootfsImage, images); err != nil {
			return "", false, err
		}
		return plan.key, imageKey(ctx, plan.ref) == plan.key, nil
	}
	var ref string
	err = c.cachedStep("node image", "assemble the kind node image (rootfs, overlay and the preloaded system images)", probe, func() error {
		var err error
		ref, err = c.buildNodeImage(ctx, plan)
		return err
	})
	return ref, err
}

// rootfsStep is the node rootfs's step: debootstrap into the cache, imported as an image.
func (c *Cluster) rootfsStep(ctx context.Context) (dir, image string, err error) {
	what := fmt.Sprintf("debootstrap of Debian %s (minbase and %d packages), imported as an image", DebianSuite, len(rootfsPackages))
	err = c.cachedStep("node rootfs (debootstrap)", what, func() (string, bool, error) { return c.rootfsState(ctx) }, func() error {
		var err error
		dir, image, err = c.buildRootfs(ctx)
		return err
	})
	return dir, image, err
}

// errNotBeside is a background rootfs's result when it did not run: the caller builds the rootfs itself.
var errNotBeside = errors.New("the node rootfs was not built beside the Kubernetes build")

// background is a step that runs beside the Kubernetes build.
type background struct {
	done       chan struct{}
	stop       context.CancelFunc
	err        error
	dir, image string
}

func (b *background) wait() error {
	<-b.done
	return b.err
}

// result waits for a background rootfs and returns it; errNotBeside when it did not run (a cluster
// existed, a node image was given, the engine failed) or was cancelled.
func (b *background) result() (dir, image string, err error) {
	if b == nil {
		return "", "", errNotBeside
	}
	<-b.done
	return b.dir, b.image, b.err
}

// cancel stops a background rootfs that is not needed and waits for it to end.
func (b *background) cancel() {
	if b == nil {
		return
	}
	b.stop()
	<-b.done
	if b.err != nil && !errors.Is(b.err, errNotBeside) {
		b.err = errNotBeside
	}
}

// beside starts the Docker engine and then, where the cluster must be created from the project's own node
// image, the node rootfs and the Go modules of the node image's components (fetchModules), in the
// background; Up waits for the engine after the Kubernetes build and buildAll for the rootfs, and the
// builds read the modules from the machine's module cache when they are there (the go command's own
// locks keep a module that both fetch whole). A failure of the engine is the engine step's; a rootfs that
// failed or did not run is built again in line, where its failure is reported.
func (c *Cluster) beside(ctx context.Context) (engine, rootfs, modules *background) {
	bctx, stop := context.WithCancel(ctx)
	engine = &background{done: make(chan struct{}), stop: stop}
	rootfs = &background{done: make(chan struct{}), stop: stop, err: errNotBeside}
	modules = &background{done: make(chan struct{}), stop: stop}
	go func() {
		defer close(rootfs.done)
		started := false
		defer func() {
			if !started {
				close(modules.done)
			}
		}()
		engine.err = c.step("docker engine", "make a Docker engine answer (the running one, or the project's own dockerd)", func() error { return c.ensureDocker(bctx) })
		close(engine.done)
		if engine.err != nil || c.opts.NodeImage != "" {
			return
		}
		if exists, err := c.clusterExists(); err != nil || exists {
			return
		}
		started = true
		go func() {
			defer close(modules.done)
			c.fetchModules(bctx, slices.Concat(nodeImageComponents, []goComponent{compKueue, compPrometheus, compMetricsAdapter, compKWOK, compKarpenter, compTraefik}))
		}()
		dir, image, err := c.rootfsStep(bctx)
		if err != nil {
			c.logf("  note: the node rootfs built beside the Kubernetes build failed (%v); it is built again after it", err)
			return
		}
		rootfs.dir, rootfs.image, rootfs.err = dir, image, nil
	}()
	return engine, rootfs, modules
}

// startBuilds starts the builds of comps (startBuild).
func (c *Cluster) startBuilds(ctx context.Context, comps ...goComponent) {
	for _, comp := range comps {
		c.startBuild(ctx, comp)
	}
}

// addonComponents are the components the cluster's add-ons run, built once the cluster runs.
var addonComponents = []goComponent{compKueue, compPrometheus, compMetricsAdapter, compKWOK, compKarpenter, compTraefik}

// startBuild starts comp's build (the step "build <name>") in the background, once per component;
// the step that loads its image waits for it. The go command is already parallel, so this gains only
// where the steps beside it leave the CPUs idle: docker's builds and imports of images, kind's creation
// of the nodes, their start. Kueue's and the tools' builds start this way, once the node image's
// components are built. Not beside the Kubernetes build, even at nice 19: a cold bring-up is no faster
// that way, because the compilers share the caches and the memory bus, which nice does not divide.
func (c *Cluster) startBuild(ctx context.Context, comp goComponent) *background {
	c.buildsMu.Lock()
	defer c.buildsMu.Unlock()
	if b := c.builds[comp.Name]; b != nil {
		return b
	}
	bctx, stop := context.WithCancel(ctx)
	b := &background{done: make(chan struct{}), stop: stop}
	go func() {
		defer close(b.done)
		b.dir, b.err = c.buildGoStep(bctx, comp)
	}()
	if c.builds == nil {
		c.builds = map[string]*background{}
	}
	c.builds[comp.Name] = b
	return b
}

// stopBuilds cancels the background builds when Up ends before it waited for them, and waits for them to end.
func (c *Cluster) stopBuilds() {
	c.buildsMu.Lock()
	builds := slices.Collect(maps.Values(c.builds))
	c.buildsMu.Unlock()
	for _, b := range builds {
		b.stop()
		<-b.done
	}
}

// revive starts stopped node containers and reports whether the cluster becomes healthy.
func (c *Cluster) revive(ctx context.Context) (bool, string) {
	ns, err := c.nodes()
	if err != nil {
		return false, err.Error()
	}
	var stopped []string
	// Each node's state, and the control plane's host port for the API server (kind publishes it at
	// creation with a port it picks; the binding stays while the container is stopped).
	states, err := output(ctx, "docker", append([]string{"inspect", "-f", `{{.Name}}={{.State.Running}}={{with index .HostConfig.PortBindings "6443/tcp"}}{{(index . 0).HostPort}}{{end}}`}, nodeNames(ns)...)...)
	if err != nil {
		return false, err.Error()
	}
	apiPort := ""
	for line := range strings.FieldsSeq(states) {
		parts := strings.SplitN(strings.TrimPrefix(line, "/"), "=", 3)
		if len(parts) == 3 && parts[2] != "" {
			apiPort = parts[2]
		}
		if len(parts) < 2 || parts[1] != "true" {
			stopped = append(stopped, parts[0])
		}
	}
	if why := c.missingSharedMount(ctx, ns); why != "" {
		return false, why
	}
	if len(stopped) > 0 {
		c.logf("starting stopped node containers: %s", strings.Join(stopped, " "))
		if err := c.run(ctx, "docker start nodes", "docker", append([]string{"start"}, stopped...)...); err != nil {
			return false, err.Error()
		}
	}
	if why := c.configDrift(); why != "" {
		return false, why
	}
	// A kubeconfig that is there is written again when it names another API server port: another checkout
	// on this machine may have recreated the cluster since, and a stale one would be waited on for the
	// whole timeout below and then recreate a healthy cluster. It is not exported on every revive: kind
	// reads it from the node through three docker calls, a fifth of a no-op make cluster.
	if why := staleKubeconfig(c.Kubeconfig(), apiPort); why != "" {
		c.logf("writing the kubeconfig from the cluster: %s", why)
		if err := c.exportKubeconfig(); err != nil {
			return false, err.Error()
		}
	}
	if err := c.waitNodesReady(ctx, 150*time.Second); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// exportKubeconfig writes the kubeconfig from the running cluster.
func (c *Cluster) exportKubeconfig() error {
	cfg, err := c.provider().KubeConfig(c.opts.Name, false)
	if err != nil {
		return err
	}
	return os.WriteFile(c.Kubeconfig(), []byte(cfg), 0o600)
}

// staleKubeconfig says why the kubeconfig at path cannot be used for a cluster whose API server the host
// reaches on port (its current context's server names another port, or it is missing or unreadable), or
// "" when it can, or when port is unknown.
func staleKubeconfig(path, port string) string {
	cfg, err := clientcmd.LoadFromFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "there is none"
	case err != nil:
		return fmt.Sprintf("it cannot be read: %v", err)
	case port == "":
		return ""
	}
	kctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return fmt.Sprintf("its current context %q is not in it", cfg.CurrentContext)
	}
	cl, ok := cfg.Clusters[kctx.Cluster]
	if !ok {
		return fmt.Sprintf("its cluster %q is not in it", kctx.Cluster)
	}
	u, err := url.Parse(cl.Server)
	if err != nil || u.Port() != port {
		return fmt.Sprintf("it names API server %s, the cluster publishes port %s", cl.Server, port)
	}
	return ""
}

// waitNodesReady waits until the API answers and every node reports Ready with a heartbeat newer than its
// container's start: right after a restart the API still shows the Ready status written before it.
func (c *Cluster) waitNodesReady(ctx context.Context, timeout time.Duration) error {
	want := 1 + c.opts.GPUWorkers + c.opts.CanaryWorkers
	started := c.nodeStartTimes(ctx)
	return poll(ctx, timeout, func() (bool, string) {
		out, err := c.kubectlOut(ctx, "get", "nodes", "--request-timeout=5s", "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}={.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}{"\n"}{end}`)
		if err != nil {
			return false, "API server: " + err.Error()
		}
		lines := strings.Fields(out)
		if len(lines) != want {
			return false, fmt.Sprintf("%d nodes registered, want %d", len(lines), want)
		}
		for _, l := range lines {
			parts := strings.SplitN(l, "=", 3)
			if len(parts) != 3 || parts[1] != "True" {
				return false, "not Ready: " + l
			}
			beat, err := time.Parse(time.RFC3339, parts[2])
			if since, ok := started[parts[0]]; ok && (err != nil || beat.Before(since.Truncate(time.Second))) {
				return false, fmt.Sprintf("node %s: Ready status predates its container's start (%s)", parts[0], since.Format(time.RFC3339))
			}
		}
		return true, ""
	})
}

// nodeStartTimes returns when each node container last started. Right after node containers start again,
// the API still shows what the nodes' kubelets wrote before: statuses older than this are stale.
func (c *Cluster) nodeStartTimes(ctx context.Context) map[string]time.Time {
	started := map[string]time.Time{}
	ns, err := c.nodes()
	if err != nil || len(ns) == 0 {
		return started
	}
	out, err := output(ctx, "docker", append([]string{"inspect", "-f", "{{.Name}}={{.State.StartedAt}}"}, nodeNames(ns)...)...)
	if err != nil {
		return started
	}
	for line := range strings.FieldsSeq(out) {
		name, at, _ := strings.Cut(strings.TrimPrefix(line, "/"), "=")
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
			started[name] = t
		}
	}
	return started
}

// nodeNames are the node containers' names.
func nodeNames(ns []nodes.Node) []string {
	names := make([]string, len(ns))
	for i, n := range ns {
		names[i] = n.String()
	}
	return names
}

// prepareSharedDir creates the host directory every worker mounts, writable by the workloads' non-root
// user (sticky, like /tmp: each work writes its own subdirectory).
func (c *Cluster) prepareSharedDir() error {
	if c.opts.SharedDir == "" {
		return nil
	}
	if err := os.MkdirAll(c.opts.SharedDir, 0o755); err != nil {
		return err
	}
	return os.Chmod(c.opts.SharedDir, 0o1777|os.ModeSticky)
}

// missingSharedMount says why the existing cluster's workers do not match the configuration's shared
// mount (a cluster created before it existed), or "" when they do: kind cannot add a mount to a node.
func (c *Cluster) missingSharedMount(ctx context.Context, ns []nodes.Node) string {
	if c.opts.SharedDir == "" {
		return ""
	}
	for _, n := range ns {
		if role, _ := n.Role(); role != "worker" {
			continue
		}
		out, err := output(ctx, "docker", "inspect", "-f", `{{range .Mounts}}{{.Source}}={{.Destination}} {{end}}`, n.String())
		if err != nil {
			return err.Error()
		}
		if !strings.Contains(" "+out+" ", " "+c.opts.SharedDir+"="+NodeSharedDir+" ") {
			return fmt.Sprintf("node %s lacks the shared checkpoint mount %s → %s (a cluster from before it existed)", n, c.opts.SharedDir, NodeSharedDir)
		}
	}
	if err := c.prepareSharedDir(); err != nil {
		return err.Error()
	}
	return ""
}

// annotateSharedDir tells the suite, on each worker, where the shared directory is mounted.
func (c *Cluster) annotateSharedDir(ctx context.Context) error {
	if c.opts.SharedDir == "" {
		return nil
	}
	return c.kubectl(ctx, "annotate shared dir", "annotate", "nodes", "--overwrite", "-l", PoolLabel, SharedDirAnnotation+"="+NodeSharedDir)
}
