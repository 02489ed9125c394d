package suite

import (
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/framework/upgrade"
)

// The user's script is run against the suite's own cluster, logs into the artifacts directory and, once the
// run's ID is settled, labels with it.
func TestPlanUpgradeWiresTheCommand(t *testing.T) {
	r := &Run{RunID: "process-2", Clients: &cluster.Clients{Kube: fake.NewClientset()}, Config: config.Config{
		Kubeconfig: "/home/me/.kube/canary", Context: "canary", ArtifactsDir: "/tmp/artifacts",
		Upgrade: config.UpgradeConfig{Command: "/opt/upgrade.sh", VersionLabel: "example.com/driver"},
	}}
	r.Upgrade = r.planUpgrade(t.Context())
	c, ok := r.Upgrade.Provider.(*upgrade.Command)
	if !ok {
		t.Fatalf("provider = %T, want the command", r.Upgrade.Provider)
	}
	if c.Path != "/opt/upgrade.sh" || c.Kubeconfig != "/home/me/.kube/canary" || c.KubeContext != "canary" ||
		c.LogPath != "/tmp/artifacts/upgrade-command.log" || c.Kube == nil || c.VersionLabel != "example.com/driver" {
		t.Errorf("command = %+v", c)
	}
	r.Env = &testenv.Env{Factory: fixtures.NewFactory("process-2")}
	r.Start("run-1")
	if c.RunID != "run-1" {
		t.Errorf("RunID = %q after Start, want the run's", c.RunID)
	}
}
