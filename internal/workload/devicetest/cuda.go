package devicetest

import (
	"errors"
	"fmt"
	"slices"

	"gpuconform.io/gpuconform/internal/cuda"
)

// CUDAReport is what the CUDA driver showed the test and what vectorAdd did on each device.
type CUDAReport struct {
	// DriverVersion is cuDriverGetVersion's CUDA version ("12.4"): the node's advertised CUDA version
	// (GFD's nvidia.com/cuda.runtime-version, a slice's cudaDriverVersion) must agree.
	DriverVersion string       `json:"driver_version"`
	Devices       []CUDADevice `json:"devices"`
	// Error is the CUDA call that failed before any device ran (cuInit: CUDA_ERROR_NO_DEVICE (100), …).
	Error string `json:"error,omitempty"`
}

// CUDADevice is one device and its vectorAdd.
type CUDADevice struct {
	cuda.Device
	VectorAdd *cuda.VectorAddResult `json:"vector_add,omitempty"`
	Error     string                `json:"error,omitempty"`
}

// StandInReason starts the StandIn of a test that ran no kernel.
const StandInReason = "stand-in (no CUDA driver in the container)"

// runCUDA opens the driver and runs vectorAdd on every device CUDA shows; a container without libcuda
// returns the stand-in sentence instead.
func runCUDA(opts Options) (*CUDAReport, string) {
	d, err := cuda.Load(opts.CUDALibrary)
	if nf, ok := errors.AsType[*cuda.NotFoundError](err); ok {
		return nil, fmt.Sprintf("%s: checked the device nodes, /dev/nvidiactl and nvidia-smi; ran no kernel (%v)", StandInReason, nf.Last)
	}
	rep := &CUDAReport{Devices: []CUDADevice{}}
	if err != nil {
		rep.Error = err.Error()
		return rep, ""
	}
	if v, err := d.DriverVersion(); err == nil {
		rep.DriverVersion = cuda.FormatVersion(v)
	}
	devs, err := d.Devices()
	if err != nil {
		rep.Error = err.Error()
		return rep, ""
	}
	n := cmpElements(opts.Elements)
	for _, dev := range devs {
		rep.Devices = append(rep.Devices, vectorAdd(d, dev, n))
	}
	return rep, ""
}

func cmpElements(n int) int {
	if n <= 0 {
		return DefaultElements
	}
	return n
}

func vectorAdd(d *cuda.Driver, dev cuda.Device, n int) CUDADevice {
	out := CUDADevice{Device: dev}
	c, err := d.Open(dev)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer c.Close()
	r, err := c.VectorAdd(n)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.VectorAdd = &r
	return out
}

// judgeCUDA says what the CUDA run shows wrong: a failed call (its CUresult is final, nothing to wait
// for), no device, a wrong sum, a device nvidia-smi does not list.
func judgeCUDA(r *CUDAReport, smiIDs []string) []string {
	if r == nil {
		return nil
	}
	if r.Error != "" {
		return []string{"CUDA failed: " + r.Error}
	}
	if len(r.Devices) == 0 {
		return []string{"CUDA shows no device although libcuda loaded"}
	}
	var out []string
	for _, dev := range r.Devices {
		switch {
		case dev.Error != "":
			out = append(out, fmt.Sprintf("CUDA device %d (%s): %s", dev.Ordinal, dev.UUID, dev.Error))
		case dev.VectorAdd.Mismatches > 0:
			out = append(out, fmt.Sprintf("CUDA device %d (%s): vectorAdd gave %d wrong element(s) of %d, first %s",
				dev.Ordinal, dev.UUID, dev.VectorAdd.Mismatches, dev.VectorAdd.Elements, dev.VectorAdd.First))
		}
		if smiIDs != nil && !slices.ContainsFunc(smiIDs, func(id string) bool { return cuda.UUIDEqual(id, dev.UUID) }) {
			out = append(out, fmt.Sprintf("CUDA device %d has UUID %s, which nvidia-smi -L does not list (%v): CUDA and the driver's tool see different devices", dev.Ordinal, dev.UUID, smiIDs))
		}
	}
	return out
}
