package fakegpu

import "gpuconform.io/gpuconform/internal/clockreasons"

// Clocks is how a driver runs one GPU, as NVML reports it and nvidia-smi prints it (--query-gpu's
// clocks.*, pstate, power.* and clocks_event_reasons.* fields, and `nvidia-smi -q -d CLOCK,PERFORMANCE`).
// It is how a real slow driver shows: a GPU held at low clocks, in a low performance state, with the
// reason it is held there among its active clock event reasons. The fake driver writes it into the
// inventory, the fake nvidia-smi prints it; nothing else in a container learns of it.
type Clocks struct {
	GraphicsMHz int `json:"graphicsMHz"`
	SMMHz       int `json:"smMHz"`
	MemoryMHz   int `json:"memoryMHz"`
	VideoMHz    int `json:"videoMHz"`

	MaxGraphicsMHz int `json:"maxGraphicsMHz"`
	MaxSMMHz       int `json:"maxSMMHz"`
	MaxMemoryMHz   int `json:"maxMemoryMHz"`
	MaxVideoMHz    int `json:"maxVideoMHz"`

	// PState is the performance state, "P0" (maximum performance) to "P12" (minimum).
	PState      string  `json:"pstate"`
	PowerDrawW  float64 `json:"powerDrawW"`
	PowerLimitW float64 `json:"powerLimitW"`
	// EventReasons is the bitmask of the active clock event reasons (package clockreasons).
	EventReasons uint64 `json:"eventReasons"`
}

// The fake GPUs' clocks and power: an H100 SXM5 80GB's (the fake's default product) maximum clocks and
// board power limit. A healthy fake GPU runs at them, as a real one under load does.
const (
	fullGraphicsMHz = 1980
	fullMemoryMHz   = 2619
	fullVideoMHz    = 1755
	powerLimitW     = 700
	busyPowerW      = 412.38 // a made-up draw under load, well inside the limit
	slowPowerW      = 86.25  // what the board draws with its core clocks held down
)

// FullClocks is a healthy GPU's state: maximum clocks, P0, no active clock event reason.
func FullClocks() Clocks {
	return Clocks{
		GraphicsMHz: fullGraphicsMHz, SMMHz: fullGraphicsMHz, MemoryMHz: fullMemoryMHz, VideoMHz: fullVideoMHz,
		MaxGraphicsMHz: fullGraphicsMHz, MaxSMMHz: fullGraphicsMHz, MaxMemoryMHz: fullMemoryMHz, MaxVideoMHz: fullVideoMHz,
		PState: "P0", PowerDrawW: busyPowerW, PowerLimitW: powerLimitW,
	}
}

// SlowedClocks is a GPU whose driver holds its core clocks at 1/factor of their maximum with HW Slowdown
// active, in performance state P8: what a driver that leaves the GPUs in a low power mode, or a board whose
// power brake is asserted, shows. The memory clock and the limits stay.
func SlowedClocks(factor int) Clocks {
	c := FullClocks()
	factor = max(factor, 1)
	c.GraphicsMHz, c.SMMHz, c.VideoMHz = c.MaxGraphicsMHz/factor, c.MaxSMMHz/factor, c.MaxVideoMHz/factor
	c.PState, c.PowerDrawW = "P8", slowPowerW
	c.EventReasons = clockreasons.HWSlowdown
	return c
}

// ClocksOf is the GPU's clock state: its Clocks, or FullClocks when the inventory says nothing.
func (g GPU) ClocksOf() Clocks {
	if g.Clocks == nil {
		return FullClocks()
	}
	return *g.Clocks
}
