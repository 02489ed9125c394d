package smi

import (
	"strings"
	"testing"
	"time"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// withSlowGPU1 swaps the test inventory for one whose GPU 1 a slow driver holds at a quarter of its
// clocks; GPU 3 says nothing about its clocks and reads as a healthy one.
func withSlowGPU1(t *testing.T) {
	t.Helper()
	saved := inventory
	inv := saved
	inv.GPUs = append([]fakegpu.GPU(nil), saved.GPUs...)
	inv.GPUs[1].Clocks = new(fakegpu.SlowedClocks(4))
	inventory = inv
	t.Cleanup(func() { inventory = saved })
}

// The clock and performance fields print as NVIDIA's nvidia-smi prints them: "<n> MHz" and "<w.ww> W"
// with units, bare without, pstate "P<n>", the reasons bitmask as 0x and 16 hex digits, and each
// header the field's canonical name with its unit.
func TestQueryClockFields(t *testing.T) {
	withSlowGPU1(t)
	env := setup(t, twoOfFour())
	const fields = "--query-gpu=index,clocks.sm,clocks.max.sm,clocks.mem,pstate,power.draw,power.limit,clocks_event_reasons.active"
	for format, want := range map[string]string{
		"csv": "index, clocks.current.sm [MHz], clocks.max.sm [MHz], clocks.current.memory [MHz], pstate, power.draw [W], power.limit [W], clocks_event_reasons.active\n" +
			"0, 495 MHz, 1980 MHz, 2619 MHz, P8, 86.25 W, 700.00 W, 0x0000000000000008\n" +
			"1, 1980 MHz, 1980 MHz, 2619 MHz, P0, 412.38 W, 700.00 W, 0x0000000000000000\n",
		"csv,noheader,nounits": "0, 495, 1980, 2619, P8, 86.25, 700.00, 0x0000000000000008\n" +
			"1, 1980, 1980, 2619, P0, 412.38, 700.00, 0x0000000000000000\n",
	} {
		code, stdout, stderr := run(env, fields, "--format="+format)
		if code != ExitOK || stdout != want || stderr != "" {
			t.Errorf("--format=%s: exit %d, stdout\n%s\nstderr %q; want\n%s", format, code, stdout, stderr, want)
		}
	}
}

// The names from before R535 (clocks_throttle_reasons.*) still answer, under the clocks_event_reasons.*
// headers later drivers print for them; each reason reads "Active" or "Not Active".
func TestQueryLegacyThrottleReasons(t *testing.T) {
	withSlowGPU1(t)
	code, stdout, _ := run(setup(t, twoOfFour()),
		"--query-gpu=clocks_throttle_reasons.active,clocks_throttle_reasons.hw_slowdown,clocks_event_reasons.sw_power_cap,clocks_event_reasons.gpu_idle", "--format=csv")
	want := "clocks_event_reasons.active, clocks_event_reasons.hw_slowdown, clocks_event_reasons.sw_power_cap, clocks_event_reasons.gpu_idle\n" +
		"0x0000000000000008, Active, Not Active, Not Active\n" +
		"0x0000000000000000, Not Active, Not Active, Not Active\n"
	if code != ExitOK || stdout != want {
		t.Errorf("exit %d, stdout\n%s\nwant\n%s", code, stdout, want)
	}
	if code, stdout, _ := run(setup(t, twoOfFour()), "--query-gpu=clocks_event_reasons.bogus"); code != ExitBadArgs || !strings.Contains(stdout, `Field "clocks_event_reasons.bogus" is not a valid field to query.`) {
		t.Errorf("an unknown reason field: exit %d, stdout %q", code, stdout)
	}
}

// -q -d PERFORMANCE,CLOCK prints the log header and, per GPU, the performance section then the clock
// section, every key padded to driver 580's 55 columns.
func TestQueryDisplayClockPerformance(t *testing.T) {
	withSlowGPU1(t)
	env := setup(t, map[string]dev{"nvidiactl": {195, 255}, "nvidia1": {195, 1}})
	env.Now = func() time.Time { return time.Date(2026, 12, 1, 9, 5, 7, 0, time.UTC) }
	code, stdout, stderr := run(env, "-q", "-d", "CLOCK,PERFORMANCE")
	want := `
==============NVSMI LOG==============

Timestamp                                              : Tue Dec  1 09:05:07 2026
Driver Version                                         : 550.54.15
CUDA Version                                           : 12.4

Attached GPUs                                          : 1
GPU 00000000:2A:00.0
    Performance State                                  : P8
    Clocks Event Reasons
        Idle                                           : Not Active
        Applications Clocks Setting                    : Not Active
        SW Power Cap                                   : Not Active
        HW Slowdown                                    : Active
            HW Thermal Slowdown                        : Not Active
            HW Power Brake Slowdown                    : Not Active
        Sync Boost                                     : Not Active
        SW Thermal Slowdown                            : Not Active
        Display Clock Setting                          : Not Active
    Clocks Event Reasons Counters
        SW Power Capping                               : 0 us
        Sync Boost                                     : 0 us
        SW Thermal Slowdown                            : 0 us
        HW Thermal Slowdown                            : 0 us
        HW Power Braking                               : 0 us
    Clocks
        Graphics                                       : 495 MHz
        SM                                             : 495 MHz
        Memory                                         : 2619 MHz
        Video                                          : 438 MHz
    Applications Clocks
        Graphics                                       : 1980 MHz
        Memory                                         : 2619 MHz
    Default Applications Clocks
        Graphics                                       : 1980 MHz
        Memory                                         : 2619 MHz
    Deferred Clocks
        Memory                                         : N/A
    Max Clocks
        Graphics                                       : 1980 MHz
        SM                                             : 1980 MHz
        Memory                                         : 2619 MHz
        Video                                          : 1755 MHz
    Max Customer Boost Clocks
        Graphics                                       : 1980 MHz
    Clock Policy
        Auto Boost                                     : N/A
        Auto Boost Default                             : N/A

`
	if code != ExitOK || stdout != want || stderr != "" {
		t.Errorf("exit %d, stderr %q, stdout\n%s\nwant\n%s", code, stderr, stdout, want)
	}

	// A healthy GPU, the display types in lower case and one of them alone.
	env = setup(t, map[string]dev{"nvidiactl": {195, 255}, "nvidia3": {195, 3}})
	code, stdout, _ = run(env, "-q", "-d", "performance")
	if code != ExitOK || !strings.Contains(stdout, "    Performance State                                  : P0\n") ||
		!strings.Contains(stdout, "        HW Slowdown                                    : Not Active\n") || strings.Contains(stdout, "Max Clocks") {
		t.Errorf("-q -d performance of a healthy GPU: exit %d, stdout\n%s", code, stdout)
	}
}

func TestQueryDisplayRefusals(t *testing.T) {
	env := setup(t, twoOfFour())
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"-q", "-d", "MEMORY"}, ExitBadArgs, `Display type "MEMORY" is not supported by the fake nvidia-smi`},
		{[]string{"-d", "CLOCK"}, ExitUnknownOpt, "ERROR: Option -d is not recognized."},
		{[]string{"-q", "-L"}, ExitBadArgs, "ERROR: Option -q is not valid for this command."},
		{[]string{"-q", "-d"}, ExitBadArgs, "ERROR: Option -d requires a value."},
	} {
		code, stdout, _ := run(env, tc.args...)
		if code != tc.code || !strings.Contains(stdout, tc.says) {
			t.Errorf("%q: exit %d, stdout %q; want exit %d saying %q", tc.args, code, stdout, tc.code, tc.says)
		}
	}
}
