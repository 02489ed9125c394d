package localcluster

import (
	"testing"
)

func TestParseBoundingSet(t *testing.T) {
	status := "Name:\tcat\nCapInh:\t0000000000000000\nCapBnd:\t000001fffeffffff\nCapAmb:\t0000000000000000\n"
	got, err := ParseBoundingSet(status)
	if err != nil {
		t.Fatal(err)
	}
	if got&(1<<capSysResource) != 0 {
		t.Errorf("CAP_SYS_RESOURCE reported present in %x", got)
	}
	full, err := ParseBoundingSet("CapBnd:\t000001ffffffffff\n")
	if err != nil || full&(1<<capSysResource) == 0 {
		t.Errorf("full set: %x, %v", full, err)
	}
	if _, err := ParseBoundingSet("Name: x\n"); err == nil {
		t.Error("missing CapBnd line accepted")
	}
}

func TestIsCgroupV1(t *testing.T) {
	const tmpfsMagic, cgroup2Magic = 0x01021994, 0x63677270
	if !IsCgroupV1(tmpfsMagic, false) {
		t.Error("tmpfs-mounted hierarchy (v1/hybrid) not detected")
	}
	if IsCgroupV1(cgroup2Magic, true) {
		t.Error("unified v2 reported as v1")
	}
}

func TestDaemonConfigOnlyWrapsWhenNeeded(t *testing.T) {
	plain := DaemonConfig(HostQuirks{}, "")
	if _, ok := plain["default-runtime"]; ok {
		t.Errorf("runtime wrapped on a host without the quirk: %v", plain)
	}
	wrapped := DaemonConfig(HostQuirks{MissingCapSysResource: true}, "/x/gpuconform-runc")
	if wrapped["default-runtime"] != "gpuconform-runc" {
		t.Errorf("default runtime = %v", wrapped["default-runtime"])
	}
	rts := wrapped["runtimes"].(map[string]any)
	if rts["gpuconform-runc"].(map[string]any)["path"] != "/x/gpuconform-runc" {
		t.Errorf("runtimes = %v", rts)
	}
}

func TestQuirksString(t *testing.T) {
	if s := (HostQuirks{}).String(); s != "none" {
		t.Errorf("got %q", s)
	}
	if s := (HostQuirks{MissingCapSysResource: true, CgroupV1: true}).String(); s != "missing-CAP_SYS_RESOURCE,cgroup-v1" {
		t.Errorf("got %q", s)
	}
}
