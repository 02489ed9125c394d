package cluster

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"gpuconform.io/gpuconform/framework/config"
)

// Sharing modes of one node on one allocation path, as DiscoverSharingModes reads them from evidence.
const (
	// ModeExclusive: every advertised device is a whole GPU that one pod holds alone.
	ModeExclusive = "exclusive"
	// ModeTimeSlicing: each physical GPU advertised several times (replicas), without memory or fault
	// isolation between the pods that share it.
	ModeTimeSlicing = "time-slicing"
	// ModeMPS: replicas like time-slicing, served through CUDA MPS with per-client limits.
	ModeMPS = "mps"
	// ModeMIGSingle: every GPU split into MIG devices of one profile, all advertised as nvidia.com/gpu.
	ModeMIGSingle = "mig-single"
	// ModeMIGMixed: MIG devices advertised per profile (nvidia.com/mig-<profile>) beside whole GPUs.
	ModeMIGMixed = "mig-mixed"
	// ModePartitionable: DRA devices consuming shared counters, so a GPU and its partitions are
	// allocatable from one budget.
	ModePartitionable = "dra-partitionable"
	// ModeConsumable: DRA devices that several claims may be allocated at once (allowMultipleAllocations),
	// each consuming part of a capacity such as memory, until the capacity is spent (KEP 5075, consumable
	// capacity).
	ModeConsumable = "dra-shared"
)

// GFD labels and DRA attributes that describe sharing and MIG beyond those discovery.go names.
const (
	LabelMIGStrategy = "nvidia.com/mig.strategy"
	LabelGPUMemory   = "nvidia.com/gpu.memory"
	// migProductInfix is what GFD puts between the product and the profile in nvidia.com/gpu.product on a
	// node whose GPUs are all split (mig.strategy=single): "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb".
	migProductInfix = "-MIG-"
	// draTypeMIG and draTypeGPU are the values of the "type" attribute of NVIDIA's DRA driver's devices.
	draTypeMIG = "mig"
	draTypeGPU = "gpu"
	// SharedResourceSuffix is what NVIDIA's device plugin appends to the name of a resource it time-slices
	// or shares through MPS when renameByDefault is set: nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb.shared.
	SharedResourceSuffix = ".shared"
	// SharedProductSuffix is what GFD appends to a shared resource's product label when the plugin does
	// not rename it: "NVIDIA-H100-80GB-HBM3-SHARED", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED".
	SharedProductSuffix = "-SHARED"
)

// PoolLabels are the node labels that name a node's pool on the common managed platforms, in the order
// they are tried: a baseline compares sharing per pool, because a pool's nodes are replaced between runs.
var PoolLabels = []string{"cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup", "kubernetes.azure.com/agentpool", "karpenter.sh/nodepool"}

// NodeSharingMode is how one node shares its GPUs on one allocation path, read from evidence.
type NodeSharingMode struct {
	Node string `json:"node"`
	// Path is "device-plugin" or "dra".
	Path string `json:"path"`
	// Resource (device-plugin path) is the extended resource that carries the node's whole GPUs, or its
	// MIG devices under the single strategy: nvidia.com/gpu, the renamed nvidia.com/gpu.shared, a vendor's.
	Resource string `json:"resource,omitempty"`
	// Mode is what the evidence shows (one of the Mode constants).
	Mode string `json:"mode"`
	// Labelled is the mode the node's GFD labels claim, "" when they claim none (no sharing or MIG label).
	Labelled string `json:"labelled,omitempty"`
	// Pool is the node's pool as "<label>=<value>" of the first of PoolLabels it carries, "" when none.
	Pool string `json:"pool,omitempty"`
	// Replicas (time-slicing, mps) is how many devices are advertised per physical GPU.
	Replicas int `json:"replicas,omitempty"`
	// MIG (MIG modes, device-plugin path) lists each resource that carries MIG devices.
	MIG []MIGResource `json:"mig,omitempty"`
	// WholeGPUs (mig-mixed) is the number of nvidia.com/gpu devices, which are whole GPUs.
	WholeGPUs int64 `json:"wholeGPUs,omitempty"`
	// WholeReplicas (mig-mixed) is how many devices each whole GPU is advertised as when they are
	// time-sliced beside the MIG devices (above 1), 0 when each is advertised once.
	WholeReplicas int `json:"wholeReplicas,omitempty"`
	// Partitions (dra-partitionable) has one entry per parent GPU.
	Partitions []PartitionableGPU `json:"partitions,omitempty"`
	// Consumable (dra-shared) has one entry per device several claims may share.
	Consumable []ConsumableDevice `json:"consumable,omitempty"`
	// Evidence says what the mode was read from, one item per fact.
	Evidence []string `json:"evidence,omitempty"`
	// Conflict says where labels and evidence disagree, and that the evidence won; "" when they agree.
	Conflict string `json:"conflict,omitempty"`
}

// MIGResource is one extended resource whose devices are MIG devices of one profile.
type MIGResource struct {
	Resource string `json:"resource"`
	Profile  string `json:"profile"`
	// Count is the devices the resource advertises (each replica one).
	Count     int64 `json:"count"`
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// Replicas is how many devices the resource advertises per physical MIG device when they are
	// time-sliced (above 1), 0 when each is advertised once.
	Replicas int `json:"replicas,omitempty"`
}

// PartitionableGPU is one GPU a DRA driver publishes with its partitions.
type PartitionableGPU struct {
	// Whole is the device name of the whole GPU, "" when none is published.
	Whole string `json:"whole,omitempty"`
	// UUID is the whole GPU's uuid attribute (else the partitions' parentUUID).
	UUID string `json:"uuid,omitempty"`
	// CounterSet is the shared counter set the GPU's devices consume, "" when they consume none.
	CounterSet string `json:"counterSet,omitempty"`
	// Counters is the capacity of each counter of that set.
	Counters   map[string]int64  `json:"counters,omitempty"`
	Partitions []PartitionDevice `json:"partitions,omitempty"`
}

// PartitionDevice is one partition of a partitionable GPU.
type PartitionDevice struct {
	Name      string `json:"name"`
	Profile   string `json:"profile,omitempty"`
	UUID      string `json:"uuid,omitempty"`
	MemoryMiB int64  `json:"memoryMiB,omitempty"`
	// Consumes is what the device takes of its counter set, by counter.
	Consumes map[string]int64 `json:"consumes,omitempty"`
}

// ConsumableDevice is one DRA device that several claims may be allocated at once, each consuming part
// of its capacities.
type ConsumableDevice struct {
	Name string `json:"name"`
	// UUID is its uuid attribute (plain or qualified with the driver's domain), "" when it has none.
	UUID string `json:"uuid,omitempty"`
	// Slice is the ResourceSlice that publishes it.
	Slice string `json:"slice,omitempty"`
	// Capacity is each of its capacities, by name as published ("memory", "gpu.nvidia.com/memory").
	Capacity map[string]ConsumableCapacity `json:"capacity,omitempty"`
}

// ConsumableCapacity is one capacity of a shareable device and the request policy that says how claims
// consume it.
type ConsumableCapacity struct {
	// Value is the whole capacity, which the claims sharing the device consume together at most.
	Value resource.Quantity `json:"value"`
	// Default is what a claim that asks for none of it consumes; nil when the device sets no policy (it
	// then consumes all of it).
	Default *resource.Quantity `json:"default,omitempty"`
	// Min, Max and Step are the policy's valid range, ValidValues its valid values; nil when it sets none.
	Min         *resource.Quantity  `json:"min,omitempty"`
	Max         *resource.Quantity  `json:"max,omitempty"`
	Step        *resource.Quantity  `json:"step,omitempty"`
	ValidValues []resource.Quantity `json:"validValues,omitempty"`
}

// SmallestRequest is the least of the capacity a claim can consume under the policy: the range's minimum,
// the first valid value, or the default; ok is false when the policy names none (any amount goes).
func (c ConsumableCapacity) SmallestRequest() (q resource.Quantity, ok bool) {
	switch {
	case c.Min != nil:
		return c.Min.DeepCopy(), true
	case len(c.ValidValues) > 0:
		return c.ValidValues[0].DeepCopy(), true
	case c.Default != nil:
		return c.Default.DeepCopy(), true
	}
	return resource.Quantity{}, false
}

// Describe is the capacity and its policy, for evidence and messages: "80Gi (request policy: default 80Gi, min 40Gi,
// max 80Gi, step 40Gi)".
func (c ConsumableCapacity) Describe() string {
	var policy []string
	add := func(what string, q *resource.Quantity) {
		if q != nil {
			policy = append(policy, what+" "+q.String())
		}
	}
	add("default", c.Default)
	add("min", c.Min)
	add("max", c.Max)
	add("step", c.Step)
	if len(c.ValidValues) > 0 {
		vs := make([]string, len(c.ValidValues))
		for i, v := range c.ValidValues {
			vs[i] = v.String()
		}
		policy = append(policy, "valid values "+strings.Join(vs, ", "))
	}
	if len(policy) == 0 {
		return c.Value.String() + " (no request policy)"
	}
	return c.Value.String() + " (request policy: " + strings.Join(policy, ", ") + ")"
}

// consumableCapacities reads a shareable device's capacities and their request policies.
func consumableCapacities(d resourcev1.Device) map[string]ConsumableCapacity {
	out := map[string]ConsumableCapacity{}
	for name, c := range d.Capacity {
		cc := ConsumableCapacity{Value: c.Value.DeepCopy()}
		if p := c.RequestPolicy; p != nil {
			cc.Default = copyQuantity(p.Default)
			if r := p.ValidRange; r != nil {
				cc.Min, cc.Max, cc.Step = copyQuantity(r.Min), copyQuantity(r.Max), copyQuantity(r.Step)
			}
			for _, v := range p.ValidValues {
				cc.ValidValues = append(cc.ValidValues, v.DeepCopy())
			}
		}
		out[string(name)] = cc
	}
	return out
}

func copyQuantity(q *resource.Quantity) *resource.Quantity {
	if q == nil {
		return nil
	}
	c := q.DeepCopy()
	return &c
}

// Shared reports whether the mode lets more than one pod use one physical GPU (replicas, MIG devices or
// partitions).
func (m NodeSharingMode) Shared() bool { return m.Mode != ModeExclusive && m.Mode != "" }

// Describe is the mode with its parameters for reports: "time-slicing, 2 replicas per GPU",
// "mig-mixed: 2 whole GPUs, nvidia.com/mig-3g.40gb ×2", "dra-partitionable: 4 GPUs, 40 partitions".
func (m NodeSharingMode) Describe() string {
	switch m.Mode {
	case ModeTimeSlicing, ModeMPS:
		return fmt.Sprintf("%s, %d replicas per GPU", m.Mode, m.Replicas)
	case ModeMIGSingle, ModeMIGMixed:
		parts := make([]string, 0, len(m.MIG)+1)
		if m.Mode == ModeMIGMixed {
			parts = append(parts, plural(int(m.WholeGPUs), "whole GPU"))
		}
		for _, r := range m.MIG {
			parts = append(parts, fmt.Sprintf("%s ×%d (%s)", r.Resource, r.Count, r.Profile))
		}
		if m.Replicas > 1 {
			parts = append(parts, fmt.Sprintf("%d replicas per MIG device", m.Replicas))
		}
		return m.Mode + ": " + strings.Join(parts, ", ")
	case ModePartitionable:
		n := 0
		for _, g := range m.Partitions {
			n += len(g.Partitions)
		}
		return fmt.Sprintf("%s: %s, %s", m.Mode, plural(len(m.Partitions), "GPU"), plural(n, "partition"))
	case ModeConsumable:
		names := map[string]bool{}
		for _, d := range m.Consumable {
			for c := range d.Capacity {
				names[c] = true
			}
		}
		by := "capacity"
		if len(names) > 0 {
			by += " (" + strings.Join(slices.Sorted(maps.Keys(names)), ", ") + ")"
		}
		return fmt.Sprintf("%s: %s shared by %s", m.Mode, plural(len(m.Consumable), "GPU"), by)
	}
	return m.Mode
}

// DiscoverSharingModes reads, per node and allocation path, how the node shares its GPUs: on the
// device-plugin path from its allocatable resources (nvidia.com/gpu against GFD's nvidia.com/gpu.count,
// nvidia.com/mig-* resources) and GFD's product label, which GFD derives from the devices themselves; on
// the DRA path from draDriver's devices (comma-separated drivers; "" reads no DRA path): their type,
// profile and parentUUID attributes and the shared counters they consume. The sharing labels
// (nvidia.com/gpu.sharing-strategy, .replicas, nvidia.com/mig.strategy) are the configuration's claim:
// they name what the evidence cannot tell apart (time-slicing from MPS) and are otherwise checked against
// it, and where they disagree the evidence wins and Conflict says so. Sorted by node, then path.
func DiscoverSharingModes(nodes []corev1.Node, published []resourcev1.ResourceSlice, draDriver string) []NodeSharingMode {
	var out []NodeSharingMode
	dra := draByNode(published, draDriver)
	for _, n := range nodes {
		pool := poolOf(n.Labels)
		if m, ok := devicePluginMode(n); ok {
			m.Pool = pool
			out = append(out, m)
		}
		if gpus, ok := dra[n.Name]; ok {
			m := draMode(n.Name, gpus)
			m.Pool = pool
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b NodeSharingMode) int {
		return strings.Compare(a.Node+"\x00"+a.Path, b.Node+"\x00"+b.Path)
	})
	return out
}

// plural is "1 GPU" or "n GPUs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// poolOf is the node's pool label as "<label>=<value>", "" when it carries none of PoolLabels.
func poolOf(labels map[string]string) string {
	for _, l := range PoolLabels {
		if v := labels[l]; v != "" {
			return l + "=" + v
		}
	}
	return ""
}

// labelledMode is the mode the node's GFD labels claim, "" when they claim none.
func labelledMode(labels map[string]string) (mode string, replicas int) {
	switch labels[LabelMIGStrategy] {
	case "single":
		return ModeMIGSingle, 0
	case "mixed":
		return ModeMIGMixed, 0
	}
	s := NodeSharingOf(labels)
	switch {
	case s.Shared() && s.Strategy == ModeMPS:
		return ModeMPS, s.Replicas
	case s.Shared():
		return ModeTimeSlicing, s.Replicas
	case labels[LabelSharingStrategy] != "" || labels[LabelMIGStrategy] == sharingNone:
		return ModeExclusive, 0
	}
	return "", 0
}

// memoryOfProfile reads a MIG profile's memory from its name ("3g.40gb" → 40 GiB) when no label says it:
// NVIDIA's names round the memory to whole GB, so this is an approximation the label replaces.
var profileMemory = regexp.MustCompile(`^\d+g\.(\d+)gb`)

func memoryOfProfile(profile string) int64 {
	m := profileMemory.FindStringSubmatch(profile)
	if m == nil {
		return 0
	}
	gb, _ := strconv.ParseInt(m[1], 10, 64)
	return gb * 1024
}

// labelInt reads an integer label, ok false when absent or not a number.
func labelInt(labels map[string]string, key string) (int64, bool) {
	v, err := strconv.ParseInt(labels[key], 10, 64)
	return v, err == nil
}

// devicePluginMode reads the device-plugin path of one node; ok is false when the node advertises no
// GPU resource and carries no GFD sharing label. Every count is read from the resource that carries the
// devices, whatever its name: NVIDIA's plugin renames a shared resource (renameByDefault: nvidia.com/gpu.shared,
// nvidia.com/mig-1g.10gb.shared) and GFD keeps labelling it under the plain name (nvidia.com/gpu.count is
// the physical GPUs, nvidia.com/mig-<profile>.count the physical MIG devices), so replicas are the
// advertised devices over those counts.
func devicePluginMode(n corev1.Node) (NodeSharingMode, bool) {
	m := NodeSharingMode{Node: n.Name, Path: config.PathDevicePlugin}
	labelled, labelReplicas := labelledMode(n.Labels)
	m.Labelled = labelled
	whole, gpus := wholeGPUResource(n)
	m.Resource = string(whole)
	// The sharing labels' replicas as written: labelledMode reports none for a MIG node, whose replicas
	// are its MIG devices' (time-sliced MIG).
	slicedReplicas := 0
	if s := NodeSharingOf(n.Labels); s.Shared() {
		slicedReplicas = s.Replicas
	}
	migResources := migResourcesOf(n, slicedReplicas, &m)
	if gpus <= 0 && len(migResources) == 0 && labelled == "" {
		return m, false
	}
	if labelled != "" {
		m.Evidence = append(m.Evidence, labelEvidence(n.Labels)...)
	}
	// NVIDIA's plugin may also time-slice MIG devices: then the sharing labels describe the MIG devices'
	// replicas, and only the MIG strategy label claims the partitioning.
	migLabelled := map[string]bool{"single": true, "mixed": true}[n.Labels[LabelMIGStrategy]]
	count, hasCount := labelInt(n.Labels, LabelGPUCount)
	product := n.Labels[LabelGPUProduct]
	_, singleProfile, singleByProduct := strings.Cut(product, migProductInfix)
	// GFD appends -SHARED to the product of a resource it shares without renaming it, MIG profile included.
	singleProfile = strings.TrimSuffix(singleProfile, SharedProductSuffix)
	var conflicts []string

	switch {
	case len(migResources) > 0:
		// Per-profile MIG resources exist only under the mixed strategy: nvidia.com/gpu then carries the
		// GPUs left whole, which GFD counts in nvidia.com/gpu.count.
		m.Mode, m.MIG, m.WholeGPUs = ModeMIGMixed, migResources, gpus
		m.Evidence = append(m.Evidence, fmt.Sprintf("allocatable %s=%d (whole GPUs)", whole, gpus))
		if hasCount && gpus > count {
			if _, renamed := strings.CutSuffix(string(whole), SharedResourceSuffix); renamed || slicedReplicas > 1 {
				// Whole GPUs time-sliced beside the MIG devices: replicas, not extra GPUs.
				m.WholeReplicas = ceilDiv(gpus, count)
				m.Evidence = append(m.Evidence, fmt.Sprintf("%d whole-GPU devices for %s=%d: %d per GPU", gpus, LabelGPUCount, count, m.WholeReplicas))
			} else {
				conflicts = append(conflicts, fmt.Sprintf("%s advertises %d devices where GFD counts %d whole GPUs (%s=%d): GPUs split into MIG devices may also be advertised whole",
					whole, gpus, count, LabelGPUCount, count))
			}
		}
		for _, r := range migResources {
			m.Replicas = max(m.Replicas, r.Replicas)
		}
	case singleByProduct && gpus > 0:
		// Under the single strategy nvidia.com/gpu carries MIG devices, GFD counts them in nvidia.com/gpu.count
		// and names the product after their profile.
		mem, hasMem := labelInt(n.Labels, LabelGPUMemory)
		if !hasMem {
			mem = memoryOfProfile(singleProfile)
		}
		r := MIGResource{Resource: string(whole), Profile: singleProfile, Count: gpus, MemoryMiB: mem}
		m.Evidence = append(m.Evidence, fmt.Sprintf("label %s=%s (GFD names the MIG profile it found)", LabelGPUProduct, product),
			fmt.Sprintf("allocatable %s=%d", whole, gpus))
		r.Replicas = replicasOf(gpus, count, hasCount, slicedReplicas, &m.Evidence, "MIG device")
		m.Mode, m.Replicas, m.MIG = ModeMIGSingle, r.Replicas, []MIGResource{r}
	case gpus <= 0:
		// Nothing advertised on any GPU resource: there is no evidence to weigh the labels against (a
		// plugin restarting, every GPU unhealthy), so the labels' mode stands and nothing conflicts.
		m.Mode, m.Replicas = cmp.Or(labelled, ModeExclusive), labelReplicas
		m.Evidence = append(m.Evidence, fmt.Sprintf("allocatable %s=0: no devices to read the mode from, the labels' mode stands", whole))
		return m, true
	default:
		m.Mode = ModeExclusive
		m.Evidence = append(m.Evidence, fmt.Sprintf("allocatable %s=%d", whole, gpus))
		if r := replicasOf(gpus, count, hasCount, labelReplicas, &m.Evidence, "GPU"); r > 1 {
			m.Mode, m.Replicas = ModeTimeSlicing, r
			if labelled == ModeMPS {
				m.Mode = ModeMPS
			}
		}
	}

	if (m.Mode == ModeMIGSingle || m.Mode == ModeMIGMixed) && !migLabelled && labelReplicas > 1 {
		// Sharing labels without a MIG strategy label on a MIG node: they speak of the MIG devices.
		labelled, m.Labelled = "", ""
	}
	// The labels' claim against the evidence; absent labels claim nothing (a cluster without GFD).
	switch {
	case labelled == "":
	case labelled != m.Mode:
		conflicts = append(conflicts, fmt.Sprintf("labels say %s, the evidence shows %s", describeLabelled(labelled, labelReplicas), m.Describe()))
	case (m.Mode == ModeTimeSlicing || m.Mode == ModeMPS) && labelReplicas != m.Replicas:
		conflicts = append(conflicts, fmt.Sprintf("labels say %d replicas per GPU, %d are advertised per GPU", labelReplicas, m.Replicas))
	}
	if len(conflicts) > 0 {
		m.Conflict = strings.Join(conflicts, "; ") + " (the evidence wins)"
	}
	return m, true
}

// replicasOf is how many devices one physical unit (a GPU, a MIG device) is advertised as: the advertised
// devices over GFD's count of physical units, rounded up (unhealthy units only lower the advertised
// devices, so a sliced node with a failed GPU stays sliced); without a count label nothing tells replicas
// from units, and the sharing labels' replicas are all there is. 0 when each unit is advertised once. It
// says what it read in evidence.
func replicasOf(advertised, physical int64, counted bool, labelReplicas int, evidence *[]string, unit string) int {
	switch {
	case counted && physical > 0:
		r := ceilDiv(advertised, physical)
		if r < 2 {
			return 0
		}
		*evidence = append(*evidence, fmt.Sprintf("%d devices for %s=%d: %d per %s", advertised, LabelGPUCount, physical, r, unit))
		return r
	case labelReplicas > 1:
		*evidence = append(*evidence, fmt.Sprintf("no %s label: replicas taken from the labels", LabelGPUCount))
		return labelReplicas
	}
	return 0
}

func ceilDiv(a, b int64) int { return int((a + b - 1) / b) }

// wholeGPUResource is the resource that carries the node's whole GPUs (MIG devices under the single
// strategy) and how many it advertises: nvidia.com/gpu, else its renamed shared form nvidia.com/gpu.shared,
// else another vendor's GPU resource (the first by name); nvidia.com/gpu with 0 when none has devices.
func wholeGPUResource(n corev1.Node) (corev1.ResourceName, int64) {
	candidates := []corev1.ResourceName{PreferredGPUResource, PreferredGPUResource + SharedResourceSuffix}
	for _, name := range slices.Sorted(maps.Keys(n.Status.Allocatable)) {
		if isExtendedGPUResource(name) && !strings.HasPrefix(string(name), migResourcePrefix) && !slices.Contains(candidates, name) {
			candidates = append(candidates, name)
		}
	}
	for _, name := range candidates {
		if q := n.Status.Allocatable[name]; q.Value() > 0 {
			return name, q.Value()
		}
	}
	return PreferredGPUResource, 0
}

// migResourcesOf reads the node's per-profile MIG resources (nvidia.com/mig-<profile>, or renamed
// nvidia.com/mig-<profile>.shared), each with its profile, memory and replicas (advertised over GFD's
// nvidia.com/mig-<profile>.count, else its .replicas label, else the node's sharing labels' replicas), and
// records them in m's evidence.
func migResourcesOf(n corev1.Node, slicedReplicas int, m *NodeSharingMode) []MIGResource {
	var out []MIGResource
	for _, name := range slices.Sorted(maps.Keys(n.Status.Allocatable)) {
		plain := strings.TrimSuffix(string(name), SharedResourceSuffix)
		profile, ok := strings.CutPrefix(plain, migResourcePrefix)
		q := n.Status.Allocatable[name]
		if !ok || q.Value() <= 0 {
			continue
		}
		mem, hasMem := labelInt(n.Labels, plain+".memory")
		if !hasMem {
			mem = memoryOfProfile(profile)
		}
		r := MIGResource{Resource: string(name), Profile: profile, Count: q.Value(), MemoryMiB: mem}
		m.Evidence = append(m.Evidence, fmt.Sprintf("allocatable %s=%d", name, q.Value()))
		physical, counted := labelInt(n.Labels, plain+".count")
		labelReplicas, hasReplicas := labelInt(n.Labels, plain+".replicas")
		switch {
		case counted && physical > 0:
			if r.Replicas = ceilDiv(r.Count, physical); r.Replicas > 1 {
				m.Evidence = append(m.Evidence, fmt.Sprintf("%d devices for %s.count=%d: %d per MIG device", r.Count, plain, physical, r.Replicas))
			}
		case labelReplicas > 1:
			r.Replicas = int(labelReplicas)
			m.Evidence = append(m.Evidence, fmt.Sprintf("no %s.count label: replicas taken from %s.replicas", plain, plain))
		case !hasReplicas && slicedReplicas > 1:
			r.Replicas = slicedReplicas
			m.Evidence = append(m.Evidence, fmt.Sprintf("no %s.count or .replicas label: replicas taken from %s", plain, LabelSharingReplicas))
		}
		if r.Replicas < 2 {
			r.Replicas = 0
		}
		out = append(out, r)
	}
	return out
}

func describeLabelled(mode string, replicas int) string {
	if replicas > 1 {
		return fmt.Sprintf("%s, %d replicas per GPU", mode, replicas)
	}
	return mode
}

// labelEvidence lists the sharing labels the node carries, for Evidence.
func labelEvidence(labels map[string]string) []string {
	var out []string
	for _, k := range []string{LabelMIGStrategy, LabelSharingStrategy, LabelSharingReplicas, LabelGPUCount} {
		if v, ok := labels[k]; ok {
			out = append(out, fmt.Sprintf("label %s=%s", k, v))
		}
	}
	return out
}

// draDevice is one device of the DRA driver with where it was read.
type draDevice struct {
	slice  string
	device resourcev1.Device
}

// draNode is what the driver publishes for one node: its devices and the counter sets of its pools.
type draNode struct {
	devices  []draDevice
	counters map[string]map[string]int64 // counter set → counter → capacity
	sliceOf  map[string]string           // counter set → the ResourceSlice that defines it
}

// draByNode groups the devices and shared counters of the drivers' latest pool generations by node. A
// pool's counters may sit in a ResourceSlice of their own (Kubernetes 1.34+ forbids devices and
// SharedCounters in one slice), so counters and devices are joined by pool, and the pool's node is that of
// any of its slices.
func draByNode(all []resourcev1.ResourceSlice, drivers string) map[string]*draNode {
	out := map[string]*draNode{}
	if drivers == "" {
		return out
	}
	want := strings.Split(drivers, ",")
	type poolKey struct{ driver, pool string }
	latest := map[poolKey]int64{}
	for _, s := range all {
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		if g, ok := latest[k]; !ok || s.Spec.Pool.Generation > g {
			latest[k] = s.Spec.Pool.Generation
		}
	}
	poolNode := map[poolKey]string{}
	for _, s := range all {
		if s.Spec.NodeName != nil && *s.Spec.NodeName != "" {
			poolNode[poolKey{s.Spec.Driver, s.Spec.Pool.Name}] = *s.Spec.NodeName
		}
	}
	node := func(name string) *draNode {
		if out[name] == nil {
			out[name] = &draNode{counters: map[string]map[string]int64{}, sliceOf: map[string]string{}}
		}
		return out[name]
	}
	for _, s := range all {
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		if !slices.Contains(want, s.Spec.Driver) || s.Spec.Pool.Generation != latest[k] {
			continue
		}
		for _, cs := range s.Spec.SharedCounters {
			if n := poolNode[k]; n != "" {
				dn := node(n)
				dn.counters[cs.Name] = counterValues(cs.Counters)
				dn.sliceOf[cs.Name] = s.Name
			}
		}
		for _, d := range s.Spec.Devices {
			n := poolNode[k]
			if d.NodeName != nil {
				n = *d.NodeName
			}
			if n != "" {
				dn := node(n)
				dn.devices = append(dn.devices, draDevice{slice: s.Name, device: d})
			}
		}
	}
	for n, dn := range out {
		if len(dn.devices) == 0 {
			delete(out, n)
		}
	}
	return out
}

func counterValues(cs map[string]resourcev1.Counter) map[string]int64 {
	out := make(map[string]int64, len(cs))
	for name, c := range cs {
		out[name] = c.Value.Value()
	}
	return out
}

// draMode reads the DRA path of one node: partitionable when its devices consume shared counters or
// describe themselves as MIG partitions, shared (dra-shared) when its GPUs allow multiple allocations,
// exclusive otherwise. Partitions that consume no counter are a
// conflict, since nothing then stops the scheduler from handing out a GPU and its partitions together.
func draMode(node string, dn *draNode) NodeSharingMode {
	m := NodeSharingMode{Node: node, Path: config.PathDRA, Mode: ModeExclusive}
	gpus := map[string]*PartitionableGPU{} // counter set, else parent UUID → GPU
	var order []string
	gpu := func(key string) *PartitionableGPU {
		if gpus[key] == nil {
			gpus[key] = &PartitionableGPU{}
			order = append(order, key)
		}
		return gpus[key]
	}
	consumersPerSet := map[string]int{}
	setSlice := map[string]string{}
	var noCounters, unknownSet []string
	wholeByUUID := map[string]string{}
	for _, dd := range dn.devices {
		d := dd.device
		typ, profile := attr(d, "type"), attr(d, "profile")
		isPartition := typ == draTypeMIG || profile != ""
		set := ""
		if len(d.ConsumesCounters) > 0 {
			set = d.ConsumesCounters[0].CounterSet
			consumersPerSet[set]++
			setSlice[set] = dd.slice
			if _, ok := dn.counters[set]; !ok {
				unknownSet = append(unknownSet, fmt.Sprintf("%s (counter set %s)", d.Name, set))
			}
		}
		if d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations && !isPartition {
			m.Consumable = append(m.Consumable, ConsumableDevice{Name: d.Name, UUID: attr(d, "uuid"), Slice: dd.slice, Capacity: consumableCapacities(d)})
		}
		switch {
		case isPartition:
			key := set
			if key == "" {
				key = "parent " + attr(d, "parentUUID")
				noCounters = append(noCounters, d.Name)
			}
			g := gpu(key)
			g.CounterSet = set
			if g.UUID == "" {
				g.UUID = attr(d, "parentUUID")
			}
			p := PartitionDevice{Name: d.Name, Profile: profile, UUID: attr(d, "uuid"), Consumes: consumption(d.ConsumesCounters)}
			p.MemoryMiB = capacityMiB(d, "memory")
			g.Partitions = append(g.Partitions, p)
		case set != "":
			g := gpu(set)
			g.CounterSet, g.Whole, g.UUID = set, d.Name, attr(d, "uuid")
		case typ == draTypeGPU || typ == "":
			if u := attr(d, "uuid"); u != "" {
				wholeByUUID[u] = d.Name
			}
		}
	}
	// Partitions that consume no counter belong with the whole GPU that does, when there is one.
	for _, key := range order {
		g := gpus[key]
		if g.CounterSet != "" || g.UUID == "" {
			continue
		}
		for _, other := range order {
			if o := gpus[other]; other != key && o.CounterSet != "" && o.UUID == g.UUID {
				o.Partitions = append(o.Partitions, g.Partitions...)
				g.Partitions = nil
				break
			}
		}
	}
	// A whole GPU consuming no counter still is its partitions' parent: join them by UUID.
	for _, key := range order {
		g := gpus[key]
		if g.Whole == "" && g.UUID != "" {
			g.Whole = wholeByUUID[g.UUID]
		}
		if g.CounterSet != "" {
			g.Counters = dn.counters[g.CounterSet]
		}
		if len(g.Partitions) > 0 || g.CounterSet != "" {
			m.Partitions = append(m.Partitions, *g)
		}
	}
	for _, set := range slices.Sorted(maps.Keys(consumersPerSet)) {
		where := setSlice[set]
		if s := dn.sliceOf[set]; s != "" && s != where {
			where += ", counters in ResourceSlice " + s
		}
		m.Evidence = append(m.Evidence, fmt.Sprintf("ResourceSlice %s: %d devices consume counter set %s", where, consumersPerSet[set], set))
	}
	for _, c := range m.Consumable {
		caps := make([]string, 0, len(c.Capacity))
		for _, name := range slices.Sorted(maps.Keys(c.Capacity)) {
			caps = append(caps, name+" "+c.Capacity[name].Describe())
		}
		m.Evidence = append(m.Evidence, fmt.Sprintf("ResourceSlice %s: device %s allows multiple allocations, capacity %s", c.Slice, c.Name, cmp.Or(strings.Join(caps, "; "), "none")))
	}
	switch {
	case len(m.Partitions) > 0:
		m.Mode = ModePartitionable
	case len(m.Consumable) > 0:
		m.Mode = ModeConsumable
	default:
		m.Evidence = append(m.Evidence, fmt.Sprintf("%d devices, none consumes a shared counter or is a partition", len(dn.devices)))
	}
	var conflicts []string
	if len(noCounters) > 0 {
		conflicts = append(conflicts, fmt.Sprintf("%d partition devices consume no shared counter (%s): nothing stops the scheduler from handing out a GPU and its partitions together",
			len(noCounters), strings.Join(firstN(noCounters, 3), ", ")))
		m.Evidence = append(m.Evidence, fmt.Sprintf("%d devices of type mig without ConsumesCounters", len(noCounters)))
	}
	if len(unknownSet) > 0 {
		conflicts = append(conflicts, fmt.Sprintf("devices consume counter sets no ResourceSlice of their pool defines: %s", strings.Join(firstN(unknownSet, 3), ", ")))
	}
	m.Conflict = strings.Join(conflicts, "; ")
	return m
}

// capacityMiB is a device's capacity name (qualified by any domain) in MiB, 0 when it has none.
func capacityMiB(d resourcev1.Device, name string) int64 {
	for k, c := range d.Capacity {
		if string(k) == name || strings.HasSuffix(string(k), "/"+name) {
			return c.Value.Value() / (1 << 20)
		}
	}
	return 0
}

func consumption(cs []resourcev1.DeviceCounterConsumption) map[string]int64 {
	if len(cs) == 0 {
		return nil
	}
	out := map[string]int64{}
	for _, c := range cs {
		for name, v := range c.Counters {
			out[name] += v.Value.Value()
		}
	}
	return out
}

// summariseSharing is the cluster-wide Sharing of the per-node modes: the distinct shared modes ("+"
// joined; exclusive when none), the largest replica count, and the MIG resources other than nvidia.com/gpu.
func summariseSharing(modes []NodeSharingMode) Sharing {
	sh := Sharing{}
	seen, mig := map[string]bool{}, map[string]bool{}
	for _, m := range modes {
		if m.Shared() {
			seen[m.Mode] = true
		}
		sh.Replicas = max(sh.Replicas, m.Replicas)
		for _, r := range m.MIG {
			if strings.HasPrefix(r.Resource, migResourcePrefix) {
				mig[r.Resource] = true
			}
		}
	}
	if len(mig) > 0 {
		sh.MIGResources = slices.Sorted(maps.Keys(mig))
	}
	sh.Mode = ModeExclusive
	if len(seen) > 0 {
		sh.Mode = strings.Join(slices.Sorted(maps.Keys(seen)), "+")
	}
	return sh
}
