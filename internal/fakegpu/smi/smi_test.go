package smi

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/internal/workload/probe"
)

// dev is a fake device node's numbers; a name absent from a test's map is whatever the file system says.
type dev struct{ major, minor uint32 }

var inventory = fakegpu.Inventory{
	Node:          "node-a",
	DriverVersion: "550.54.15",
	CUDAVersion:   "12.4",
	GPUs: []fakegpu.GPU{
		{Minor: 0, UUID: "GPU-00000000-1111-2222-3333-000000000000", Product: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, PCIBusID: "00000000:18:00.0"},
		{Minor: 1, UUID: "GPU-11111111-1111-2222-3333-111111111111", Product: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, PCIBusID: "00000000:2A:00.0"},
		{Minor: 2, UUID: "GPU-22222222-1111-2222-3333-222222222222", Product: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, PCIBusID: "00000000:3A:00.0"},
		{Minor: 3, UUID: "GPU-33333333-1111-2222-3333-333333333333", Product: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, PCIBusID: "00000000:5D:00.0"},
	},
}

// twoOfFour is a container given GPUs 1 and 3 of the node, with the control devices the runtime adds,
// a directory nvidia-caps and a regular file named nvidia0 that must not count as a GPU.
func twoOfFour() map[string]dev {
	return map[string]dev{
		"nvidiactl":        {195, 255},
		"nvidia1":          {195, 1},
		"nvidia3":          {195, 3},
		"nvidia-uvm":       {fakegpu.NvidiaUVMMajor, fakegpu.NvidiaUVMMinor},
		"nvidia-uvm-tools": {fakegpu.NvidiaUVMMajor, fakegpu.NvidiaUVMToolsMin},
	}
}

// setup makes a dev directory holding a file per node (and the decoys), writes the inventory, and
// returns an Env whose Stat reports nodes' numbers from the map.
func setup(t *testing.T, nodes map[string]dev) Env {
	t.Helper()
	dir := t.TempDir()
	devDir := filepath.Join(dir, "dev")
	if err := os.MkdirAll(filepath.Join(devDir, "nvidia-caps"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name := range nodes {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(devDir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(devDir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := nodes["nvidia0"]; !ok {
		if err := os.WriteFile(filepath.Join(devDir, "nvidia0"), []byte("not a device"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	invFile := filepath.Join(dir, "inventory.json")
	if err := inventory.Save(invFile); err != nil {
		t.Fatal(err)
	}
	stat := func(path string) (bool, uint32, uint32, error) {
		// Names below dev, "nvidia-caps/nvidia-cap21" included.
		if rel, err := filepath.Rel(devDir, path); err == nil {
			if d, ok := nodes[rel]; ok {
				return true, d.major, d.minor, nil
			}
		}
		_, err := os.Stat(path)
		return false, 0, 0, err
	}
	return Env{DevDir: devDir, InventoryFile: invFile, Stat: stat}
}

func run(env Env, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Main(args, env, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestCLI(t *testing.T) {
	without := func(name string) map[string]dev {
		n := twoOfFour()
		delete(n, name)
		return n
	}
	cases := []struct {
		name       string
		nodes      map[string]dev
		args       []string
		wantCode   int
		wantStdout string // exact, unless empty and wantIn is set
		wantIn     []string
		wantNotIn  []string
		wantStderr string // substring
	}{
		{
			name:  "list renumbers the visible GPUs",
			nodes: twoOfFour(),
			args:  []string{"-L"},
			wantStdout: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-11111111-1111-2222-3333-111111111111)\n" +
				"GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-33333333-1111-2222-3333-333333333333)\n",
		},
		{
			name:  "long list option",
			nodes: twoOfFour(),
			args:  []string{"--list-gpus"},
			wantStdout: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-11111111-1111-2222-3333-111111111111)\n" +
				"GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-33333333-1111-2222-3333-333333333333)\n",
		},
		{
			name: "unknown minor is listed, not dropped",
			nodes: func() map[string]dev {
				n := twoOfFour()
				n["nvidia7"] = dev{195, 7}
				return n
			}(),
			args: []string{"-L"},
			wantStdout: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-11111111-1111-2222-3333-111111111111)\n" +
				"GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-33333333-1111-2222-3333-333333333333)\n" +
				"GPU 2: Unknown (UUID: GPU-unknown-minor-7)\n",
		},
		{
			name: "identity comes from the minor, not the name",
			nodes: map[string]dev{
				"nvidiactl": {195, 255},
				"nvidia0":   {195, 2}, // a runtime may rename the node; the driver goes by the numbers
				"nvidia9":   {10, 9},  // wrong major: not an NVIDIA GPU
			},
			args:       []string{"-L"},
			wantStdout: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-22222222-1111-2222-3333-222222222222)\n",
		},
		{
			name:  "query with header and units",
			nodes: twoOfFour(),
			args:  []string{"--query-gpu=index,uuid,name,memory.total,driver_version,pci.bus_id,count", "--format=csv"},
			wantStdout: "index, uuid, name, memory.total [MiB], driver_version, pci.bus_id, count\n" +
				"0, GPU-11111111-1111-2222-3333-111111111111, NVIDIA H100 80GB HBM3, 81559 MiB, 550.54.15, 00000000:2A:00.0, 2\n" +
				"1, GPU-33333333-1111-2222-3333-333333333333, NVIDIA H100 80GB HBM3, 81559 MiB, 550.54.15, 00000000:5D:00.0, 2\n",
		},
		{
			name:  "query without header and units, separate values",
			nodes: twoOfFour(),
			args:  []string{"--query-gpu", "index,memory.total,uuid", "--format", "csv,noheader,nounits"},
			wantStdout: "0, 81559, GPU-11111111-1111-2222-3333-111111111111\n" +
				"1, 81559, GPU-33333333-1111-2222-3333-333333333333\n",
		},
		{
			name:       "query noheader keeps units",
			nodes:      twoOfFour(),
			args:       []string{"--query-gpu=memory.total", "--format=csv,noheader"},
			wantStdout: "81559 MiB\n81559 MiB\n",
		},
		{
			name:       "query nounits keeps header",
			nodes:      twoOfFour(),
			args:       []string{"--query-gpu=uuid,memory.total", "--format=csv,nounits"},
			wantStdout: "uuid, memory.total [MiB]\nGPU-11111111-1111-2222-3333-111111111111, 81559\nGPU-33333333-1111-2222-3333-333333333333, 81559\n",
		},
		{
			name:       "unknown query field",
			nodes:      twoOfFour(),
			args:       []string{"--query-gpu=uuid,x", "--format=csv"},
			wantCode:   ExitBadArgs,
			wantStdout: "Field \"x\" is not a valid field to query.\n\n",
		},
		{
			name:       "no minor_number field (the real tool has none)",
			nodes:      twoOfFour(),
			args:       []string{"--query-gpu=uuid,minor_number", "--format=csv"},
			wantCode:   ExitBadArgs,
			wantStdout: "Field \"minor_number\" is not a valid field to query.\n\n",
		},
		{
			name:       "query without format is CSV with a header",
			nodes:      twoOfFour(),
			args:       []string{"--query-gpu=uuid"},
			wantStdout: "uuid\nGPU-11111111-1111-2222-3333-111111111111\nGPU-33333333-1111-2222-3333-333333333333\n",
		},
		{
			name:       "the workload probe's driver query: one line per GPU",
			nodes:      twoOfFour(),
			args:       []string{"--query-gpu=driver_version", "--format=csv,noheader"},
			wantStdout: "550.54.15\n550.54.15\n",
		},
		{
			name:       "version",
			nodes:      twoOfFour(),
			args:       []string{"--version"},
			wantStdout: "NVIDIA-SMI version  : 550.54.15\nNVML version        : 550.54\nDRIVER version      : 550.54.15\nCUDA Version        : 12.4\n",
		},
		{
			name:      "summary shows only the visible GPUs",
			nodes:     twoOfFour(),
			wantIn:    []string{"NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4", "NVIDIA H100 80GB HBM3", "00000000:2A:00.0", "00000000:5D:00.0", "81559MiB"},
			wantNotIn: []string{"00000000:18:00.0", "00000000:3A:00.0"},
		},
		{
			name:     "help",
			nodes:    nil, // needs no driver
			args:     []string{"-h"},
			wantCode: ExitOK,
			wantIn:   []string{"Usage: nvidia-smi", "--query-gpu"},
		},
		{
			name:       "missing nvidiactl",
			nodes:      without("nvidiactl"),
			args:       []string{"-L"},
			wantCode:   ExitDriverError,
			wantStderr: DriverFailure,
		},
		{
			name: "nvidiactl with wrong numbers",
			nodes: func() map[string]dev {
				n := twoOfFour()
				n["nvidiactl"] = dev{195, 254}
				return n
			}(),
			wantCode:   ExitDriverError,
			wantStderr: DriverFailure,
		},
		{
			name:       "no GPU visible",
			nodes:      map[string]dev{"nvidiactl": {195, 255}, "nvidia-uvm": {235, 0}},
			args:       []string{"-L"},
			wantCode:   ExitNoDevices,
			wantStderr: "No devices were found",
		},
		{
			name:       "no GPU visible, query",
			nodes:      map[string]dev{"nvidiactl": {195, 255}},
			args:       []string{"--query-gpu=uuid", "--format=csv"},
			wantCode:   ExitNoDevices,
			wantStderr: "No devices were found",
		},
		{
			name:       "unknown option",
			nodes:      twoOfFour(),
			args:       []string{"--bogus"},
			wantCode:   ExitUnknownOpt,
			wantStdout: "ERROR: Option --bogus is not recognized. Please run 'nvidia-smi -h'.\n\n",
		},
		{
			name:       "value on a flag",
			nodes:      twoOfFour(),
			args:       []string{"-L=1"},
			wantCode:   ExitUnknownOpt,
			wantStdout: "ERROR: Option -L=1 is not recognized. Please run 'nvidia-smi -h'.\n\n",
		},
		{
			name:       "two modes",
			nodes:      twoOfFour(),
			args:       []string{"-L", "--version"},
			wantCode:   ExitBadArgs,
			wantStdout: "ERROR: Option -L is not valid for this command. Please run 'nvidia-smi -h' for help.\n\n",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(setup(t, tc.nodes), tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout, stderr)
			}
			if tc.wantIn == nil && stdout != tc.wantStdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout, tc.wantStdout)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout)
				}
			}
			for _, s := range tc.wantNotIn {
				if strings.Contains(stdout, s) {
					t.Errorf("stdout has %q:\n%s", s, stdout)
				}
			}
			if !strings.Contains(stderr, tc.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantStderr, stderr)
			}
			if tc.wantStderr == "" && stderr != "" {
				t.Errorf("unexpected stderr:\n%s", stderr)
			}
		})
	}
}

func TestUnreadableInventory(t *testing.T) {
	env := setup(t, twoOfFour())
	env.InventoryFile = filepath.Join(t.TempDir(), "missing.json")
	code, stdout, stderr := run(env, "-L")
	if code != ExitDriverError || stdout != "" {
		t.Fatalf("exit %d, stdout %q; want %d and nothing", code, stdout, ExitDriverError)
	}
	if !strings.Contains(stderr, DriverFailure) || !strings.Contains(stderr, env.InventoryFile) {
		t.Errorf("stderr should give the driver failure and name %s:\n%s", env.InventoryFile, stderr)
	}
}

// TestProbeParsesList checks the fake against its consumer: the workload probe's parser of `nvidia-smi -L`.
func TestProbeParsesList(t *testing.T) {
	nodes := twoOfFour()
	nodes["nvidia12"] = dev{195, 12}
	code, stdout, stderr := run(setup(t, nodes), "-L")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := []string{
		"GPU-11111111-1111-2222-3333-111111111111",
		"GPU-33333333-1111-2222-3333-333333333333",
		"GPU-unknown-minor-12",
	}
	if got := probe.ParseNvidiaSMIList(stdout); !reflect.DeepEqual(got, want) {
		t.Errorf("probe parsed %q, want %q", got, want)
	}
}

// TestStatDevice checks the real Stat on what any Linux system has: /dev/null is character device 1:3.
func TestStatDevice(t *testing.T) {
	isChar, major, minor, err := StatDevice("/dev/null")
	if err != nil {
		t.Skip(err)
	}
	if !isChar || major != 1 || minor != 3 {
		t.Errorf("/dev/null: char %v %d:%d, want char 1:3", isChar, major, minor)
	}
	if isChar, _, _, err := StatDevice(t.TempDir()); err != nil || isChar {
		t.Errorf("a directory: char %v, err %v", isChar, err)
	}
}

func TestDefaultEnv(t *testing.T) {
	t.Setenv(fakegpu.EnvInventory, "")
	if got := DefaultEnv().InventoryFile; got != fakegpu.ContainerInventoryFile {
		t.Errorf("InventoryFile %q, want %q", got, fakegpu.ContainerInventoryFile)
	}
	t.Setenv(fakegpu.EnvInventory, "/tmp/inv.json")
	if got := DefaultEnv(); got.InventoryFile != "/tmp/inv.json" || got.DevDir != "/dev" || got.Stat == nil {
		t.Errorf("DefaultEnv() = %+v", got)
	}
}
