package scenarios

import (
	"slices"
	"strings"
	"testing"
	"time"

	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/poollock"
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

// The DRA roll and the driver upgrade rehearsal share the canary pool's lock, also where the canary is
// not in the GPU pool and no node lock keeps them apart; where it is, the roll holds its nodes too.
func TestDRACanaryLocksTakeTheCanaryPool(t *testing.T) {
	dra := &gpu.DRA{Devices: map[string][]string{"w1": {"gpu-0"}, "c1": {"gpu-0"}}}
	ex, sh := poollock.Exclusive, poollock.Shared
	outside := Base{Paths: []gpu.Path{dra}, GPUPool: []string{"w1"}}
	if got := draCanaryLocks(outside, []string{"c1"}); !slices.Equal(got, []poollock.Lock{{Name: canaryLock, Mode: ex}}) {
		t.Errorf("canary outside the GPU pool: %v", got)
	}
	inside := Base{Paths: []gpu.Path{dra, &gpu.ExtendedDRA{DRA: dra}}, GPUPool: []string{"w1", "c1"}}
	want := []poollock.Lock{{Name: canaryLock, Mode: ex}, {Name: "path-dra", Mode: sh}, {Name: "path-dra@c1", Mode: ex}}
	if got := draCanaryLocks(inside, []string{"c1"}); !slices.Equal(got, want) {
		t.Errorf("canary in the GPU pool: %v, want %v", got, want)
	}
	if !slices.ContainsFunc(canaryHold(inside, []string{"c1"}, []string{"w1"}, 1).locks, func(l poollock.Lock) bool { return l == poollock.Lock{Name: canaryLock, Mode: ex} }) {
		t.Error("the driver upgrade rehearsal does not take the canary pool's lock")
	}
}
