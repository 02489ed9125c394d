package config

import (
	"flag"
	"strings"
	"testing"
)

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
