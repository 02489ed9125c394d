package gpu

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/labels"
)

// DRAClaimName is the name of the pod-level claim entry (and the template's request) the DRA path adds.
const DRAClaimName = "gpus"

// DRA is the Dynamic Resource Allocation path: a ResourceClaimTemplate asks for exactly N devices of
// the DeviceClass; the pod references it; the scheduler allocates a generated ResourceClaim from the
// driver's ResourceSlices; the driver's CDI spec injects the devices.
type DRA struct {
	// DeviceClass is the class requested.
	DeviceClass string
	// Driver is the driver behind the class (comma-separated when the class selects several).
	Driver string
	// KueueResource is the name Kueue accounts the class's devices as (deviceClassMappings).
	KueueResource corev1.ResourceName
	// Devices are the names per node of the devices the class selects.
	Devices map[string][]string
	// Published counts per node the devices the driver publishes, selected by the class or not.
	Published map[string]int
	// Tainted is what discovery left out of Devices: per node, selected devices a NoSchedule or NoExecute
	// taint in their slice kept from new allocations ("name key=value:Effect").
	Tainted map[string][]string
}

var _ Path = (*DRA)(nil)

// Name implements Path.
func (p *DRA) Name() string { return config.PathDRA }

// UUIDSelector is a CEL selector for the one device of the path's driver whose uuid attribute (NVIDIA's
// driver's, and the fake's) is uuid.
func (p *DRA) UUIDSelector(uuid string) string {
	driver, _, _ := strings.Cut(p.Driver, ",")
	return fmt.Sprintf("device.driver == %q && device.attributes[%q].uuid == %q", driver, driver, uuid)
}

// Authority implements Path.
func (p *DRA) Authority() string { return "the ResourceClaim" }

// ClaimBased implements Path.
func (p *DRA) ClaimBased() bool { return true }

// Label implements Path.
func (p *DRA) Label() string { return labels.PathDRA }

// QuotaResource implements Path.
func (p *DRA) QuotaResource() corev1.ResourceName { return p.KueueResource }

// Capacity implements Path.
func (p *DRA) Capacity() map[string]int64 {
	out := map[string]int64{}
	for n, d := range p.Devices {
		out[n] = int64(len(d))
	}
	return out
}

// Describe implements Path.
func (p *DRA) Describe() string {
	published := 0
	for _, n := range p.Published {
		published += n
	}
	d := fmt.Sprintf("DRA: DeviceClass %s matches %d of %d published devices, driver %s (%d nodes; Kueue quota as %s)",
		p.DeviceClass, sum(p.Capacity()), published, p.Driver, len(p.Devices), p.KueueResource)
	if len(p.Tainted) > 0 {
		d += "; not counted, tainted in their slices: " + cluster.DescribeTainted(p.Tainted)
	}
	return d
}

// TemplateName is the ResourceClaimTemplate name for an owner (Job or Pod) name.
func TemplateName(owner string) string { return owner + "-gpus" }

// RequestDevices implements fixtures.DeviceRequester: a template asking for exactly count devices,
// referenced from the pod and claimed by the container.
func (p *DRA) RequestDevices(f fixtures.Factory, spec *corev1.PodSpec, container string, count int, owner metav1.ObjectMeta) []fixtures.Object {
	tmpl := f.ResourceClaimTemplate(TemplateName(owner.Name), owner.Namespace).ExactCount(DRAClaimName, p.DeviceClass, count).Obj()
	spec.ResourceClaims = append(spec.ResourceClaims, corev1.PodResourceClaim{Name: DRAClaimName, ResourceClaimTemplateName: ptr.To(tmpl.Name)})
	for i := range spec.Containers {
		if spec.Containers[i].Name == container {
			spec.Containers[i].Resources.Claims = append(spec.Containers[i].Resources.Claims, corev1.ResourceClaim{Name: DRAClaimName})
		}
	}
	return []fixtures.Object{tmpl}
}

// ClaimNames returns the generated claim names of pod for the DRA path's entry, and the claim the
// scheduler created for its extended resources (the extended-resource-dra path's).
func ClaimNames(pod *corev1.Pod) []string {
	var out []string
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == DRAClaimName && s.ResourceClaimName != nil {
			out = append(out, *s.ResourceClaimName)
		}
	}
	if ext := pod.Status.ExtendedResourceClaimStatus; ext != nil && ext.ResourceClaimName != "" {
		out = append(out, ext.ResourceClaimName)
	}
	return out
}

// Given implements Path: the generated claim's status.allocation is the authority. A claim already
// released after the pod finished is taken from the recorder.
func (p *DRA) Given(ctx context.Context, in GivenInput) (Allocation, error) {
	pod := in.Pod
	names := ClaimNames(pod)
	if len(names) == 0 {
		return Allocation{}, fmt.Errorf("pod %s/%s has no generated ResourceClaim for %q in status.resourceClaimStatuses, nor one in status.extendedResourceClaimStatus", pod.Namespace, pod.Name, DRAClaimName)
	}
	a := Allocation{Node: pod.Spec.NodeName, Devices: []string{}}
	drivers := strings.Split(p.Driver, ",")
	var refs []resourcev1.DeviceRequestAllocationResult
	for _, name := range names {
		claim, err := in.Kube.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		source := "ResourceClaim " + pod.Namespace + "/" + name
		if (apierrors.IsNotFound(err) || err == nil && claim.Status.Allocation == nil) && in.Claims != nil {
			if rec, ok := in.Claims.LastAllocated(name); ok {
				claim, err, source = rec, nil, source+" (as recorded before its release)"
			}
		}
		if err != nil {
			return a, fmt.Errorf("reading %s: %w", source, err)
		}
		if claim.Status.Allocation == nil {
			return a, fmt.Errorf("%s is not allocated", source)
		}
		info := ClaimInfo{Name: name}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if slices.Contains(drivers, r.Driver) {
				refs = append(refs, r)
				a.DeviceRefs = append(a.DeviceRefs, r.Pool+"/"+r.Device)
				if !slices.Contains(info.Pools, r.Pool) {
					info.Pools = append(info.Pools, r.Pool)
				}
			}
		}
		for _, c := range claim.Status.ReservedFor {
			info.ReservedFor = append(info.ReservedFor, string(c.UID))
		}
		a.Claims = append(a.Claims, info)
		a.Source = strings.TrimPrefix(a.Source+", "+source, ", ")
	}
	ids, err := p.identities(ctx, in.Kube, refs)
	if err != nil {
		return a, err
	}
	a.Devices = ids
	a.Aliases = map[string]string{}
	for i, r := range refs {
		if r.Device != ids[i] {
			a.Aliases[r.Device] = ids[i]
		}
	}
	slices.Sort(a.Devices)
	slices.Sort(a.DeviceRefs)
	a.Count = len(a.Devices)
	return a, nil
}

// identities names each allocated device the way the container sees it: by the "uuid" attribute its
// ResourceSlice publishes (plain, or qualified with the driver's domain), else by its device name.
func (p *DRA) identities(ctx context.Context, kube kubernetes.Interface, refs []resourcev1.DeviceRequestAllocationResult) ([]string, error) {
	out := make([]string, 0, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices to name the allocated devices: %w", err)
	}
	uuid := map[string]string{} // driver/pool/device → uuid attribute
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			for _, key := range []resourcev1.QualifiedName{"uuid", resourcev1.QualifiedName(s.Spec.Driver + "/uuid")} {
				if v, ok := d.Attributes[key]; ok && v.StringValue != nil {
					uuid[s.Spec.Driver+"/"+s.Spec.Pool.Name+"/"+d.Name] = *v.StringValue
				}
			}
		}
	}
	for _, r := range refs {
		if u, ok := uuid[r.Driver+"/"+r.Pool+"/"+r.Device]; ok {
			out = append(out, u)
		} else {
			out = append(out, r.Device)
		}
	}
	return out, nil
}

// SliceChecker is a path whose allocations come from ResourceSlices (DRA, and extended-resource-dra
// through its DRA).
type SliceChecker interface {
	CheckFromNodeSlices(ctx context.Context, kube kubernetes.Interface, a Allocation) error
}

// CheckFromNodeSlices verifies that every device of a came from a ResourceSlice of the driver that is
// local to a.Node. It returns an error naming the first device that did not.
func (p *DRA) CheckFromNodeSlices(ctx context.Context, kube kubernetes.Interface, a Allocation) error {
	slicesList, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ResourceSlices: %w", err)
	}
	onNode := map[string]bool{} // "pool/device" published on a.Node
	var elsewhere []string
	drivers := strings.Split(p.Driver, ",")
	for _, s := range slicesList.Items {
		if !slices.Contains(drivers, s.Spec.Driver) {
			continue
		}
		for _, d := range s.Spec.Devices {
			key := s.Spec.Pool.Name + "/" + d.Name
			if s.Spec.NodeName != nil && *s.Spec.NodeName == a.Node {
				onNode[key] = true
			} else if s.Spec.NodeName != nil {
				elsewhere = append(elsewhere, key+"@"+*s.Spec.NodeName)
			}
		}
	}
	for _, ref := range a.DeviceRefs {
		if onNode[ref] {
			continue
		}
		return fmt.Errorf("%s was allocated device %s, but no ResourceSlice on node %s publishes it (slices on other nodes: %s)",
			a.Source, ref, a.Node, strings.Join(elsewhere[:min(8, len(elsewhere))], ", "))
	}
	return nil
}

// ClaimRecorder watches the ResourceClaims of one namespace and remembers each claim's last allocated
// state and every consumer it was reserved for, so a check made after the claim controller released a
// finished pod's claim still sees what was allocated. A watch, not a poll: a short pod's claim can be
// allocated and released between two polls.
type ClaimRecorder struct {
	mu        sync.Mutex
	allocated map[string]*resourcev1.ResourceClaim
	reserved  map[string][]string
	deleted   map[string]bool
	stop      chan struct{}
}

// RecordClaims starts a recorder for namespace; call Stop when done (DeferCleanup).
func RecordClaims(ctx context.Context, kube kubernetes.Interface, namespace string) *ClaimRecorder {
	r := &ClaimRecorder{allocated: map[string]*resourcev1.ResourceClaim{}, reserved: map[string][]string{}, deleted: map[string]bool{}, stop: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(namespace))
	inf := factory.Resource().V1().ResourceClaims().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(obj) },
		UpdateFunc: func(_, obj any) { r.observe(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if c, ok := obj.(*resourcev1.ResourceClaim); ok {
				r.mu.Lock()
				r.deleted[c.Name] = true
				r.mu.Unlock()
			}
		},
	})
	factory.Start(r.stop)
	factory.WaitForCacheSync(r.stop)
	return r
}

func (r *ClaimRecorder) observe(obj any) {
	c, ok := obj.(*resourcev1.ResourceClaim)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.Status.Allocation != nil {
		r.allocated[c.Name] = c.DeepCopy()
	}
	for _, ref := range c.Status.ReservedFor {
		if !slices.Contains(r.reserved[c.Name], string(ref.UID)) {
			r.reserved[c.Name] = append(r.reserved[c.Name], string(ref.UID))
		}
	}
}

// LastAllocated returns the last allocated state seen for a claim.
func (r *ClaimRecorder) LastAllocated(name string) (*resourcev1.ResourceClaim, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.allocated[name]
	return c, ok
}

// EverReservedFor reports whether the claim was ever seen reserved for uid.
func (r *ClaimRecorder) EverReservedFor(name, uid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.reserved[name], uid)
}

// Stop ends the watch.
func (r *ClaimRecorder) Stop() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
}
