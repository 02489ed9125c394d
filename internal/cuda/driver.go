// Package cuda runs the suite's GPU work through NVIDIA's driver library, libcuda.so.1, which NVIDIA's
// container stack injects into every container given a GPU with the `compute` driver capability (CDI or
// the runtime hook). The library is opened at run time without cgo (github.com/ebitengine/purego), and
// the kernels are PTX text (kernels/kernels.ptx) that the driver compiles for the GPU it runs on: the
// workload image needs no CUDA toolkit and no cgo.
//
// purego imports dlopen from the C library, so a binary that links this package has an ELF interpreter:
// the workload image carries the C runtime (Debian's libc6), which libcuda needs as well.
//
// Where the library is absent (the local cluster's fake GPUs, or a runtime that did not inject the
// driver), Load returns a *NotFoundError and the callers run their named stand-ins.
package cuda

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"

	_ "embed"
)

// Library is the driver library's soname, as NVIDIA's container stack injects it.
const Library = "libcuda.so.1"

// searchDirs are where NVIDIA's container stack puts the driver's libraries when the dynamic loader's own
// search does not find them (an image without the loader cache the toolkit's ldconfig hook writes).
var searchDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
	"/usr/local/nvidia/lib64", // GKE's driver installer
	"/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
}

// NotFoundError says that no CUDA driver library could be opened, and what was tried.
type NotFoundError struct {
	Tried []string
	// Last is the first attempt's error (the loader's own search).
	Last error
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no CUDA driver in the container: %s could not be opened (tried %s: %v)", Library, strings.Join(e.Tried, ", "), e.Last)
}

// Error is a CUDA driver call that failed: the call, the CUresult and its name (CUDA_ERROR_NO_DEVICE, …).
type Error struct {
	Call string
	Code int32
	Name string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, e.Code) }

// Codes of the CUresults the callers tell apart.
const (
	ErrorOutOfMemory          int32 = 2
	ErrorNoDevice             int32 = 100
	ErrorSystemDriverMismatch int32 = 803
)

// IsCode reports whether err is a CUDA error with that CUresult.
func IsCode(err error, code int32) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Driver is an opened libcuda with cuInit done.
type Driver struct {
	handle uintptr

	cuInit                    func(flags uint32) int32
	cuDriverGetVersion        func(v *int32) int32
	cuGetErrorName            func(code int32, name **byte) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(dev *int32, ordinal int32) int32
	cuDeviceGetName           func(name *byte, n int32, dev int32) int32
	cuDeviceGetUUID           func(uuid *[16]byte, dev int32) int32
	cuDeviceGetAttribute      func(v *int32, attr int32, dev int32) int32
	cuDeviceTotalMem          func(bytes *uint64, dev int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuCtxSynchronize          func() int32
	cuCtxGetExecAffinity      func(p *execAffinity, typ int32) int32 // nil before CUDA 11.4
	cuModuleLoadData          func(mod *uintptr, image *byte) int32
	cuModuleGetFunction       func(fn *uintptr, mod uintptr, name *byte) int32
	cuModuleUnload            func(mod uintptr) int32
	cuMemAlloc                func(ptr *uint64, bytes uint64) int32
	cuMemFree                 func(ptr uint64) int32
	cuMemcpyHtoD              func(dst uint64, src unsafe.Pointer, bytes uint64) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uint64, bytes uint64) int32
	cuMemGetInfo              func(free, total *uint64) int32
	cuLaunchKernel            func(fn uintptr, gx, gy, gz, bx, by, bz, shared uint32, stream uintptr, params *unsafe.Pointer, extra uintptr) int32
	cuEventCreate             func(ev *uintptr, flags uint32) int32
	cuEventRecord             func(ev uintptr, stream uintptr) int32
	cuEventSynchronize        func(ev uintptr) int32
	cuEventElapsedTime        func(ms *float32, start, end uintptr) int32
	cuEventDestroy            func(ev uintptr) int32
}

// execAffinity is CUexecAffinityParam with its only member, the SM count.
type execAffinity struct {
	Type    int32
	SMCount uint32
}

// Load opens the driver library (path, or Library through the loader and searchDirs when path is "")
// and initialises it. A library that opens but fails cuInit is an *Error naming the CUresult.
func Load(path string) (*Driver, error) {
	tried := []string{path}
	if path == "" {
		tried = []string{Library}
		for _, d := range searchDirs {
			tried = append(tried, d+"/"+Library)
		}
	}
	var h uintptr
	var first error // the loader's own search, which says the most
	for _, p := range tried {
		var err error
		if h, err = purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
			break
		}
		first = cmp.Or(first, err)
	}
	if h == 0 {
		return nil, &NotFoundError{Tried: tried, Last: first}
	}
	d := &Driver{handle: h}
	if err := d.bind(); err != nil {
		return nil, err
	}
	if err := d.check("cuInit", d.cuInit(0)); err != nil {
		return nil, err
	}
	return d, nil
}

// bind resolves every entry point; the versioned names are those cuda.h maps the plain ones to.
func (d *Driver) bind() error {
	for _, s := range []struct {
		fn       any
		name     string
		optional bool
	}{
		{&d.cuInit, "cuInit", false}, {&d.cuDriverGetVersion, "cuDriverGetVersion", false},
		{&d.cuGetErrorName, "cuGetErrorName", false}, {&d.cuDeviceGetCount, "cuDeviceGetCount", false},
		{&d.cuDeviceGet, "cuDeviceGet", false}, {&d.cuDeviceGetName, "cuDeviceGetName", false},
		{&d.cuDeviceGetUUID, "cuDeviceGetUuid_v2", false}, {&d.cuDeviceGetAttribute, "cuDeviceGetAttribute", false},
		{&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2", false}, {&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", false},
		{&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", false}, {&d.cuCtxSetCurrent, "cuCtxSetCurrent", false},
		{&d.cuCtxSynchronize, "cuCtxSynchronize", false}, {&d.cuCtxGetExecAffinity, "cuCtxGetExecAffinity", true},
		{&d.cuModuleLoadData, "cuModuleLoadData", false}, {&d.cuModuleGetFunction, "cuModuleGetFunction", false},
		{&d.cuModuleUnload, "cuModuleUnload", false}, {&d.cuMemAlloc, "cuMemAlloc_v2", false},
		{&d.cuMemFree, "cuMemFree_v2", false}, {&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2", false},
		{&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2", false}, {&d.cuMemGetInfo, "cuMemGetInfo_v2", false},
		{&d.cuLaunchKernel, "cuLaunchKernel", false}, {&d.cuEventCreate, "cuEventCreate", false},
		{&d.cuEventRecord, "cuEventRecord", false}, {&d.cuEventSynchronize, "cuEventSynchronize", false},
		{&d.cuEventElapsedTime, "cuEventElapsedTime", false}, {&d.cuEventDestroy, "cuEventDestroy_v2", false},
	} {
		sym, err := purego.Dlsym(d.handle, s.name)
		if err != nil {
			if s.optional {
				continue
			}
			return fmt.Errorf("%s has no %s: a driver too old for this test (CUDA 11.4 or later is needed): %w", Library, s.name, err)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	return nil
}

// check turns a CUresult into an *Error (nil for CUDA_SUCCESS).
func (d *Driver) check(call string, code int32) error {
	if code == 0 {
		return nil
	}
	name := "CUDA error"
	var p *byte
	if d.cuGetErrorName != nil && d.cuGetErrorName(code, &p) == 0 && p != nil {
		name = cString(p)
	}
	return &Error{Call: call, Code: code, Name: name}
}

// cString copies a NUL-terminated C string.
func cString(p *byte) string {
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0 && len(b) < 256; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}

// DriverVersion is cuDriverGetVersion: the CUDA version the driver supports, 1000*major + 10*minor.
func (d *Driver) DriverVersion() (int, error) {
	var v int32
	return int(v), d.check("cuDriverGetVersion", d.cuDriverGetVersion(&v))
}

// FormatVersion renders a cuDriverGetVersion value as "12.4".
func FormatVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// Device attributes read (CUdevice_attribute).
const (
	attrClockRateKHz       = 13
	attrMultiprocessors    = 16
	attrMemoryClockKHz     = 36
	attrMemoryBusWidthBits = 37
	attrComputeMajor       = 75
	attrComputeMinor       = 76
)

// Device is one device the driver shows this process.
type Device struct {
	Ordinal int    `json:"ordinal"`
	Name    string `json:"name"`
	// UUID is the device's UUID as nvidia-smi prints it ("GPU-" and 36 characters); a MIG device's reads
	// the same way from CUDA, so compare with UUIDEqual.
	UUID   string `json:"uuid"`
	SMs    int    `json:"sms"`
	Memory uint64 `json:"memory_bytes"`
	// ComputeCapability is "9.0" for an H100.
	ComputeCapability string `json:"compute_capability"`
	// ClockKHz is the SM clock the driver reports (its maximum).
	ClockKHz int `json:"clock_khz"`
	// PeakGBps is the memory bandwidth the memory clock and bus width imply (0 when the driver does not say).
	PeakGBps float64 `json:"peak_gbps,omitempty"`
	handle   int32
}

// Devices lists the devices the driver shows this process (CUDA_VISIBLE_DEVICES and the container's device
// nodes decide which).
func (d *Driver) Devices() ([]Device, error) {
	var n int32
	if err := d.check("cuDeviceGetCount", d.cuDeviceGetCount(&n)); err != nil {
		return nil, err
	}
	out := make([]Device, 0, n)
	for i := range n {
		var h int32
		if err := d.check("cuDeviceGet", d.cuDeviceGet(&h, i)); err != nil {
			return nil, err
		}
		dev := Device{Ordinal: int(i), handle: h}
		name := make([]byte, 256)
		if err := d.check("cuDeviceGetName", d.cuDeviceGetName(&name[0], int32(len(name)), h)); err != nil {
			return nil, err
		}
		dev.Name = cString(&name[0])
		var u [16]byte
		if err := d.check("cuDeviceGetUuid_v2", d.cuDeviceGetUUID(&u, h)); err != nil {
			return nil, err
		}
		dev.UUID = FormatUUID(u)
		attrs := map[int32]*int{attrMultiprocessors: &dev.SMs, attrClockRateKHz: &dev.ClockKHz}
		var major, minor, memKHz, busBits int
		attrs[attrComputeMajor], attrs[attrComputeMinor], attrs[attrMemoryClockKHz], attrs[attrMemoryBusWidthBits] = &major, &minor, &memKHz, &busBits
		for a, dst := range attrs {
			var v int32
			if err := d.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&v, a, h)); err != nil {
				return nil, err
			}
			*dst = int(v)
		}
		dev.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
		// Double data rate: two transfers per memory clock, bus width in bits.
		dev.PeakGBps = 2 * float64(memKHz) * 1e3 * float64(busBits) / 8 / 1e9
		if err := d.check("cuDeviceTotalMem_v2", d.cuDeviceTotalMem(&dev.Memory, h)); err != nil {
			return nil, err
		}
		out = append(out, dev)
	}
	return out, nil
}

// FormatUUID renders 16 UUID bytes as nvidia-smi does: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func FormatUUID(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// UUIDEqual compares two device UUIDs without their "GPU-"/"MIG-" prefix: CUDA reports a MIG device's
// UUID bytes, which nvidia-smi and the kubelet print with the MIG- prefix.
func UUIDEqual(a, b string) bool {
	strip := func(s string) string {
		s = strings.ToLower(s)
		for _, p := range []string{"gpu-", "mig-"} {
			s = strings.TrimPrefix(s, p)
		}
		return s
	}
	return strip(a) == strip(b)
}

//go:embed kernels/kernels.ptx
var kernelsPTX string

// Context is a device's primary context made current on a locked OS thread, with the suite's kernels
// loaded. It must be used and closed from the goroutine that opened it (CUDA contexts are per thread).
type Context struct {
	d      *Driver
	Device Device
	ctx    uintptr
	mod    uintptr
	fns    map[string]uintptr
	// start and end time every launch; fmaOut is the FMA kernel's output, grown to the largest grid used.
	start, end uintptr
	fmaOut     *buffer
}

// Open makes dev's primary context current on this goroutine's thread and loads the kernels; the driver
// compiles their PTX here, so a driver that cannot JIT fails at this step with its CUresult.
func (d *Driver) Open(dev Device) (c *Context, err error) {
	runtime.LockOSThread()
	defer func() {
		if err != nil {
			runtime.UnlockOSThread()
		}
	}()
	c = &Context{d: d, Device: dev, fns: map[string]uintptr{}}
	if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&c.ctx, dev.handle)); err != nil {
		return nil, err
	}
	if err := d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(c.ctx)); err != nil {
		d.cuDevicePrimaryCtxRelease(dev.handle)
		return nil, err
	}
	image := append([]byte(kernelsPTX), 0)
	if err := d.check("cuModuleLoadData", d.cuModuleLoadData(&c.mod, &image[0])); err != nil {
		d.cuDevicePrimaryCtxRelease(dev.handle)
		return nil, err
	}
	for _, name := range []string{"vector_add", "fma_load", "copy_words"} {
		var fn uintptr
		n := append([]byte(name), 0)
		if err := d.check("cuModuleGetFunction "+name, d.cuModuleGetFunction(&fn, c.mod, &n[0])); err != nil {
			c.release()
			return nil, err
		}
		c.fns[name] = fn
	}
	for _, ev := range []*uintptr{&c.start, &c.end} {
		if err := d.check("cuEventCreate", d.cuEventCreate(ev, 0)); err != nil {
			c.release()
			return nil, err
		}
	}
	return c, nil
}

// release frees what Open made; a second call does nothing.
func (c *Context) release() {
	if c.ctx == 0 {
		return
	}
	for _, ev := range []uintptr{c.start, c.end} {
		if ev != 0 {
			c.d.cuEventDestroy(ev)
		}
	}
	if c.fmaOut != nil {
		c.fmaOut.free()
	}
	c.d.cuModuleUnload(c.mod)
	c.d.cuDevicePrimaryCtxRelease(c.Device.handle)
	c.ctx, c.start, c.end, c.fmaOut = 0, 0, 0, nil
}

// Close unloads the kernels, releases the primary context and unlocks the thread.
func (c *Context) Close() {
	c.release()
	runtime.UnlockOSThread()
}

// MemInfo is cuMemGetInfo in this context: free and total bytes as the context sees them (under MPS
// with a pinned memory limit, the limit).
func (c *Context) MemInfo() (free, total uint64, err error) {
	err = c.d.check("cuMemGetInfo_v2", c.d.cuMemGetInfo(&free, &total))
	return free, total, err
}

// SMCount is the number of SMs this context may use (cuCtxGetExecAffinity, which MPS's active thread
// percentage limits); ok is false when the driver has no such call.
func (c *Context) SMCount() (n int, ok bool, err error) {
	if c.d.cuCtxGetExecAffinity == nil {
		return 0, false, nil
	}
	var p execAffinity
	if err := c.d.check("cuCtxGetExecAffinity", c.d.cuCtxGetExecAffinity(&p, 0)); err != nil {
		return 0, true, err
	}
	return int(p.SMCount), true, nil
}

// buffer is device memory.
type buffer struct {
	c    *Context
	ptr  uint64
	size uint64
}

func (c *Context) alloc(size uint64) (*buffer, error) {
	b := &buffer{c: c, size: size}
	return b, c.d.check("cuMemAlloc_v2", c.d.cuMemAlloc(&b.ptr, size))
}

func (b *buffer) free() { b.c.d.cuMemFree(b.ptr) }

// TryAlloc allocates size bytes and frees them again: the error is the driver's answer (an MPS client
// above its pinned memory limit gets CUDA_ERROR_OUT_OF_MEMORY).
func (c *Context) TryAlloc(size uint64) error {
	b, err := c.alloc(size)
	if err == nil {
		b.free()
	}
	return err
}

// launch runs a kernel on the default stream between two events and returns the milliseconds the GPU
// took, as CUDA events measure it. args are pointers to each argument's value.
func (c *Context) launch(name string, blocks, threads uint32, args ...unsafe.Pointer) (float32, error) {
	d, start, end := c.d, c.start, c.end
	if err := d.check("cuEventRecord", d.cuEventRecord(start, 0)); err != nil {
		return 0, err
	}
	if err := d.check("cuLaunchKernel "+name, d.cuLaunchKernel(c.fns[name], blocks, 1, 1, threads, 1, 1, 0, 0, &args[0], 0)); err != nil {
		return 0, err
	}
	if err := d.check("cuEventRecord", d.cuEventRecord(end, 0)); err != nil {
		return 0, err
	}
	if err := d.check("cuEventSynchronize "+name, d.cuEventSynchronize(end)); err != nil {
		return 0, err
	}
	var ms float32
	err := d.check("cuEventElapsedTime", d.cuEventElapsedTime(&ms, start, end))
	runtime.KeepAlive(args)
	return ms, err
}

// fp32LanesPerSM are the FP32 units of one SM by compute capability, from NVIDIA's CUDA programming
// guide's throughput table (results per clock cycle per multiprocessor).
var fp32LanesPerSM = map[string]int{
	"5.0": 128, "5.2": 128, "5.3": 128, "6.0": 64, "6.1": 128, "6.2": 128, "7.0": 64, "7.2": 64, "7.5": 64,
	"8.0": 64, "8.6": 128, "8.7": 128, "8.9": 128, "9.0": 128, "10.0": 128, "12.0": 128,
}

// PeakGFLOPS is the device's FP32 peak (an FMA counts two operations) at the clock the driver reports; 0
// where the compute capability is not in the table.
func (d Device) PeakGFLOPS() float64 {
	return float64(d.SMs*fp32LanesPerSM[d.ComputeCapability]) * 2 * float64(d.ClockKHz) / 1e6
}
