package conformance

import (
	"slices"
	"testing"
)

func TestChecklists(t *testing.T) {
	for _, v := range Versions() {
		c, err := For(v)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[ID]bool{}
		for _, r := range c.Requirements {
			if seen[r.ID] {
				t.Errorf("%s lists %s twice", v, r.ID)
			}
			seen[r.ID] = true
			if !slices.Contains(Sections(), r.Section) || (r.Level != Must && r.Level != Should) || r.Summary == "" {
				t.Errorf("%s: %+v has no known section, level or summary", v, r)
			}
		}
		// The requirements this suite proves are in every version it knows.
		for _, id := range []ID{SecureAcceleratorAccess, GangScheduling, AcceleratorMetrics, DriverRuntimeManagement, GPUSharing} {
			r, ok := c.Find(id)
			if !ok || r.OutOfScope != "" {
				t.Errorf("%s: %s missing or out of scope: %+v", v, id, r)
			}
		}
	}
	c136, _ := For("1.36")
	c137, _ := For("1.37")
	if _, ok := c136.Find(WorkloadSandboxing); ok {
		t.Error("1.36 has workload_sandboxing, which 1.37 added")
	}
	if r, ok := c137.Find(WorkloadSandboxing); !ok || r.Level != Should || len(c137.Requirements) != len(c136.Requirements)+1 {
		t.Errorf("1.37: workload_sandboxing = %+v, %d requirements", r, len(c137.Requirements))
	}
	if r, _ := c137.Find(GangScheduling); r.Level != Must {
		t.Errorf("gang_scheduling is %s, the checklist says MUST", r.Level)
	}
	if _, err := For("1.20"); err == nil {
		t.Error("an unknown version was accepted")
	}
	if !Known(WorkloadSandboxing) || Known("dra_supprot") {
		t.Error("Known disagrees with the checklists")
	}
}

func TestParseProfile(t *testing.T) {
	for in, want := range map[string]struct {
		conf    bool
		version string
	}{"": {false, Latest}, "signoff": {false, Latest}, "ai-conformance": {true, Latest}, "ai-conformance-1.36": {true, "1.36"}, "ai-conformance-1.37": {true, "1.37"}} {
		conf, v, err := ParseProfile(in)
		if err != nil || conf != want.conf || v != want.version {
			t.Errorf("ParseProfile(%q) = %v, %q, %v", in, conf, v, err)
		}
	}
	for _, bad := range []string{"ai-conformance-1.20", "conformance", "signoff-1.37"} {
		if _, _, err := ParseProfile(bad); err == nil {
			t.Errorf("ParseProfile(%q) accepted", bad)
		}
	}
}
