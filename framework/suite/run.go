// Package suite is what one conformance run knows, built once by Prepare before the spec tree: the
// configuration, the clients, the discovered capabilities and the decisions that follow from them (the
// timeout profile, the tolerations, the allocation paths, whether Kueue is usable, checkpoint storage, the
// fault injector, the upgrade provider), and the environment specs work in. The suite package only wires
// it to Ginkgo; scenarios read it through their typed inputs (scenarios.Define).
package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/accelmetrics"
	"gpuconform.io/gpuconform/framework/checkpoints"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/faults"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/monitoring"
	"gpuconform.io/gpuconform/framework/runlease"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/timeouts"
	"gpuconform.io/gpuconform/framework/upgrade"
	fwwait "gpuconform.io/gpuconform/framework/wait"
)

// Run is one run's knowledge. Prepare fills it (in team-namespace mode, teamPreflight narrows the paths
// to those the namespace's quota and LimitRanges admit); only Start (the first parallel process's run ID)
// and NotExercised change it afterwards.
type Run struct {
	// Config is the run's configuration, its timeout profile decided ("auto" resolved).
	Config config.Config
	// ProfileWhy says how an "auto" timeout profile was decided.
	ProfileWhy string
	// Clients reach the cluster; Caps is what discovery found there.
	Clients *cluster.Clients
	Caps    cluster.Capabilities
	// Paths are the allocation paths that run; Nodes every node, as discovery read them.
	Paths []gpu.Path
	Nodes []corev1.Node
	// Tolerations are every test pod's: the configured ones and the GPU pool's dedication taints.
	Tolerations []corev1.Toleration
	// KueueUsable says whether specs may submit through Kueue: it is installed, and in team-namespace
	// mode the user named a LocalQueue (the suite may not create ClusterQueues there).
	KueueUsable bool
	// Checkpoints is storage that outlives a node; CheckpointsWhy says why there is none.
	Checkpoints    checkpoints.Storage
	CheckpointsWhy string
	// FeatureGates are the cluster's gates, for the compatibility record. Notes are the run's own notes
	// for the record, after discovery's (Caps.Notes): the gates that could not be read, what the
	// stack-ready wait waited for (RecordNotes joins the two).
	FeatureGates []cluster.FeatureGate
	// NodeMonitorGracePeriod is how long the control plane waits before it calls a silent node NotReady
	// (cluster.ReadNodeMonitorGracePeriod), for the record.
	NodeMonitorGracePeriod string
	Notes                  []string
	// Upgrade is what an upgrade rehearsal would use.
	Upgrade Upgrade
	// DRAUpgrade is what the DRA driver's rolling-upgrade rehearsal would use.
	DRAUpgrade Upgrade
	// Metrics is the accelerator metrics endpoint (a DCGM exporter, or a Prometheus); MetricsWhy says why
	// there is none.
	Metrics    accelmetrics.Endpoint
	MetricsWhy string
	// Monitoring is the cluster's monitoring system (a Prometheus); MonitoringWhy says why there is none.
	Monitoring    monitoring.Endpoint
	MonitoringWhy string
	// Env is the specs' environment; RunID names the run on every object and artifact.
	Env   *testenv.Env
	RunID string

	skipped   []Skipped
	queueGaps map[string]string
	faults    func() *faults.Injector
	// lease says on the cluster that the run is alive (HoldLease), nil before it is taken.
	lease *runlease.Lease
	// say is told how a long wait of the preparation stands (nil: silent).
	say func(line string)
}

// Skipped is a check the scenarios did not register on this cluster, and why.
type Skipped struct{ What, Why string }

// Prepare connects, waits until the requested GPU stack answers, discovers the cluster and decides what
// follows from it, in team-namespace mode from the namespace's policy too (teamPreflight). It returns the run so far with the error: a caller writing a setup failure's record
// names the cluster it reached. say, when set, is told how a long wait stands (the GPU stack's).
func Prepare(ctx context.Context, cfg config.Config, runID string, say func(line string)) (*Run, error) {
	r := &Run{Config: cfg, RunID: runID, say: say}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeouts().StackReady+time.Minute)
	defer cancel()
	var err error
	r.Clients, err = cluster.Connect(ctx, cluster.ConnectOptions{Kubeconfig: cfg.Kubeconfig, Context: cfg.Context, Timeout: cfg.Timeouts().API})
	if err != nil {
		return r, err
	}
	if r.Caps, err = r.waitForStack(ctx); err != nil {
		return r, err
	}
	if err := r.decideAndList(ctx); err != nil {
		return r, err
	}
	r.Checkpoints, r.CheckpointsWhy = checkpoints.Discover(cfg.Checkpoints, r.PoolNodes())
	if cfg.Namespace != "" && r.Checkpoints.HostPath != "" {
		r.Checkpoints, r.CheckpointsWhy = checkpoints.Storage{}, "no storage that outlives a pod in team-namespace mode: the shared directory "+
			r.Checkpoints.HostPath+" would need a PersistentVolume, a cluster-scoped object; give --checkpoint-storage-class (ReadWriteMany)"
	}
	gates, notes := cluster.ReadFeatureGates(ctx, r.Clients.Kube, r.Caps.GateNode)
	r.FeatureGates, r.Notes = gates, append(r.Notes, notes...)
	r.NodeMonitorGracePeriod = cluster.ReadNodeMonitorGracePeriod(ctx, r.Clients.Kube)
	r.Upgrade = r.planUpgrade(ctx)
	r.DRAUpgrade = r.planDRAUpgrade(ctx)
	r.Metrics, r.MetricsWhy = accelmetrics.Discover(ctx, r.Clients.Kube, cfg.AcceleratorMetrics)
	r.Monitoring, r.MonitoringWhy = monitoring.Discover(ctx, r.Clients.Kube, cfg.Monitoring, r.Metrics)
	r.faults = sync.OnceValue(r.newInjector)
	r.Env = r.newEnv()
	if err := r.teamPreflight(ctx); err != nil {
		return r, err
	}
	return r, nil
}

// PrepareCleanup is Prepare for `gpuconform cleanup`: it reads the GPU stack once instead of waiting for it
// to be ready (a dead run may have left a node stopped or the canary on another driver: that is what the
// cleanup restores) and builds only what restoring needs, the fault injector and the upgrade provider.
func PrepareCleanup(ctx context.Context, cfg config.Config, runID string) (*Run, error) {
	r := &Run{Config: cfg, RunID: runID}
	var err error
	r.Clients, err = cluster.Connect(ctx, cluster.ConnectOptions{Kubeconfig: cfg.Kubeconfig, Context: cfg.Context, Timeout: cfg.Timeouts().API})
	if err != nil {
		return r, err
	}
	var stackErr error
	if r.Caps, stackErr = cluster.CheckStackReady(ctx, r.Clients.Kube, r.Config, cluster.NewSettle(time.Now())); stackErr != nil {
		r.Notes = append(r.Notes, "the GPU stack is not ready (what a dead run left may be why): "+strings.SplitN(stackErr.Error(), "\n", 2)[0])
	}
	if err := r.decideAndList(ctx); err != nil {
		return r, err
	}
	r.Upgrade = r.planUpgrade(ctx)
	r.DRAUpgrade = r.planDRAUpgrade(ctx)
	r.faults = sync.OnceValue(r.newInjector)
	r.Env = r.newEnv()
	return r, nil
}

// decideAndList makes the decisions that follow from discovery and lists the nodes.
func (r *Run) decideAndList(ctx context.Context) error {
	r.decide()
	list, err := r.Clients.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	r.Nodes = list.Items
	return nil
}

// decide makes the decisions that follow from discovery: the timeout profile, the tolerations, the paths
// and whether Kueue is usable.
func (r *Run) decide() {
	if r.Config.TimeoutProfile == timeouts.ProfileAuto {
		r.Config.TimeoutProfile, r.ProfileWhy = timeouts.ProfileReal, "auto: not a kind cluster"
		if r.Caps.KindCluster {
			r.Config.TimeoutProfile, r.ProfileWhy = timeouts.ProfileLocal, "auto: every node's providerID is kind://"
		}
	}
	r.Tolerations = append(slices.Clone(r.Config.Tolerations), r.Caps.Taints.Tolerations()...)
	r.Paths = gpu.Paths(r.Caps, r.Config)
	r.KueueUsable = r.Caps.Kueue.Present
	if r.KueueUsable && r.Config.Namespace != "" && r.ExistingLocalQueue() == "" {
		r.KueueUsable = false
		r.NotExercised("specs submitted through Kueue", fmt.Sprintf("team-namespace mode (--namespace %s) without --local-queue: the suite may not create ClusterQueues there; name the namespace's LocalQueue", r.Config.Namespace))
	}
}

// newEnv is the specs' environment.
func (r *Run) newEnv() *testenv.Env {
	factory := fixtures.NewFactory(r.RunID)
	factory.Image = r.Config.Image
	factory.Tolerations = r.Tolerations
	factory.CPU, factory.Memory = r.Config.PodResources.Quantities()
	t := r.Config.Timeouts()
	env := &testenv.Env{
		Clients: r.Clients, KueuePresent: r.Caps.Kueue.Present, Factory: factory, Timeouts: t,
		Wait: fwwait.Waiter{Poll: t.Poll, Explain: testenv.DiagnoseExplainer(r.Clients, r.Caps.Kueue.Present),
			Judge: testenv.DiagnoseJudge(r.Clients, r.Caps.Kueue.Present)},
		NamespacePrefix: r.Config.NamespacePrefix, ArtifactsDir: r.Config.ArtifactsDir, KeepResources: r.Config.KeepResources,
		Namespace: r.Config.Namespace, HelperNamespace: r.Config.HelperNamespace,
	}
	// Waits wake on the spec's informers instead of polling on a clock.
	env.Wait.Wake = env.Changed
	return env
}

// Start adopts the run's ID (with parallel processes, the first process's) before any spec runs.
func (r *Run) Start(runID string) {
	r.RunID = runID
	r.Env.Factory.RunID = runID
	// The upgrade script was planned with this process's own ID: it must label with the run's.
	for _, p := range []upgrade.Provider{r.Upgrade.Provider, r.DRAUpgrade.Provider} {
		if c, ok := p.(*upgrade.Command); ok {
			c.RunID = runID
		}
	}
}

// ExistingLocalQueue is the user's LocalQueue when the suite submits to one, else "" (own queues).
func (r *Run) ExistingLocalQueue() string {
	if r.Config.Queues.Mode == config.QueuesExisting {
		return r.Config.Queues.LocalQueue
	}
	return ""
}

// NotExercised records a check the scenarios did not register, and why.
func (r *Run) NotExercised(what, why string) {
	r.skipped = append(r.skipped, Skipped{What: what, Why: why})
}

// Skipped lists what NotExercised recorded, in order.
func (r *Run) Skipped() []Skipped { return slices.Clone(r.skipped) }

// PoolNodes are the discovered nodes of the GPU pool.
func (r *Run) PoolNodes() []corev1.Node {
	return slices.DeleteFunc(slices.Clone(r.Nodes), func(n corev1.Node) bool { return !slices.Contains(r.Caps.Pools.GPU.Nodes, n.Name) })
}

// KnownGood are the GPU nodes an upgrade rehearsal must leave untouched: the known-good pool without the
// canary nodes.
func (r *Run) KnownGood() []string {
	return slices.DeleteFunc(slices.Clone(r.Caps.Pools.KnownGood.Nodes), func(n string) bool { return slices.Contains(r.Caps.Pools.Canary.Nodes, n) })
}

// Faults is the run's fault layer, chosen once from the configuration and the cluster.
func (r *Run) Faults() *faults.Injector { return r.faults() }

func (r *Run) newInjector() *faults.Injector {
	inj := faults.New(faults.Options{Kube: r.Clients.Kube, RunID: r.RunID, Pool: r.PoolNodes(), Config: r.Config.Faults, HelperNamespace: r.Config.HelperNamespace,
		Image: r.Config.Image, Resources: r.Env.Factory.Resources(), ServesDeviceTaintRules: faults.ServesDeviceTaintRules(r.Clients.Kube)})
	// An interrupted upgrade rehearsal is undone (--cleanup-leftovers) with the provider this run's
	// rehearsal would use, and judged by the label it reads.
	inj.DriverVersionLabel = r.Upgrade.VersionLabel
	if p := r.Upgrade.Provider; p != nil {
		inj.UpgradeRollback = func(ctx context.Context, node, from string) error { return p.Rollback(ctx, []string{node}, from) }
	}
	if p := r.DRAUpgrade.Provider; p != nil {
		inj.DRAUpgradeRollback = func(ctx context.Context, node, from string) error { return p.Rollback(ctx, []string{node}, from) }
	}
	return inj
}

// DescribeFaults says which provider injects which fault, and why one is missing.
func (r *Run) DescribeFaults() string {
	inj := r.Faults()
	part := func(what string, ok bool, name func() string, why string) string {
		if !ok {
			return what + ": none (" + why + ")"
		}
		return what + ": " + name()
	}
	return strings.Join([]string{
		part("nodes", inj.Nodes != nil, func() string { return inj.Nodes.Name() }, inj.NodesWhy),
		part("devices (device plugin)", inj.Devices != nil, func() string { return inj.Devices.Name() }, inj.DevicesWhy),
		part("devices (DRA)", inj.DRADevices != nil, func() string { return inj.DRADevices.Name() }, inj.DRADevicesWhy),
		part("evicting device fault (DRA)", inj.DRAEvict != nil, func() string { return inj.DRAEvict.Name() }, inj.DRAEvictWhy),
		fmt.Sprintf("failed-worker pods evicted %s after their node's NotReady (tolerationSeconds, --eviction-toleration)", r.Config.Faults.EvictionToleration.Duration),
	}, "; ")
}

// SameDiscovery reports a difference between this process's discovery and the run's (the first parallel
// process's) that would change the spec tree. Discovery's notes are left out: they say what it saw on the
// way (a plugin pod that was not Ready yet when one process looked), which registers no spec.
func (r *Run) SameDiscovery(process int, run cluster.Capabilities) error {
	mine := r.Caps
	mine.Notes, run.Notes = nil, nil
	a, _ := json.Marshal(mine)
	b, _ := json.Marshal(run)
	if string(a) == string(b) {
		return nil
	}
	return fmt.Errorf("parallel process %d discovered another cluster state than process 1 (the cluster changed while the processes started: a node, a device or a pool differs); rerun, or run without -p\nprocess 1: %s\nthis process: %s",
		process, b, a)
}

// RecordNotes are the notes of the run's record: discovery's, then the run's own.
func (r *Run) RecordNotes() []string { return slices.Concat(r.Caps.Notes, r.Notes) }

// ContextName and Server name the cluster the run reached ("" before it connected).
func (r *Run) ContextName() string {
	if r == nil || r.Clients == nil {
		return ""
	}
	return r.Clients.Context
}

// Server is the API server's address ("" before the run connected).
func (r *Run) Server() string {
	if r == nil || r.Clients == nil {
		return ""
	}
	return r.Clients.Server
}
