package localcluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// GPUCONFORM_REPLICAS sets the default the --replicas flag starts from; unset it is 1, and a value that
// is not a count is refused before anything is touched.
func TestReplicasOption(t *testing.T) {
	cases := []struct {
		env     string
		want    int
		invalid bool
	}{
		{"", 1, false},
		{"2", 2, false},
		{" 4 ", 4, false},
		{"0", 0, true},
		{"two", 0, true},
		{"-1", -1, true},
	}
	t.Setenv(EnvSharing, "") // the mode follows the replicas
	for _, c := range cases {
		t.Setenv(EnvReplicas, c.env)
		o := DefaultOptions(t.TempDir())
		if o.Replicas != c.want {
			t.Errorf("%s=%q: Replicas = %d, want %d", EnvReplicas, c.env, o.Replicas, c.want)
		}
		err := o.Validate()
		if c.invalid != (err != nil) {
			t.Errorf("%s=%q: validate() = %v, want invalid=%v", EnvReplicas, c.env, err, c.invalid)
		}
		if err != nil && !strings.Contains(err.Error(), EnvReplicas) {
			t.Errorf("the refusal %q does not name %s", err, EnvReplicas)
		}
	}
}

// The setting reaches the agent's flags, and a different setting renders a different pod template: `cluster
// up` applies it on every run, so a cluster brought up with 1 replica and then with --replicas 2 rolls its
// agent instead of keeping 1.
func TestReplicasReachTheAgent(t *testing.T) {
	t.Setenv(EnvReplicas, "")
	t.Setenv(EnvSharing, "")
	o := DefaultOptions(t.TempDir())
	whole := o.gpuStack("tools:1")
	o.Replicas = 2
	sliced := o.gpuStack("tools:1")
	if whole.Replicas != 1 || sliced.Replicas != 2 || sliced.Devices != o.DevicesPerNode || sliced.DRADevices != o.DevicesPerNode {
		t.Fatalf("stacks: whole %+v, sliced %+v", whole, sliced)
	}
	a, err := render("fake-device-plugin.yaml", whole)
	if err != nil {
		t.Fatal(err)
	}
	b, err := render("fake-device-plugin.yaml", sliced)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(a, []byte(`"--replicas=1"`)) || !bytes.Contains(b, []byte(`"--replicas=2"`)) {
		t.Errorf("the agent's --replicas flag does not follow the option")
	}
	if bytes.Equal(a, b) {
		t.Error("replicas 1 and 2 render the same manifest: the agent would keep its old setting")
	}
	// The example DRA driver replaces the agent's DRA half, whatever the replicas.
	o.DRADriver = DRADriverExample
	if s := o.gpuStack("tools:1"); !s.ExampleDRADriver || s.DRADevices != 0 || s.Replicas != 2 {
		t.Errorf("example driver stack: %+v", s)
	}
}

// GPUCONFORM_SHARING sets the default of --sharing; with it unset the replicas decide as before. A mode
// that does not exist, or replicas that do not fit the mode, are refused before anything is touched, and
// the refusal names what to change.
func TestSharingOption(t *testing.T) {
	cases := []struct {
		sharing, replicas string
		mode              string
		refusal           string // "" = valid; else a word the refusal must contain
	}{
		{"", "", fakegpu.SharingNone, ""},
		{"", "2", fakegpu.SharingTimeSlicing, ""},
		{"none", "", fakegpu.SharingNone, ""},
		{" mig-single ", "", fakegpu.SharingMIGSingle, ""},
		{"mig-mixed", "1", fakegpu.SharingMIGMixed, ""},
		{"time-slicing", "4", fakegpu.SharingTimeSlicing, ""},
		{"mps", "2", fakegpu.SharingMPS, ""},
		{"mps", "", fakegpu.SharingMPS, EnvReplicas},
		{"time-slicing", "1", fakegpu.SharingTimeSlicing, "2 or more"},
		{"none", "2", fakegpu.SharingNone, "--sharing time-slicing"},
		{"mig-mixed", "2", fakegpu.SharingMIGMixed, EnvReplicas},
		{"mig", "", "mig", EnvSharing},
		{"MIG-single", "", "MIG-single", "mig-single, mig-mixed"},
	}
	// Renaming needs a mode that shares: a usage error otherwise.
	t.Setenv(EnvRenameShared, "true")
	t.Setenv(EnvSharing, fakegpu.SharingMIGMixed)
	t.Setenv(EnvReplicas, "")
	if err := DefaultOptions(t.TempDir()).Validate(); err == nil || !strings.Contains(err.Error(), "--rename-shared") {
		t.Errorf("rename-shared with mig-mixed: %v, want a refusal naming --rename-shared", err)
	}
	t.Setenv(EnvSharing, fakegpu.SharingTimeSlicing)
	t.Setenv(EnvReplicas, "2")
	if o := DefaultOptions(t.TempDir()); !o.RenameShared || o.Validate() != nil {
		t.Errorf("rename-shared with time-slicing: %+v refused: %v", o, o.Validate())
	}
	t.Setenv(EnvRenameShared, "")
	for _, c := range cases {
		t.Setenv(EnvSharing, c.sharing)
		t.Setenv(EnvReplicas, c.replicas)
		o := DefaultOptions(t.TempDir())
		if got := o.SharingMode(); got != c.mode {
			t.Errorf("%s=%q %s=%q: mode %q, want %q", EnvSharing, c.sharing, EnvReplicas, c.replicas, got, c.mode)
		}
		err := o.Validate()
		switch {
		case c.refusal == "" && err != nil:
			t.Errorf("%s=%q %s=%q refused: %v", EnvSharing, c.sharing, EnvReplicas, c.replicas, err)
		case c.refusal != "" && err == nil:
			t.Errorf("%s=%q %s=%q accepted, want a refusal", EnvSharing, c.sharing, EnvReplicas, c.replicas)
		case c.refusal != "" && !strings.Contains(err.Error(), c.refusal):
			t.Errorf("%s=%q %s=%q: refusal %q does not say %q", EnvSharing, c.sharing, EnvReplicas, c.replicas, err, c.refusal)
		}
	}
}

// The mode reaches the agent as --sharing (none needs no flag), changes the pod template, and in the MIG
// modes the manifest also holds the mig.nvidia.com class, selecting partitions, beside the class of whole
// GPUs.
func TestSharingReachesTheAgent(t *testing.T) {
	t.Setenv(EnvSharing, "")
	t.Setenv(EnvReplicas, "")
	render := func(o Options) string {
		t.Helper()
		b, err := render("fake-device-plugin.yaml", o.gpuStack("tools:1"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	o := DefaultOptions(t.TempDir())
	none := render(o)
	if strings.Contains(none, "--sharing") || strings.Contains(none, MIGDeviceClass) {
		t.Errorf("mode none renders --sharing or the MIG class:\n%s", none)
	}
	if !strings.Contains(none, `device.attributes['gpu.nvidia.com'].type == 'gpu'`) {
		t.Error("the class of whole GPUs does not select type == 'gpu'")
	}
	o.Replicas = 2
	if ts := render(o); !strings.Contains(ts, `"--sharing=time-slicing"`) || strings.Contains(ts, MIGDeviceClass) {
		t.Errorf("replicas 2 without a mode: want --sharing=time-slicing and no MIG class")
	}
	o.RenameShared = true
	if ts := render(o); !strings.Contains(ts, `"--rename-shared"`) {
		t.Errorf("rename-shared does not reach the agent")
	}
	o.RenameShared = false
	o.Replicas = 1
	for _, mode := range []string{fakegpu.SharingMIGSingle, fakegpu.SharingMIGMixed} {
		o.Sharing = mode
		m := render(o)
		if !strings.Contains(m, `"--sharing=`+mode+`"`) {
			t.Errorf("%s: the agent does not get --sharing=%s", mode, mode)
		}
		if !strings.Contains(m, "name: "+MIGDeviceClass) || !strings.Contains(m, `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'`) {
			t.Errorf("%s: no %s class selecting the agent's type == 'mig' devices:\n%s", mode, MIGDeviceClass, m)
		}
		if m == none {
			t.Errorf("%s renders the same manifest as none: the agent would not roll", mode)
		}
		if !o.gpuStack("t").partitionable() {
			t.Errorf("%s: the stack is not partitionable, so cluster up would delete the MIG class", mode)
		}
	}
	// With the example driver on the DRA path the agent publishes no partitions: no MIG class.
	o.DRADriver = DRADriverExample
	if s := o.gpuStack("tools:1"); s.partitionable() || strings.Contains(render(o), MIGDeviceClass) {
		t.Error("with the example DRA driver the MIG class is installed")
	}
}

// What cluster up waits for in each mode: per node the device-plugin resources the agent advertises and
// the DRA devices it publishes (4 GPUs per path).
func TestWaitCountsFollowTheMode(t *testing.T) {
	t.Setenv(EnvSharing, "")
	t.Setenv(EnvReplicas, "")
	cases := []struct {
		sharing  string
		replicas int
		renamed  bool
		alloc    map[string]int
		dra      int
	}{
		{"", 1, false, map[string]int{"nvidia.com/gpu": 4, "nvidia.com/gpu.shared": 0}, 4},
		{"time-slicing", 2, false, map[string]int{"nvidia.com/gpu": 8, "nvidia.com/gpu.shared": 0}, 4},
		// renameByDefault: the replicas under nvidia.com/gpu.shared, nvidia.com/gpu down to 0.
		{"time-slicing", 2, true, map[string]int{"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 8}, 4},
		{"mps", 3, false, map[string]int{"nvidia.com/gpu": 12, "nvidia.com/gpu.shared": 0}, 4},
		{"mig-single", 1, false, map[string]int{"nvidia.com/gpu": 8}, 4 * 14},
		{"mig-mixed", 1, false, map[string]int{"nvidia.com/gpu": 2, "nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-2g.20gb": 3, "nvidia.com/mig-1g.10gb": 1}, 4 * 14},
	}
	for _, c := range cases {
		o := DefaultOptions(t.TempDir())
		o.Sharing, o.Replicas, o.RenameShared = c.sharing, c.replicas, c.renamed
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		s := o.gpuStack("tools:1")
		if got := s.allocatable(); fmt.Sprint(got) != fmt.Sprint(c.alloc) {
			t.Errorf("%s×%d: allocatable %v, want %v", c.sharing, c.replicas, got, c.alloc)
		}
		if got := s.draDevicesPerNode(); got != c.dra {
			t.Errorf("%s×%d: DRA devices per node %d, want %d", c.sharing, c.replicas, got, c.dra)
		}
		o.DRADriver = DRADriverExample
		if got := o.gpuStack("tools:1").draDevicesPerNode(); got != 0 {
			t.Errorf("%s with the example driver: %d DRA devices required, want any (0)", c.sharing, got)
		}
	}
}

func TestAllocatableMismatch(t *testing.T) {
	want := map[string]int{"nvidia.com/gpu": 2, "nvidia.com/mig-3g.40gb": 2}
	node := func(name string, alloc map[string]string) string {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": name}, "status": map[string]any{"allocatable": alloc}})
		return string(b)
	}
	list := func(items ...string) []byte { return []byte(`{"items":[` + strings.Join(items, ",") + `]}`) }
	good := node("w1", map[string]string{"cpu": "8", "nvidia.com/gpu": "2", "nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-1g.10gb": "0"})
	if why := allocatableMismatch(list(good), want); why != "" {
		t.Errorf("a node as wanted: %s", why)
	}
	for _, bad := range []string{
		node("w2", map[string]string{"nvidia.com/gpu": "4"}),
		node("w2", map[string]string{"nvidia.com/gpu": "2", "nvidia.com/mig-3g.40gb": "1"}),
		node("w2", map[string]string{"nvidia.com/gpu": "2", "nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-1g.10gb": "1"}),
	} {
		if why := allocatableMismatch(list(good, bad), want); !strings.Contains(why, "node w2") {
			t.Errorf("%s: mismatch %q, want one naming w2", bad, why)
		}
	}
}

func TestSliceMismatch(t *testing.T) {
	slice := func(node string, devices int, counterSets int) string {
		devs := make([]map[string]string, devices)
		for i := range devs {
			devs[i] = map[string]string{"name": fmt.Sprintf("gpu-%d", i)}
		}
		spec := map[string]any{"driver": "gpu.nvidia.com", "nodeName": node}
		if devices > 0 {
			spec["devices"] = devs
		}
		if counterSets > 0 {
			spec["sharedCounters"] = make([]map[string]string, counterSets)
		}
		b, _ := json.Marshal(map[string]any{"spec": spec})
		return string(b)
	}
	list := func(items ...string) []byte { return []byte(`{"items":[` + strings.Join(items, ",") + `]}`) }
	pool := []string{"node/w1", "node/w2"}
	if ok, why := sliceMismatch(list(slice("w1", 0, 4), slice("w1", 56, 0), slice("w2", 0, 4), slice("w2", 56, 0)), "gpu.nvidia.com", pool, 56); !ok {
		t.Errorf("both nodes publish 56 devices: %s", why)
	}
	if ok, why := sliceMismatch(list(slice("w1", 0, 4), slice("w1", 56, 0), slice("w2", 0, 4)), "gpu.nvidia.com", pool, 56); ok || !strings.Contains(why, "w2") {
		t.Errorf("w2 publishes counter sets only: %v %q", ok, why)
	}
	if ok, why := sliceMismatch(list(slice("w1", 4, 0), slice("w2", 4, 0)), "gpu.nvidia.com", pool, 56); ok || !strings.Contains(why, "publish 4 devices") {
		t.Errorf("whole GPUs only where partitions are due: %v %q", ok, why)
	}
	if ok, why := sliceMismatch(list(slice("w1", 4, 0), slice("w2", 3, 0)), "gpu.nvidia.com", pool, 0); !ok {
		t.Errorf("any devices will do for another driver: %s", why)
	}
}

// Kueue and the dra-example-driver are not in the node image: Kueue compiles beside the node image's
// later steps and is loaded after the cluster's creation, the driver is built only for a bring-up that
// asks for it. Their manifests name the content-keyed images loadKueue and loadExampleDRADriver return (a
// stack that asks for the driver without its image is refused before anything is applied).
func TestKueueAndExampleDRADriverAreLoadedNotPreloaded(t *testing.T) {
	for _, comp := range nodeImageComponents {
		if comp.Name == compDRA.Name || comp.Name == compKueue.Name {
			t.Errorf("the node image waits for %s's build", comp.Name)
		}
	}
	c := &Cluster{built: map[string]string{}}
	for _, s := range c.systemImages("rootfs:1") {
		if s.Ref == ImageDRADriver || s.Ref == ImageKueue {
			t.Errorf("the node image preloads %s", s.Ref)
		}
	}
	if got := c.kueueImage(); got.Ref != ImageKueue || got.User == "" || len(got.Files) != 1 {
		t.Errorf("Kueue's image: %+v", got)
	}
	ov := renderedKueueOverlay(kueueImageRepo + ":k2")
	if !strings.Contains(ov, "newName: "+kueueImageRepo+"\n  newTag: k2\n") || strings.Contains(ov, "KUEUE_") {
		t.Errorf("Kueue's overlay does not name the loaded image:\n%s", ov)
	}
	if renderedKueueOverlay(kueueImageRepo+":k3") == ov {
		t.Error("a rebuilt manager renders the same manifests: its Deployment would not roll")
	}
	if got := c.exampleDRAImage(); got.Ref != ImageDRADriver || len(got.Files) != 1 {
		t.Errorf("the example driver's image: %+v", got)
	}
	o := Options{DevicesPerNode: 4, Replicas: 1, DRADriver: DRADriverExample}
	s := o.gpuStack("tools:1")
	if _, err := renderExampleDRADriver(s); err == nil || !strings.Contains(err.Error(), "loadExampleDRADriver") {
		t.Errorf("a stack without the driver's image: %v", err)
	}
	if err := c.installGPUStack(t.Context(), s); err == nil || !strings.Contains(err.Error(), "loadExampleDRADriver") {
		t.Errorf("installing a stack without the driver's image: %v", err)
	}
	s.DRAImage = exampleDRAImageRepo + ":k1"
	b, err := renderExampleDRADriver(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("image: "+exampleDRAImageRepo+":k1")) || bytes.Contains(b, []byte(ImageDRADriver)) {
		t.Errorf("the driver's manifest does not name the keyed image:\n%s", b)
	}
}

// --dra-only-workers labels the last GPU workers so that the agent runs no device plugin there, maps
// nvidia.com/gpu to the agent's DeviceClass, and the stack's wait wants those nodes to advertise none.
func TestDRAOnlyWorkers(t *testing.T) {
	o := DefaultOptions(t.TempDir())
	if o.DRAOnlyWorkers != 1 {
		t.Fatalf("default DRA-only workers %d, want 1", o.DRAOnlyWorkers)
	}
	var cfg v1alpha4.Cluster
	if err := yaml.UnmarshalStrict([]byte(KindConfig(o, HostQuirks{})), &cfg); err != nil {
		t.Fatal(err)
	}
	var off []int
	for i, n := range cfg.Nodes {
		if n.Labels[DevicePluginOffLabel] == "false" {
			off = append(off, i)
		}
	}
	if !slices.Equal(off, []int{o.GPUWorkers}) || cfg.Nodes[o.GPUWorkers].Labels[PoolLabel] != GPUPool {
		t.Errorf("labelled nodes %v, want the last GPU worker (%d)", off, o.GPUWorkers)
	}
	b, err := render("fake-device-plugin.yaml", o.gpuStack("tools:1"))
	if err != nil || !strings.Contains(string(b), "extendedResourceName: nvidia.com/gpu") {
		t.Errorf("the DeviceClass does not map nvidia.com/gpu (%v)", err)
	}
	o.DRAOnlyWorkers = 0
	if b, _ := render("fake-device-plugin.yaml", o.gpuStack("tools:1")); strings.Contains(string(b), "extendedResourceName") || strings.Contains(KindConfig(o, HostQuirks{}), DevicePluginOffLabel) {
		t.Error("0 DRA-only workers still maps the resource or labels a node")
	}
	for _, bad := range []Options{{GPUWorkers: 2, DRAOnlyWorkers: 2, Replicas: 1}, {GPUWorkers: 3, DRAOnlyWorkers: -1, Replicas: 1}, {GPUWorkers: 3, DRAOnlyWorkers: 1, Replicas: 1, DRADriver: DRADriverExample}} {
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "--dra-only-workers") {
			t.Errorf("%+v: %v, want a usage error naming --dra-only-workers", bad, err)
		}
	}
	node := func(name, off string, alloc map[string]string) string {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": name, "labels": map[string]string{DevicePluginOffLabel: off}}, "status": map[string]any{"allocatable": alloc}})
		return string(b)
	}
	list := func(items ...string) []byte { return []byte(`{"items":[` + strings.Join(items, ",") + `]}`) }
	want := map[string]int{"nvidia.com/gpu": 4}
	if why := allocatableMismatch(list(node("w1", "", map[string]string{"nvidia.com/gpu": "4"}), node("w3", "false", map[string]string{"cpu": "8"})), want); why != "" {
		t.Errorf("a DRA-only node without the resource: %s", why)
	}
	if why := allocatableMismatch(list(node("w3", "false", map[string]string{"nvidia.com/gpu": "4"})), want); !strings.Contains(why, "w3") {
		t.Errorf("a DRA-only node that still allocates: %q", why)
	}
}

// The canary workers' names follow the GPU workers' in kind's numbering.
func TestCanaryNodes(t *testing.T) {
	o := DefaultOptions(t.TempDir())
	if got := o.CanaryNodes(); !slices.Equal(got, []string{"gpuconform-worker5"}) {
		t.Errorf("default canary %v, want gpuconform-worker5", got)
	}
	if got := (Options{Name: "c", GPUWorkers: 0, CanaryWorkers: 2}).CanaryNodes(); !slices.Equal(got, []string{"c-worker", "c-worker2"}) {
		t.Errorf("canary only: %v", got)
	}
}
