package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/suite"
)

// SharingInput is the input of SharingSpec.
type SharingInput struct {
	Base
	// Modes are how each node shares its GPUs on each path, read by discovery from evidence (labels,
	// resources, ResourceSlices), evidence winning over labels.
	Modes []cluster.NodeSharingMode
}

const sharingName = "sharing"

// Sharing is the shared-and-partitioned-GPU scenario (SharingSpec). It is not required: a cluster of whole
// exclusive GPUs has nothing to share, and the allocation scenario already holds it to one device per pod.
var Sharing = Define(Scenario{Name: sharingName,
	NotOnExtendedDRA: noSharingOnExtendedDRA,
	Title:            "a shared or partitioned GPU keeps what its mode promises, and only that (not required: a cluster of whole exclusive GPUs has nothing to share)",
	Proves: []conformance.Proof{{Requirement: conformance.GPUSharing,
		How: "in each sharing mode discovery finds on a node (time-slicing, MPS, MIG, DRA partitions or shared capacity), a full node's pods " +
			"each get one replica, MIG device or partition, every one mapped to its physical GPU, no GPU has more holders than its mode allows, " +
			"and one more pod waits"}}},
	func(r *suite.Run) SharingInput {
		return SharingInput{Base: baseOf(r), Modes: r.Caps.SharingModes}
	},
	SharingSpec)

// SharingSpec registers, per path, one node of each sharing mode found in the GPU pool and the checks of
// what that mode promises: time-slicing and MPS replicas map to one physical GPU, no GPU has more holders
// than its replicas, MPS containers see their limits; MIG devices are distinct, of their profile, and never
// handed out beside their parent GPU; DRA partitions never exceed their parent's shared counters and never
// run beside the whole parent. Every check it cannot make here is recorded as not exercised, with the evidence.
func SharingSpec(input func() SharingInput) {
	reg := input()
	for _, regPath := range reg.pathsFor(sharingName) {
		pathName := regPath.Name()
		chosen, exclusive := sharingModesOn(reg.Modes, pathName, reg.GPUPool)
		if len(chosen) == 0 {
			why := "discovery read no sharing mode for any node of the GPU pool on this path"
			if len(exclusive) > 0 {
				why = "every node of the GPU pool hands out whole exclusive GPUs on this path, so nothing is shared (" + strings.Join(exclusive, "; ") + ")"
			}
			reg.notExercised(pathName+": sharing", why)
		}
		if len(chosen) == 0 {
			continue
		}
		describePath(input, regPath, "GPU sharing", "share", []any{labels.Of(labels.Scenario(sharingName))}, func(s *Spec[SharingInput]) {
			for _, m := range chosen {
				switch m.Mode {
				case cluster.ModeTimeSlicing, cluster.ModeMPS:
					// holds:path: it fills every free replica of the node.
					ginkgo.It(fmt.Sprintf("maps every %s replica of a full node to one physical GPU", m.Mode),
						takes(Takes{Devices: WholePath}), proves(sharingName, conformance.GPUSharing), func(ctx context.Context) {
							ginkgo.By("no GPU gets more holders than its replicas, the pods sharing each GPU are named, and one more pod waits")
							sharedNodeFilled(ctx, s, m)
						})
				case cluster.ModeMIGSingle, cluster.ModeMIGMixed:
					ginkgo.It(fmt.Sprintf("fills a %s node with MIG devices, never beside its whole parent GPU", m.Mode),
						takes(Takes{Devices: WholePath}), proves(sharingName, conformance.GPUSharing), func(ctx context.Context) {
							ginkgo.By("each pod gets one distinct MIG device of its resource's profile, and one more pod waits")
							migNodeFilled(ctx, s, m)
						})
				case cluster.ModePartitionable:
					registerPartitionSpecs(reg, s, m)
				case cluster.ModeConsumable:
					registerCapacitySpecs(reg, s, m)
				}
			}
		})
	}
}

// registerPartitionSpecs registers the checks of a node whose DRA GPUs are partitionable through shared
// counters: a whole GPU and a partition of it are never allocated together, and partitions of one parent
// run exactly as many as its counters allow, never more.
func registerPartitionSpecs(reg SharingInput, s *Spec[SharingInput], m cluster.NodeSharingMode) {
	if len(m.Partitions) == 0 {
		reg.notExercised("dra: partitions on "+m.Node, "discovery calls the node partitionable but names no parent GPU with partitions ("+strings.Join(m.Evidence, ", ")+")")
		return
	}
	if slices.ContainsFunc(m.Partitions, func(g cluster.PartitionableGPU) bool { return g.Whole != "" }) {
		ginkgo.It("does not allocate a partition of a GPU whose whole device a pod holds", proves(sharingName, conformance.GPUSharing),
			takes(Takes{Devices: WholePath}), func(ctx context.Context) {
				ginkgo.By("the claim is diagnosed as waiting for the device")
				partitionBesideWhole(ctx, s, m)
			})
	} else {
		reg.notExercised("dra: a partition beside its whole GPU on "+m.Node, "the node's partitionable GPUs publish no whole-GPU device, so there is nothing to allocate beside a partition")
	}
	ginkgo.It("runs as many partitions of one GPU as its shared counters allow", proves(sharingName, conformance.GPUSharing),
		takes(Takes{Devices: WholePath}), func(ctx context.Context) {
			ginkgo.By("each a distinct MIG device of that GPU, and one more waits")
			fillParentWithPartitions(ctx, s, m)
		})
}

// capacitySpecText is the spec that checks a dra-shared node (the selfcheck table focuses on it).
const capacitySpecText = "shares one GPU among as many claims as its published capacity allows"

// registerCapacitySpecs registers the check of a node whose DRA GPUs several claims share by capacity.
func registerCapacitySpecs(reg SharingInput, s *Spec[SharingInput], m cluster.NodeSharingMode) {
	if len(m.Consumable) == 0 {
		reg.notExercised("dra: capacity sharing on "+m.Node, "discovery calls the node dra-shared but names no device that allows multiple allocations ("+strings.Join(m.Evidence, ", ")+")")
		return
	}
	ginkgo.It(capacitySpecText, proves(sharingName, conformance.GPUSharing), takes(Takes{Devices: WholePath}), func(ctx context.Context) {
		ginkgo.By("each claim sees that GPU, the capacity is no more than the GPU's memory, and one more claim waits")
		fillSharedGPU(ctx, s, m)
	})
}
