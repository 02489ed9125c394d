package suite

import (
	"reflect"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/runlease"
)

// selected is a spec Ginkgo's preview would run, with its labels; filtered one it would not.
func selected(ls ...string) types.SpecReport {
	return types.SpecReport{LeafNodeType: types.NodeTypeIt, State: types.SpecStatePassed, LeafNodeLabels: ls}
}

func filtered(ls ...string) types.SpecReport {
	sp := selected(ls...)
	sp.State = types.SpecStateSkipped
	return sp
}

// A run holds, for other runs, what its selected specs hold: a path exclusive where any of them leases a
// node or fills the path, shared where they only use a device beside others; node stoppers and device
// faults disrupt; the rehearsal holds the canary (and every path, having none of its own). Filtered specs
// hold nothing.
func TestPlanHolds(t *testing.T) {
	r := &Run{Paths: teamPaths()}
	r.Caps.Pools = cluster.Pools{Canary: cluster.Pool{Nodes: []string{"c1"}}, GPU: cluster.Pool{Nodes: []string{"w1", "c1"}}}
	dp, dra := labels.ForPath("device-plugin"), labels.ForPath("dra")
	cases := []struct {
		name  string
		specs []types.SpecReport
		want  runlease.Holds
	}{
		{name: "plain specs share their path", specs: []types.SpecReport{selected(dra), selected(dra, labels.OnNode), selected(dra, labels.NoDevices)},
			want: runlease.Holds{Paths: map[string]runlease.Mode{"dra": runlease.Shared}}},
		{name: "one node holder makes the path exclusive", specs: []types.SpecReport{selected(dp), selected(dp, labels.HoldsNode), selected(dra)},
			want: runlease.Holds{Paths: map[string]runlease.Mode{"device-plugin": runlease.Exclusive, "dra": runlease.Shared}}},
		{name: "filtered specs hold nothing", specs: []types.SpecReport{filtered(dp, labels.HoldsPath), selected(dra)},
			want: runlease.Holds{Paths: map[string]runlease.Mode{"dra": runlease.Shared}}},
		{name: "a stopper disrupts", specs: []types.SpecReport{selected(dp, labels.StopsNode, labels.HoldsPath)},
			want: runlease.Holds{Paths: map[string]runlease.Mode{"device-plugin": runlease.Exclusive}, Disrupts: true}},
		{name: "the rehearsal holds the canary on every path", specs: []types.SpecReport{selected(labels.HoldsCanary)},
			want: runlease.Holds{Paths: map[string]runlease.Mode{"device-plugin": runlease.Exclusive, "dra": runlease.Exclusive}, Canary: []string{"c1"}}},
		{name: "nothing selected holds nothing", specs: []types.SpecReport{filtered(dra)},
			want: runlease.Holds{Paths: map[string]runlease.Mode{}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.want.Nodes = []string{"w1", "c1"} // the GPU pool's, whatever the specs
			if got := r.PlanHolds(c.specs); !reflect.DeepEqual(got, c.want) {
				t.Errorf("holds %+v, want %+v", got, c.want)
			}
		})
	}
	if got := r.PlanHolds(nil); !got.Empty() || runlease.Conflict(got, runlease.Holds{Disrupts: true}) != "" {
		t.Errorf("a run of no spec holds %v", got)
	}
}
