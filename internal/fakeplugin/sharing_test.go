package fakeplugin

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/internal/fakegpu/smi"
	"gpuconform.io/gpuconform/internal/workload/probe"
)

func modeConfig(t *testing.T, mode string, replicas int) Config {
	cfg := cdiConfig(t, 0)
	cfg.Sharing, cfg.Replicas = mode, replicas
	return cfg
}

// allocateOn calls Allocate of resource's server for one container.
func allocateOn(t *testing.T, p *Plugin, resource string, ids ...string) *pluginapi.ContainerAllocateResponse {
	t.Helper()
	srv := p.Server(resource)
	if srv == nil {
		t.Fatalf("no server for %s (resources %v)", resource, p.Resources())
	}
	resp, err := srv.Allocate(t.Context(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatalf("Allocate(%s %v): %v", resource, ids, err)
	}
	return resp.ContainerResponses[0]
}

func deviceIDs(devs []*pluginapi.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.ID
	}
	return out
}

func TestSharingModeAndReplicasMustAgree(t *testing.T) {
	cases := []struct {
		sharing  string
		replicas int
		mode     string // "" = invalid
		strategy string
	}{
		{"", 1, fakegpu.SharingNone, "none"},
		{"", 3, fakegpu.SharingTimeSlicing, "time-slicing"}, // --replicas alone, as the local cluster passes it
		{fakegpu.SharingNone, 1, fakegpu.SharingNone, "none"},
		{fakegpu.SharingTimeSlicing, 2, fakegpu.SharingTimeSlicing, "time-slicing"},
		{fakegpu.SharingMPS, 4, fakegpu.SharingMPS, "mps"},
		{fakegpu.SharingMIGSingle, 1, fakegpu.SharingMIGSingle, "none"},
		{fakegpu.SharingMIGMixed, 1, fakegpu.SharingMIGMixed, "none"},
		{fakegpu.SharingNone, 2, "", ""},
		{fakegpu.SharingTimeSlicing, 1, "", ""},
		{fakegpu.SharingMPS, 1, "", ""},
		{fakegpu.SharingMIGSingle, 2, "", ""},
		{fakegpu.SharingMIGMixed, 2, "", ""},
		{"vgpu", 1, "", ""},
	}
	for _, c := range cases {
		cfg := testConfig(t, shortDir(t), "node-a")
		cfg.Sharing, cfg.Replicas = c.sharing, c.replicas
		err := cfg.Validate()
		if (err == nil) != (c.mode != "") {
			t.Errorf("--sharing=%q --replicas=%d: Validate() = %v, want valid=%v", c.sharing, c.replicas, err, c.mode != "")
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), "replicas") && !strings.Contains(err.Error(), "not one of") {
				t.Errorf("--sharing=%q --replicas=%d: the refusal %q does not say what to change", c.sharing, c.replicas, err)
			}
			continue
		}
		if cfg.Mode() != c.mode || cfg.SharingStrategy() != c.strategy {
			t.Errorf("--sharing=%q --replicas=%d: mode %s, strategy %s; want %s, %s", c.sharing, c.replicas, cfg.Mode(), cfg.SharingStrategy(), c.mode, c.strategy)
		}
	}
}

// In mode mps an allocation gets what NVIDIA's plugin gives it: the pipe directory of the node's MPS
// daemon (CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe, the daemon's directory mounted there) and no
// CUDA_MPS_* limit variable; the limits are the daemon's defaults, 100/replicas and memory/replicas per GPU.
func TestMPSAdvertisesReplicasAndGivesThePipeDirectory(t *testing.T) {
	cfg := modeConfig(t, fakegpu.SharingMPS, 4)
	cfg.Devices, cfg.MemoryMiB = 2, 81559
	p := mustNew(t, cfg)
	u := p.PhysicalUUIDs()
	want := []string{ReplicaID(u[0], 0), ReplicaID(u[0], 1), ReplicaID(u[0], 2), ReplicaID(u[0], 3),
		ReplicaID(u[1], 0), ReplicaID(u[1], 1), ReplicaID(u[1], 2), ReplicaID(u[1], 3)}
	if got := deviceIDs(p.Devices()); !slices.Equal(got, want) {
		t.Fatalf("advertised %v, want %v", got, want)
	}
	if r := p.Resources(); !slices.Equal(r, []string{"nvidia.com/gpu"}) {
		t.Errorf("resources %v", r)
	}

	one := allocateOn(t, p, cfg.ResourceName, ReplicaID(u[1], 2))
	if one.Envs[EnvVisibleDevices] != u[1] || one.Envs[EnvMPSPipeDirectory] != "/mps/nvidia.com/gpu/pipe" {
		t.Errorf("one replica: envs %v, want %s=%s and %s=/mps/nvidia.com/gpu/pipe", one.Envs, EnvVisibleDevices, u[1], EnvMPSPipeDirectory)
	}
	for k := range one.Envs {
		if strings.HasPrefix(k, "CUDA_MPS_") && k != EnvMPSPipeDirectory {
			t.Errorf("one replica: %s set; NVIDIA's plugin sets only the pipe directory, the limits are the daemon's", k)
		}
	}
	hostPipe := filepath.Join(cfg.StateDir, "mps", "nvidia.com", "gpu", "pipe")
	if !slices.ContainsFunc(one.Mounts, func(m *pluginapi.Mount) bool {
		return m.ContainerPath == "/mps/nvidia.com/gpu/pipe" && m.HostPath == hostPipe
	}) {
		t.Errorf("one replica: mounts %v, want %s at /mps/nvidia.com/gpu/pipe", one.Mounts, hostPipe)
	}
	if got := cdiNames(one); !slices.Equal(got, []string{CDIDeviceName(1)}) {
		t.Errorf("one replica: CDI %v", got)
	}

	d := p.MPSDaemon()
	if d.DefaultActiveThreadPercentage == nil || *d.DefaultActiveThreadPercentage != 25 ||
		d.DefaultPinnedDeviceMemLimitMiB["0"] != 20389 || d.DefaultPinnedDeviceMemLimitMiB["1"] != 20389 { // 81559/4
		t.Errorf("daemon defaults %+v, want 25%% and 20389 MiB for GPUs 0 and 1", d)
	}
	p.SetFaultsFromAnnotation(string(FaultMPSNoLimits))
	if d := p.MPSDaemon(); d.DefaultActiveThreadPercentage != nil || len(d.DefaultPinnedDeviceMemLimitMiB) != 0 {
		t.Errorf("mps-no-limits: daemon defaults %+v, want none", d)
	}
	bare := allocateOn(t, p, cfg.ResourceName, ReplicaID(u[0], 0))
	if bare.Envs[EnvMPSPipeDirectory] == "" || bare.Envs[EnvVisibleDevices] != u[0] {
		t.Errorf("mps-no-limits must keep the pipe directory and the device: %v", bare.Envs)
	}

	// Time-slicing sets no MPS variable.
	ts := mustNew(t, modeConfig(t, fakegpu.SharingTimeSlicing, 2))
	for k := range allocateOn(t, ts, "nvidia.com/gpu", ts.DeviceIDs()[0]).Envs {
		if strings.HasPrefix(k, "CUDA_MPS_") {
			t.Errorf("time-slicing sets %s", k)
		}
	}
}

// The fake daemon's defaults reach a container through nvidia-cuda-mps-control: the agent keeps them in
// the pipe directory it mounts, the fake client answers from there as the real one does, and the
// mps-no-limits fault leaves the daemon with its built-in defaults (100 percent, no memory limit).
func TestMPSControlAnswersTheDaemonsDefaults(t *testing.T) {
	cfg := modeConfig(t, fakegpu.SharingMPS, 2)
	cfg.Devices, cfg.MemoryMiB, cfg.NvidiaSMI = 2, 81559, "/bin/true"
	p := mustNew(t, cfg)
	if err := p.installMPSControl(); err != nil {
		t.Fatal(err)
	}
	if !fileExists(filepath.Join(cfg.StateDir, "bin", "nvidia-cuda-mps-control")) {
		t.Error("nvidia-cuda-mps-control not installed beside nvidia-smi")
	}
	spec := p.CDISpec()
	if !slices.ContainsFunc(spec.ContainerEdits.Mounts, func(m *cdispec.Mount) bool { return m.ContainerPath == fakegpu.ContainerMPSControl }) {
		t.Errorf("CDI spec mounts %v, want %s as the toolkit mounts it", spec.ContainerEdits.Mounts, fakegpu.ContainerMPSControl)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { p.KeepMPSDaemon(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	pipe := filepath.Join(cfg.StateDir, "mps", "nvidia.com", "gpu", "pipe")
	ask := func(commands string) (string, int) {
		var out, errOut strings.Builder
		code := smi.MPSControlMain(nil, smi.MPSEnv{PipeDirectory: pipe}, strings.NewReader(commands), &out, &errOut)
		return out.String() + errOut.String(), code
	}
	const queries = "get_default_active_thread_percentage\nget_default_device_pinned_mem_limit 1"
	eventually(t, "the daemon's defaults", func() bool { out, code := ask(queries); return code == 0 && out == "50.0\n40779M\n" })
	p.SetFaultsFromAnnotation(string(FaultMPSNoLimits))
	eventually(t, "the daemon without defaults", func() bool { out, code := ask(queries); return code == 0 && out == "100.0\n0\n" })
	p.SetFaultsFromAnnotation("")
	eventually(t, "the daemon's defaults again", func() bool { out, code := ask(queries); return code == 0 && out == "50.0\n40779M\n" })

	// No daemon behind the pipe directory: the real client's words and status.
	if out, code := ask("get_default_active_thread_percentage"); code != 0 {
		t.Errorf("with the daemon: %q, exit %d", out, code)
	}
	var out strings.Builder
	if code := smi.MPSControlMain(nil, smi.MPSEnv{PipeDirectory: t.TempDir()}, strings.NewReader("get_default_active_thread_percentage"), &out, io.Discard); code != smi.MPSExitNoDaemon || strings.TrimSpace(out.String()) != smi.MPSNoDaemon {
		t.Errorf("no daemon: %q, exit %d; want %q, exit %d", out.String(), code, smi.MPSNoDaemon, smi.MPSExitNoDaemon)
	}
}

func TestExtraReplicaAdvertisesOneMorePerGPU(t *testing.T) {
	for _, mode := range []string{fakegpu.SharingTimeSlicing, fakegpu.SharingMPS} {
		cfg := modeConfig(t, mode, 2)
		cfg.Devices = 2
		p := mustNew(t, cfg)
		u := p.PhysicalUUIDs()
		if n := len(p.Devices()); n != 4 {
			t.Fatalf("%s: %d devices without the fault, want 4", mode, n)
		}
		p.SetFaultsFromAnnotation(string(FaultExtraReplica))
		got := deviceIDs(p.Devices())
		for _, id := range []string{ReplicaID(u[0], 2), ReplicaID(u[1], 2)} {
			if !slices.Contains(got, id) {
				t.Errorf("%s extra-replica: %s not advertised in %v", mode, id, got)
			}
		}
		if len(got) != 6 || cfg.NodeLabels()[LabelReplicas] != "2" {
			t.Errorf("%s extra-replica: %d devices (want 6) while the label says %s", mode, len(got), cfg.NodeLabels()[LabelReplicas])
		}
		// The kubelet hands the extra replica out like any other; it is the same GPU.
		if r := allocateOn(t, p, cfg.ResourceName, ReplicaID(u[1], 2)); r.Envs[EnvVisibleDevices] != u[1] {
			t.Errorf("%s extra-replica: allocating %s gave %q", mode, ReplicaID(u[1], 2), r.Envs[EnvVisibleDevices])
		}
	}
	// Without replicas the fault has nothing to add.
	p := mustNew(t, modeConfig(t, fakegpu.SharingNone, 1))
	p.SetFaultsFromAnnotation(string(FaultExtraReplica))
	if n := len(p.Devices()); n != 4 {
		t.Errorf("none with extra-replica: %d devices, want 4", n)
	}
}

func TestMIGSingleAdvertisesMIGDevicesOnNvidiaGPU(t *testing.T) {
	cfg := modeConfig(t, fakegpu.SharingMIGSingle, 1)
	p := mustNew(t, cfg)
	u := p.PhysicalUUIDs()
	var want []string
	for i := range cfg.Devices {
		for _, pl := range fakegpu.SingleLayout {
			want = append(want, fakegpu.MIGUUID(u[i], pl))
		}
	}
	if got := deviceIDs(p.Devices()); !slices.Equal(got, want) || len(got) != 8 {
		t.Fatalf("advertised %v, want the 8 MIG UUIDs %v", got, want)
	}
	if r := p.Resources(); !slices.Equal(r, []string{"nvidia.com/gpu"}) {
		t.Errorf("resources %v, want nvidia.com/gpu alone", r)
	}
	r := allocateOn(t, p, "nvidia.com/gpu", want[3], want[0], want[3])
	if r.Envs[EnvVisibleDevices] != want[3]+","+want[0] {
		t.Errorf("%s = %q, want the two MIG UUIDs in request order", EnvVisibleDevices, r.Envs[EnvVisibleDevices])
	}
	if got := cdiNames(r); !slices.Equal(got, []string{CDIMIGDeviceName(want[3]), CDIMIGDeviceName(want[0])}) {
		t.Errorf("CDI %v", got)
	}
	if CDIMIGDeviceName(want[0]) != "nvidia.com/gpu="+want[0] {
		t.Errorf("CDIMIGDeviceName = %s", CDIMIGDeviceName(want[0]))
	}
	// A whole GPU is not what this resource hands out.
	if _, err := p.Allocate(t.Context(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{u[0]}}}}); err == nil {
		t.Error("allocating a whole GPU on mig-single's nvidia.com/gpu succeeded")
	}

	l := cfg.NodeLabels()
	for k, v := range map[string]string{
		LabelMIGStrategy: "single", LabelMIGCapable: "true", LabelProduct: "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
		LabelCount: "8", LabelMemory: "40960", LabelSlicesGI: "3", LabelSlicesCI: "3", LabelMultiprocessors: "48",
		LabelSharingStrategy: "none", LabelReplicas: "1",
	} {
		if l[k] != v {
			t.Errorf("label %s = %q, want %q", k, l[k], v)
		}
	}
	if _, ok := l[MIGProfileLabel("3g.40gb", MIGLabelCount)]; ok {
		t.Error("mig-single carries the mixed strategy's per-profile labels")
	}
}

func TestMIGMixedServesOneResourcePerProfile(t *testing.T) {
	cfg := modeConfig(t, fakegpu.SharingMIGMixed, 1)
	p := mustNew(t, cfg)
	u := p.PhysicalUUIDs()
	wantRes := []string{"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"}
	if r := p.Resources(); !slices.Equal(r, wantRes) {
		t.Fatalf("resources %v, want %v", r, wantRes)
	}
	mig := func(gpu int, profile string, start int) string {
		return fakegpu.MIGUUID(u[gpu], fakegpu.Placement{Profile: profile, Start: start})
	}
	wantIDs := map[string][]string{
		"nvidia.com/gpu":         {u[0], u[1]},
		"nvidia.com/mig-1g.10gb": {mig(3, "1g.10gb", 6)},
		"nvidia.com/mig-2g.20gb": {mig(3, "2g.20gb", 0), mig(3, "2g.20gb", 2), mig(3, "2g.20gb", 4)},
		"nvidia.com/mig-3g.40gb": {mig(2, "3g.40gb", 0), mig(2, "3g.40gb", 4)},
	}
	for res, want := range wantIDs {
		if got := p.ResourceDeviceIDs(res); !slices.Equal(got, want) {
			t.Errorf("%s advertises %v, want %v", res, got, want)
		}
	}

	// Each MIG resource allocates its own devices and refuses another resource's.
	r := allocateOn(t, p, "nvidia.com/mig-2g.20gb", mig(3, "2g.20gb", 2))
	if r.Envs[EnvVisibleDevices] != mig(3, "2g.20gb", 2) || r.Envs[EnvResource] != "nvidia.com/mig-2g.20gb" ||
		!slices.Equal(cdiNames(r), []string{CDIMIGDeviceName(mig(3, "2g.20gb", 2))}) {
		t.Errorf("mig-2g.20gb allocation: env %v, CDI %v", r.Envs, cdiNames(r))
	}
	for res, id := range map[string]string{"nvidia.com/mig-3g.40gb": mig(3, "2g.20gb", 0), "nvidia.com/gpu": mig(2, "3g.40gb", 0)} {
		if _, err := p.Server(res).Allocate(t.Context(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{id}}}}); err == nil {
			t.Errorf("%s allocated %s, a device of another resource", res, id)
		}
	}
	if r := allocateOn(t, p, "nvidia.com/gpu", u[1]); r.Envs[EnvVisibleDevices] != u[1] || !slices.Equal(cdiNames(r), []string{CDIDeviceName(1)}) {
		t.Errorf("whole GPU allocation: env %v, CDI %v", r.Envs, cdiNames(r))
	}

	l := cfg.NodeLabels()
	for k, v := range map[string]string{
		LabelMIGStrategy: "mixed", LabelMIGCapable: "true", LabelCount: "2", LabelProduct: "NVIDIA-H100-80GB-HBM3",
		MIGProfileLabel("3g.40gb", MIGLabelCount): "2", MIGProfileLabel("3g.40gb", MIGLabelMemory): "40960",
		MIGProfileLabel("3g.40gb", MIGLabelProduct): "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
		MIGProfileLabel("2g.20gb", MIGLabelCount):   "3", MIGProfileLabel("2g.20gb", MIGLabelSlicesGI): "2",
		MIGProfileLabel("2g.20gb", MIGLabelSlicesCI): "2", MIGProfileLabel("2g.20gb", MIGLabelMultiprocessors): "32",
		MIGProfileLabel("1g.10gb", MIGLabelCount): "1", MIGProfileLabel("1g.10gb", MIGLabelMemory): "10240",
		"nvidia.com/mig-3g.40gb.count": "2",
	} {
		if l[k] != v {
			t.Errorf("label %s = %q, want %q", k, l[k], v)
		}
	}
	for _, k := range []string{MIGProfileLabel("4g.40gb", MIGLabelCount), LabelSlicesGI} {
		if _, ok := l[k]; ok {
			t.Errorf("label %s set in mig-mixed", k)
		}
	}
}

// Every label a mode sets is owned, so a switch to another mode removes it; and a switch back to none
// leaves exactly the labels none sets.
func TestOwnedLabelsCoverEveryMode(t *testing.T) {
	owned := OwnedLabelKeys()
	for _, mode := range fakegpu.SharingModes {
		replicas := 1
		if mode == fakegpu.SharingTimeSlicing || mode == fakegpu.SharingMPS {
			replicas = 2
		}
		cfg := DefaultConfig()
		cfg.Sharing, cfg.Replicas = mode, replicas
		for k := range cfg.NodeLabels() {
			if !slices.Contains(owned, k) {
				t.Errorf("%s sets label %s, which OwnedLabelKeys does not list (it would linger after a mode change)", mode, k)
			}
		}
	}
	none := DefaultConfig()
	mixed := DefaultConfig()
	mixed.Sharing = fakegpu.SharingMIGMixed
	if !none.labelsCurrent(none.NodeLabels()) || none.labelsCurrent(mixed.NodeLabels()) {
		t.Error("labelsCurrent does not tell mig-mixed's labels from none's")
	}
}

func TestMIGWithParentAdvertisesTheSplitGPUs(t *testing.T) {
	cfg := modeConfig(t, fakegpu.SharingMIGMixed, 1)
	p := mustNew(t, cfg)
	u := p.PhysicalUUIDs()
	if got := deviceIDs(p.Devices()); !slices.Equal(got, []string{u[0], u[1]}) {
		t.Fatalf("nvidia.com/gpu without the fault: %v", got)
	}
	p.SetFaultsFromAnnotation(string(FaultMIGWithParent))
	if got := deviceIDs(p.Devices()); !slices.Equal(got, []string{u[0], u[1], u[2], u[3]}) {
		t.Errorf("nvidia.com/gpu under mig-with-parent: %v, want the split GPUs 2 and 3 too", got)
	}
	// The MIG resources are unchanged, and the parent is handed out whole beside them.
	if n := len(p.ResourceDeviceIDs("nvidia.com/mig-3g.40gb")); n != 2 {
		t.Errorf("mig-3g.40gb has %d devices under the fault, want 2", n)
	}
	r := allocateOn(t, p, "nvidia.com/gpu", u[2])
	if r.Envs[EnvVisibleDevices] != u[2] || !slices.Equal(cdiNames(r), []string{CDIDeviceName(2)}) {
		t.Errorf("the parent allocation: env %v, CDI %v", r.Envs, cdiNames(r))
	}
	// Only in mig-mixed: mig-single has no whole GPUs to add them to.
	single := mustNew(t, modeConfig(t, fakegpu.SharingMIGSingle, 1))
	single.SetFaultsFromAnnotation(string(FaultMIGWithParent))
	if n := len(single.Devices()); n != 8 {
		t.Errorf("mig-single with mig-with-parent: %d devices, want 8", n)
	}
}

func TestMIGHealthFollowsTheGPU(t *testing.T) {
	cfg := modeConfig(t, fakegpu.SharingMIGMixed, 1)
	p := mustNew(t, cfg)
	u := p.PhysicalUUIDs()
	unhealthy := func(res string) []string {
		var out []string
		for _, d := range p.servers[slices.Index(p.Resources(), res)].devices() {
			if d.Health != pluginapi.Healthy {
				out = append(out, d.ID)
			}
		}
		return out
	}
	p.SetUnhealthyFromAnnotation("2")
	if got := unhealthy("nvidia.com/mig-3g.40gb"); len(got) != 2 {
		t.Errorf("GPU 2 unhealthy: unhealthy 3g.40gb devices %v, want both", got)
	}
	if got := unhealthy("nvidia.com/mig-2g.20gb"); len(got) != 0 {
		t.Errorf("GPU 2 unhealthy: GPU 3's devices %v unhealthy too", got)
	}
	// A MIG UUID in the annotation marks its GPU, and with it the GPU's other MIG devices.
	p.SetUnhealthyFromAnnotation(fakegpu.MIGUUID(u[3], fakegpu.Placement{Profile: "1g.10gb", Start: 6}))
	if a, b := unhealthy("nvidia.com/mig-2g.20gb"), unhealthy("nvidia.com/mig-1g.10gb"); len(a) != 3 || len(b) != 1 {
		t.Errorf("a MIG device of GPU 3 unhealthy: unhealthy %v and %v, want every MIG device of GPU 3", a, b)
	}
	p.SetFaultsFromAnnotation(string(FaultIgnoreHealth))
	if got := unhealthy("nvidia.com/mig-2g.20gb"); len(got) != 0 {
		t.Errorf("ignore-health: %v still unhealthy", got)
	}
}

func TestMIGFaultsOfTheAllocator(t *testing.T) {
	cfg := modeConfig(t, fakegpu.SharingMIGMixed, 1)
	p := mustNew(t, cfg)
	ids := p.ResourceDeviceIDs("nvidia.com/mig-2g.20gb")

	p.SetFaultsFromAnnotation(string(FaultWrongIDs))
	r := allocateOn(t, p, "nvidia.com/mig-2g.20gb", ids[0])
	if got := r.Envs[EnvVisibleDevices]; got == ids[0] || !slices.Contains(ids, got) {
		t.Errorf("wrong-ids: asked %s, handed %s; want another 2g.20gb device", ids[0], got)
	}
	r = allocateOn(t, p, "nvidia.com/mig-2g.20gb", ids...)
	for got := range strings.SplitSeq(r.Envs[EnvVisibleDevices], ",") {
		if slices.Contains(ids, got) {
			t.Errorf("wrong-ids asking for every device: handed %s, one of them", got)
		}
	}

	p.SetFaultsFromAnnotation(string(FaultDoubleAllocate))
	first := allocateOn(t, p, "nvidia.com/mig-2g.20gb", ids[1]).Envs[EnvVisibleDevices]
	second := allocateOn(t, p, "nvidia.com/mig-2g.20gb", ids[2]).Envs[EnvVisibleDevices]
	if second != first || second == ids[2] {
		t.Errorf("double-allocate: asked %s, handed %s, right after handing out %s; want that one again", ids[2], second, first)
	}

	p.SetFaultsFromAnnotation(string(FaultOverAdvertise))
	devs := deviceIDs(p.servers[2].devices())
	phantom := devs[len(devs)-1]
	if len(devs) != 4 || !strings.HasPrefix(phantom, "MIG-") || slices.Contains(ids, phantom) {
		t.Fatalf("over-advertise: %v, want the three devices and a phantom MIG device", devs)
	}
	r = allocateOn(t, p, "nvidia.com/mig-2g.20gb", phantom)
	if r.Envs[EnvVisibleDevices] != phantom || !slices.Equal(cdiNames(r), []string{CDIMIGDeviceName(phantom)}) {
		t.Errorf("the phantom's allocation: env %v, CDI %v", r.Envs, cdiNames(r))
	}
	for _, d := range p.CDISpec().Devices {
		if d.Name == phantom {
			t.Errorf("the CDI spec has the phantom %s; the runtime must refuse it", phantom)
		}
	}
}

// mixedWithDRA is mig-mixed with two DRA GPUs, so the inventory has both kinds of MIG lists.
func mixedWithDRA(t *testing.T) (Config, *Plugin) {
	cfg := modeConfig(t, fakegpu.SharingMIGMixed, 1)
	cfg.DRADevices = 2
	cfg.NvidiaSMI = "/bin/true"
	return cfg, mustNew(t, cfg)
}

func TestInventoryAndCDISpecOfMIGDevices(t *testing.T) {
	cfg, p := mixedWithDRA(t)
	inv := p.Inventory()
	for i, g := range inv.GPUs {
		var want []fakegpu.Placement
		switch {
		case i < cfg.Devices:
			want = fakegpu.LayoutFor(fakegpu.SharingMIGMixed, i)
		default:
			want = fakegpu.PartitionPlacements() // every partition a DRA GPU can be prepared as
		}
		var got []fakegpu.Placement
		for _, m := range g.MIG {
			got = append(got, m.Placement())
			if m.UUID != fakegpu.MIGUUID(g.UUID, m.Placement()) || m.CapMinor != fakegpu.MIGCapMinor(g.Minor, m.Placement()) || m.Path != g.Path {
				t.Errorf("GPU %d: MIG device %+v", i, m)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("GPU %d: placements %v, want %v", i, got, want)
		}
	}
	none := mustNew(t, cdiConfig(t, 2)).Inventory()
	for _, g := range none.GPUs {
		if len(g.MIG) != 0 {
			t.Errorf("mode none: GPU %d has MIG devices %v", g.Minor, g.MIG)
		}
	}

	spec := p.CDISpec()
	byName := map[string]cdispec.Device{}
	for _, d := range spec.Devices {
		byName[d.Name] = d
	}
	wantDevices := cfg.Devices + cfg.DRADevices + 2 + 4 + 2*13
	if len(spec.Devices) != wantDevices {
		t.Errorf("CDI spec has %d devices, want %d (6 GPUs, 6 MIG devices of the device plugin, 26 partitions)", len(spec.Devices), wantDevices)
	}
	for _, g := range inv.GPUs {
		for _, m := range g.MIG {
			d, ok := byName[m.UUID]
			if !ok {
				t.Errorf("no CDI device %s for %s of GPU %d", CDIMIGDeviceName(m.UUID), m.Profile, g.Minor)
				continue
			}
			n := d.ContainerEdits.DeviceNodes
			if len(n) != 2 || n[0].Path != fakegpu.DeviceNode("/dev", g.Minor) || n[0].Major != fakegpu.NvidiaMajor || n[0].Minor != int64(g.Minor) ||
				n[1].Path != fakegpu.CapDeviceNode("/dev", m.CapMinor) || n[1].Type != "c" || n[1].Major != fakegpu.NvidiaCapsMajor || n[1].Minor != int64(m.CapMinor) ||
				n[1].HostPath != fakegpu.CapDeviceNode(filepath.Join(cfg.StateDir, "dev"), m.CapMinor) {
				t.Errorf("CDI device %s: nodes %+v %+v", m.UUID, n[0], n[1])
			}
			if len(d.ContainerEdits.Env) != 0 {
				t.Errorf("CDI device %s sets env %v; a container's devices would overwrite each other's", m.UUID, d.ContainerEdits.Env)
			}
		}
	}
}

func TestDeviceSpecsStrategyGivesAMIGDevicesNodes(t *testing.T) {
	cfg := modeConfig(t, fakegpu.SharingMIGMixed, 1)
	cfg.DeviceListStrategy = StrategyDeviceSpecs
	p := mustNew(t, cfg)
	ids := p.ResourceDeviceIDs("nvidia.com/mig-2g.20gb")
	r := allocateOn(t, p, "nvidia.com/mig-2g.20gb", ids[0], ids[2])
	if len(r.CdiDevices) != 0 {
		t.Errorf("device-specs strategy returned CDI devices %v", cdiNames(r))
	}
	var paths []string
	for _, d := range r.Devices {
		paths = append(paths, d.ContainerPath)
	}
	inv := p.Inventory()
	_, m0, _ := inv.MIGByUUID(ids[0])
	_, m2, _ := inv.MIGByUUID(ids[2])
	want := []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia3",
		fakegpu.CapDeviceNode("/dev", m0.CapMinor), fakegpu.CapDeviceNode("/dev", m2.CapMinor)}
	if !slices.Equal(paths, want) {
		t.Errorf("device specs %v, want %v (the GPU once, a cap device per MIG device)", paths, want)
	}
	if len(r.Mounts) == 0 {
		t.Error("no mounts: the inventory must reach the container")
	}
}

// End to end on the node: the agent installs the fake driver, the kubelet allocates MIG devices, the
// runtime injects what the CDI spec says for them, and nvidia-smi in the container lists exactly those,
// under their GPU, in a form the workload probe counts as the MIG devices.
func TestContainerGivenMIGDevicesSeesThemInNvidiaSMI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root (CI runs as root)")
	}
	cfg, p := mixedWithDRA(t)
	if err := p.InstallDriver(); err != nil {
		t.Fatal(err)
	}
	spec := p.CDISpec()
	// container plays the runtime: the spec-wide device nodes and those of the named CDI devices, as
	// links to the agent's nodes in a fresh /dev.
	container := func(names []string) smi.Env {
		devDir := t.TempDir()
		nodes := slices.Clone(spec.ContainerEdits.DeviceNodes)
		for _, name := range names {
			found := false
			for _, d := range spec.Devices {
				if CDIKind+"="+d.Name == name {
					nodes, found = append(nodes, d.ContainerEdits.DeviceNodes...), true
				}
			}
			if !found {
				t.Fatalf("unresolvable CDI device %s", name)
			}
		}
		for _, n := range nodes {
			link := filepath.Join(devDir, strings.TrimPrefix(n.Path, "/dev/"))
			if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(n.HostPath, link); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		}
		return smi.Env{DevDir: devDir, InventoryFile: filepath.Join(cfg.StateDir, "inventory.json"), Stat: smi.StatDevice}
	}
	list := func(env smi.Env) string {
		var out, errOut strings.Builder
		if code := smi.Main([]string{"-L"}, env, &out, &errOut); code != smi.ExitOK {
			t.Fatalf("nvidia-smi -L: exit %d: %s", code, errOut.String())
		}
		return out.String()
	}
	u := p.PhysicalUUIDs()
	ids := p.ResourceDeviceIDs("nvidia.com/mig-2g.20gb")
	r := allocateOn(t, p, "nvidia.com/mig-2g.20gb", ids[1])
	got := list(container(cdiNames(r)))
	want := "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + u[3] + ")\n  MIG 2g.20gb     Device  0: (UUID: " + ids[1] + ")\n"
	if got != want {
		t.Errorf("a container given %s lists:\n%s\nwant:\n%s", ids[1], got, want)
	}
	if devs := probe.ParseNvidiaSMIList(got); !slices.Equal(devs, []string{ids[1]}) {
		t.Errorf("the probe counts %v, want the MIG device alone", devs)
	}
	// A DRA partition is given the same way, by the name CDIMIGDeviceName gives it.
	part := fakegpu.MIGUUID(u[5], fakegpu.Placement{Profile: "1g.10gb", Start: 3})
	got = list(container([]string{CDIMIGDeviceName(part)}))
	if devs := probe.ParseNvidiaSMIList(got); !slices.Equal(devs, []string{part}) || !strings.Contains(got, "MIG 1g.10gb     Device  0:") {
		t.Errorf("a container given partition %s lists:\n%s", part, got)
	}
	// The parent whole (mig-with-parent) is a GPU without MIG devices.
	got = list(container([]string{CDIDeviceName(3)}))
	if devs := probe.ParseNvidiaSMIList(got); !slices.Equal(devs, []string{u[3]}) {
		t.Errorf("a container given GPU 3 whole lists:\n%s", got)
	}
}

// The kubelet registers every resource of mig-mixed on its own socket, and each socket serves its
// resource's devices.
func TestMIGMixedRegistersEveryResource(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, "node-a")
	cfg.Sharing = fakegpu.SharingMIGMixed
	kubelet := startFakeKubelet(t, dir)
	p := mustNew(t, cfg)
	startPlugin(t, p.ServeKubelet)
	eventually(t, "four registrations", func() bool { return len(kubelet.requests()) == 4 })
	endpoints := map[string]string{}
	for _, r := range kubelet.requests() {
		endpoints[r.ResourceName] = r.Endpoint
	}
	for _, res := range p.Resources() {
		if endpoints[res] != socketName(res) {
			t.Errorf("%s registered at %q, want %q", res, endpoints[res], socketName(res))
		}
		c := cfg
		c.ResourceName = res
		stream, err := dialPlugin(t, c).ListAndWatch(t.Context(), &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil || !slices.Equal(deviceIDs(resp.Devices), p.ResourceDeviceIDs(res)) {
			t.Errorf("%s socket lists %v (err %v), want %v", res, deviceIDs(resp.GetDevices()), err, p.ResourceDeviceIDs(res))
		}
	}
	if len(endpoints) != 4 {
		t.Errorf("registered %v", endpoints)
	}
}

// The readiness marker waits for the kubelet to stream every resource, not just the first.
func TestReadyNeedsAStreamOnEveryResource(t *testing.T) {
	cfg := testConfig(t, shortDir(t), "node-a")
	cfg.Sharing = fakegpu.SharingMIGMixed
	cfg.ReadyFile = filepath.Join(t.TempDir(), "ready")
	p := mustNew(t, cfg)
	for i, res := range p.Resources() {
		if fileExists(cfg.ReadyFile) {
			t.Fatalf("ready with streams on %d of %d resources", i, len(p.Resources()))
		}
		p.streamOpened(res)
	}
	if !fileExists(cfg.ReadyFile) {
		t.Fatal("not ready with a stream on every resource")
	}
	p.streamClosed("nvidia.com/mig-1g.10gb")
	if fileExists(cfg.ReadyFile) {
		t.Error("still ready after one resource lost its stream")
	}
}

// renameByDefault: the replicas are advertised as nvidia.com/gpu.shared (resource, socket and MPS pipe
// directory follow the name), GFD's labels stay on nvidia.com/gpu.* and the product has no -SHARED; a
// mode that shares nothing has nothing to rename.
func TestRenameSharedAdvertisesTheSharedResource(t *testing.T) {
	for _, mode := range []string{fakegpu.SharingTimeSlicing, fakegpu.SharingMPS} {
		cfg := modeConfig(t, mode, 2)
		cfg.RenameShared = true
		p := mustNew(t, cfg)
		if got := p.Resources(); !slices.Equal(got, []string{"nvidia.com/gpu.shared"}) {
			t.Errorf("%s renamed: resources %v, want nvidia.com/gpu.shared", mode, got)
		}
		l := cfg.NodeLabels()
		if l[LabelProduct] != LabelValue(cfg.Product) || l[LabelReplicas] != "2" || l[LabelSharingStrategy] != mode {
			t.Errorf("%s renamed: labels %v, want the plain product, 2 replicas, strategy %s", mode, l, mode)
		}
		cfg.RenameShared = false
		if l := cfg.NodeLabels(); !strings.HasSuffix(l[LabelProduct], "-SHARED") {
			t.Errorf("%s not renamed: product %q, want the -SHARED suffix", mode, l[LabelProduct])
		}
	}
	cfg := modeConfig(t, fakegpu.SharingMIGMixed, 1)
	cfg.RenameShared = true
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "renaming") {
		t.Errorf("rename with mig-mixed: %v, want a refusal", err)
	}
}
