package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/diagnose"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/internal/textcut"
	"gpuconform.io/gpuconform/internal/workload/podresources"
)

// PodResourcesSocketDir is the kubelet's pod-resources directory the helper pod mounts.
const PodResourcesSocketDir = "/var/lib/kubelet/pod-resources"

// DevicePlugin is the extended-resource path: the container asks for the resource with request equal
// to limit, the kubelet asks the plugin to Allocate, the plugin injects the device IDs.
type DevicePlugin struct {
	// Resource is the extended resource, e.g. nvidia.com/gpu.
	Resource corev1.ResourceName
	// Allocatable is the devices per node.
	Allocatable map[string]int64
	// ServedByDRA are the nodes where a DeviceClass maps Resource to a DRA driver's devices (no device
	// plugin advertises it there): a pod of this path could be given a DRA device there, so its pods are
	// kept off them.
	ServedByDRA []string
}

var _ Path = (*DevicePlugin)(nil)

// Name implements Path.
func (p *DevicePlugin) Name() string { return config.PathDevicePlugin }

// Authority implements Path.
func (p *DevicePlugin) Authority() string { return "the kubelet" }

// ClaimBased implements Path.
func (p *DevicePlugin) ClaimBased() bool { return false }

// Label implements Path.
func (p *DevicePlugin) Label() string { return labels.PathDevicePlugin }

// QuotaResource implements Path: Kueue accounts extended resources under their own name.
func (p *DevicePlugin) QuotaResource() corev1.ResourceName { return p.Resource }

// Capacity implements Path.
func (p *DevicePlugin) Capacity() map[string]int64 { return p.Allocatable }

// Describe implements Path.
func (p *DevicePlugin) Describe() string {
	return fmt.Sprintf("device plugin: extended resource %s (%d nodes, %d devices)", p.Resource, len(p.Allocatable), sum(p.Allocatable))
}

// RequestDevices implements fixtures.DeviceRequester: limit = request = count on the container, kept off
// the nodes where a DRA driver serves the same name (ServedByDRA).
func (p *DevicePlugin) RequestDevices(_ fixtures.Factory, spec *corev1.PodSpec, container string, count int, _ metav1.ObjectMeta) []fixtures.Object {
	requestExtended(spec, container, p.Resource, count)
	fixtures.KeepOffNodes(spec, p.ServedByDRA)
	return nil
}

// requestExtended asks for count of the extended resource on the container, request equal to limit.
func requestExtended(spec *corev1.PodSpec, container string, resourceName corev1.ResourceName, count int) {
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if c.Name != container {
			continue
		}
		q := resource.MustParse(strconv.Itoa(count))
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		c.Resources.Limits[resourceName] = q
		c.Resources.Requests[resourceName] = q
	}
}

// Given implements Path. The kubelet is the authority: a helper pod on the pod's node reads the
// pod-resources API. When the cluster forbids hostPath pods (PodSecurity, policy engines), the
// allocation falls back to the count in the pod spec and says so.
func (p *DevicePlugin) Given(ctx context.Context, in GivenInput) (Allocation, error) {
	out, err := p.GivenAll(ctx, []GivenInput{in})
	return out[0], err
}

// GivenAll implements AllGiver: one helper pod per node (the nodes' at once) reads the kubelet's view of
// every pod asked about there, instead of one helper per pod. A spec that fills a node with N pods pays
// one helper's start instead of N. Every node's error is returned (joined), with the allocations read
// from the other nodes.
func (p *DevicePlugin) GivenAll(ctx context.Context, ins []GivenInput) ([]Allocation, error) {
	out := make([]Allocation, len(ins))
	byNode := map[string][]int{}
	var nodes []string
	for i, in := range ins {
		out[i] = KubeletAllocation(in.Pod.Spec.NodeName, nil)
		if out[i].Node == "" {
			return out, fmt.Errorf("pod %s/%s is not scheduled; no node to ask", in.Pod.Namespace, in.Pod.Name)
		}
		if _, seen := byNode[out[i].Node]; !seen {
			nodes = append(nodes, out[i].Node)
		}
		byNode[out[i].Node] = append(byNode[out[i].Node], i)
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for n, node := range nodes {
		wg.Go(func() {
			idx := byNode[node]
			first := ins[idx[0]]
			filter := podresources.Filter{Namespace: first.Pod.Namespace}
			for _, i := range idx {
				if ins[i].Pod.Namespace != filter.Namespace {
					filter.Namespace = ""
				}
			}
			if len(idx) == 1 {
				filter.Pod = first.Pod.Name
			}
			text, err := runPodResourcesHelper(ctx, first, node, filter)
			if errors.Is(err, errHelperForbidden) {
				for _, i := range idx {
					want := requestedCount(ins[i].Pod, ins[i].Container, p.Resource)
					out[i] = Allocation{Node: node, CountOnly: true, Count: want, Source: "pod spec (count only)",
						Note: fmt.Sprintf("kubelet view unavailable: %v; compared the device count only", err)}
				}
				return
			}
			if err != nil {
				errs[n] = err
				return
			}
			report, err := ParsePodResources(text)
			if err != nil {
				errs[n] = err
				return
			}
			for _, i := range idx {
				pod := ins[i].Pod
				devices, found := report.DevicesOf(pod.Namespace, pod.Name, ins[i].Container, string(p.Resource))
				if !found {
					errs[n] = cmp.Or(errs[n], fmt.Errorf("the kubelet on %s does not list pod %s/%s (it reports only active pods; did the pod finish?)", node, pod.Namespace, pod.Name))
					continue
				}
				out[i] = KubeletAllocation(node, devices)
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// KubeletAllocation is the allocation the kubelet on node reports for a container's device IDs. Time-slicing
// and MPS hand out replica IDs ("<uuid>::<n>"): Devices are then the GPUs behind them, which is what the
// container sees, and Replicas the IDs themselves. Count is the number of IDs, as the pod asked for.
func KubeletAllocation(node string, ids []string) Allocation {
	a := Allocation{Node: node, Source: "kubelet pod-resources API on " + node, Count: len(ids)}
	a.Devices, a.Replicas = splitReplicas(ids)
	return a
}

var errHelperForbidden = errors.New("helper pod forbidden")

// runPodResourcesHelper runs `gpu-workload podresources` on node, for the pods that filter selects, and
// returns its logs. in gives the clients, the helper's factory and namespace, and a pod whose namespace is
// the helper's when no helper namespace is set.
func runPodResourcesHelper(ctx context.Context, in GivenInput, node string, filter podresources.Filter) (string, error) {
	base := cmp.Or(filter.Pod, node)
	name := "podresources-" + strings.TrimSuffix(base[:min(40, len(base))], "-")
	ns := cmp.Or(in.HelperNamespace, in.Pod.Namespace)
	args := []string{fixtures.WorkloadBinary, "podresources"}
	if filter.Namespace != "" {
		args = append(args, "--namespace", filter.Namespace)
	}
	if filter.Pod != "" {
		args = append(args, "--pod", filter.Pod)
	}
	helper := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-", Namespace: ns, Labels: map[string]string{
			fixtures.RunLabel: in.Factory.RunID, fixtures.ManagedByLabel: fixtures.ManagedByValue,
		}},
		Spec: corev1.PodSpec{
			NodeName:                      node, // bypass the scheduler: it must run exactly there
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Tolerations:                   append([]corev1.Toleration{{Operator: corev1.TolerationOpExists}}, in.Factory.Tolerations...),
			Containers: []corev1.Container{{
				Name:            "podresources",
				Image:           in.Factory.Image,
				ImagePullPolicy: in.Factory.PullPolicy,
				Command:         args,
				Resources:       in.Factory.Resources(),
				VolumeMounts:    []corev1.VolumeMount{{Name: "pod-resources", MountPath: PodResourcesSocketDir, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "pod-resources", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: PodResourcesSocketDir, Type: ptr.To(corev1.HostPathDirectory),
			}}}},
		},
	}
	created, err := in.Kube.CoreV1().Pods(ns).Create(ctx, helper, metav1.CreateOptions{})
	// The helper must run as root with a hostPath mount, which Pod Security "restricted" and most policy
	// engines refuse: any admission refusal (RBAC, PodSecurity, a webhook or a validating policy, which
	// may answer Invalid and name another rule first) is the documented fallback, not a failure.
	if _, denied := diagnose.ParseAdmissionDenial(fmt.Sprint(err)); err != nil && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err) && (denied || strings.Contains(err.Error(), "hostPath"))) {
		return "", fmt.Errorf("%w: creating a hostPath pod in %s was refused (a namespace that admits it can be named with --helper-namespace): %w", errHelperForbidden, ns, err)
	}
	if err != nil {
		return "", fmt.Errorf("creating podresources helper pod: %w", err)
	}
	defer func() {
		// The helper is deleted whatever happens; a fresh context because ctx may be done.
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = in.Kube.CoreV1().Pods(created.Namespace).Delete(dctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	timeout := in.HelperTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	last, err := untilPodDone(ctx, in.Kube, created, timeout)
	if err != nil {
		return "", fmt.Errorf("podresources helper %s/%s on %s did not finish within %s (last phase %s)", created.Namespace, created.Name, node, timeout, phase(last))
	}
	logs, lerr := in.Kube.CoreV1().Pods(created.Namespace).GetLogs(created.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if last.Status.Phase == corev1.PodFailed {
		return "", fmt.Errorf("podresources helper on %s failed: %s", node, textcut.Head(string(logs), 600))
	}
	if lerr != nil {
		return "", fmt.Errorf("reading podresources helper logs: %w", lerr)
	}
	return string(logs), nil
}

// untilPodDone waits until pod has succeeded or failed, from one watch of it (client-go's UntilWithSync)
// rather than a get per poll, and returns the last state seen.
func untilPodDone(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, timeout time.Duration) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pods := kube.CoreV1().Pods(pod.Namespace)
	byName := fields.OneTermEqualSelector("metadata.name", pod.Name).String()
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return pods.Watch(ctx, o)
		},
	}, kube)
	var last *corev1.Pod
	done := func(obj any) bool {
		p, ok := obj.(*corev1.Pod)
		ok = ok && p.Name == pod.Name // the field selector says so already; a fake client ignores it
		if ok {
			last = p
		}
		return ok && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed)
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{},
		func(store cache.Store) (bool, error) { return slices.ContainsFunc(store.List(), done), nil },
		func(ev watch.Event) (bool, error) { return done(ev.Object), nil })
	return last, err
}

func requestedCount(pod *corev1.Pod, container string, res corev1.ResourceName) int {
	for _, c := range pod.Spec.Containers {
		if c.Name == container {
			q := c.Resources.Limits[res]
			return int(q.Value())
		}
	}
	return 0
}

func phase(p *corev1.Pod) string {
	if p == nil {
		return "unknown"
	}
	return string(p.Status.Phase)
}

func sum(m map[string]int64) int64 {
	var t int64
	for _, v := range m {
		t += v
	}
	return t
}
