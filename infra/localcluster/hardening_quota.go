package localcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	"gpuconform.io/gpuconform/fixtures"
)

// The compute policy of a multi-tenant namespace (hardening rows team-quota and own-quota): the names of
// its ResourceQuota and LimitRange, and the bounds of one container.
const (
	ComputeQuota      = "compute-quota"
	ContainerLimits   = "container-limits"
	containerMinCPU   = "10m"
	containerMinMem   = "16Mi"
	containerDefCPU   = "500m"
	containerDefMem   = "512Mi"
	computeQuotaPods  = "200"
	quotaStatusWithin = time.Minute
)

// ComputePolicy returns the ResourceQuota and LimitRange a platform puts in a tenant's namespace. The
// quota covers pods and CPU and memory requests and limits, so the API server refuses a pod whose
// containers do not all declare them. The LimitRange bounds every container (min, max), fills in what one
// leaves out (default, defaultRequest) and allows no limit above its request (maxLimitRequestRatio 1):
// the suite's pods pass only with requests equal to limits within the bounds (min 10m and 16Mi, below its
// defaults). Max and quota are sized from the nodes, twice and four times the biggest node's allocatable,
// so the shortage specs' pods (one CPU or 1Gi more than any node has) are admitted and stay Pending as
// those specs require.
func ComputePolicy(namespace string, nodes []corev1.Node) (*corev1.ResourceQuota, *corev1.LimitRange) {
	cpu, mem := resource.MustParse("1"), resource.MustParse("1Gi")
	for _, n := range nodes {
		if c := n.Status.Allocatable[corev1.ResourceCPU]; c.Cmp(cpu) > 0 {
			cpu = c
		}
		if m := n.Status.Allocatable[corev1.ResourceMemory]; m.Cmp(mem) > 0 {
			mem = m
		}
	}
	times := func(q resource.Quantity, n int64) resource.Quantity {
		q = q.DeepCopy()
		q.Mul(n)
		return q
	}
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: ComputeQuota, Namespace: namespace},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourcePods:           resource.MustParse(computeQuotaPods),
			corev1.ResourceRequestsCPU:    times(cpu, 4),
			corev1.ResourceLimitsCPU:      times(cpu, 4),
			corev1.ResourceRequestsMemory: times(mem, 4),
			corev1.ResourceLimitsMemory:   times(mem, 4),
		}},
	}
	list := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	limits := &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: ContainerLimits, Namespace: namespace},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type:                 corev1.LimitTypeContainer,
			Min:                  list(containerMinCPU, containerMinMem),
			Max:                  corev1.ResourceList{corev1.ResourceCPU: times(cpu, 2), corev1.ResourceMemory: times(mem, 2)},
			Default:              list(containerDefCPU, containerDefMem),
			DefaultRequest:       list(containerDefCPU, containerDefMem),
			MaxLimitRequestRatio: list("1", "1"),
		}}},
	}
	return quota, limits
}

// ApplyComputePolicy creates ComputePolicy's LimitRange and ResourceQuota in namespace, sized from the
// cluster's nodes, and waits until the quota controller has counted the namespace (until then the API
// server refuses every pod there: "status unknown for quota"). The undo deletes both.
func ApplyComputePolicy(ctx context.Context, kube kubernetes.Interface, namespace string) (Undo, error) {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	quota, limits := ComputePolicy(namespace, nodes.Items)
	undo := deleteComputePolicy(kube, namespace)
	if err := createComputePolicy(ctx, kube, quota, limits, false); err != nil {
		return nil, errors.Join(err, undo(ctx))
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, quotaStatusWithin, true, func(ctx context.Context) (bool, error) {
		q, err := kube.CoreV1().ResourceQuotas(namespace).Get(ctx, ComputeQuota, metav1.GetOptions{})
		return err == nil && counted(q), nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("ResourceQuota %s/%s: the quota controller did not count it within %s: %w", namespace, ComputeQuota, quotaStatusWithin, err), undo(ctx))
	}
	return undo, nil
}

// ApplyTeamQuota is ApplyTeamNamespace for QuotaTeamNamespace, with ApplyComputePolicy there: the shape
// of a multi-tenant cluster, where a team's namespace has a LocalQueue and a quota on CPU and memory
// limits.
func ApplyTeamQuota(ctx context.Context, cfg *rest.Config, kube kubernetes.Interface, kq kueueclient.Interface, root, dir string) (Team, Undo, error) {
	team, undoTeam, err := applyTeam(ctx, cfg, kube, kq, root, dir, QuotaTeamNamespace, nil)
	if err != nil {
		return team, nil, err
	}
	undoPolicy, err := ApplyComputePolicy(ctx, kube, team.Namespace)
	if err != nil {
		return team, nil, errors.Join(err, undoTeam(ctx))
	}
	undos := undoStack{undoTeam, undoPolicy}
	return team, undos.run, nil
}

// Team namespaces whose policy leaves the suite less than it needs (hardening rows team-quota-too-small
// and team-queue-without-dra).
const (
	SmallQuotaTeamNamespace = "team-gpu-quota-small"
	NoDRATeamNamespace      = "team-gpu-nodra"
)

// SmallComputeQuota is a ResourceQuota in namespace whose limits.cpu is half of one suite pod's (the
// fixtures' default CPU): no pod the suite makes fits, on any path.
func SmallComputeQuota(namespace string) *corev1.ResourceQuota {
	half := resource.MustParse(fixtures.DefaultCPU)
	half.SetMilli(half.MilliValue() / 2)
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: ComputeQuota, Namespace: namespace},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourcePods:        resource.MustParse(computeQuotaPods),
			corev1.ResourceLimitsCPU:   half,
			corev1.ResourceRequestsCPU: half,
		}},
	}
}

// ApplyTeamQuotaTooSmall is ApplyTeamNamespace for SmallQuotaTeamNamespace with SmallComputeQuota there:
// the team preflight must refuse to start, naming the quota, limits.cpu and its figures. The undo deletes
// the quota and the team.
func ApplyTeamQuotaTooSmall(ctx context.Context, cfg *rest.Config, kube kubernetes.Interface, kq kueueclient.Interface, root, dir string) (Team, Undo, error) {
	team, undoTeam, err := applyTeam(ctx, cfg, kube, kq, root, dir, SmallQuotaTeamNamespace, nil)
	if err != nil {
		return team, nil, err
	}
	q := SmallComputeQuota(team.Namespace)
	if _, err := kube.CoreV1().ResourceQuotas(team.Namespace).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		return team, nil, errors.Join(fmt.Errorf("creating ResourceQuota %s/%s: %w", team.Namespace, q.Name, err), undoTeam(ctx))
	}
	undoQuota := func(ctx context.Context) error {
		if err := kube.CoreV1().ResourceQuotas(team.Namespace).Delete(ctx, q.Name, metav1.DeleteOptions{}); err != nil && !gone(err) {
			return err
		}
		return nil
	}
	undos := undoStack{undoTeam, undoQuota}
	return team, undos.run, nil
}

// ApplyTeamQueueWithoutDRA is ApplyTeamNamespace for NoDRATeamNamespace, its ClusterQueue covering CPU,
// memory and the device plugin's GPUs but not the DRA path's Kueue resource: the DRA path's queued specs
// must be not exercised, naming the ClusterQueue and what it covers, and the run GO.
func ApplyTeamQueueWithoutDRA(ctx context.Context, cfg *rest.Config, kube kubernetes.Interface, kq kueueclient.Interface, root, dir string) (Team, Undo, error) {
	return applyTeam(ctx, cfg, kube, kq, root, dir, NoDRATeamNamespace, []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, GPUResource})
}

// ProvisionComputePolicy puts ComputePolicy, sized from the cluster's nodes, into every namespace that
// carries the suite's run label (fixtures.RunLabel), from now until the undo, as a platform's
// namespace-provisioning policy (an admission controller's generate rule, an operator) would: the suite's
// own-namespace mode then meets a quota and a LimitRange in each namespace it creates. The undo stops
// provisioning, deletes what it put in namespaces still there, and reports anything it failed to create.
func ProvisionComputePolicy(ctx context.Context, kube kubernetes.Interface) (Undo, error) {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	// Provisioning outlives ctx (it runs until the undo), as the hardening row's run does.
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	p := &provisioner{kube: kube, nodes: nodes.Items, ctx: pctx}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = fixtures.RunLabel }))
	informer := factory.Core().V1().Namespaces().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: p.namespace}); err != nil {
		stop()
		return nil, err
	}
	factory.Start(pctx.Done())
	halt := func() {
		stop()
		factory.Shutdown()
	}
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		halt()
		return nil, fmt.Errorf("watching namespaces labelled %s: %w", fixtures.RunLabel, context.Cause(ctx))
	}
	return func(ctx context.Context) error {
		halt()
		errs := p.failures()
		for _, ns := range p.namespaces() {
			errs = append(errs, deleteComputePolicy(kube, ns)(ctx))
		}
		return errors.Join(errs...)
	}, nil
}

// provisioner puts the compute policy into the namespaces its informer reports.
type provisioner struct {
	kube  kubernetes.Interface
	nodes []corev1.Node
	ctx   context.Context

	mu   sync.Mutex
	made []string
	errs []error
}

// namespace is the informer's add handler.
func (p *provisioner) namespace(obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok || ns.Labels[fixtures.RunLabel] == "" || ns.DeletionTimestamp != nil {
		return
	}
	quota, limits := ComputePolicy(ns.Name, p.nodes)
	err := createComputePolicy(p.ctx, p.kube, quota, limits, true)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.made = append(p.made, ns.Name)
	// A spec namespace may be gone again before its policy is in (a spec that failed at once).
	if err != nil && !gone(err) && p.ctx.Err() == nil {
		p.errs = append(p.errs, fmt.Errorf("namespace %s: %w", ns.Name, err))
	}
}

func (p *provisioner) namespaces() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.made)
}

func (p *provisioner) failures() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.errs)
}

// createComputePolicy creates the LimitRange, then the ResourceQuota; one already there is kept. With
// prime, it records the quota's usage of the fresh namespace itself (none) when the quota controller has
// not yet: until one of them has, the API server refuses every pod there ("status unknown for quota"),
// and the suite creates its first pod within milliseconds of its namespace. The quota controller counts
// the namespace anyway and corrects the figure; the update carries the created object's resourceVersion,
// so a count the controller wrote first is never overwritten.
func createComputePolicy(ctx context.Context, kube kubernetes.Interface, quota *corev1.ResourceQuota, limits *corev1.LimitRange, prime bool) error {
	ns := quota.Namespace
	if _, err := kube.CoreV1().LimitRanges(ns).Create(ctx, limits, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating LimitRange %s/%s: %w", ns, limits.Name, err)
	}
	created, err := kube.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("creating ResourceQuota %s/%s: %w", ns, quota.Name, err)
	case !prime || counted(created):
		return nil
	}
	created.Status = corev1.ResourceQuotaStatus{Hard: created.Spec.Hard.DeepCopy(), Used: corev1.ResourceList{}}
	for name := range created.Spec.Hard {
		created.Status.Used[name] = resource.Quantity{}
	}
	if _, err := kube.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("recording the usage of ResourceQuota %s/%s: %w", ns, quota.Name, err)
	}
	return nil
}

// counted reports whether q's status has a usage for every resource it limits.
func counted(q *corev1.ResourceQuota) bool {
	for name := range q.Spec.Hard {
		if _, ok := q.Status.Used[name]; !ok {
			return false
		}
	}
	return len(q.Status.Hard) > 0
}

// deleteComputePolicy returns the undo that deletes the policy's objects in namespace.
func deleteComputePolicy(kube kubernetes.Interface, namespace string) Undo {
	return func(ctx context.Context) error {
		var errs []error
		if err := kube.CoreV1().ResourceQuotas(namespace).Delete(ctx, ComputeQuota, metav1.DeleteOptions{}); err != nil && !gone(err) {
			errs = append(errs, err)
		}
		if err := kube.CoreV1().LimitRanges(namespace).Delete(ctx, ContainerLimits, metav1.DeleteOptions{}); err != nil && !gone(err) {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
}

// gone reports whether err says the object's namespace (or the object) is gone or going.
func gone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
}
