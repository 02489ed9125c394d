package upgrade

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gpuconform.io/gpuconform/internal/clockreasons"
)

// What a slow driver shows of a GPU: nvidia-smi's clock and performance fields, read in the representative
// load's containers while the load runs. A GPU a driver holds back runs its SM clock far below its maximum
// (clocks.sm against clocks.max.sm), often in a low performance state (pstate), with the reason among its
// active clock event reasons (NVML's nvmlClocksEventReason* bitmask, clocks_event_reasons.active; the same
// bits were clocks_throttle_reasons.active before driver R535).

// The --query-gpu fields the rehearsal reads, in this order (NVIDIA's `nvidia-smi --help-query-gpu`):
// clocks.sm is clocks.current.sm, clocks.mem clocks.current.memory.
const (
	ReasonsField       = "clocks_event_reasons.active"
	LegacyReasonsField = "clocks_throttle_reasons.active" // before R535; later drivers still accept it
)

var clockFields = []string{"index", "uuid", "clocks.sm", "clocks.max.sm", "clocks.mem", "pstate", "power.draw", "power.limit", ReasonsField}

// ClockQuery is the nvidia-smi command line that reads the clocks of a container's GPUs; legacy asks for
// the reasons under their name from before R535, for a driver that refused the current one.
func ClockQuery(legacy bool) []string {
	fields := append([]string(nil), clockFields...)
	if legacy {
		fields[len(fields)-1] = LegacyReasonsField
	}
	return []string{"nvidia-smi", "--query-gpu=" + strings.Join(fields, ","), "--format=csv,noheader,nounits"}
}

// RefusedField reports whether nvidia-smi's output is its refusal of a --query-gpu field it does not know
// (`Field "x" is not a valid field to query.`, exit 2).
func RefusedField(output, field string) bool {
	return strings.Contains(output, fmt.Sprintf("Field %q is not a valid field to query", field))
}

// GPUClocks is one GPU's clock state as nvidia-smi printed it.
type GPUClocks struct {
	Index, UUID string
	// SMMHz, MaxSMMHz and MemMHz are -1 when nvidia-smi reports none ([N/A], [Not Supported]).
	SMMHz, MaxSMMHz, MemMHz int
	PState                  string
	// PowerDrawW and PowerLimitW are -1 when not reported.
	PowerDrawW, PowerLimitW float64
	// Reasons is the active clock event reasons bitmask, when ReasonsKnown.
	Reasons      uint64
	ReasonsKnown bool
}

// ParseClocks reads ClockQuery's output: one line per GPU, cells separated by ", ", units tolerated.
func ParseClocks(out string) ([]GPUClocks, error) {
	var gpus []GPUClocks
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		cells := strings.Split(line, ",")
		if len(cells) != len(clockFields) {
			return nil, fmt.Errorf("nvidia-smi printed %q: %d cells, want %d (%s)", line, len(cells), len(clockFields), strings.Join(clockFields, ","))
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		g := GPUClocks{Index: cells[0], UUID: cells[1], SMMHz: mhz(cells[2]), MaxSMMHz: mhz(cells[3]), MemMHz: mhz(cells[4]),
			PState: cells[5], PowerDrawW: watts(cells[6]), PowerLimitW: watts(cells[7])}
		if hex, ok := strings.CutPrefix(strings.ToLower(cells[8]), "0x"); ok {
			if v, err := strconv.ParseUint(hex, 16, 64); err == nil {
				g.Reasons, g.ReasonsKnown = v, true
			}
		}
		gpus = append(gpus, g)
	}
	if len(gpus) == 0 {
		return nil, errors.New("nvidia-smi listed no GPU")
	}
	return gpus, nil
}

func mhz(s string) int {
	v, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(s, "MHz")))
	if err != nil || v < 0 {
		return -1
	}
	return v
}

func watts(s string) float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(s, "W")), 64)
	if err != nil || v < 0 {
		return -1
	}
	return v
}

// SMRatio is the SM clock over its maximum, and whether both are reported.
func (g GPUClocks) SMRatio() (float64, bool) {
	if g.SMMHz < 0 || g.MaxSMMHz <= 0 {
		return 0, false
	}
	return float64(g.SMMHz) / float64(g.MaxSMMHz), true
}

// Slowdowns are its active clockreasons.Slowdown (0 when the reasons are not known).
func (g GPUClocks) Slowdowns() uint64 {
	if !g.ReasonsKnown {
		return 0
	}
	return g.Reasons & clockreasons.Slowdown
}

// Describe is the GPU's state in the fields' terms: "495 of 1980 MHz (pstate P8, HW Slowdown active,
// clocks_event_reasons.active 0x0000000000000008, power.draw 86.25 of 700.00 W)".
func (g GPUClocks) Describe() string {
	sm := "clocks.sm not reported"
	if _, ok := g.SMRatio(); ok {
		sm = fmt.Sprintf("%d of %d MHz", g.SMMHz, g.MaxSMMHz)
	} else if g.SMMHz >= 0 {
		sm = fmt.Sprintf("%d MHz (clocks.max.sm not reported)", g.SMMHz)
	}
	details := []string{"pstate " + orDash(g.PState)}
	switch {
	case !g.ReasonsKnown:
		details = append(details, "clock event reasons not reported")
	case g.Reasons == 0:
		details = append(details, "no clock event reason active", fmt.Sprintf("%s 0x%016X", ReasonsField, g.Reasons))
	default:
		details = append(details, strings.Join(clockreasons.Names(g.Reasons), ", ")+" active", fmt.Sprintf("%s 0x%016X", ReasonsField, g.Reasons))
	}
	if g.PowerDrawW >= 0 && g.PowerLimitW > 0 {
		details = append(details, fmt.Sprintf("power.draw %.2f of %.2f W", g.PowerDrawW, g.PowerLimitW))
	}
	return sm + " (" + strings.Join(details, ", ") + ")"
}

// ClockSample is one reading of the two loads' GPUs, taken at the same moment of the window.
type ClockSample struct {
	Canary, KnownGood []GPUClocks
}

// finding compares one sample: a canary GPU whose SM clock is below minRatio of its maximum while the
// known-good GPU's is not, or that has a slowdown reason active that the known-good GPU has not. It
// names the nodes, the fields and the values; "" when the canary's GPUs look as the known-good's do.
func (s ClockSample) finding(canaryNode, goodNode string, minRatio float64) string {
	if len(s.KnownGood) == 0 {
		return ""
	}
	// The known-good GPU the canary is held against: the one running closest to its maximum.
	ref := s.KnownGood[0]
	best, _ := ref.SMRatio()
	for _, g := range s.KnownGood[1:] {
		if r, ok := g.SMRatio(); ok && r > best {
			ref, best = g, r
		}
	}
	refRatio, refOK := ref.SMRatio()
	for _, c := range s.Canary {
		var why []string
		if r, ok := c.SMRatio(); ok && refOK && r < minRatio && refRatio >= minRatio {
			why = append(why, fmt.Sprintf("clocks.sm below %.2f of clocks.max.sm on the canary only", minRatio))
		}
		if c.ReasonsKnown && ref.ReasonsKnown {
			if extra := c.Slowdowns() &^ ref.Slowdowns(); extra != 0 {
				why = append(why, strings.Join(clockreasons.Names(extra), ", ")+" active on the canary only")
			}
		}
		if len(why) > 0 {
			return fmt.Sprintf("the upgraded canary %s runs its GPU at %s; the known-good %s at %s: %s",
				canaryNode, c.Describe(), goodNode, ref.Describe(), strings.Join(why, "; "))
		}
	}
	return ""
}
