package cuda_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gpuconform.io/gpuconform/internal/cuda"
	"gpuconform.io/gpuconform/internal/cuda/cudatest"
)

func open(t *testing.T, env map[string]string) (*cuda.Driver, *cuda.Context) {
	t.Helper()
	lib := cudatest.Build(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	d, err := cuda.Load(lib)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	devs, err := d.Devices()
	if err != nil || len(devs) == 0 {
		t.Fatalf("Devices: %v %v", devs, err)
	}
	c, err := d.Open(devs[0])
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(c.Close)
	return d, c
}

func TestDevices(t *testing.T) {
	lib := cudatest.Build(t)
	t.Setenv("CUDA_DOUBLE_DEVICES", "2")
	d, err := cuda.Load(lib)
	if err != nil {
		t.Fatal(err)
	}
	v, err := d.DriverVersion()
	if err != nil || cuda.FormatVersion(v) != "12.4" {
		t.Errorf("driver version %d (%s), %v; want 12.4", v, cuda.FormatVersion(v), err)
	}
	devs, err := d.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[1].Name != "Double GPU 1" || devs[0].UUID != "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f" ||
		devs[0].SMs != 8 || devs[0].ComputeCapability != "9.0" || devs[0].Memory != 80<<30 {
		t.Errorf("devices %+v", devs)
	}
	if devs[0].PeakGBps < 3000 || devs[0].PeakGBps > 3500 {
		t.Errorf("peak bandwidth %.0f GB/s, want H100's ~3352 from 2619 MHz × 5120 bits", devs[0].PeakGBps)
	}
	if !cuda.UUIDEqual("MIG-00010203-0405-0607-0809-0A0B0C0D0E0F", devs[0].UUID) || cuda.UUIDEqual("GPU-1", devs[0].UUID) {
		t.Error("UUIDEqual")
	}
}

func TestLoadErrors(t *testing.T) {
	_, err := cuda.Load(t.TempDir() + "/libcuda.so.1")
	if nf, ok := errors.AsType[*cuda.NotFoundError](err); !ok || !strings.Contains(nf.Error(), "no CUDA driver in the container") {
		t.Errorf("missing library: %v", err)
	}
	lib := cudatest.Build(t)
	t.Setenv("CUDA_DOUBLE_INIT", "100")
	_, err = cuda.Load(lib)
	if !cuda.IsCode(err, cuda.ErrorNoDevice) || err.Error() != "cuInit: CUDA_ERROR_NO_DEVICE (100)" {
		t.Errorf("cuInit failure: %v", err)
	}
}

func TestVectorAdd(t *testing.T) {
	_, c := open(t, nil)
	r, err := c.VectorAdd(100_000)
	if err != nil || r.Mismatches != 0 || r.Elements != 100_000 {
		t.Errorf("vectorAdd %+v %v", r, err)
	}
}

func TestVectorAddWrongResult(t *testing.T) {
	_, c := open(t, map[string]string{"CUDA_DOUBLE_WRONG_SUM": "1"})
	r, err := c.VectorAdd(1000)
	if err != nil || r.Mismatches != 1 || r.First != "element 7: 7 + 15 gave 23" {
		t.Errorf("a wrong element must be found: %+v %v", r, err)
	}
}

func TestThroughput(t *testing.T) {
	_, c := open(t, nil)
	f, err := c.FMALoad(2, 1000)
	if err != nil || f.GFLOPS <= 0 || f.KernelMs <= 0 {
		t.Errorf("fma %+v %v", f, err)
	}
	cp, err := c.NewCopier(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	g, err := cp.Copy()
	if err != nil || g.GBps <= 0 {
		t.Errorf("copy %+v %v", g, err)
	}
	iters, err := c.CalibrateIters(20 * time.Millisecond)
	if err != nil || iters < 256 {
		t.Errorf("calibrate %d %v", iters, err)
	}
}

func TestSlowGPU(t *testing.T) {
	_, fast := open(t, nil)
	f1, err := fast.FMALoad(4, 20000)
	if err != nil {
		t.Fatal(err)
	}
	fast.Close()
	_, slow := open(t, map[string]string{"CUDA_DOUBLE_SLOW": "4"})
	f2, err := slow.FMALoad(4, 20000)
	if err != nil {
		t.Fatal(err)
	}
	if ratio := f2.GFLOPS / f1.GFLOPS; ratio > 0.5 {
		t.Errorf("a GPU four times slower measured %.2f of the fast one's GFLOP/s", ratio)
	}
}

func TestMPSLimits(t *testing.T) {
	_, c := open(t, map[string]string{"CUDA_DOUBLE_MEM_LIMIT": "1048576", "CUDA_DOUBLE_SMS": "4"})
	if n, ok, err := c.SMCount(); !ok || err != nil || n != 4 {
		t.Errorf("SM count %d %v %v", n, ok, err)
	}
	if _, total, err := c.MemInfo(); err != nil || total != 1<<20 {
		t.Errorf("mem info %d %v", total, err)
	}
	if err := c.TryAlloc(2 << 20); !cuda.IsCode(err, cuda.ErrorOutOfMemory) {
		t.Errorf("an allocation above the limit: %v", err)
	}
	if err := c.TryAlloc(1 << 19); err != nil {
		t.Errorf("an allocation below the limit: %v", err)
	}
}
