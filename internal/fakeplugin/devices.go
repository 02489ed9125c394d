package fakeplugin

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// replicaSeparator joins a physical GPU UUID and a replica number in an advertised ID, the same shape
// NVIDIA's device plugin uses for time-slicing ("GPU-…::0"), so tooling that parses real IDs parses ours.
const replicaSeparator = "::"

// DeviceUUID returns the stable NVIDIA-style UUID ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx") of the
// fake GPU at index on node. It is a hash of both, so restarts of the plugin keep a node's IDs (the
// kubelet's checkpoint of allocated devices stays valid) while two nodes never share an ID (a test that
// compares IDs across nodes cannot be fooled by a collision).
func DeviceUUID(node string, index int) string {
	return fakegpu.NameUUID("GPU-", "gpuconform.io/fake-gpu", node, strconv.Itoa(index))
}

// ReplicaID returns the advertised ID of one time-slicing replica of a physical GPU.
func ReplicaID(uuid string, replica int) string {
	return uuid + replicaSeparator + strconv.Itoa(replica)
}

// deviceTable is the immutable inventory of one node: physical UUIDs, the MIG devices of the MIG modes,
// and the IDs the device plugin advertises for them per resource. The physical index of a GPU is its
// device minor; the first dp GPUs are the device plugin's, the rest are served on the DRA path.
type deviceTable struct {
	node     string
	mode     string         // sharing mode (fakegpu.Sharing*)
	dp       int            // GPUs served by the device plugin: indexes 0..dp-1
	uuids    []string       // physical GPUs of both paths, by index
	replicas int            // 1 = IDs are the UUIDs themselves
	ids      []string       // the configured resource's advertised IDs (resources[0].ids)
	byID     map[string]int // advertised whole-GPU or replica ID, or physical UUID → physical index
	replica  map[string]int // advertised ID → replica number (0 without sharing)

	// resources are the device-plugin resources served, the configured one first; in mig-mixed one more
	// per MIG profile present on the node, as NVIDIA's plugin serves them.
	resources []*resourceDevices
	// migs are the MIG devices of the device-plugin GPUs (mig-single and mig-mixed), by GPU and placement.
	migs    []migDevice
	migByID map[string]int // MIG UUID → index in migs
}

// resourceDevices is one extended resource the device plugin serves and the IDs it advertises.
type resourceDevices struct {
	name string
	// mig: the IDs are MIG UUIDs (mig-single's nvidia.com/gpu, mig-mixed's nvidia.com/mig-<profile>).
	mig bool
	// profile is the MIG profile of a mig resource's devices.
	profile string
	ids     []string
}

// migDevice is one MIG device the device plugin advertises: its UUID, its GPU and where it sits there.
type migDevice struct {
	uuid      string
	parent    int // physical index; past the inventory for a phantom
	placement fakegpu.Placement
}

// newModeTable builds the table of a node in sharing mode mode, whose configured resource is resource.
func newModeTable(node, resource, mode string, devices, draDevices, replicas int) *deviceTable {
	t := &deviceTable{node: node, mode: mode, dp: devices, replicas: replicas,
		byID: map[string]int{}, replica: map[string]int{}, migByID: map[string]int{}}
	primary := &resourceDevices{name: resource, mig: mode == fakegpu.SharingMIGSingle}
	if primary.mig {
		primary.profile = fakegpu.SingleLayout[0].Profile
	}
	t.resources = []*resourceDevices{primary}
	perProfile := map[string]*resourceDevices{}
	for i := range devices + draDevices {
		u := DeviceUUID(node, i)
		t.uuids = append(t.uuids, u)
		t.byID[u] = i
		if i >= devices {
			continue // a DRA GPU: the device plugin never advertises it
		}
		if layout := fakegpu.LayoutFor(mode, i); layout != nil {
			for _, pl := range layout {
				m := migDevice{uuid: fakegpu.MIGUUID(u, pl), parent: i, placement: pl}
				t.migByID[m.uuid] = len(t.migs)
				t.migs = append(t.migs, m)
				res := primary
				if mode == fakegpu.SharingMIGMixed {
					if res = perProfile[pl.Profile]; res == nil {
						res = &resourceDevices{name: fakegpu.MIGResource(pl.Profile), mig: true, profile: pl.Profile}
						perProfile[pl.Profile] = res
					}
				}
				res.ids = append(res.ids, m.uuid)
			}
			continue
		}
		if replicas == 1 {
			primary.ids = append(primary.ids, u)
			continue
		}
		// replicas+1: the extra-replica fault advertises one more; it is known here so that Allocate
		// accepts it like the kubelet's other IDs, and advertised only under the fault.
		for r := range replicas + 1 {
			id := ReplicaID(u, r)
			if r < replicas {
				primary.ids = append(primary.ids, id)
			}
			t.byID[id] = i
			t.replica[id] = r
		}
	}
	// The MIG resources in profile order (H100Profiles), so registration and logs are stable.
	for _, prof := range fakegpu.H100Profiles {
		if res := perProfile[prof.Name]; res != nil {
			t.resources = append(t.resources, res)
		}
	}
	t.ids = primary.ids
	return t
}

// resource returns the served resource called name.
func (t *deviceTable) resource(name string) (*resourceDevices, bool) {
	for _, r := range t.resources {
		if r.name == name {
			return r, true
		}
	}
	return nil, false
}

// parentOf is the physical index behind an advertised ID of any resource (ok false for an unknown ID).
func (t *deviceTable) parentOf(id string) (int, bool) {
	if i, ok := t.byID[id]; ok {
		return i, true
	}
	if k, ok := t.migByID[id]; ok {
		return t.migs[k].parent, true
	}
	return 0, false
}

// splitGPUs are the device-plugin GPUs that are split into MIG devices, in index order.
func (t *deviceTable) splitGPUs() []int {
	var out []int
	for _, m := range t.migs {
		if !slices.Contains(out, m.parent) {
			out = append(out, m.parent)
		}
	}
	return out
}

// phantomMIG is the MIG device a GPU past the end of the inventory (index parent, at or past
// len(uuids)) would have at placement: no device node, cap device or CDI device exists for it.
func (t *deviceTable) phantomMIG(parent int, placement fakegpu.Placement) migDevice {
	return migDevice{uuid: fakegpu.MIGUUID(t.uuid(parent), placement), parent: parent, placement: placement}
}

// phantomFor is the ID the over-advertise fault adds to resource res: a GPU past the end of the
// inventory, or for a MIG resource a MIG device of that GPU.
func (t *deviceTable) phantomFor(res *resourceDevices) string {
	if !res.mig {
		return t.phantomID()
	}
	return t.phantomMIG(len(t.uuids), t.firstPlacement(res)).uuid
}

// firstPlacement is the placement of res's first MIG device (where its phantoms sit).
func (t *deviceTable) firstPlacement(res *resourceDevices) fakegpu.Placement {
	if len(res.ids) > 0 {
		return t.migs[t.migByID[res.ids[0]]].placement
	}
	return fakegpu.Placement{Profile: res.profile}
}

// migsOf maps MIG IDs of res to its MIG devices, keeping the order of first appearance and dropping
// duplicates.
func (t *deviceTable) migsOf(res *resourceDevices, ids []string) ([]migDevice, error) {
	seen := map[string]bool{}
	var out []migDevice
	for _, id := range ids {
		k, ok := t.migByID[id]
		if !ok || !slices.Contains(res.ids, id) {
			return nil, fmt.Errorf("device %q is not one of the %d %s devices of node %s", id, len(res.ids), res.name, t.node)
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, t.migs[k])
		}
	}
	return out, nil
}

// wrongMIGs picks, for the wrong-ids fault, as many MIG devices of res as were requested but none of
// them: the next unrequested ones after the last requested, wrapping around, then phantoms (MIG devices
// of GPUs past the inventory), so the result never accidentally looks correct.
func (t *deviceTable) wrongMIGs(res *resourceDevices, requested []migDevice) []migDevice {
	asked := map[string]bool{}
	start := 0
	for _, m := range requested {
		asked[m.uuid] = true
		start = max(start, slices.Index(res.ids, m.uuid)+1)
	}
	var out []migDevice
	for k := 0; k < len(res.ids) && len(out) < len(requested); k++ {
		id := res.ids[(start+k)%len(res.ids)]
		if !asked[id] {
			out = append(out, t.migs[t.migByID[id]])
		}
	}
	for phantom := len(t.uuids); len(out) < len(requested); phantom++ {
		out = append(out, t.phantomMIG(phantom, t.firstPlacement(res)))
	}
	return out
}

// phantomID is the ID the over-advertise fault adds: the UUID a GPU past the end of the inventory would
// have. No device node and no CDI device exist for it.
func (t *deviceTable) phantomID() string { return DeviceUUID(t.node, len(t.uuids)) }

// physical maps advertised IDs to their physical UUIDs, keeping the order of first appearance and
// dropping duplicates: two replicas of one GPU are still one GPU to the container runtime.
func (t *deviceTable) physical(ids []string) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, id := range ids {
		i, ok := t.byID[id]
		if !ok {
			return nil, fmt.Errorf("device %q is not one of the %d devices of node %s", id, len(t.ids), t.node)
		}
		if !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	return out, nil
}

// wrongIndexes picks, for the wrong-ids fault, as many physical GPUs as were requested but none of them,
// from the same path as the first requested one: the next unrequested indexes after the highest requested
// one, wrapping around. When the path has too few unrequested GPUs it makes up phantom ones (indexes past
// the inventory, with no device node), so the result is always disjoint from the request and the fault can
// never accidentally look correct.
func (t *deviceTable) wrongIndexes(requested []int) []int {
	if len(requested) == 0 {
		return nil
	}
	lo, hi := 0, t.dp
	if requested[0] >= t.dp {
		lo, hi = t.dp, len(t.uuids)
	}
	asked := map[int]bool{}
	start := lo
	for _, i := range requested {
		asked[i] = true
		start = max(start, i+1)
	}
	var out []int
	n := hi - lo
	for k := 0; k < n && len(out) < len(requested); k++ {
		i := lo + (start-lo+k)%n
		if !asked[i] {
			out = append(out, i)
		}
	}
	for phantom := len(t.uuids); len(out) < len(requested); phantom++ {
		out = append(out, phantom)
	}
	return out
}

// uuid is the UUID of physical index i, also for phantom indexes past the inventory.
func (t *deviceTable) uuid(i int) string {
	if i >= 0 && i < len(t.uuids) {
		return t.uuids[i]
	}
	return DeviceUUID(t.node, i)
}

// parseUnhealthy turns the annotation value into a set of physical indexes. Entries may be indexes,
// physical UUIDs, replica IDs or MIG UUIDs; a replica or MIG device marks its whole GPU, because the
// fake's health is per physical GPU (a sick GPU is sick for every tenant that time-slices it, and a GPU
// marked sick takes its MIG devices with it). Unknown entries are returned so the caller can log them.
func (t *deviceTable) parseUnhealthy(value string) (map[int]bool, []string) {
	set := map[int]bool{}
	var unknown []string
	for raw := range strings.SplitSeq(value, ",") {
		e := strings.TrimSpace(raw)
		if e == "" {
			continue
		}
		if i, err := strconv.Atoi(e); err == nil {
			if i >= 0 && i < len(t.uuids) {
				set[i] = true
			} else {
				unknown = append(unknown, e)
			}
			continue
		}
		if i, ok := t.parentOf(e); ok {
			set[i] = true
			continue
		}
		unknown = append(unknown, e)
	}
	return set, unknown
}

// order is an advertised ID's place in index order: its GPU's index, or for a MIG device its position
// among the MIG devices (GPU by GPU, placement by placement).
func (t *deviceTable) order(id string) (int, bool) {
	if i, ok := t.byID[id]; ok {
		return i, true
	}
	k, ok := t.migByID[id]
	return k, ok
}

// preferred chooses size devices from available, must-include first, then the rest ordered by replica
// number and then GPU index. For time-slicing that spreads a multi-replica request across distinct GPUs
// before stacking replicas on one, like NVIDIA's "distributed" policy; without sharing it is simply
// index order. The result depends only on the inputs, which keeps scheduling reproducible.
func (t *deviceTable) preferred(available, mustInclude []string, size int) []string {
	chosen := map[string]bool{}
	var out []string
	for _, id := range mustInclude {
		if len(out) < size && !chosen[id] {
			chosen[id] = true
			out = append(out, id)
		}
	}
	rest := make([]string, 0, len(available))
	for _, id := range available {
		if !chosen[id] {
			rest = append(rest, id)
		}
	}
	slices.SortStableFunc(rest, func(a, b string) int {
		ia, oka := t.order(a)
		ib, okb := t.order(b)
		if oka != okb {
			if oka {
				return -1 // known IDs before anything we do not recognise
			}
			return 1
		}
		if !oka {
			return strings.Compare(a, b)
		}
		return cmp.Or(cmp.Compare(t.replica[a], t.replica[b]), cmp.Compare(ia, ib))
	})
	for _, id := range rest {
		if len(out) >= size {
			break
		}
		if !chosen[id] {
			chosen[id] = true
			out = append(out, id)
		}
	}
	return out
}
