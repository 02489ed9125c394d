// Package gpuwork is the workload's GPU work through package cuda: a worker that owns one device's context
// on a locked OS thread and does a training step's work (an FMA load and a copy, timed with CUDA events),
// the noisy-neighbour roles, and the latency probe. Start returns a stand-in sentence instead where the
// container has no CUDA driver.
package gpuwork

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"gpuconform.io/gpuconform/internal/cuda"
)

// StandInPrefix starts every stand-in sentence of the workload.
const StandInPrefix = "stand-in (no CUDA driver in the container)"

// copyBytes is the copy kernel's buffer: large enough that the GPU's caches do not hold it.
const copyBytes = 256 << 20

// Worker owns a device's primary context on one locked goroutine; Do runs work there.
type Worker struct {
	Device        cuda.Device
	DriverVersion string
	jobs          chan func(*cuda.Context)
	done          chan struct{}
}

// Start opens the CUDA driver (lib, or libcuda.so.1 where the container has it) and device 0's context.
// Without a driver it returns (nil, the stand-in sentence, nil); a driver that fails returns the error.
func Start(lib string) (*Worker, string, error) {
	d, err := cuda.Load(lib)
	if nf, ok := errors.AsType[*cuda.NotFoundError](err); ok {
		return nil, fmt.Sprintf("%s: %v", StandInPrefix, nf.Last), nil
	}
	if err != nil {
		return nil, "", err
	}
	v, err := d.DriverVersion()
	if err != nil {
		return nil, "", err
	}
	devs, err := d.Devices()
	if err != nil {
		return nil, "", err
	}
	if len(devs) == 0 {
		return nil, "", errors.New("CUDA shows no device although libcuda loaded")
	}
	w := &Worker{Device: devs[0], DriverVersion: cuda.FormatVersion(v), jobs: make(chan func(*cuda.Context)), done: make(chan struct{})}
	opened := make(chan error)
	go func() {
		defer close(w.done)
		c, err := d.Open(devs[0])
		opened <- err
		if err != nil {
			return
		}
		defer c.Close()
		for job := range w.jobs {
			job(c)
		}
	}()
	if err := <-opened; err != nil {
		return nil, "", err
	}
	return w, "", nil
}

// Do runs f on the worker's context and returns its error.
func (w *Worker) Do(f func(c *cuda.Context) error) error {
	errc := make(chan error, 1)
	w.jobs <- func(c *cuda.Context) { errc <- f(c) }
	return <-errc
}

// Close releases the context.
func (w *Worker) Close() {
	close(w.jobs)
	<-w.done
}

// Describe is the worker's device for a log line.
func (w *Worker) Describe() map[string]any {
	return map[string]any{"mode": "cuda", "cuda": w.DriverVersion, "device": w.Device.Name, "uuid": w.Device.UUID,
		"sms": w.Device.SMs, "compute_capability": w.Device.ComputeCapability}
}

// Measure is one step's GPU work: FP32 throughput and memory bandwidth as CUDA events measured them.
type Measure struct {
	GFLOPS float64 `json:"gflops"`
	GBps   float64 `json:"gbps"`
}

// Stepper does a training step's GPU work: the FMA kernel over the whole device, sized once so that it
// takes about half the step on this GPU, and one copy. A slower GPU takes longer per step and shows a lower
// GFLOP/s; the step's remainder is slept, as the training loop's pace asks.
type Stepper struct {
	w      *Worker
	copier *cuda.Copier
	iters  int
	blocks int
}

// NewStepper sizes the FMA kernel for step (at least 256 iterations) and allocates the copy buffers.
func (w *Worker) NewStepper(step time.Duration) (*Stepper, error) {
	s := &Stepper{w: w}
	err := w.Do(func(c *cuda.Context) error {
		var err error
		s.blocks = c.LoadBlocks()
		if s.iters, err = c.CalibrateIters(max(step/2, time.Millisecond)); err != nil {
			return err
		}
		s.copier, err = c.NewCopier(copyBytes)
		return err
	})
	return s, err
}

// Close frees the copy buffers.
func (s *Stepper) Close() {
	_ = s.w.Do(func(*cuda.Context) error { s.copier.Close(); return nil })
}

// Step does one step's GPU work, then waits out the rest of d (or until ctx ends).
func (s *Stepper) Step(ctx context.Context, d time.Duration) (Measure, error) {
	start := time.Now()
	var m Measure
	err := s.w.Do(func(c *cuda.Context) error {
		f, err := c.FMALoad(s.blocks, s.iters)
		if err != nil {
			return err
		}
		g, err := s.copier.Copy()
		m = Measure{GFLOPS: f.GFLOPS, GBps: g.GBps}
		return err
	})
	if err != nil {
		return m, err
	}
	if err := ctx.Err(); err != nil {
		return m, err
	}
	rest := d - time.Since(start)
	if rest <= 0 {
		return m, nil
	}
	t := time.NewTimer(rest)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return m, ctx.Err()
	case <-t.C:
		return m, nil
	}
}

// Latency is the probe's answer: percentiles of a short kernel's launch-to-completion time, in ms.
type Latency struct {
	P50     float64 `json:"p50_ms"`
	P99     float64 `json:"p99_ms"`
	Samples int     `json:"samples"`
}

// ProbeLatency launches a short kernel (one block per SM, a few thousand FMA steps) n times and returns the
// percentiles of the time from launch to its end as the host sees it: what a latency-bound tenant of a
// shared GPU waits, neighbours' time slices included.
func (w *Worker) ProbeLatency(ctx context.Context, n int) (Latency, error) {
	var ms []float64
	for range n {
		if err := ctx.Err(); err != nil {
			return Latency{}, err
		}
		start := time.Now()
		if err := w.Do(func(c *cuda.Context) error {
			_, err := c.FMALoad(max(1, c.Device.SMs), 2048)
			return err
		}); err != nil {
			return Latency{}, err
		}
		ms = append(ms, float64(time.Since(start).Microseconds())/1e3)
	}
	slices.Sort(ms)
	pick := func(q float64) float64 { return ms[min(len(ms)-1, int(q*float64(len(ms))))] }
	return Latency{P50: pick(0.50), P99: pick(0.99), Samples: len(ms)}, nil
}

// Neighbour keeps the GPU busy until ctx ends: "memory-heavy" copies a large buffer over and over,
// "compute-heavy" runs the FMA kernel over the whole device. It reports each second's throughput to
// report.
func (w *Worker) Neighbour(ctx context.Context, role string, report func(Measure)) error {
	var copier *cuda.Copier
	var iters, blocks int
	if err := w.Do(func(c *cuda.Context) error {
		var err error
		blocks = c.LoadBlocks()
		if role == RoleMemory {
			copier, err = c.NewCopier(copyBytes)
			return err
		}
		iters, err = c.CalibrateIters(20 * time.Millisecond)
		return err
	}); err != nil {
		return err
	}
	if copier != nil {
		defer func() { _ = w.Do(func(*cuda.Context) error { copier.Close(); return nil }) }()
	}
	last := time.Now()
	for ctx.Err() == nil {
		var m Measure
		err := w.Do(func(c *cuda.Context) error {
			if copier != nil {
				t, err := copier.Copy()
				m.GBps = t.GBps
				return err
			}
			t, err := c.FMALoad(blocks, iters)
			m.GFLOPS = t.GFLOPS
			return err
		})
		if err != nil {
			return err
		}
		if time.Since(last) >= time.Second {
			report(m)
			last = time.Now()
		}
	}
	return nil
}

// The noisy-neighbour roles (config.NoisyRole*: the scenario sets one in the pod's environment).
const (
	RoleProbe   = "probe"
	RoleMemory  = "memory-heavy"
	RoleCompute = "compute-heavy"
)
