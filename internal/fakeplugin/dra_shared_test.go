package fakeplugin

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// policyErrors applies the API server's rules for a capacity's request policy (kubernetes
// pkg/apis/resource/validation: validateSingleAllocatableDeviceCapacity, validateRequestPolicyRange and
// validateRequestPolicyRangeStep) and says what breaks them.
func policyErrors(d resourceapi.Device) []string {
	var errs []string
	for name, c := range d.Capacity {
		pol := c.RequestPolicy
		switch {
		case pol == nil:
			continue
		case d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations:
			errs = append(errs, fmt.Sprintf("%s: a request policy needs allowMultipleAllocations", name))
			continue
		case pol.ValidRange == nil || pol.ValidRange.Min == nil || pol.Default == nil:
			errs = append(errs, fmt.Sprintf("%s: the fake publishes a range with min and default", name))
			continue
		}
		r, def, capValue := pol.ValidRange, pol.Default.Value(), c.Value.Value()
		minV := r.Min.Value()
		if minV > capValue {
			errs = append(errs, fmt.Sprintf("%s: min %d above the capacity %d", name, minV, capValue))
		}
		if def < minV {
			errs = append(errs, fmt.Sprintf("%s: default %d below min %d", name, def, minV))
		}
		if r.Max != nil {
			maxV := r.Max.Value()
			if minV > maxV || maxV > capValue || def > maxV {
				errs = append(errs, fmt.Sprintf("%s: min %d, default %d, max %d, capacity %d out of order", name, minV, def, maxV, capValue))
			}
		}
		if r.Step != nil {
			step := r.Step.Value()
			if minV+step > capValue {
				errs = append(errs, fmt.Sprintf("%s: one step above min exceeds the capacity", name))
			}
			if (def-minV)%step != 0 {
				errs = append(errs, fmt.Sprintf("%s: default %d is not min %d plus whole steps of %d", name, def, minV, step))
			}
			if r.Max != nil && (r.Max.Value()-minV)%step != 0 {
				errs = append(errs, fmt.Sprintf("%s: max %d is not min %d plus whole steps of %d", name, r.Max.Value(), minV, step))
			}
		}
	}
	return errs
}

// sharesThatFit is how many claims, each asking for request of memory (nil: asking for none), the
// scheduler's allocator lets share device d: each consumes the request rounded up to the policy's range
// (or its default when it asks for none), a request the range does not admit fits never, and together
// they stay within the capacity (k8s.io/dynamic-resource-allocation's consumable-capacity rules).
func sharesThatFit(d resourceapi.Device, request *resource.Quantity) int {
	c := d.Capacity[DRACapacityMemory]
	pol := c.RequestPolicy
	consumed := c.Value.Value()
	switch {
	case request == nil && pol != nil && pol.Default != nil:
		consumed = pol.Default.Value()
	case request != nil && pol != nil && pol.ValidRange != nil:
		r := pol.ValidRange
		v, minV := request.Value(), r.Min.Value()
		if v < minV {
			v = minV
		}
		if r.Step != nil {
			step := r.Step.Value()
			v = minV + (v-minV+step-1)/step*step
		}
		if r.Max != nil && v > r.Max.Value() {
			return 0
		}
		consumed = v
	case request != nil:
		consumed = request.Value()
	}
	if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
		return min(1, int(c.Value.Value()/consumed))
	}
	return int(c.Value.Value() / consumed)
}

// memoryOf is the memory capacity a device publishes, in bytes.
func memoryOf(d resourceapi.Device) int64 {
	c := d.Capacity[DRACapacityMemory]
	return c.Value.Value()
}

func TestSharingModesPublishDRAGPUsSharedByMemory(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		replicas int
	}{{fakegpu.SharingTimeSlicing, 2}, {fakegpu.SharingMPS, 2}, {"", 2}, {fakegpu.SharingTimeSlicing, 3}} {
		cfg := cdiConfig(t, 2)
		cfg.Sharing, cfg.Replicas = tc.mode, tc.replicas
		p := mustNew(t, cfg)
		devs, _ := checkPool(t, poolOf(p))
		memory := int64(cfg.MemoryMiB) << 20
		share := resource.NewQuantity(memory/int64(tc.replicas), resource.BinarySI)
		for _, name := range []string{"gpu-4", "gpu-5"} {
			d, ok := devs[name]
			if !ok {
				t.Fatalf("mode %q×%d: %s not published", tc.mode, tc.replicas, name)
			}
			if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
				t.Errorf("mode %q×%d: %s does not allow multiple allocations", tc.mode, tc.replicas, name)
			}
			if errs := policyErrors(d); len(errs) > 0 {
				t.Errorf("mode %q×%d: %s's request policy breaks the API's rules: %v", tc.mode, tc.replicas, name, errs)
			}
			if got := memoryOf(d); got != memory {
				t.Errorf("mode %q×%d: %s publishes memory %d, the GPU has %d", tc.mode, tc.replicas, name, got, memory)
			}
			if n := sharesThatFit(d, share); n != tc.replicas {
				t.Errorf("mode %q×%d: %d claims of one share fit on %s, want %d", tc.mode, tc.replicas, n, name, tc.replicas)
			}
			if n := sharesThatFit(d, nil); n != 1 {
				t.Errorf("mode %q×%d: %d claims asking for no memory fit on %s; a plain claim must keep a GPU to itself", tc.mode, tc.replicas, n, name)
			}
			if attrString(d.Attributes["uuid"]) == "" || attrString(d.Attributes["type"]) != DRATypeGPU {
				t.Errorf("mode %q×%d: %s lost its attributes: %v", tc.mode, tc.replicas, name, d.Attributes)
			}
		}
	}
}

func TestOtherModesPublishDRAGPUsForOneClaimAtATime(t *testing.T) {
	for _, mode := range []string{fakegpu.SharingNone, fakegpu.SharingMIGSingle, fakegpu.SharingMIGMixed} {
		p := partitionableAgent(t, mode, 2)
		devs, _ := checkPool(t, poolOf(p))
		for name, d := range devs {
			if d.AllowMultipleAllocations != nil {
				t.Errorf("mode %s: %s sets allowMultipleAllocations", mode, name)
			}
			for c, v := range d.Capacity {
				if v.RequestPolicy != nil {
					t.Errorf("mode %s: %s's capacity %s has a request policy", mode, name, c)
				}
			}
		}
	}
}

// Under dra-capacity-overstated twice the GPU's memory is published, so twice the replicas fit; the pool
// stays valid.
func TestCapacityOverstatedFault(t *testing.T) {
	cfg := cdiConfig(t, 1)
	cfg.Sharing, cfg.Replicas = fakegpu.SharingTimeSlicing, 2
	p := mustNew(t, cfg)
	p.SetFaultsFromAnnotation(string(FaultDRACapacityOverstated))
	devs, _ := checkPool(t, poolOf(p))
	d := devs["gpu-4"]
	memory := int64(cfg.MemoryMiB) << 20
	if got := memoryOf(d); got != 2*memory {
		t.Errorf("published memory %d, want twice the GPU's %d", got, memory)
	}
	if errs := policyErrors(d); len(errs) > 0 {
		t.Errorf("request policy breaks the API's rules: %v", errs)
	}
	if n := sharesThatFit(d, resource.NewQuantity(memory/2, resource.BinarySI)); n != 4 {
		t.Errorf("%d claims of half the memory fit, want 4 under the fault", n)
	}
	// The fault is the DRA sharing's only: whole GPUs in the other modes publish their memory as it is.
	cfg = cdiConfig(t, 1)
	q := mustNew(t, cfg)
	q.SetFaultsFromAnnotation(string(FaultDRACapacityOverstated))
	devs, _ = checkPool(t, poolOf(q))
	if got := memoryOf(devs["gpu-4"]); got != memory {
		t.Errorf("mode none under the fault: published memory %d, want the GPU's %d", got, memory)
	}
}

// Each share of a shared GPU is prepared as the GPU itself, its share ID handed back to the kubelet.
func TestPrepareOfASharedGPUHandsOutTheGPU(t *testing.T) {
	cfg := cdiConfig(t, 2)
	cfg.Sharing, cfg.Replicas = fakegpu.SharingTimeSlicing, 2
	p := mustNew(t, cfg)
	for _, share := range []types.UID{"share-a", "share-b"} {
		c := claim("gpu-5")
		c.UID = "uid-" + share
		c.Status.Allocation.Devices.Results[0].ShareID = ptr.To(share)
		c.Status.Allocation.Devices.Results[0].ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{DRACapacityMemory: *resource.NewQuantity(p.draShare(), resource.BinarySI)}
		res := p.prepareClaim(c)
		if res.Err != nil {
			t.Fatalf("share %s: %v", share, res.Err)
		}
		if len(res.Devices) != 1 || fmt.Sprint(res.Devices[0].CDIDeviceIDs) != fmt.Sprint([]string{CDIDeviceName(5)}) {
			t.Errorf("share %s: prepared %+v, want GPU 5's CDI device", share, res.Devices)
			continue
		}
		if got := res.Devices[0].ShareID; got == nil || *got != share {
			t.Errorf("share %s: prepared with share ID %v", share, got)
		}
	}
}
