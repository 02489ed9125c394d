package upgrade

import (
	"strings"
	"testing"
	"time"
)

func TestAppChecksRoundTrip(t *testing.T) {
	rows := []AppCheck{{Check: "device identity", Path: "dra", Node: "w3", Result: AppCheckPassed},
		{Check: "sharing", Path: "device-plugin", Result: AppCheckNotApplicable + ": the canary pool shares no GPU"}}
	text := FormatAppChecks(rows)
	back := ParseAppChecks(`"` + text + `"`) // as a report entry read back from JSON
	if len(back) != 2 || back[0] != rows[0] || back[1].Node != "-" || back[1].Result != rows[1].Result {
		t.Errorf("round trip of %q gave %+v", text, back)
	}
}

func TestLoadRatio(t *testing.T) {
	l := Load{CanaryRate: 2.5, GoodRate: 10, MinRatio: 0.8}
	if l.Ratio() != 0.25 || l.Passed() {
		t.Errorf("a canary at a quarter of the rate: ratio %g passed %t", l.Ratio(), l.Passed())
	}
	l.CanaryRate = 9
	if !l.Passed() {
		t.Errorf("ratio %g must pass %g", l.Ratio(), l.MinRatio)
	}
	if (Load{CanaryRate: 1, MinRatio: 0.8}).Passed() {
		t.Error("no progress on the known-good pool cannot be compared, so it does not pass")
	}
	if s := l.String(); !strings.Contains(s, "ratio 0.90 (minimum 0.80)") {
		t.Errorf("String() = %q", s)
	}
}

func TestReserveBreach(t *testing.T) {
	r := Reserve{Deployment: "ns/serving", Budget: "ns/serving", Replicas: 2, MinAvailable: 1,
		Samples: []Sample{{0, 2}, {time.Second, 1}, {3 * time.Second, 2}}}
	if _, breached := r.Breach(); breached || r.Min() != 1 {
		t.Errorf("min %d, breached %t: one replica moving at a time keeps the minimum", r.Min(), breached)
	}
	r.Samples = append(r.Samples, Sample{4 * time.Second, 0})
	s, breached := r.Breach()
	if !breached || s.Available != 0 || s.At != 4*time.Second {
		t.Errorf("breach %+v %t, want the sample at 4s with 0", s, breached)
	}
	if (Reserve{}).Min() != -1 {
		t.Error("no sample: Min must say so")
	}
	if str := r.String(); !strings.Contains(str, "fewest available 0") || !strings.Contains(str, "1s=1") {
		t.Errorf("String() = %q", str)
	}
}
