package fakeplugin

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

var uuidPattern = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestDeviceIDsAreStablePerNodeAndDistinctAcrossNodes(t *testing.T) {
	dir := shortDir(t)
	first := mustNew(t, testConfig(t, dir, "node-a")).DeviceIDs()
	restarted := mustNew(t, testConfig(t, dir, "node-a")).DeviceIDs()
	other := mustNew(t, testConfig(t, dir, "node-b")).DeviceIDs()

	if len(first) != 4 {
		t.Fatalf("default config advertises %d devices, want 4", len(first))
	}
	if !slices.Equal(first, restarted) {
		t.Errorf("IDs changed across a restart on the same node:\n%v\n%v", first, restarted)
	}
	seen := map[string]string{}
	for _, set := range []struct {
		node string
		ids  []string
	}{{"node-a", first}, {"node-b", other}} {
		for _, id := range set.ids {
			if !uuidPattern.MatchString(id) {
				t.Errorf("ID %q of %s is not NVIDIA-UUID shaped", id, set.node)
			}
			if len(id) > 63 {
				t.Errorf("ID %q is longer than the 63 characters the device plugin API allows", id)
			}
			if prev, dup := seen[id]; dup {
				t.Errorf("ID %q appears on %s and %s", id, prev, set.node)
			}
			seen[id] = set.node
		}
	}
}

func TestTimeSlicingAdvertisesReplicasPerGPU(t *testing.T) {
	cfg := testConfig(t, shortDir(t), "node-a")
	cfg.Devices, cfg.Replicas = 3, 2
	p := mustNew(t, cfg)
	uuids := p.PhysicalUUIDs()
	want := []string{
		uuids[0] + "::0", uuids[0] + "::1",
		uuids[1] + "::0", uuids[1] + "::1",
		uuids[2] + "::0", uuids[2] + "::1",
	}
	if got := p.DeviceIDs(); !slices.Equal(got, want) {
		t.Fatalf("advertised IDs:\n got %v\nwant %v", got, want)
	}
	for _, id := range want {
		if len(id) > 63 {
			t.Errorf("replica ID %q exceeds 63 characters", id)
		}
	}
	if got := cfg.SharingStrategy(); got != "time-slicing" {
		t.Errorf("sharing strategy = %q, want time-slicing", got)
	}
}

func TestHealthAnnotationParsing(t *testing.T) {
	cfg := testConfig(t, shortDir(t), "node-a")
	cfg.Replicas = 2
	p := mustNew(t, cfg)
	u := p.PhysicalUUIDs()
	cases := []struct {
		value     string
		unhealthy []int
		unknown   []string
	}{
		{"", nil, nil},
		{"0,2", []int{0, 2}, nil},
		{" 1 , ,3", []int{1, 3}, nil},
		{u[1], []int{1}, nil},
		{ReplicaID(u[3], 1), []int{3}, nil}, // a replica fails its whole GPU
		{"4,-1,GPU-nope,0", []int{0}, []string{"4", "-1", "GPU-nope"}},
	}
	for _, c := range cases {
		set, unknown := p.table.parseUnhealthy(c.value)
		var got []int
		for i := range set {
			got = append(got, i)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.unhealthy) || !slices.Equal(unknown, c.unknown) {
			t.Errorf("parse %q = %v (unknown %v), want %v (unknown %v)", c.value, got, unknown, c.unhealthy, c.unknown)
		}
	}

	// All replicas of a failed GPU are reported Unhealthy, and nothing else.
	p.SetUnhealthyFromAnnotation("1")
	for _, d := range p.Devices() {
		wantBad := strings.HasPrefix(d.ID, u[1]+"::")
		if (d.Health == pluginapi.Unhealthy) != wantBad {
			t.Errorf("device %s health %s, want unhealthy=%v", d.ID, d.Health, wantBad)
		}
	}
}

func TestWrongIndexesNeverOverlapTheRequestAndStayOnItsPath(t *testing.T) {
	tab := newDeviceTable("node-a", 4, 4, 1) // 0-3 device plugin, 4-7 DRA
	cases := [][]int{{0}, {1, 2}, {3}, {0, 1, 2}, {0, 1, 2, 3}, {2, 0}, {4}, {5, 7}, {4, 5, 6, 7}}
	for _, req := range cases {
		got := tab.wrongIndexes(req)
		if len(got) != len(req) {
			t.Errorf("request %v: got %d wrong devices, want %d", req, len(got), len(req))
		}
		for _, i := range got {
			if slices.Contains(req, i) {
				t.Errorf("request %v: wrong-ids fault handed out requested device %d", req, i)
			}
			onDP := req[0] < 4
			if i < 8 && (i < 4) != onDP {
				t.Errorf("request %v: wrong device %d is on the other path", req, i)
			}
		}
	}
	// "Next unrequested device": a request for GPU 1 gets GPU 2; for GPU 7 (DRA) it wraps to 4.
	if got := tab.wrongIndexes([]int{1}); got[0] != 2 {
		t.Errorf("wrong device for [1] = %d, want 2", got[0])
	}
	if got := tab.wrongIndexes([]int{7}); got[0] != 4 {
		t.Errorf("wrong device for [7] = %d, want 4", got[0])
	}
	// The device plugin never advertises DRA GPUs.
	if len(tab.ids) != 4 {
		t.Errorf("advertised %d IDs, want the 4 device-plugin GPUs", len(tab.ids))
	}
}

func TestValidateRejectsUnusableConfig(t *testing.T) {
	base := testConfig(t, shortDir(t), "node-a")
	mutations := map[string]func(*Config){
		"no node":         func(c *Config) { c.NodeName = "" },
		"bare resource":   func(c *Config) { c.ResourceName = "gpu" },
		"zero devices":    func(c *Config) { c.Devices = 0 },
		"zero replicas":   func(c *Config) { c.Replicas = 0 },
		"unknown fault":   func(c *Config) { c.Faults = []Fault{"explode"} },
		"dra, no driver":  func(c *Config) { c.DRADevices, c.DRADriverName = 2, "" },
		"no plugin dir":   func(c *Config) { c.PluginDir = "" },
		"inverse backoff": func(c *Config) { c.RegisterMaxBackoff = c.RegisterInitialBackoff / 2 },
	}
	for name, mutate := range mutations {
		c := base
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted the config", name)
		}
	}
	if err := base.Validate(); err != nil {
		t.Errorf("base config rejected: %v", err)
	}
}

// newDeviceTable is the table of a node without MIG: devices device-plugin GPUs advertised replicas
// times each on nvidia.com/gpu, then draDevices DRA GPUs.
func newDeviceTable(node string, devices, draDevices, replicas int) *deviceTable {
	mode := fakegpu.SharingNone
	if replicas > 1 {
		mode = fakegpu.SharingTimeSlicing
	}
	return newModeTable(node, "nvidia.com/gpu", mode, devices, draDevices, replicas)
}
