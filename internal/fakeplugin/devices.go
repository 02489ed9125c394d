package fakeplugin

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// replicaSeparator joins a physical GPU UUID and a replica number in an advertised ID, the same shape
// NVIDIA's device plugin uses for time-slicing ("GPU-…::0"), so tooling that parses real IDs parses ours.
const replicaSeparator = "::"

// DeviceUUID returns the stable NVIDIA-style UUID ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx") of the
// fake GPU at index on node. It is a hash of both, so restarts of the plugin keep a node's IDs (the
// kubelet's checkpoint of allocated devices stays valid) while two nodes never share an ID (a test that
// compares IDs across nodes cannot be fooled by a collision).
func DeviceUUID(node string, index int) string {
	sum := sha256.Sum256([]byte("gpuconform.io/fake-gpu\x00" + node + "\x00" + strconv.Itoa(index)))
	b := sum[:16]
	// Mark it as a name-based (version 5 style) RFC 4122 UUID so it also parses as one.
	b[6] = (b[6] & 0x0f) | 0x50
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b)
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// ReplicaID returns the advertised ID of one time-slicing replica of a physical GPU.
func ReplicaID(uuid string, replica int) string {
	return uuid + replicaSeparator + strconv.Itoa(replica)
}

// deviceTable is the immutable inventory of one node: physical UUIDs and the IDs the device plugin
// advertises for them. The physical index of a GPU is its device minor; the first dp GPUs are the
// device plugin's, the rest are served on the DRA path.
type deviceTable struct {
	node     string
	dp       int            // GPUs served by the device plugin: indexes 0..dp-1
	uuids    []string       // physical GPUs of both paths, by index
	replicas int            // 1 = IDs are the UUIDs themselves
	ids      []string       // advertised IDs, index-major: gpu0 replicas, then gpu1 replicas, …
	byID     map[string]int // advertised ID or physical UUID → physical index
	replica  map[string]int // advertised ID → replica number (0 without sharing)
}

func newDeviceTable(node string, devices, draDevices, replicas int) *deviceTable {
	t := &deviceTable{node: node, dp: devices, replicas: replicas, byID: map[string]int{}, replica: map[string]int{}}
	for i := range devices + draDevices {
		u := DeviceUUID(node, i)
		t.uuids = append(t.uuids, u)
		t.byID[u] = i
		if i >= devices {
			continue // a DRA GPU: the device plugin never advertises it
		}
		if replicas == 1 {
			t.ids = append(t.ids, u)
			continue
		}
		for r := range replicas {
			id := ReplicaID(u, r)
			t.ids = append(t.ids, id)
			t.byID[id] = i
			t.replica[id] = r
		}
	}
	return t
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
// physical UUIDs or replica IDs; a replica marks its whole GPU, because a sick GPU is sick for every
// tenant that time-slices it. Unknown entries are returned so the caller can log them.
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
		if i, ok := t.byID[e]; ok {
			set[i] = true
			continue
		}
		unknown = append(unknown, e)
	}
	return set, unknown
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
		ia, oka := t.byID[a]
		ib, okb := t.byID[b]
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
