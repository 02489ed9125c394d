package config

import (
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/fixtures"
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

// --local-queue implies --queues=existing; its NS/NAME form implies --namespace NS, and a bare NAME
// needs --namespace (the suite's own namespaces are fresh per spec and hold no LocalQueue).
func TestLocalQueueFlag(t *testing.T) {
	for _, args := range [][]string{{"--local-queue", "team-a/gpus"}, {"--namespace", "team-a", "--local-queue", "team-a/gpus"}, {"--local-queue", "gpus", "--namespace", "team-a"}} {
		cfg, err := Parse(args)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if cfg.Queues.Mode != QueuesExisting || cfg.Queues.LocalQueue != "gpus" || cfg.Namespace != "team-a" {
			t.Errorf("%q: queues %+v, namespace %q", args, cfg.Queues, cfg.Namespace)
		}
	}
	cfg, err := Parse([]string{"--config", writeFile(t, "queues:\n  mode: existing\n  localQueue: team-a/gpus\n")})
	if err != nil || cfg.Namespace != "team-a" || cfg.Queues.LocalQueue != "gpus" {
		t.Errorf("queues.localQueue NS/NAME in the file: %v, namespace %q, queue %q", err, cfg.Namespace, cfg.Queues.LocalQueue)
	}
	for args, want := range map[string]string{
		"--local-queue gpus":                           "give --namespace NS, or --local-queue NS/gpus",
		"--namespace team-b --local-queue team-a/gpus": `is in namespace "team-a" but namespace is "team-b"`,
	} {
		if _, err := Parse(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", args, err, want)
		}
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
	if _, err := Parse([]string{"--require=dra"}); err == nil || !strings.Contains(err.Error(), "want path:NAME, scenario:NAME or conformance:REQUIREMENT") {
		t.Errorf("--require=dra: err = %v", err)
	}
}

func TestFaultAndCheckpointFlags(t *testing.T) {
	script := executable(t, "f.sh")
	cfg, err := Parse([]string{"--fault-command", script, "--fault-provider", "command", "--kubelet-stop-for", "90s", "--eviction-toleration", "5s",
		"--dra-device-fault-provider", "device-taint-rule", "--checkpoint-storage-class", "efs"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Faults.Command != script || cfg.Faults.NodeProvider != "command" || cfg.Faults.KubeletStopFor.Duration.String() != "1m30s" ||
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

// With Resolve set, Config resolves a relative script before Validate looks for it.
func TestConfigResolvesScriptsBeforeValidating(t *testing.T) {
	script := executable(t, "upgrade.sh")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f := RegisterFlags(fs)
	f.Resolve = func(file string) string { return Resolve(file, []string{filepath.Dir(script)}) }
	if err := fs.Parse([]string{"--upgrade-command", "./upgrade.sh"}); err != nil {
		t.Fatal(err)
	}
	c, err := f.Config()
	if err != nil || c.Upgrade.Command != script {
		t.Errorf("upgrade command %q, err %v; want %q", c.Upgrade.Command, err, script)
	}
}

// --pod-cpu and --pod-memory (podResources.cpu and .memory in the file) are quantities; unset, they are
// zero and the fixtures' defaults apply, which the flags' help names.
func TestPodResourcesFlags(t *testing.T) {
	cfg, err := Parse([]string{"--pod-cpu", "250m", "--pod-memory", "1Gi"})
	if err != nil {
		t.Fatal(err)
	}
	if cpu, mem := cfg.PodResources.Quantities(); cpu.String() != "250m" || mem.String() != "1Gi" {
		t.Errorf("flags: cpu %s memory %s, want 250m 1Gi", cpu.String(), mem.String())
	}
	cfg, err = Parse([]string{"--config", writeFile(t, "podResources:\n  cpu: \"0.5\"\n  memory: 256Mi\n"), "--pod-memory", "512Mi"})
	if cpu, mem := cfg.PodResources.Quantities(); err != nil || cpu.String() != "500m" || mem.String() != "512Mi" {
		t.Errorf("file then flag: %v, cpu %s memory %s, want 500m 512Mi", err, cpu.String(), mem.String())
	}
	if cpu, mem := Default().PodResources.Quantities(); !cpu.IsZero() || !mem.IsZero() {
		t.Errorf("defaults: cpu %s memory %s, want zero (the fixtures' defaults)", cpu.String(), mem.String())
	}
	for _, d := range flagTable() {
		if want := map[string]string{"pod-cpu": fixtures.DefaultCPU, "pod-memory": fixtures.DefaultMemory}[d.name]; want != "" && !strings.Contains(d.usage, "(default "+want+")") {
			t.Errorf("--%s: usage %q does not name the default %s", d.name, d.usage, want)
		}
	}
	for bad, want := range map[string]string{
		"--pod-cpu=lots":    `podResources.cpu "lots" (--pod-cpu): not a Kubernetes quantity; give a positive quantity such as 100m`,
		"--pod-memory=0":    `podResources.memory "0" (--pod-memory): not above zero`,
		"--pod-memory=-1Gi": "not above zero",
	} {
		if _, err := Parse(strings.Fields(bad)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", bad, err, want)
		}
	}
}

// The noisy-neighbour workload is an image and a command split on spaces; a command without an image is a
// usage error that names the flag to give.
func TestNoisyNeighbourFlags(t *testing.T) {
	cfg, err := Parse([]string{"--noisy-neighbour-image", "example.com/bench:1", "--noisy-neighbour-command", "/bench  --seconds 5"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NoisyNeighbour.Image != "example.com/bench:1" || strings.Join(cfg.NoisyNeighbour.Command, "|") != "/bench|--seconds|5" {
		t.Errorf("noisyNeighbour = %+v", cfg.NoisyNeighbour)
	}
	if _, err := Parse([]string{"--noisy-neighbour-command", "/bench"}); err == nil || !strings.Contains(err.Error(), "--noisy-neighbour-image") {
		t.Errorf("a command without an image: err = %v", err)
	}
	cfg, err = Parse([]string{"--config", writeFile(t, "noisyNeighbour:\n  image: example.com/bench:1\n  command: [/bench, --label, a b]\n")})
	if err != nil || len(cfg.NoisyNeighbour.Command) != 3 || cfg.NoisyNeighbour.Command[2] != "a b" {
		t.Errorf("noisyNeighbour from the file: %v %+v", err, cfg.NoisyNeighbour)
	}
}

// The device test is an image and a command split on white space, from flags or the file; a command
// alone, or the workload image with its bare entrypoint, is a usage error before anything connects.
func TestDeviceTestFlags(t *testing.T) {
	const vectorAdd = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
	cfg, err := Parse(nil)
	if err != nil || cfg.DeviceTest.Image != "" || cfg.DeviceTest.Command != nil {
		t.Errorf("default: %v, deviceTest %+v; want none (the workload image's own test)", err, cfg.DeviceTest)
	}
	cfg, err = Parse([]string{"--device-test-image", vectorAdd})
	if err != nil || cfg.DeviceTest.Image != vectorAdd || cfg.DeviceTest.Command != nil {
		t.Errorf("image alone (its entrypoint): %v, deviceTest %+v", err, cfg.DeviceTest)
	}
	cfg, err = Parse([]string{"--device-test-image", vectorAdd, "--device-test-command", " /cuda-samples/vectorAdd\t--quiet  x"})
	if err != nil || strings.Join(cfg.DeviceTest.Command, "|") != "/cuda-samples/vectorAdd|--quiet|x" {
		t.Errorf("image and command: %v, deviceTest %+v", err, cfg.DeviceTest)
	}
	cfg, err = Parse([]string{"--config", writeFile(t, "deviceTest:\n  image: "+vectorAdd+"\n  command: [/bin/sh, -c, ./vectorAdd && echo done]\n")})
	if err != nil || len(cfg.DeviceTest.Command) != 3 || cfg.DeviceTest.Command[2] != "./vectorAdd && echo done" {
		t.Errorf("deviceTest from the file: %v %+v", err, cfg.DeviceTest)
	}
	cfg, err = Parse([]string{"--config", writeFile(t, "deviceTest:\n  image: "+vectorAdd+"\n"), "--device-test-image", "example.com/other:1"})
	if err != nil || cfg.DeviceTest.Image != "example.com/other:1" {
		t.Errorf("the flag over the file: %v %+v", err, cfg.DeviceTest)
	}
	for args, want := range map[string]string{
		"--device-test-command /cuda-samples/vectorAdd":                                     "without deviceTest.image",
		"--image example.com/gpu-workload:1 --device-test-image example.com/gpu-workload:1": "is the workload image with no command",
	} {
		_, err := Parse(strings.Fields(args))
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a usage error saying %q", args, err, want)
		}
	}
	if _, err := Parse([]string{"--image", "example.com/gpu-workload:1", "--device-test-image", "example.com/gpu-workload:1", "--device-test-command", "/usr/local/bin/gpu-workload device-test"}); err != nil {
		t.Errorf("the workload image with a command of its own: %v", err)
	}
}
