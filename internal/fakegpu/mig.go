package fakegpu

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Sharing modes the fake agent serves (its --sharing flag). Each is what a real NVIDIA node in that
// mode looks like to Kubernetes and to a container: the resources and IDs the device plugin advertises,
// the GPU Feature Discovery labels, what the container's nvidia-smi lists, and, for the MIG modes, the
// partitions the DRA half publishes through shared counters.
const (
	// SharingNone: whole exclusive GPUs (the default).
	SharingNone = "none"
	// SharingTimeSlicing: each GPU advertised --replicas times as "<uuid>::<n>" (no isolation).
	SharingTimeSlicing = "time-slicing"
	// SharingMPS: replicas like time-slicing, each container given the pipe directory of the node's MPS
	// control daemon, whose default limits nvidia-cuda-mps-control reads back (mps.go).
	SharingMPS = "mps"
	// SharingMIGSingle: every device-plugin GPU split into the same MIG profile (SingleLayout), all
	// advertised as nvidia.com/gpu with MIG UUIDs (GFD's mig.strategy=single).
	SharingMIGSingle = "mig-single"
	// SharingMIGMixed: some GPUs whole on nvidia.com/gpu, the others split into MIG devices advertised
	// per profile as nvidia.com/mig-<profile> (GFD's mig.strategy=mixed; MixedLayout).
	SharingMIGMixed = "mig-mixed"
)

// SharingModes are the modes in the order the flag's help lists them.
var SharingModes = []string{SharingNone, SharingTimeSlicing, SharingMPS, SharingMIGSingle, SharingMIGMixed}

// ModeOf is the sharing mode in force for a --sharing value and a replica count: the value itself, or when
// it is empty the mode the replicas imply (time-slicing above 1, else none), so that --replicas 2 alone
// keeps meaning time-slicing as it did before there were other modes.
func ModeOf(sharing string, replicas int) string {
	switch {
	case sharing != "":
		return sharing
	case replicas > 1:
		return SharingTimeSlicing
	}
	return SharingNone
}

// IsMIG reports whether mode partitions GPUs into MIG devices.
func IsMIG(mode string) bool { return mode == SharingMIGSingle || mode == SharingMIGMixed }

// MIGProfile is one GPU instance profile of a MIG-capable GPU: its name ("3g.40gb"), how many of the
// GPU's compute slices and memory it takes, and where on the GPU it may be placed. The values are
// NVIDIA's for the H100 80GB, as go-nvml's mock of a DGX H100 (pkg/nvml/mock/dgxh100) serves them
// (GetGpuInstanceProfileInfo and GetGpuInstancePossiblePlacements); mig_nvml_test.go, built with cgo,
// checks this table against that mock.
type MIGProfile struct {
	// Name is the profile as NVIDIA names it and as resource names and labels carry it.
	Name string
	// Slices is the number of compute slices (the "Ng" of the name) and the size of a placement.
	Slices int
	// MemoryMiB is the profile's framebuffer (go-nvml's MemorySizeMB).
	MemoryMiB int
	// Multiprocessors is the number of SMs an instance gets.
	Multiprocessors int
	// Starts are the possible placement starts, in slice units; a placement covers [start, start+Slices).
	Starts []int
}

// MIGSlices is the number of slices of the H100 80GB a placement is counted in (0..6 for the 1g
// profiles, 7g covers all): go-nvml's mock places the 7g.80gb profile at {0, 7}.
const MIGSlices = 7

// H100Profiles are the MIG profiles of the fake GPUs (the fake's product is the H100 80GB HBM3).
var H100Profiles = []MIGProfile{
	{Name: "1g.10gb", Slices: 1, MemoryMiB: 10240, Multiprocessors: 16, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
	{Name: "2g.20gb", Slices: 2, MemoryMiB: 20480, Multiprocessors: 32, Starts: []int{0, 2, 4}},
	{Name: "3g.40gb", Slices: 3, MemoryMiB: 40960, Multiprocessors: 48, Starts: []int{0, 4}},
	{Name: "4g.40gb", Slices: 4, MemoryMiB: 40960, Multiprocessors: 64, Starts: []int{0}},
	{Name: "7g.80gb", Slices: 7, MemoryMiB: 81920, Multiprocessors: 112, Starts: []int{0}},
}

// ProfileByName returns the H100 profile called name.
func ProfileByName(name string) (MIGProfile, bool) {
	for _, p := range H100Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// Placement is one MIG device on a GPU: a profile at a start slice.
type Placement struct {
	Profile string `json:"profile"`
	Start   int    `json:"start"`
}

// Slices returns the slice range [start, end) the placement covers.
func (p Placement) Slices() (start, end int) {
	prof, _ := ProfileByName(p.Profile)
	return p.Start, p.Start + prof.Slices
}

// Overlaps reports whether two placements on one GPU share a slice.
func (p Placement) Overlaps(q Placement) bool {
	a0, a1 := p.Slices()
	b0, b1 := q.Slices()
	return a0 < b1 && b0 < a1
}

// SingleLayout is how mig-single splits every device-plugin GPU: two 3g.40gb devices (8 MIG devices on
// a 4-GPU node, so a spec that fills a node starts as many pods as the whole-GPU specs do twice over).
var SingleLayout = []Placement{{Profile: "3g.40gb", Start: 0}, {Profile: "3g.40gb", Start: 4}}

// MixedLayouts is how mig-mixed splits a node's device-plugin GPUs, by device-plugin index: GPUs past
// the list stay whole (nvidia.com/gpu). GPU 0 and 1 are whole; GPU 2 holds two 3g.40gb; GPU 3 holds
// three 2g.20gb and one 1g.10gb, a valid H100 geometry with three profiles in one GPU.
var MixedLayouts = map[int][]Placement{
	2: {{Profile: "3g.40gb", Start: 0}, {Profile: "3g.40gb", Start: 4}},
	3: {{Profile: "2g.20gb", Start: 0}, {Profile: "2g.20gb", Start: 2}, {Profile: "2g.20gb", Start: 4}, {Profile: "1g.10gb", Start: 6}},
}

// LayoutFor returns the MIG placements of device-plugin GPU index under mode (nil: a whole GPU).
func LayoutFor(mode string, index int) []Placement {
	switch mode {
	case SharingMIGSingle:
		return SingleLayout
	case SharingMIGMixed:
		return MixedLayouts[index]
	}
	return nil
}

// MIGUUID is the stable UUID of the MIG device at placement p of the GPU whose UUID is parent, in the
// "MIG-<uuid>" shape drivers since R470 print: a hash of the parent and the placement, so it survives
// agent restarts and is distinct across GPUs and nodes.
func MIGUUID(parent string, p Placement) string {
	return NameUUID("MIG-", "gpuconform.io/fake-mig", parent, p.Profile, strconv.Itoa(p.Start))
}

// NameUUID is prefix and a name-based (version 5 style) RFC 4122 UUID hashed from namespace and parts:
// stable across restarts of the agent, distinct for distinct parts. NVIDIA prints GPUs as "GPU-<uuid>"
// and MIG devices as "MIG-<uuid>".
func NameUUID(prefix, namespace string, parts ...string) string {
	sum := sha256.Sum256([]byte(namespace + "\x00" + strings.Join(parts, "\x00")))
	b := sum[:16]
	b[6] = (b[6] & 0x0f) | 0x50
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b)
	return prefix + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// SharedResourceSuffix is what NVIDIA's device plugin appends to a time-sliced or MPS resource's name
// under renameByDefault: nvidia.com/gpu.shared.
const SharedResourceSuffix = ".shared"

// MIGResource is the extended resource of profile under the mixed strategy: nvidia.com/mig-3g.40gb.
func MIGResource(profile string) string { return "nvidia.com/mig-" + profile }

// ProfileOfResource is the profile a mixed-strategy resource name carries ("" when it is not one).
func ProfileOfResource(resource string) string {
	p, ok := strings.CutPrefix(resource, "nvidia.com/mig-")
	if !ok {
		return ""
	}
	return p
}

// MIGProduct is GFD's product label of a MIG device: "<product>-MIG-<profile>".
func MIGProduct(product, profile string) string { return fmt.Sprintf("%s-MIG-%s", product, profile) }

// PlacementsOf returns every possible placement of the H100 profiles named, in the order H100Profiles
// and their Starts list them; no names means every profile.
func PlacementsOf(profiles ...string) []Placement {
	var out []Placement
	for _, prof := range H100Profiles {
		if len(profiles) > 0 && !slices.Contains(profiles, prof.Name) {
			continue
		}
		for _, s := range prof.Starts {
			out = append(out, Placement{Profile: prof.Name, Start: s})
		}
	}
	return out
}

// PartitionPlacements are the placements a partitionable (DRA) GPU offers in the MIG modes: every
// possible placement of every H100 profile but the 7g one, which is the whole GPU again.
func PartitionPlacements() []Placement {
	var names []string
	for _, prof := range H100Profiles {
		if prof.Slices < MIGSlices {
			names = append(names, prof.Name)
		}
	}
	return PlacementsOf(names...)
}

// PlacementIndex is p's position among every possible placement of the H100 (PlacementsOf()), or -1
// when p is not one. It serves as the fake's GPU instance ID: distinct per placement, stable, and
// below the 15 GPU instances a GPU's capability minors are laid out for (MIGCapMinor).
func PlacementIndex(p Placement) int {
	return slices.Index(PlacementsOf(), p)
}
