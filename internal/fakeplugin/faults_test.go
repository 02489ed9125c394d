package fakeplugin

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/internal/fakegpu/smi"
)

// cdiConfig is a test config with the fake driver (device nodes, CDI) pointed at temporary directories and
// a DRA half of draDevices GPUs.
func cdiConfig(t *testing.T, draDevices int) Config {
	cfg := testConfig(t, shortDir(t), "node-a")
	cfg.StateDir = t.TempDir()
	cfg.CDIDir = t.TempDir()
	cfg.DRADevices = draDevices
	return cfg
}

func allocateResp(t *testing.T, c pluginapi.DevicePluginClient, ids ...string) *pluginapi.ContainerAllocateResponse {
	t.Helper()
	resp, err := c.Allocate(t.Context(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatalf("Allocate(%v): %v", ids, err)
	}
	return resp.ContainerResponses[0]
}

func cdiNames(r *pluginapi.ContainerAllocateResponse) []string {
	var out []string
	for _, d := range r.CdiDevices {
		out = append(out, d.Name)
	}
	return out
}

func TestParseFaults(t *testing.T) {
	got, err := ParseFaults(" wrong-ids,leak-all,,wrong-ids ")
	if err != nil || !slices.Equal(got, []Fault{FaultLeakAll, FaultWrongIDs}) {
		t.Errorf("ParseFaults = %v, %v", got, err)
	}
	if _, err := ParseFaults("wrong-ids,explode"); err == nil || !strings.Contains(err.Error(), "no-reregister") {
		t.Errorf("unknown fault: err = %v, want one listing the known faults", err)
	}
}

func TestAllocateInjectsTheCDIDevicesOfExactlyTheAllocatedGPUs(t *testing.T) {
	p, c := servePlugin(t, cdiConfig(t, 4))
	ids := p.DeviceIDs()
	if len(ids) != 4 {
		t.Fatalf("device plugin advertises %d IDs, want its 4 (the DRA GPUs are not its)", len(ids))
	}
	r := allocateResp(t, c, ids[1], ids[3])
	if want := []string{"nvidia.com/gpu=1", "nvidia.com/gpu=3"}; !slices.Equal(cdiNames(r), want) {
		t.Errorf("CDI devices = %v, want %v", cdiNames(r), want)
	}
	if got := r.Envs[EnvVisibleDevices]; got != ids[1]+","+ids[3] {
		t.Errorf("%s = %q", EnvVisibleDevices, got)
	}
}

func TestDeviceSpecsStrategyGivesTheSameDeviceNodesAndFiles(t *testing.T) {
	cfg := cdiConfig(t, 0)
	cfg.DeviceListStrategy = StrategyDeviceSpecs
	cfg.NvidiaSMI = "/bin/true"
	p, c := servePlugin(t, cfg)
	r := allocateResp(t, c, p.DeviceIDs()[2])
	var paths []string
	for _, d := range r.Devices {
		paths = append(paths, d.ContainerPath)
	}
	if want := []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia2"}; !slices.Equal(paths, want) || len(r.CdiDevices) != 0 {
		t.Errorf("device specs = %v (CDI %v), want %v and no CDI", paths, cdiNames(r), want)
	}
	var mounts []string
	for _, m := range r.Mounts {
		mounts = append(mounts, m.ContainerPath)
	}
	if !slices.Contains(mounts, fakegpu.ContainerNvidiaSMI) || !slices.Contains(mounts, fakegpu.ContainerInventoryFile) {
		t.Errorf("mounts = %v", mounts)
	}
}

func TestOverAdvertiseAdvertisesAPhantomWithoutADevice(t *testing.T) {
	cfg := cdiConfig(t, 0)
	cfg.Faults = []Fault{FaultOverAdvertise}
	p, c := servePlugin(t, cfg)
	devs := p.Devices()
	if len(devs) != cfg.Devices+1 {
		t.Fatalf("advertised %d devices, want %d (one phantom)", len(devs), cfg.Devices+1)
	}
	phantom := devs[len(devs)-1].ID
	if slices.Contains(p.PhysicalUUIDs(), phantom) {
		t.Fatalf("phantom %s is a real GPU", phantom)
	}
	r := allocateResp(t, c, p.DeviceIDs()[0], phantom)
	// The phantom is handed to the runtime as a CDI device the spec does not define, so the runtime refuses
	// to create the container, as NVIDIA's toolkit does for an unknown GPU.
	if want := []string{"nvidia.com/gpu=0", CDIDeviceName(cfg.Devices)}; !slices.Equal(cdiNames(r), want) {
		t.Errorf("CDI devices = %v, want %v", cdiNames(r), want)
	}
	if n := len(p.CDISpec().Devices); n != cfg.Devices {
		t.Errorf("CDI spec defines %d devices; the phantom must not be one of them", n)
	}
	if !strings.Contains(r.Envs[EnvVisibleDevices], phantom) {
		t.Errorf("the broken plugin names the phantom to the runtime: %q", r.Envs[EnvVisibleDevices])
	}
}

func TestDoubleAllocateHandsOutTheDeviceInUse(t *testing.T) {
	cfg := cdiConfig(t, 0)
	cfg.Faults = []Fault{FaultDoubleAllocate}
	p, c := servePlugin(t, cfg)
	ids := p.DeviceIDs()
	first := allocateResp(t, c, ids[0])
	second := allocateResp(t, c, ids[1])
	if !slices.Equal(cdiNames(first), cdiNames(second)) || second.Envs[EnvVisibleDevices] != ids[0] {
		t.Errorf("second allocation got %v / %q, want the first one's GPU %v", cdiNames(second), second.Envs[EnvVisibleDevices], cdiNames(first))
	}
}

func TestIgnoreHealthKeepsAnUnhealthyGPUAdvertised(t *testing.T) {
	cfg := cdiConfig(t, 2)
	p := mustNew(t, cfg)
	p.SetUnhealthyFromAnnotation("0,5")
	if got := countUnhealthy(p.Devices()); got != 1 {
		t.Fatalf("unhealthy devices = %d, want 1", got)
	}
	p.mu.Lock()
	slice, _ := p.sliceDevicesLocked()
	p.mu.Unlock()
	if names := sliceNames(slice); !slices.Equal(names, []string{"gpu-4", "gpu-5"}) {
		t.Errorf("slice = %v, want both: unhealthy gpu-5 stays, tainted", names)
	}
	want := resourceapi.DeviceTaint{Key: "gpu.nvidia.com/xid", Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	if len(slice[0].Taints) != 0 || len(slice[1].Taints) != 1 || slice[1].Taints[0] != want {
		t.Errorf("taints gpu-4 %v, gpu-5 %v; want none, and %v on gpu-5 (NVIDIA's critical-XID taint)", slice[0].Taints, slice[1].Taints, want)
	}
	// A driver told to ignore the XID keeps the taint but without a scheduling effect.
	p.SetFaultsFromAnnotation(string(FaultDRAXIDIgnored))
	p.mu.Lock()
	slice, _ = p.sliceDevicesLocked()
	p.mu.Unlock()
	if len(slice[1].Taints) != 1 || slice[1].Taints[0].Effect != resourceapi.DeviceTaintEffectNone {
		t.Errorf("with dra-xid-ignored gpu-5 has taints %v, want one with effect None", slice[1].Taints)
	}
	// The fault, switched on at run time through the node annotation.
	p.SetFaultsFromAnnotation(string(FaultIgnoreHealth))
	if got := countUnhealthy(p.Devices()); got != 0 {
		t.Errorf("with ignore-health: %d unhealthy advertised, want 0", got)
	}
	p.mu.Lock()
	slice, _ = p.sliceDevicesLocked()
	p.mu.Unlock()
	if names := sliceNames(slice); !slices.Equal(names, []string{"gpu-4", "gpu-5"}) || len(slice[1].Taints) != 0 {
		t.Errorf("slice with ignore-health = %v, gpu-5 tainted %v; want both, untainted", names, slice[1].Taints)
	}
	// Removing the annotation switches it off again; unknown names are ignored, not fatal.
	p.SetFaultsFromAnnotation("explode")
	if got := p.Faults(); len(got) != 0 {
		t.Errorf("faults after clearing = %v", got)
	}
}

func sliceNames(devs []resourceapi.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Name)
	}
	return out
}

func TestSliceDevicesCarryNVIDIAsAttributes(t *testing.T) {
	p := mustNew(t, cdiConfig(t, 2))
	d := p.sliceDevice(4)
	if d.Name != "gpu-4" {
		t.Errorf("name %s", d.Name)
	}
	for _, a := range []resourceapi.QualifiedName{"type", "uuid", "productName", "brand", "architecture", "driverVersion", "cudaDriverVersion", "index", "minor", "pcieBusID"} {
		if _, ok := d.Attributes[a]; !ok {
			t.Errorf("attribute %s missing", a)
		}
	}
	if *d.Attributes["uuid"].StringValue != p.PhysicalUUIDs()[4] || *d.Attributes["driverVersion"].VersionValue != "550.54.15" {
		t.Errorf("uuid/driverVersion = %v/%v", *d.Attributes["uuid"].StringValue, *d.Attributes["driverVersion"].VersionValue)
	}
	if *d.Attributes["cudaDriverVersion"].VersionValue != "12.4.0" {
		t.Errorf("cudaDriverVersion = %s, want padded to semver", *d.Attributes["cudaDriverVersion"].VersionValue)
	}
	if q := d.Capacity["memory"].Value; q.Value() != int64(p.cfg.MemoryMiB)<<20 {
		t.Errorf("memory = %s", q.String())
	}
}

func claim(devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid-1"}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: "gpu.nvidia.com", Pool: "node-a", Device: d})
	}
	return c
}

func TestPrepareHandsTheKubeletTheClaimsCDIDevices(t *testing.T) {
	p := mustNew(t, cdiConfig(t, 4))
	res := p.prepareClaim(claim("gpu-5", "gpu-7"))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	var got []string
	for _, d := range res.Devices {
		got = append(got, d.CDIDeviceIDs...)
	}
	if !slices.Equal(got, []string{"nvidia.com/gpu=5", "nvidia.com/gpu=7"}) {
		t.Errorf("CDI devices = %v", got)
	}
	// A device the node does not have (a phantom slice entry, a device-plugin GPU) fails the claim.
	for _, bad := range []string{"gpu-8", "gpu-1", "nvme-0"} {
		if res := p.prepareClaim(claim(bad)); res.Err == nil {
			t.Errorf("prepare of %s succeeded", bad)
		}
	}
	p.SetFaultsFromAnnotation(string(FaultDRAPrepareFail))
	if res := p.prepareClaim(claim("gpu-4")); res.Err == nil || !strings.Contains(res.Err.Error(), "dra-prepare-fail") {
		t.Errorf("prepare under dra-prepare-fail: %v", res.Err)
	}
	p.SetFaultsFromAnnotation(string(FaultPhantomSliceDevice))
	p.mu.Lock()
	slice, _ := p.sliceDevicesLocked()
	p.mu.Unlock()
	if names := sliceNames(slice); !slices.Contains(names, "gpu-8") {
		t.Errorf("slice under phantom-slice-device = %v, want gpu-8 too", names)
	}
}

func TestCDISpecInjectsOneDeviceNodePerGPUAndTheSharedFiles(t *testing.T) {
	cfg := cdiConfig(t, 2)
	cfg.NvidiaSMI = "/bin/true"
	p := mustNew(t, cfg)
	spec := p.CDISpec()
	if spec.Kind != CDIKind || len(spec.Devices) != cfg.Devices+2 {
		t.Fatalf("spec kind %s with %d devices", spec.Kind, len(spec.Devices))
	}
	for i, d := range spec.Devices {
		n := d.ContainerEdits.DeviceNodes
		if d.Name != strings.TrimPrefix(CDIDeviceName(i), CDIKind+"=") || len(n) != 1 || n[0].Path != fakegpu.DeviceNode("/dev", i) || n[0].Major != fakegpu.NvidiaMajor || n[0].Minor != int64(i) {
			t.Errorf("device %d = %+v", i, d)
		}
	}
	var mounts []string
	for _, m := range spec.ContainerEdits.Mounts {
		mounts = append(mounts, m.ContainerPath)
	}
	if !slices.Contains(mounts, fakegpu.ContainerNvidiaSMI) || !slices.Contains(mounts, fakegpu.ContainerInventoryFile) {
		t.Errorf("shared mounts = %v", mounts)
	}
	if len(spec.ContainerEdits.DeviceNodes) != 3 {
		t.Errorf("control devices = %+v", spec.ContainerEdits.DeviceNodes)
	}
}

func TestInstallDriverMakesCharacterDevicesAndTheInventory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root (CI runs as root)")
	}
	cfg := cdiConfig(t, 2)
	p := mustNew(t, cfg)
	if err := p.InstallDriver(); err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Devices + 2 {
		var st unix.Stat_t
		if err := unix.Stat(fakegpu.DeviceNode(filepath.Join(cfg.StateDir, "dev"), i), &st); err != nil {
			t.Fatal(err)
		}
		rdev := uint64(st.Rdev) //nolint:unconvert // Rdev is not a uint64 on every platform
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(rdev) != fakegpu.NvidiaMajor || unix.Minor(rdev) != uint32(i) {
			t.Errorf("nvidia%d: mode %o rdev %d:%d", i, st.Mode, unix.Major(rdev), unix.Minor(rdev))
		}
	}
	inv, err := fakegpu.Load(filepath.Join(cfg.StateDir, "inventory.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.OnPath(fakegpu.PathDevicePlugin)) != cfg.Devices || len(inv.OnPath(fakegpu.PathDRA)) != 2 {
		t.Errorf("inventory paths: %+v", inv.GPUs)
	}
	if _, err := os.Stat(filepath.Join(cfg.CDIDir, CDISpecFile)); err != nil {
		t.Errorf("CDI spec: %v", err)
	}
	// Idempotent: a restarted agent finds its own nodes and files.
	if err := p.InstallDriver(); err != nil {
		t.Errorf("second install: %v", err)
	}
}

func TestLeakAdjustmentGivesEveryGPU(t *testing.T) {
	cfg := cdiConfig(t, 2)
	cfg.NvidiaSMI = "/bin/true"
	p := mustNew(t, cfg)
	adj := p.leakAdjustment()
	var gpus int
	for _, d := range adj.GetLinux().GetDevices() {
		if strings.HasPrefix(d.Path, "/dev/nvidia") && d.Major == fakegpu.NvidiaMajor && d.Minor != fakegpu.NvidiaCtlMinor {
			gpus++
		}
	}
	if gpus != cfg.Devices+2 {
		t.Errorf("leak injects %d GPUs, want all %d", gpus, cfg.Devices+2)
	}
}

func TestNoReregisterFaultStaysAwayAfterKubeletRestart(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, "node-a")
	cfg.Faults = []Fault{FaultNoReregister}
	first := startFakeKubelet(t, dir)
	p := mustNew(t, cfg)
	startPlugin(t, p.ServeKubelet)
	eventually(t, "first registration", func() bool { return len(first.requests()) == 1 })
	first.srv.Stop()
	_ = os.Remove(filepath.Join(dir, cfg.SocketName()))
	_ = os.Remove(filepath.Join(dir, "kubelet.sock"))
	second := startFakeKubelet(t, dir)
	time.Sleep(20 * cfg.SocketPollInterval) // the healthy plugin re-registers within a few polls
	if n := len(second.requests()); n != 0 {
		t.Errorf("plugin with no-reregister registered %d times with the restarted kubelet", n)
	}
}

// The agent tells a node restart (its /run state gone) from its own restart, and with
// stale-after-reboot on refuses to serve only after a restart of a node it ran on before.
func TestStaleAfterRebootRefusesOnlyAfterANodeRestart(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), "n1")
	cfg.StateDir, cfg.KubeletPluginsDir = t.TempDir(), t.TempDir()
	p := mustNew(t, cfg)
	if rebooted, ran := p.bootState(); !rebooted || ran {
		t.Fatalf("first start: rebooted=%t ran=%t, want true false", rebooted, ran)
	}
	_ = os.MkdirAll(filepath.Join(cfg.StateDir, "dev"), 0o755) // what InstallDriver leaves on /run
	p.markRan()
	if rebooted, ran := p.bootState(); rebooted || !ran {
		t.Fatalf("agent restart: rebooted=%t ran=%t, want rebooted=false ran=true", rebooted, ran)
	}
	_ = os.RemoveAll(cfg.StateDir) // the node restarted: /run is empty
	if rebooted, ran := p.bootState(); !rebooted || !ran {
		t.Fatalf("node restart: rebooted=%t ran=%t, want rebooted=true ran=true", rebooted, ran)
	}
}

func TestMismatchedDriverVersionDiffersFromTheAdvertisedOne(t *testing.T) {
	for advertised, want := range map[string]string{
		"550.54.15":  "551.54.15",
		"535.183.01": "536.183.01",
		"580":        "581",
		"":           "535.183.01",
		"beta.1":     "535.183.01",
	} {
		if got := MismatchedDriverVersion(advertised); got != want || got == advertised {
			t.Errorf("MismatchedDriverVersion(%q) = %q, want %q", advertised, got, want)
		}
	}
}

// The driver-mismatch fault changes what nvidia-smi prints in a container, at run time through the node
// annotation, and nothing the node advertises.
func TestDriverMismatchChangesOnlyWhatNvidiaSMIPrints(t *testing.T) {
	cfg := cdiConfig(t, 2)
	p := mustNew(t, cfg)
	nvidiaSMI := containerSMI(t, p, cfg)
	smiDriver := func() string { return nvidiaSMI("--query-gpu=driver_version", "--format=csv,noheader") }
	advertised := func() (label, attr string) {
		return p.cfg.NodeLabels()[LabelDriverFull], *p.sliceDevice(cfg.Devices).Attributes["driverVersion"].VersionValue
	}

	eventually(t, "nvidia-smi prints the advertised driver", func() bool { return smiDriver() == cfg.DriverVersion })
	p.SetFaultsFromAnnotation(string(FaultDriverMismatch))
	mismatched := MismatchedDriverVersion(cfg.DriverVersion)
	eventually(t, "nvidia-smi prints "+mismatched+" under driver-mismatch", func() bool { return smiDriver() == mismatched })
	if label, attr := advertised(); label != cfg.DriverVersion || attr != cfg.DriverVersion {
		t.Errorf("under driver-mismatch the node advertises %s (label) and %s (slice); want both to stay %s", label, attr, cfg.DriverVersion)
	}
	p.SetFaultsFromAnnotation("")
	eventually(t, "nvidia-smi prints the advertised driver again", func() bool { return smiDriver() == cfg.DriverVersion })

	// Given with --fault, it is in the inventory InstallDriver writes at start.
	cfg.Faults = []Fault{FaultDriverMismatch}
	if got := mustNew(t, cfg).Inventory().DriverVersion; got != mismatched {
		t.Errorf("inventory with --fault=driver-mismatch says %s, want %s", got, mismatched)
	}
}

// The missing-nvidia-smi fault leaves the tool out of every way the fake driver reaches a container (the CDI
// spec file both paths name, the device-specs allocation, the leak-all injection), at run time through the
// node annotation, and keeps the device nodes and the inventory; switched off, the tool is back.
func TestMissingNvidiaSMILeavesOnlyTheToolOut(t *testing.T) {
	cfg := cdiConfig(t, 2)
	cfg.DeviceListStrategy = StrategyDeviceSpecs
	cfg.NvidiaSMI = "/bin/true"
	p, c := servePlugin(t, cfg)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { p.KeepCDISpec(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	specMounts := func() []string {
		raw, err := os.ReadFile(filepath.Join(cfg.CDIDir, CDISpecFile))
		if err != nil {
			return nil
		}
		var spec cdispec.Spec
		if json.Unmarshal(raw, &spec) != nil {
			return nil
		}
		var out []string
		for _, m := range spec.ContainerEdits.Mounts {
			out = append(out, m.ContainerPath)
		}
		return out
	}
	allocated := func() (mounts, devices []string) {
		r := allocateResp(t, c, p.DeviceIDs()[0])
		for _, m := range r.Mounts {
			mounts = append(mounts, m.ContainerPath)
		}
		for _, d := range r.Devices {
			devices = append(devices, d.ContainerPath)
		}
		return mounts, devices
	}
	leaked := func() []string {
		var out []string
		for _, m := range p.leakAdjustment().GetMounts() {
			out = append(out, m.Destination)
		}
		return out
	}
	hasTool := func(mounts []string) bool { return slices.Contains(mounts, fakegpu.ContainerNvidiaSMI) }

	eventually(t, "the CDI spec mounts nvidia-smi", func() bool { return hasTool(specMounts()) })
	p.SetFaultsFromAnnotation(string(FaultMissingNvidiaSMI))
	eventually(t, "the CDI spec leaves nvidia-smi out", func() bool { m := specMounts(); return m != nil && !hasTool(m) })
	if m := specMounts(); !slices.Contains(m, fakegpu.ContainerInventoryFile) {
		t.Errorf("under missing-nvidia-smi the CDI spec mounts %v; the inventory must stay", m)
	}
	mounts, devices := allocated()
	if hasTool(mounts) || !slices.Contains(mounts, fakegpu.ContainerInventoryFile) || !slices.Equal(devices, []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0"}) {
		t.Errorf("under missing-nvidia-smi an allocation mounts %v with devices %v; want the inventory and every device node, no nvidia-smi", mounts, devices)
	}
	if hasTool(leaked()) {
		t.Errorf("under missing-nvidia-smi the leak-all injection still mounts nvidia-smi: %v", leaked())
	}
	p.SetFaultsFromAnnotation("")
	eventually(t, "the CDI spec mounts nvidia-smi again", func() bool { return hasTool(specMounts()) })
	if mounts, _ := allocated(); !hasTool(mounts) {
		t.Errorf("with the fault off an allocation mounts %v, want nvidia-smi too", mounts)
	}
}

func TestVersionFaults(t *testing.T) {
	for v, want := range map[string][]Fault{
		"560.35.03":                     nil,
		"560.35.03-wrong-ids":           {FaultWrongIDs},
		"560.35.03-slow-gpu":            {FaultSlowGPU},
		"560.35.03-broken":              nil, // the plugin does not come up at all (BrokenVersionSuffix)
		"560.35.03-kueue-no-pods-ready": nil, // a cluster fault is not the driver's
	} {
		if got := VersionFaults(v); !slices.Equal(got, want) {
			t.Errorf("VersionFaults(%q) = %v, want %v", v, got, want)
		}
	}
}

// containerSMI keeps p's inventory up to date while the test runs and returns nvidia-smi as a container
// given GPU 0 runs it (its device node and nvidiactl, numbers from a fake stat, and the inventory the agent
// keeps): the output of args, "" when it fails.
func containerSMI(t *testing.T, p *Plugin, cfg Config) func(args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { p.KeepInventory(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	devDir := t.TempDir()
	for _, n := range []string{"nvidiactl", "nvidia0"} {
		if err := os.WriteFile(filepath.Join(devDir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := smi.Env{DevDir: devDir, InventoryFile: filepath.Join(cfg.StateDir, "inventory.json"),
		Stat: func(path string) (bool, uint32, uint32, error) {
			if filepath.Base(path) == "nvidiactl" {
				return true, fakegpu.NvidiaMajor, fakegpu.NvidiaCtlMinor, nil
			}
			return true, fakegpu.NvidiaMajor, 0, nil
		}}
	return func(args ...string) string {
		var out strings.Builder
		if smi.Main(args, env, &out, io.Discard) != smi.ExitOK {
			return ""
		}
		return strings.TrimSpace(out.String())
	}
}
