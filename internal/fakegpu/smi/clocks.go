package smi

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"gpuconform.io/gpuconform/internal/clockreasons"
	"gpuconform.io/gpuconform/internal/fakegpu"
)

// What the fake answers about a GPU's clocks and performance, from the inventory's fakegpu.Clocks: the
// --query-gpu fields of NVIDIA's `nvidia-smi --help-query-gpu` (clocks.*, pstate, power.*,
// clocks_event_reasons.* with their clocks_throttle_reasons.* names from before R535) and the CLOCK and
// PERFORMANCE sections of `nvidia-smi -q`, laid out as driver 580's nvidia-smi lays them out.

// clockFields are the clock and performance --query-gpu fields, by every name the real tool accepts. As
// for its other aliases, the header is the field's canonical name: clocks.sm prints "clocks.current.sm
// [MHz]", and a clocks_throttle_reasons.* name prints its clocks_event_reasons.* header.
func clockFields() map[string]field {
	mhz := func(header string, of func(fakegpu.Clocks) int) field {
		return field{header + " [MHz]", func(_ fakegpu.Inventory, _ int, g gpu, units bool) string {
			v := strconv.Itoa(of(g.ClocksOf()))
			if units {
				v += " MHz"
			}
			return v
		}}
	}
	watts := func(header string, of func(fakegpu.Clocks) float64) field {
		return field{header + " [W]", func(_ fakegpu.Inventory, _ int, g gpu, units bool) string {
			v := strconv.FormatFloat(of(g.ClocksOf()), 'f', 2, 64)
			if units {
				v += " W"
			}
			return v
		}}
	}
	out := map[string]field{
		"pstate":               {"pstate", func(_ fakegpu.Inventory, _ int, g gpu, _ bool) string { return g.ClocksOf().PState }},
		"power.draw":           watts("power.draw", func(c fakegpu.Clocks) float64 { return c.PowerDrawW }),
		"power.limit":          watts("power.limit", func(c fakegpu.Clocks) float64 { return c.PowerLimitW }),
		"enforced.power.limit": watts("enforced.power.limit", func(c fakegpu.Clocks) float64 { return c.PowerLimitW }),
		"clocks_event_reasons.active": {"clocks_event_reasons.active", func(_ fakegpu.Inventory, _ int, g gpu, _ bool) string {
			return ReasonsBitmask(g.ClocksOf().EventReasons)
		}},
	}
	for _, c := range []struct {
		names  []string
		header string
		of     func(fakegpu.Clocks) int
	}{
		{[]string{"clocks.current.graphics", "clocks.gr"}, "clocks.current.graphics", func(c fakegpu.Clocks) int { return c.GraphicsMHz }},
		{[]string{"clocks.current.sm", "clocks.sm"}, "clocks.current.sm", func(c fakegpu.Clocks) int { return c.SMMHz }},
		{[]string{"clocks.current.memory", "clocks.mem"}, "clocks.current.memory", func(c fakegpu.Clocks) int { return c.MemoryMHz }},
		{[]string{"clocks.current.video", "clocks.video"}, "clocks.current.video", func(c fakegpu.Clocks) int { return c.VideoMHz }},
		{[]string{"clocks.max.graphics", "clocks.max.gr"}, "clocks.max.graphics", func(c fakegpu.Clocks) int { return c.MaxGraphicsMHz }},
		{[]string{"clocks.max.sm"}, "clocks.max.sm", func(c fakegpu.Clocks) int { return c.MaxSMMHz }},
		{[]string{"clocks.max.memory", "clocks.max.mem"}, "clocks.max.memory", func(c fakegpu.Clocks) int { return c.MaxMemoryMHz }},
	} {
		for _, n := range c.names {
			out[n] = mhz(c.header, c.of)
		}
	}
	for _, r := range eventReasons {
		if r.field == "" {
			continue
		}
		bit := r.bit
		out["clocks_event_reasons."+r.field] = field{"clocks_event_reasons." + r.field, func(_ fakegpu.Inventory, _ int, g gpu, _ bool) string {
			return activeOrNot(g.ClocksOf().EventReasons&bit != 0)
		}}
	}
	// The names of the same fields before R535, which later drivers still accept.
	for name, f := range out {
		if rest, ok := strings.CutPrefix(name, "clocks_event_reasons."); ok {
			out["clocks_throttle_reasons."+rest] = f
		}
	}
	return out
}

// ReasonsBitmask prints a clock event reasons bitmask as nvidia-smi's clocks_event_reasons.active does.
func ReasonsBitmask(mask uint64) string { return fmt.Sprintf("0x%016X", mask) }

func activeOrNot(active bool) string {
	if active {
		return "Active"
	}
	return "Not Active"
}

// eventReasons are the clock event reasons in the order and with the names `nvidia-smi -q` lists them
// (indent 1: listed under HW Slowdown), with their --query-gpu field names.
var eventReasons = []struct {
	bit    uint64
	name   string
	indent int
	field  string
}{
	{clockreasons.GPUIdle, "Idle", 0, "gpu_idle"},
	{clockreasons.ApplicationsClocksSetting, "Applications Clocks Setting", 0, "applications_clocks_setting"},
	{clockreasons.SWPowerCap, "SW Power Cap", 0, "sw_power_cap"},
	{clockreasons.HWSlowdown, "HW Slowdown", 0, "hw_slowdown"},
	{clockreasons.HWThermalSlowdown, "HW Thermal Slowdown", 1, "hw_thermal_slowdown"},
	{clockreasons.HWPowerBrakeSlowdown, "HW Power Brake Slowdown", 1, "hw_power_brake_slowdown"},
	{clockreasons.SyncBoost, "Sync Boost", 0, "sync_boost"},
	{clockreasons.SWThermalSlowdown, "SW Thermal Slowdown", 0, "sw_thermal_slowdown"},
	{clockreasons.DisplayClockSetting, "Display Clock Setting", 0, ""},
}

// Display types of -q -d the fake answers (the real tool also has MEMORY, ECC, TEMPERATURE, POWER, ...).
const (
	DisplayClock       = "CLOCK"
	DisplayPerformance = "PERFORMANCE"
)

// parseDisplay reads -d's comma-separated display types; the real tool takes them in any case.
func parseDisplay(value string) ([]string, error) {
	var out []string
	for raw := range strings.SplitSeq(value, ",") {
		d := strings.ToUpper(strings.TrimSpace(raw))
		if d != DisplayClock && d != DisplayPerformance {
			// The fake's wording (not recorded from the real tool): it answers only these two.
			return nil, argErr{ExitBadArgs, fmt.Sprintf("ERROR: Display type %q is not supported by the fake nvidia-smi (it answers -d %s,%s).\n", raw, DisplayClock, DisplayPerformance)}
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// smiKeyWidth is where driver 580's `nvidia-smi -q` puts the colon: every key, whatever its indent, is
// padded to 55 columns (older drivers used 42).
const smiKeyWidth = 55

// writeQuery prints `nvidia-smi -q -d <display>` for the visible GPUs: the log header, then per GPU its
// PERFORMANCE section (performance state, clock event reasons and their counters) and its CLOCK section
// (current, applications, default applications, deferred, max and max boost clocks, clock policy), in
// the order a full -q prints them. Without -d the fake prints both, which is all of -q it knows.
func writeQuery(w io.Writer, inv fakegpu.Inventory, gpus []gpu, display []string, now time.Time) {
	if len(display) == 0 {
		display = []string{DisplayPerformance, DisplayClock}
	}
	kv := func(indent int, key, value string) {
		k := strings.Repeat("    ", indent) + key
		if value == "" {
			fmt.Fprintln(w, k)
			return
		}
		fmt.Fprintf(w, "%-*s: %s\n", smiKeyWidth, k, value)
	}
	mhz := func(v int) string { return strconv.Itoa(v) + " MHz" }
	fmt.Fprintln(w)
	fmt.Fprintln(w, "==============NVSMI LOG==============")
	fmt.Fprintln(w)
	kv(0, "Timestamp", now.Format("Mon Jan _2 15:04:05 2006"))
	kv(0, "Driver Version", notAvailable(inv.DriverVersion))
	kv(0, "CUDA Version", notAvailable(inv.CUDAVersion))
	fmt.Fprintln(w)
	kv(0, "Attached GPUs", strconv.Itoa(len(gpus)))
	for i, g := range gpus {
		if i > 0 {
			fmt.Fprintln(w)
		}
		c := g.ClocksOf()
		fmt.Fprintln(w, "GPU "+notAvailable(g.PCIBusID))
		if slices.Contains(display, DisplayPerformance) {
			kv(1, "Performance State", c.PState)
			kv(1, "Clocks Event Reasons", "")
			for _, r := range eventReasons {
				kv(2+r.indent, r.name, activeOrNot(c.EventReasons&r.bit != 0))
			}
			// The counters of the reasons' time in microseconds since the driver loaded: the fake keeps none.
			kv(1, "Clocks Event Reasons Counters", "")
			for _, n := range []string{"SW Power Capping", "Sync Boost", "SW Thermal Slowdown", "HW Thermal Slowdown", "HW Power Braking"} {
				kv(2, n, "0 us")
			}
		}
		if slices.Contains(display, DisplayClock) {
			kv(1, "Clocks", "")
			kv(2, "Graphics", mhz(c.GraphicsMHz))
			kv(2, "SM", mhz(c.SMMHz))
			kv(2, "Memory", mhz(c.MemoryMHz))
			kv(2, "Video", mhz(c.VideoMHz))
			for _, section := range []string{"Applications Clocks", "Default Applications Clocks"} {
				kv(1, section, "")
				kv(2, "Graphics", mhz(c.MaxGraphicsMHz))
				kv(2, "Memory", mhz(c.MaxMemoryMHz))
			}
			kv(1, "Deferred Clocks", "")
			kv(2, "Memory", "N/A")
			kv(1, "Max Clocks", "")
			kv(2, "Graphics", mhz(c.MaxGraphicsMHz))
			kv(2, "SM", mhz(c.MaxSMMHz))
			kv(2, "Memory", mhz(c.MaxMemoryMHz))
			kv(2, "Video", mhz(c.MaxVideoMHz))
			kv(1, "Max Customer Boost Clocks", "")
			kv(2, "Graphics", mhz(c.MaxGraphicsMHz))
			kv(1, "Clock Policy", "")
			kv(2, "Auto Boost", "N/A")
			kv(2, "Auto Boost Default", "N/A")
		}
	}
	fmt.Fprintln(w)
}
