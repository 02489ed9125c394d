package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gpuconform.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultsAreValid(t *testing.T) {
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if cfg.NamespacePrefix != "gpuconform" || !cfg.WantsPath(PathDRA) || !cfg.WantsPath(PathDevicePlugin) {
		t.Errorf("unexpected defaults: %+v", cfg)
	}
	if cfg.Pools.Explicit("gpu") {
		t.Error("default GPU pool must not count as explicit, or discovery would not fall back")
	}
	if cfg.Queues.Mode != QueuesOwn || cfg.DRA.KueueResourceName != "example.com/gpu" {
		t.Errorf("unexpected queue/DRA defaults: %+v %+v", cfg.Queues, cfg.DRA)
	}
}

func TestFileThenFlagsFlagsWin(t *testing.T) {
	file := writeFile(t, `
kubeconfig: /from/file
context: file-ctx
namespacePrefix: filepfx
allocationPaths: [dra]
pools:
  gpu: team=ml
timeoutProfile: real
tolerations:
- key: nvidia.com/gpu
  operator: Exists
  effect: NoSchedule
`)
	cfg, err := Parse([]string{"--config", file, "--context", "flag-ctx", "--disruptive", "--toleration", "dedicated=gpu:NoExecute"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kubeconfig != "/from/file" {
		t.Errorf("kubeconfig from file lost: %q", cfg.Kubeconfig)
	}
	if cfg.Context != "flag-ctx" {
		t.Errorf("flag must win over file: context %q", cfg.Context)
	}
	if cfg.NamespacePrefix != "filepfx" || !cfg.Disruptive || cfg.TimeoutProfile != "real" {
		t.Errorf("merge wrong: %+v", cfg)
	}
	if cfg.WantsPath(PathDevicePlugin) || !cfg.WantsPath(PathDRA) {
		t.Errorf("explicit paths not honoured: %v", cfg.AllocationPaths)
	}
	if !cfg.Pools.Explicit("gpu") || cfg.Pools.Explicit("canary") {
		t.Errorf("explicit pool tracking wrong: %+v", cfg.Pools.explicit)
	}
	if len(cfg.Tolerations) != 2 || cfg.Tolerations[1].Key != "dedicated" || cfg.Tolerations[1].Effect != corev1.TaintEffectNoExecute {
		t.Errorf("tolerations: %+v", cfg.Tolerations)
	}
	local := Default()
	local.TimeoutProfile = "local"
	if cfg.Timeouts().PodStart <= local.Timeouts().PodStart {
		t.Error("real profile must wait longer than local")
	}
	if Default().TimeoutProfile != "auto" || Default().Timeouts() != cfg.Timeouts() {
		t.Error("the default profile is auto, which waits as real does until the nodes decide")
	}
}

func TestTeamNamespaceAndTaintFlags(t *testing.T) {
	cfg, err := Parse([]string{"--namespace", "team-a", "--local-queue", "gpus", "--dedication-taint", "nvidia.com/gpu", "--dedication-taint", "dedicated", "--auto-tolerate=false"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Namespace != "team-a" || cfg.Queues.LocalQueue != "gpus" || len(cfg.DedicationTaints) != 2 || cfg.AutoTolerate() {
		t.Errorf("flags not applied: %+v", cfg)
	}
	if !Default().AutoTolerate() {
		t.Error("dedication taints are tolerated by default")
	}
	for _, bad := range [][]string{{"--namespace", "Team_A"}, {"--dedication-taint", "nvidia.com/gpu=present:NoSchedule"}} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestLocalQueueFlagImpliesExisting(t *testing.T) {
	cfg, err := Parse([]string{"--local-queue", "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Queues.Mode != QueuesExisting || cfg.Queues.LocalQueue != "team-a" {
		t.Errorf("queues: %+v", cfg.Queues)
	}
}

func TestValidationErrorsAreSpecific(t *testing.T) {
	cases := map[string]struct {
		args []string
		want []string
	}{
		"unknown path":        {[]string{"--allocation-paths", "mig"}, []string{`unknown path "mig"`}},
		"auto mixed":          {[]string{"--allocation-paths", "auto,dra"}, []string{"cannot be combined"}},
		"bad selector":        {[]string{"--gpu-pool", "a=b=c"}, []string{"pools.gpu", "not a label selector"}},
		"existing without lq": {[]string{"--queues", "existing"}, []string{"queues.localQueue is empty"}},
		"bad profile":         {[]string{"--timeout-profile", "fast"}, []string{`unknown timeout profile "fast"`}},
		"bad prefix":          {[]string{"--namespace-prefix", "Bad_Prefix"}, []string{"namespacePrefix"}},
		"two errors at once":  {[]string{"--queues", "x", "--image", ""}, []string{"queues.mode", "image: empty"}},
		"bad toleration":      {[]string{"--toleration", "nocolon"}, []string{"want key[=value]:Effect"}},
		"bad bool":            {[]string{"--disruptive=maybe"}, []string{"disruptive"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.args)
			if err == nil {
				t.Fatal("expected an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestUnknownFlagAndKeyAreErrors(t *testing.T) {
	_, err := Parse([]string{"--kubecontext", "x"})
	if err == nil || !strings.Contains(err.Error(), "kubecontext") || !strings.Contains(err.Error(), "--context") {
		t.Errorf("unknown flag error should name it and list valid flags: %v", err)
	}
	file := writeFile(t, "kubeconfg: /typo\n")
	_, err = Parse([]string{"--config", file})
	if err == nil || !strings.Contains(err.Error(), "kubeconfg") {
		t.Errorf("unknown YAML key must be an error naming it: %v", err)
	}
	_, err = Parse([]string{"--config", "/does/not/exist.yaml"})
	if err == nil || !strings.Contains(err.Error(), "reading config file") {
		t.Errorf("missing file: %v", err)
	}
}

func TestSignoffFlags(t *testing.T) {
	cfg, err := Parse([]string{"--require=path:dra,scenario:preemption", "--allow-incomplete", "--baseline=/tmp/last/gpuconform-record.json"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Signoff.Require) != 2 || cfg.Signoff.Require[1] != "scenario:preemption" || !cfg.Signoff.AllowIncomplete || cfg.Signoff.Baseline != "/tmp/last/gpuconform-record.json" {
		t.Errorf("signoff = %+v", cfg.Signoff)
	}
	if _, err := Parse([]string{"--require=dra"}); err == nil || !strings.Contains(err.Error(), "want path:NAME or scenario:NAME") {
		t.Errorf("--require=dra: err = %v", err)
	}
}

func TestFaultAndCheckpointFlags(t *testing.T) {
	cfg, err := Parse([]string{"--fault-command", "/opt/f.sh", "--fault-provider", "command", "--kubelet-stop-for", "90s", "--eviction-toleration", "5s",
		"--dra-device-fault-provider", "device-taint-rule", "--checkpoint-storage-class", "efs"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Faults.Command != "/opt/f.sh" || cfg.Faults.NodeProvider != "command" || cfg.Faults.KubeletStopFor.Duration.String() != "1m30s" ||
		cfg.Faults.EvictionToleration.Duration.String() != "5s" || cfg.Faults.DRADeviceProvider != "device-taint-rule" || cfg.Checkpoints.StorageClass != "efs" {
		t.Errorf("flags not applied: %+v %+v", cfg.Faults, cfg.Checkpoints)
	}
	cfg, err = Parse([]string{"--config", writeFile(t, "faults:\n  nodeProvider: kubelet-stop\n  kubeletStopFor: 3m\ncheckpoints:\n  hostPath: /mnt/nfs\n")})
	if err != nil || cfg.Faults.NodeProvider != "kubelet-stop" || cfg.Faults.KubeletStopFor.Duration.String() != "3m0s" || cfg.Checkpoints.HostPath != "/mnt/nfs" {
		t.Errorf("YAML not applied: %v %+v", err, cfg)
	}
	for bad, want := range map[string]string{
		"--fault-provider=ssh":                                   "faults.nodeProvider",
		"--fault-provider=command":                               "faults.command",
		"--kubelet-stop-for=5s":                                  "at least 30s",
		"--checkpoint-host-path=relative":                        "absolute",
		"--dra-device-fault-provider=kubelet-stop":               "faults.draDeviceProvider",
		"--checkpoint-host-path=/a --checkpoint-storage-class=b": "pick one",
		"--eviction-toleration=soon":                             "not a duration",
	} {
		_, err := Parse(strings.Fields(bad))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %q", bad, err, want)
		}
	}
}

// A relative path is taken from the first base where it exists (the current directory, then the
// checkout's root under go test); one that exists nowhere, from the last; a bare script name stays a
// name for PATH.
func TestResolvePaths(t *testing.T) {
	wd, root := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "_output"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(root, "_output", "kubeconfig"), filepath.Join(wd, "base.json"), filepath.Join(root, "base.json")} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := Config{Kubeconfig: "_output/kubeconfig", ArtifactsDir: "_artifacts", Signoff: SignoffConfig{Baseline: "base.json"}}
	c.Faults.Command = "faults.sh"
	c.Upgrade.Command = "./upgrade.sh"
	got := c.ResolvePaths([]string{wd, root})
	want := map[string]string{
		"kubeconfig": filepath.Join(root, "_output", "kubeconfig"), "artifacts": filepath.Join(root, "_artifacts"),
		"baseline": filepath.Join(wd, "base.json"), "fault command": "faults.sh", "upgrade command": filepath.Join(root, "upgrade.sh"),
	}
	have := map[string]string{"kubeconfig": got.Kubeconfig, "artifacts": got.ArtifactsDir, "baseline": got.Signoff.Baseline,
		"fault command": got.Faults.Command, "upgrade command": got.Upgrade.Command}
	for k, w := range want {
		if have[k] != w {
			t.Errorf("%s: %q, want %q", k, have[k], w)
		}
	}
	if abs := Resolve("/etc/kubeconfig", []string{wd}); abs != "/etc/kubeconfig" {
		t.Errorf("an absolute path changed: %q", abs)
	}
}

// A flag another package defined first (controller-runtime's --kubeconfig) is shared, not redefined.
func TestSharedFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("kubeconfig", "", "defined by another package")
	f := RegisterFlags(fs)
	if err := fs.Parse([]string{"--kubeconfig", "/k", "--disruptive"}); err != nil {
		t.Fatal(err)
	}
	c, err := f.Config()
	if err != nil || c.Kubeconfig != "/k" || !c.Disruptive {
		t.Errorf("config %q %v %v", c.Kubeconfig, c.Disruptive, err)
	}
}
