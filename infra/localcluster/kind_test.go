package localcluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"
)

func TestKindConfigPoolsAndQuirks(t *testing.T) {
	opts := Options{GPUWorkers: 2, CanaryWorkers: 1}
	raw := KindConfig(opts, HostQuirks{CgroupV1: true})
	var cfg v1alpha4.Cluster
	if err := yaml.UnmarshalStrict([]byte(raw), &cfg); err != nil {
		t.Fatalf("config does not decode as kind v1alpha4: %v\n%s", err, raw)
	}
	if len(cfg.Nodes) != 4 || cfg.Nodes[0].Role != v1alpha4.ControlPlaneRole {
		t.Fatalf("nodes = %+v", cfg.Nodes)
	}
	pools := map[string]int{}
	for _, n := range cfg.Nodes[1:] {
		pools[n.Labels[PoolLabel]]++
	}
	if pools[GPUPool] != 2 || pools[CanaryPool] != 1 {
		t.Errorf("pools = %v", pools)
	}
	if len(cfg.KubeadmConfigPatches) != 1 || !strings.Contains(cfg.KubeadmConfigPatches[0], "failCgroupV1: false") {
		t.Errorf("cgroup v1 patch missing: %v", cfg.KubeadmConfigPatches)
	}
	var kubelet struct {
		Kind                      string `json:"kind"`
		NodeStatusUpdateFrequency string `json:"nodeStatusUpdateFrequency"`
		NodeLeaseDurationSeconds  int    `json:"nodeLeaseDurationSeconds"`
		FailCgroupV1              *bool  `json:"failCgroupV1"`
	}
	if err := yaml.UnmarshalStrict([]byte(cfg.KubeadmConfigPatches[0]), &kubelet); err != nil {
		t.Fatalf("kubelet patch: %v\n%s", err, cfg.KubeadmConfigPatches[0])
	}
	if kubelet.Kind != "KubeletConfiguration" || kubelet.NodeStatusUpdateFrequency != "4s" || kubelet.NodeLeaseDurationSeconds != 20 || kubelet.FailCgroupV1 == nil || *kubelet.FailCgroupV1 {
		t.Errorf("kubelet patch = %+v", kubelet)
	}
	// The controller-manager's grace period, for both kubeadm config versions kind may generate.
	if len(cfg.KubeadmConfigPatchesJSON6902) != 2 {
		t.Fatalf("JSON patches = %+v", cfg.KubeadmConfigPatchesJSON6902)
	}
	for _, p := range cfg.KubeadmConfigPatchesJSON6902 {
		var ops []struct {
			Op, Path string
			Value    any
		}
		if err := yaml.UnmarshalStrict([]byte(p.Patch), &ops); err != nil || len(ops) != 1 || p.Kind != "ClusterConfiguration" || p.Group != "kubeadm.k8s.io" {
			t.Fatalf("patch %+v: %v", p, err)
		}
		want := map[string]any{
			"v1beta4": map[string]any{"name": "node-monitor-grace-period", "value": "20s"},
			"v1beta3": "20s",
		}[p.Version]
		if ops[0].Op != "add" || !strings.HasPrefix(ops[0].Path, "/controllerManager/extraArgs/") || fmt.Sprint(ops[0].Value) != fmt.Sprint(want) {
			t.Errorf("%s patch = %+v, want the value %v", p.Version, ops[0], want)
		}
	}
	if strings.Contains(raw, "restrict_oom_score_adj") {
		t.Error("containerd patch added although the built node image carries it")
	}
	user := KindConfig(Options{GPUWorkers: 1, NodeImage: "kindest/node:v1.37.2"}, HostQuirks{MissingCapSysResource: true})
	if err := yaml.UnmarshalStrict([]byte(user), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.ContainerdConfigPatches) != 1 || !strings.Contains(cfg.ContainerdConfigPatches[0], "restrict_oom_score_adj = true") {
		t.Errorf("user node image on a host without CAP_SYS_RESOURCE lacks the containerd patch: %v", cfg.ContainerdConfigPatches)
	}
	if strings.Contains(KindConfig(opts, HostQuirks{}), "failCgroupV1") {
		t.Error("cgroup v1 patch applied on a v2 host")
	}
}

func TestContainerdConfig(t *testing.T) {
	kind := "[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.10\"\n  restrict_oom_score_adj = false\n"
	got, err := ContainerdConfig(kind, HostQuirks{MissingCapSysResource: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, `sandbox_image = "`+ImagePause+`"`) || !strings.Contains(got, "restrict_oom_score_adj = true") {
		t.Errorf("got %s", got)
	}
	plain, _ := ContainerdConfig(kind, HostQuirks{})
	if !strings.Contains(plain, "restrict_oom_score_adj = false") {
		t.Error("oom score restriction applied on a host with the capability")
	}
	if _, err := ContainerdConfig("sandbox_image = \"other\"", HostQuirks{}); err == nil {
		t.Error("an unexpected kind config was accepted silently")
	}
}

func TestNormalizeRef(t *testing.T) {
	for in, want := range map[string]string{
		"busybox:1":                      "docker.io/library/busybox:1",
		"spike/busybox:1":                "docker.io/spike/busybox:1",
		"registry.k8s.io/pause:3.10.2":   "registry.k8s.io/pause:3.10.2",
		"gpuconform.local/kueue:v0.17.0": "gpuconform.local/kueue:v0.17.0",
	} {
		if got := normalizeRef(in); got != want {
			t.Errorf("normalizeRef(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestKindConfigSharedMount(t *testing.T) {
	raw := KindConfig(Options{GPUWorkers: 2, CanaryWorkers: 1, SharedDir: "/cache/shared/x"}, HostQuirks{})
	var cfg v1alpha4.Cluster
	if err := yaml.UnmarshalStrict([]byte(raw), &cfg); err != nil {
		t.Fatalf("config does not decode as kind v1alpha4: %v\n%s", err, raw)
	}
	if len(cfg.Nodes[0].ExtraMounts) != 0 {
		t.Errorf("the control plane mounts the shared directory: %+v", cfg.Nodes[0].ExtraMounts)
	}
	for _, n := range cfg.Nodes[1:] {
		if len(n.ExtraMounts) != 1 || n.ExtraMounts[0].HostPath != "/cache/shared/x" || n.ExtraMounts[0].ContainerPath != NodeSharedDir {
			t.Errorf("worker %v: mounts %+v, want /cache/shared/x → %s", n.Labels, n.ExtraMounts, NodeSharedDir)
		}
	}
	if strings.Contains(KindConfig(Options{GPUWorkers: 1}, HostQuirks{}), "extraMounts") {
		t.Error("a mount without a shared directory configured")
	}
}

func TestConfigDiffNamesTheFirstChangedLine(t *testing.T) {
	old := KindConfig(Options{GPUWorkers: 2, CanaryWorkers: 1}, HostQuirks{})
	if why := configDiff(old, old); why != "" {
		t.Errorf("same configuration reported as different: %s", why)
	}
	grown := KindConfig(Options{GPUWorkers: 3, CanaryWorkers: 1}, HostQuirks{})
	why := configDiff(old, grown)
	if !strings.Contains(why, "another kind configuration") || !strings.Contains(why, `"gpuconform.io/pool: canary", wanted "gpuconform.io/pool: gpu"`) {
		t.Errorf("diff = %q", why)
	}
	if why := configDiff("kind: Cluster\n", old); !strings.Contains(why, "line 2") {
		t.Errorf("diff of a truncated configuration = %q", why)
	}
}

// A marker that cat reports missing is "no record" at once; a failing exec is tried again and, when it
// keeps failing, is an error that says so, never "no record" (which would recreate a healthy cluster).
func TestReadMarkerRetriesAFailedExecAndTrustsOnlyCatsNoSuchFile(t *testing.T) {
	script := func(results ...[3]string) (func() (string, string, error), *int) {
		calls := 0
		return func() (string, string, error) {
			r := results[min(calls, len(results)-1)]
			calls++
			if r[2] != "" {
				return r[0], r[1], errors.New(r[2])
			}
			return r[0], r[1], nil
		}, &calls
	}
	run, calls := script([3]string{"", "Error response from daemon: container is restarting", "exit status 1"}, [3]string{"kind: Cluster\n", "", ""})
	got, missing, err := readMarker(run, 0)
	if err != nil || missing || got != "kind: Cluster\n" || *calls != 2 {
		t.Fatalf("transient failure: got %q missing=%v err=%v after %d calls", got, missing, err, *calls)
	}
	run, calls = script([3]string{"", "cat: /kind/gpuconform-kind-config.yaml: No such file or directory", "exit status 1"})
	if _, missing, err := readMarker(run, 0); !missing || err != nil || *calls != 1 {
		t.Fatalf("missing marker: missing=%v err=%v after %d calls", missing, err, *calls)
	}
	run, calls = script([3]string{"", "Error response from daemon: no such container", "exit status 1"})
	_, missing, err = readMarker(run, 0)
	if missing || err == nil || *calls != markerReadTries || !strings.Contains(err.Error(), "no such container") {
		t.Fatalf("persistent failure: missing=%v err=%v after %d calls", missing, err, *calls)
	}
}
