package smi

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/internal/workload/probe"
)

// migInventory is the test inventory with GPU 2 split in two 3g.40gb and GPU 3 in three 2g.20gb and a
// 1g.10gb (mig-mixed's layouts), GPUs 0 and 1 whole.
func migInventory() fakegpu.Inventory {
	inv := inventory
	inv.GPUs = append([]fakegpu.GPU(nil), inventory.GPUs...)
	for i := range inv.GPUs {
		for _, pl := range fakegpu.LayoutFor(fakegpu.SharingMIGMixed, i) {
			inv.GPUs[i].MIG = append(inv.GPUs[i].MIG, fakegpu.NewMIGDevice(inv.GPUs[i].UUID, inv.GPUs[i].Minor, pl, fakegpu.PathDevicePlugin))
		}
	}
	return inv
}

// capNode is the dev-relative name and numbers of a MIG device's cap device.
func capNode(m fakegpu.MIGDevice) (string, dev) {
	return fmt.Sprintf("%s/nvidia-cap%d", fakegpu.NvidiaCapsDir, m.CapMinor), dev{fakegpu.NvidiaCapsMajor, uint32(m.CapMinor)}
}

// withMIG is a container with the control devices, the device nodes of the GPUs with the given minors,
// and the cap devices of the given MIG devices.
func withMIG(minors []int, migs ...fakegpu.MIGDevice) map[string]dev {
	n := map[string]dev{"nvidiactl": {195, 255}, "nvidia-uvm": {fakegpu.NvidiaUVMMajor, fakegpu.NvidiaUVMMinor}}
	for _, m := range minors {
		n[fmt.Sprintf("nvidia%d", m)] = dev{195, uint32(m)}
	}
	for _, m := range migs {
		name, d := capNode(m)
		n[name] = d
	}
	return n
}

func useInventory(t *testing.T, inv fakegpu.Inventory) {
	saved := inventory
	inventory = inv
	t.Cleanup(func() { inventory = saved })
}

func TestListMIGDevices(t *testing.T) {
	inv := migInventory()
	useInventory(t, inv)
	g2, g3 := inv.GPUs[2], inv.GPUs[3]
	cases := []struct {
		name  string
		nodes map[string]dev
		want  string
	}{
		{
			name:  "one MIG device: its GPU's line and it alone, numbered 0",
			nodes: withMIG([]int{3}, g3.MIG[1]),
			want: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + g3.UUID + ")\n" +
				"  MIG 2g.20gb     Device  0: (UUID: " + g3.MIG[1].UUID + ")\n",
		},
		{
			name:  "MIG devices of two GPUs, by placement under each, beside a whole GPU",
			nodes: withMIG([]int{0, 2, 3}, g3.MIG[3], g2.MIG[1], g3.MIG[0], g2.MIG[0]),
			want: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + inv.GPUs[0].UUID + ")\n" +
				"GPU 1: NVIDIA H100 80GB HBM3 (UUID: " + g2.UUID + ")\n" +
				"  MIG 3g.40gb     Device  0: (UUID: " + g2.MIG[0].UUID + ")\n" +
				"  MIG 3g.40gb     Device  1: (UUID: " + g2.MIG[1].UUID + ")\n" +
				"GPU 2: NVIDIA H100 80GB HBM3 (UUID: " + g3.UUID + ")\n" +
				"  MIG 2g.20gb     Device  0: (UUID: " + g3.MIG[0].UUID + ")\n" +
				"  MIG 1g.10gb     Device  1: (UUID: " + g3.MIG[3].UUID + ")\n",
		},
		{
			name:  "the parent alone (no cap device) is a whole GPU",
			nodes: withMIG([]int{2}),
			want:  "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + g2.UUID + ")\n",
		},
		{
			name: "a cap device with the wrong major, or without its GPU's node, gives nothing",
			nodes: func() map[string]dev {
				n := withMIG([]int{2}, g3.MIG[0])
				name, _ := capNode(g2.MIG[0])
				n[name] = dev{10, uint32(g2.MIG[0].CapMinor)}
				return n
			}(),
			want: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + g2.UUID + ")\n",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(setup(t, tc.nodes), "-L")
			if code != ExitOK || stderr != "" {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			if stdout != tc.want {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout, tc.want)
			}
		})
	}
}

// The workload probe counts a GPU listed with MIG devices as those devices, and the other MIG devices
// of the same GPU not at all.
func TestProbeParsesMIGList(t *testing.T) {
	inv := migInventory()
	useInventory(t, inv)
	g3 := inv.GPUs[3]
	code, stdout, stderr := run(setup(t, withMIG([]int{1, 3}, g3.MIG[2], g3.MIG[0])), "-L")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := []string{inv.GPUs[1].UUID, g3.MIG[0].UUID, g3.MIG[2].UUID}
	if got := probe.ParseNvidiaSMIList(stdout); !reflect.DeepEqual(got, want) {
		t.Errorf("probe parsed %q, want %q from:\n%s", got, want, stdout)
	}
	for _, other := range []fakegpu.MIGDevice{g3.MIG[1], g3.MIG[3]} {
		if strings.Contains(stdout, other.UUID) {
			t.Errorf("lists %s, a MIG device of the same GPU the container was not given:\n%s", other.UUID, stdout)
		}
	}
}

// Queries and the summary keep working with MIG devices: the queries describe the GPUs (as the real
// tool's --query-gpu does), the summary adds the MIG devices.
func TestQueriesWithMIG(t *testing.T) {
	inv := migInventory()
	useInventory(t, inv)
	g2 := inv.GPUs[2]
	env := setup(t, withMIG([]int{2}, g2.MIG[1]))
	code, stdout, _ := run(env, "--query-gpu=uuid,memory.total", "--format=csv,noheader")
	if want := g2.UUID + ", 81559 MiB\n"; code != ExitOK || stdout != want {
		t.Errorf("query: exit %d, stdout %q, want %q", code, stdout, want)
	}
	code, stdout, _ = run(env)
	if code != ExitOK || !strings.Contains(stdout, "MIG devices:") || !strings.Contains(stdout, g2.MIG[1].UUID) || !strings.Contains(stdout, "40960MiB") ||
		strings.Contains(stdout, g2.MIG[0].UUID) {
		t.Errorf("summary: exit %d, want the MIG device given and not its sibling:\n%s", code, stdout)
	}
}
