package fakegpu

import (
	"fmt"
	"testing"
)

// Every MIG device of every GPU a node can have gets its own cap minor, none of them the driver's config
// (1) or monitor (2) minor, so a container's cap devices name its MIG devices unambiguously.
func TestMIGCapMinorsAreDistinct(t *testing.T) {
	seen := map[int]string{}
	for gpu := range 16 {
		for _, p := range PlacementsOf() {
			k := MIGCapMinor(gpu, p)
			what := fmt.Sprintf("GPU %d %s@%d", gpu, p.Profile, p.Start)
			if k < 3 {
				t.Errorf("%s: cap minor %d is one of the driver's own", what, k)
			}
			if other, dup := seen[k]; dup {
				t.Errorf("%s and %s share cap minor %d", what, other, k)
			}
			seen[k] = what
		}
	}
}

func TestPlacements(t *testing.T) {
	if n := len(PlacementsOf()); n != 14 {
		t.Errorf("%d placements of the H100 profiles, want 14 (7+3+2+1+1)", n)
	}
	parts := PartitionPlacements()
	if len(parts) != 13 {
		t.Errorf("%d partition placements, want 13 (every placement but the 7g one)", len(parts))
	}
	for _, p := range parts {
		if p.Profile == "7g.80gb" {
			t.Errorf("partition placements include %v, the whole GPU", p)
		}
	}
	if PlacementIndex(Placement{Profile: "3g.40gb", Start: 4}) != 11 || PlacementIndex(Placement{Profile: "3g.40gb", Start: 2}) != -1 {
		t.Errorf("PlacementIndex: 3g.40gb@4 = %d (want 11), 3g.40gb@2 = %d (want -1)",
			PlacementIndex(Placement{Profile: "3g.40gb", Start: 4}), PlacementIndex(Placement{Profile: "3g.40gb", Start: 2}))
	}
}

func TestInventoryFindsMIGDevices(t *testing.T) {
	g := GPU{Minor: 2, UUID: "GPU-x", Path: PathDevicePlugin}
	for _, p := range SingleLayout {
		g.MIG = append(g.MIG, NewMIGDevice(g.UUID, g.Minor, p, g.Path))
	}
	inv := Inventory{GPUs: []GPU{{Minor: 0, UUID: "GPU-w"}, g}}
	m := g.MIG[1]
	if m.UUID != MIGUUID("GPU-x", SingleLayout[1]) || m.MemoryMiB != 40960 || m.Placement() != SingleLayout[1] || m.Path != PathDevicePlugin {
		t.Errorf("NewMIGDevice = %+v", m)
	}
	if parent, got, ok := inv.MIGByUUID(m.UUID); !ok || parent.UUID != "GPU-x" || got != m {
		t.Errorf("MIGByUUID(%s) = %v, %+v, %v", m.UUID, parent.UUID, got, ok)
	}
	if parent, got, ok := inv.MIGByCapMinor(m.CapMinor); !ok || parent.UUID != "GPU-x" || got != m {
		t.Errorf("MIGByCapMinor(%d) = %v, %+v, %v", m.CapMinor, parent.UUID, got, ok)
	}
	if _, _, ok := inv.MIGByCapMinor(1); ok {
		t.Error("MIGByCapMinor(1) found a MIG device")
	}
	if got := CapDeviceNode("/dev", 21); got != "/dev/nvidia-caps/nvidia-cap21" {
		t.Errorf("CapDeviceNode = %s", got)
	}
}
