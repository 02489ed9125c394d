package scenarios

import "testing"

func TestSemverOfDriverVersions(t *testing.T) {
	for in, want := range map[string]string{"550.54.15": "550.54.15", "560.35.03": "560.35.3", "560.35": "560.35.0", "560.35.03-broken": "", "1.2.3.4": ""} {
		if got := semverOf(in); got != want {
			t.Errorf("semverOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDiffStatesNamesWhatChanged(t *testing.T) {
	before := map[string]nodeState{"canary": {Version: "550.54.15", Devices: map[string]int64{"dra": 4}}, "good": {Version: "550.54.15", Devices: map[string]int64{"dra": 4}}}
	after := map[string]nodeState{"canary": {Version: "560.35.03", Devices: map[string]int64{"dra": 3}}, "good": {Version: "550.54.15", Devices: map[string]int64{"dra": 4}}}
	if got := diffStates(before, after); got != "canary: driver 550.54.15 → 560.35.03; canary: dra devices 4 → 3" {
		t.Errorf("diff = %q", got)
	}
	if got := diffStates(before, before); got != "no change" {
		t.Errorf("diff of equal records = %q", got)
	}
}
