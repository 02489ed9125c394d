package cuda

import (
	"fmt"
	"math"
	"time"
	"unsafe"
)

// threadsPerBlock is the block size of every launch: a multiple of the warp on every NVIDIA GPU.
const threadsPerBlock = 256

// VectorAddResult is one vectorAdd run, checked element by element on the host.
type VectorAddResult struct {
	Elements int `json:"elements"`
	// Mismatches counts the elements whose sum differs from the host's; First names the first one.
	Mismatches int     `json:"mismatches"`
	First      string  `json:"first_mismatch,omitempty"`
	KernelMs   float32 `json:"kernel_ms"`
}

// VectorAdd copies two vectors of n floats in, adds them on the GPU, copies the sum out and compares every
// element with the host's sum (the inputs are exact in float32, so the sums must be equal).
func (c *Context) VectorAdd(n int) (VectorAddResult, error) {
	res := VectorAddResult{Elements: n}
	a, b, sum := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range n {
		a[i], b[i] = float32(i%4096), float32(2*(i%1024)+1)
	}
	size := uint64(n) * 4
	var bufs [3]*buffer
	for i := range bufs {
		buf, err := c.alloc(size)
		if err != nil {
			return res, err
		}
		defer buf.free()
		bufs[i] = buf
	}
	if err := c.d.check("cuMemcpyHtoD_v2", c.d.cuMemcpyHtoD(bufs[0].ptr, unsafe.Pointer(&a[0]), size)); err != nil {
		return res, err
	}
	if err := c.d.check("cuMemcpyHtoD_v2", c.d.cuMemcpyHtoD(bufs[1].ptr, unsafe.Pointer(&b[0]), size)); err != nil {
		return res, err
	}
	n32 := int32(n)
	blocks := uint32((n + threadsPerBlock - 1) / threadsPerBlock)
	ms, err := c.launch("vector_add", blocks, threadsPerBlock, unsafe.Pointer(&bufs[0].ptr), unsafe.Pointer(&bufs[1].ptr), unsafe.Pointer(&bufs[2].ptr), unsafe.Pointer(&n32))
	if err != nil {
		return res, err
	}
	res.KernelMs = ms
	if err := c.d.check("cuMemcpyDtoH_v2", c.d.cuMemcpyDtoH(unsafe.Pointer(&sum[0]), bufs[2].ptr, size)); err != nil {
		return res, err
	}
	for i := range n {
		if want := a[i] + b[i]; sum[i] != want {
			if res.Mismatches == 0 {
				res.First = fmt.Sprintf("element %d: %g + %g gave %g", i, a[i], b[i], sum[i])
			}
			res.Mismatches++
		}
	}
	return res, nil
}

// Throughput is one timed kernel: what it did and how fast, as CUDA events measured it.
type Throughput struct {
	KernelMs float64 `json:"kernel_ms"`
	// GFLOPS (the FMA kernel) or GBps (the copy kernel): the work divided by the kernel's time.
	GFLOPS float64 `json:"gflops,omitempty"`
	GBps   float64 `json:"gbps,omitempty"`
}

// FMALoad runs blocks×256 threads of the FMA kernel, each doing iters steps of eight multiply-add chains
// (16 FP32 operations a step), and returns the achieved GFLOP/s.
func (c *Context) FMALoad(blocks, iters int) (Throughput, error) {
	threads := blocks * threadsPerBlock
	if size := uint64(threads) * 4; c.fmaOut == nil || c.fmaOut.size < size {
		if c.fmaOut != nil {
			c.fmaOut.free()
			c.fmaOut = nil
		}
		out, err := c.alloc(size)
		if err != nil {
			return Throughput{}, err
		}
		c.fmaOut = out
	}
	out := c.fmaOut
	it, a, b := int32(iters), float32(0.999), float32(0.001)
	ms, err := c.launch("fma_load", uint32(blocks), threadsPerBlock, unsafe.Pointer(&out.ptr), unsafe.Pointer(&it), unsafe.Pointer(&a), unsafe.Pointer(&b))
	if err != nil {
		return Throughput{}, err
	}
	flops := float64(threads) * float64(iters) * 16
	return Throughput{KernelMs: float64(ms), GFLOPS: flops / (float64(ms) / 1e3) / 1e9}, nil
}

// Copier holds two device buffers for the copy kernel, so a loop measures bandwidth without allocating.
type Copier struct {
	c        *Context
	src, dst *buffer
	words    uint64
}

// NewCopier allocates two buffers of size bytes (a multiple of 16).
func (c *Context) NewCopier(size uint64) (*Copier, error) {
	src, err := c.alloc(size)
	if err != nil {
		return nil, err
	}
	dst, err := c.alloc(size)
	if err != nil {
		src.free()
		return nil, err
	}
	return &Copier{c: c, src: src, dst: dst, words: size / 16}, nil
}

// Close frees the buffers.
func (cp *Copier) Close() {
	cp.src.free()
	cp.dst.free()
}

// Copy runs the copy kernel once over the buffers and returns the bandwidth it achieved (bytes read plus
// bytes written, per second).
func (cp *Copier) Copy() (Throughput, error) {
	blocks := uint32(min(cp.words/threadsPerBlock+1, 65535))
	ms, err := cp.c.launch("copy_words", blocks, threadsPerBlock, unsafe.Pointer(&cp.src.ptr), unsafe.Pointer(&cp.dst.ptr), unsafe.Pointer(&cp.words))
	if err != nil {
		return Throughput{}, err
	}
	bytes := 2 * float64(cp.words) * 16
	return Throughput{KernelMs: float64(ms), GBps: bytes / (float64(ms) / 1e3) / 1e9}, nil
}

// LoadBlocks is the FMA grid that fills the device: four blocks of 256 threads per SM.
func (c *Context) LoadBlocks() int { return max(1, c.Device.SMs) * 4 }

// CalibrateIters returns the FMA kernel's iteration count whose run on the full grid takes about target,
// from one timed run (at least 256 iterations).
func (c *Context) CalibrateIters(target time.Duration) (int, error) {
	const probe = 4096
	t, err := c.FMALoad(c.LoadBlocks(), probe)
	if err != nil {
		return 0, err
	}
	if t.KernelMs <= 0 {
		return probe, nil
	}
	iters := float64(probe) * float64(target.Milliseconds()) / t.KernelMs
	return int(math.Max(256, math.Min(iters, 1<<24))), nil
}
