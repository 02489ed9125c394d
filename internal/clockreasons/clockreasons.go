// Package clockreasons names NVML's clock event reasons (nvml.h nvmlClocksEventReason*; the same bits were
// nvmlClocksThrottleReason* before R535), which nvidia-smi prints as clocks_event_reasons.active: the suite
// reads them (framework/upgrade) and the fake GPUs' nvidia-smi writes them (internal/fakegpu).
package clockreasons

import "fmt"

// The reasons' bits.
const (
	GPUIdle                   uint64 = 0x0000000000000001
	ApplicationsClocksSetting uint64 = 0x0000000000000002
	SWPowerCap                uint64 = 0x0000000000000004
	HWSlowdown                uint64 = 0x0000000000000008
	SyncBoost                 uint64 = 0x0000000000000010
	SWThermalSlowdown         uint64 = 0x0000000000000020
	HWThermalSlowdown         uint64 = 0x0000000000000040
	HWPowerBrakeSlowdown      uint64 = 0x0000000000000080
	DisplayClockSetting       uint64 = 0x0000000000000100
)

// Slowdown are the reasons that hold a GPU's clocks below what its work asks for: a clock limit
// set on it, its power cap, and the thermal and hardware slowdowns. GPU Idle (nothing runs, the clocks
// drop), Sync Boost and the display clock setting are not: a GPU that shows only those is not held back.
const Slowdown = ApplicationsClocksSetting | SWPowerCap | HWSlowdown |
	SWThermalSlowdown | HWThermalSlowdown | HWPowerBrakeSlowdown

var names = []struct {
	bit  uint64
	name string
}{
	{GPUIdle, "GPU Idle"}, {ApplicationsClocksSetting, "Applications Clocks Setting"},
	{SWPowerCap, "SW Power Cap"}, {HWSlowdown, "HW Slowdown"}, {SyncBoost, "Sync Boost"},
	{SWThermalSlowdown, "SW Thermal Slowdown"}, {HWThermalSlowdown, "HW Thermal Slowdown"},
	{HWPowerBrakeSlowdown, "HW Power Brake Slowdown"}, {DisplayClockSetting, "Display Clock Setting"},
}

// Names names the reasons of mask, in NVML's bit order (an unknown bit by its value).
func Names(mask uint64) []string {
	var out []string
	for _, r := range names {
		if mask&r.bit != 0 {
			out = append(out, r.name)
			mask &^= r.bit
		}
	}
	if mask != 0 {
		out = append(out, fmt.Sprintf("reason %#x", mask))
	}
	return out
}

// All is every reason above (nvmlClocksEventReasonAll).
const All uint64 = 0x00000000000001FF
