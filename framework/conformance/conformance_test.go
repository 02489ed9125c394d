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
			if r.Description == "" {
				t.Errorf("%s: %s has no description", v, r.ID)
			}
		}
		// The requirements this suite proves are in every version it knows.
		for _, id := range []ID{SecureAcceleratorAccess, GangScheduling, AcceleratorMetrics, RobustController} {
			r, ok := c.Find(id)
			if !ok || r.OutOfScope != "" || r.Level != Must {
				t.Errorf("%s: %s missing, out of scope or not MUST: %+v", v, id, r)
			}
		}
	}
	c134, _ := For("1.34")
	c136, _ := For("1.36")
	c137, _ := For("1.37")
	c138, _ := For("1.38")
	if r, ok := c134.Find(DRASupport); !ok || r.Level != Must {
		t.Errorf("1.34: dra_support = %+v, the checklist says MUST", r)
	}
	if _, ok := c136.Find(WorkloadSandboxing); ok {
		t.Error("1.36 has workload_sandboxing, which 1.37 added")
	}
	if r, ok := c137.Find(WorkloadSandboxing); !ok || r.Level != Should || len(c137.Requirements) != len(c136.Requirements)+1 {
		t.Errorf("1.37: workload_sandboxing = %+v, %d requirements", r, len(c137.Requirements))
	}
	if r, _ := c137.Find(DriverRuntimeManagement); r.Level != Should || c137.Draft {
		t.Errorf("1.37: driver_runtime_management %s, draft %v", r.Level, c137.Draft)
	}
	if r, _ := c138.Find(DriverRuntimeManagement); r.Level != Must || !c138.Draft {
		t.Errorf("the 1.38 draft: driver_runtime_management %s, draft %v", r.Level, c138.Draft)
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

func TestForKubernetes(t *testing.T) {
	for in, want := range map[string]struct {
		version string
		ok      bool
	}{"v1.37.2": {"1.37", true}, "v1.33.0-gke.100": {"1.33", true}, "1.36": {"1.36", true}, "v1.38.0": {"1.38", false}, "v1.30.4": {"1.30", false}, "garbage": {"", false}} {
		if v, ok := ForKubernetes(in); v != want.version || ok != want.ok {
			t.Errorf("ForKubernetes(%q) = %q, %v; want %q, %v", in, v, ok, want.version, want.ok)
		}
	}
}
