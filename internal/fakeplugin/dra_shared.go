package fakeplugin

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// Shared DRA GPUs (KEP 5075, "consumable capacity"): in the time-slicing and MPS modes the DRA half
// publishes each GPU as a device that several claims may be allocated at once, each consuming part of its
// memory capacity, so the scheduler lets as many claims share one GPU as its memory holds and makes the
// next one wait. It is the DRA counterpart of the device plugin's replicas: one physical GPU, no memory or
// fault isolation between the pods on it.
//
// The capacity's request policy admits shares of memory/replicas up to the whole memory, in steps of one
// share. Its default, which a claim that asks for no memory consumes, is the whole memory: a plain claim
// for a GPU keeps getting a GPU of its own, as it does in the other modes, and only a claim that asks for
// a share of the memory shares the GPU. The API server requires the default and the maximum to be a whole
// number of steps above the minimum (pkg/apis/resource/validation, validateRequestPolicyRange), so both are
// replicas shares, which is the whole memory but for the bytes a division by replicas leaves over.

// DRACapacityMemory is the capacity NVIDIA's driver publishes a GPU's framebuffer as, and the one shared
// GPUs are consumed by.
const DRACapacityMemory = DRACounterMemory

// draShared reports whether the DRA GPUs are published as shared by capacity (time-slicing and MPS).
func (p *Plugin) draShared() bool {
	switch fakegpu.ModeOf(p.cfg.Sharing, p.cfg.Replicas) {
	case fakegpu.SharingTimeSlicing, fakegpu.SharingMPS:
		return p.cfg.Replicas > 1
	}
	return false
}

// draShare is the memory, in bytes, of one share of a shared DRA GPU: the GPU's memory divided among the
// configured replicas.
func (p *Plugin) draShare() int64 {
	return (int64(p.cfg.MemoryMiB) << 20) / int64(p.cfg.Replicas)
}

// sharedDevice turns a whole-GPU device into one that several claims may share by memory. Under
// FaultDRACapacityOverstated the memory published is twice what the GPU has, while the request policy
// stays that of the real memory: twice as many shares then fit.
func (p *Plugin) sharedDevice(d resourceapi.Device, overstated bool) resourceapi.Device {
	share := p.draShare()
	whole := share * int64(p.cfg.Replicas)
	published := int64(p.cfg.MemoryMiB) << 20
	if overstated {
		published *= 2
	}
	q := func(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.BinarySI) }
	d.AllowMultipleAllocations = ptr.To(true)
	d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		DRACapacityMemory: {
			Value: *q(published),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    q(whole),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q(share), Max: q(whole), Step: q(share)},
			},
		},
	}
	return d
}
