package scenarios

import (
	"strings"
	"testing"
	"time"

	"gpuconform.io/gpuconform/framework/upgrade"
)

func TestJudgeProbes(t *testing.T) {
	start := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
	end := start.Add(10 * time.Second)
	ok := draProbe{name: "p1", node: "n", created: start.Add(time.Second), phase: "Succeeded"}
	if got := judgeProbes([]draProbe{ok}, start, end); len(got) != 0 {
		t.Errorf("a probe that ran during the roll: %v", got)
	}
	before := ok
	before.created = start.Add(-time.Second)
	if got := judgeProbes([]draProbe{before}, start, end); len(got) != 1 || !strings.Contains(got[0], "no probe pod was started during the roll") {
		t.Errorf("no probe during the roll measured nothing: %v", got)
	}
	failed := ok
	failed.failedToPrepare = []string{"DRA driver gpu.nvidia.com is not registered"}
	stuck := ok
	stuck.name, stuck.phase, stuck.waiting = "p2", "Pending", "ContainerCreating"
	got := strings.Join(judgeProbes([]draProbe{failed, stuck}, start, end), "\n")
	for _, want := range []string{"probe pod p1 on n (created 02:00:01): FailedPrepareDynamicResources: DRA driver gpu.nvidia.com is not registered",
		"probe pod p2 on n did not run to success within 2m0s (phase Pending ContainerCreating)"} {
		if !strings.Contains(got, want) {
			t.Errorf("findings lack %q:\n%s", want, got)
		}
	}
}

func TestFromVersion(t *testing.T) {
	old := upgrade.PluginPod{Namespace: "ns", Name: "old", DaemonSet: "dra", UID: "old", Version: "v1"}
	csi := upgrade.PluginPod{Namespace: "ns", Name: "csi", DaemonSet: "csi", UID: "csi", Version: "1.0"}
	fresh := upgrade.PluginPod{Namespace: "ns", Name: "new", DaemonSet: "dra", UID: "new", Version: "v2"}
	before := map[string][]upgrade.PluginPod{"n": {old, csi}}
	if got := fromVersion(before, map[string][]upgrade.PluginPod{"n": {old, csi, fresh}}, "v2"); got != "v1" {
		t.Errorf("fromVersion = %q, want the replaced DaemonSet's v1", got)
	}
	if got := fromVersion(before, before, "v2"); got != "" {
		t.Errorf("nothing changed: fromVersion = %q", got)
	}
}
