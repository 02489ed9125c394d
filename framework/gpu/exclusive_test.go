package gpu

import (
	"strings"
	"testing"

	"gpuconform.io/gpuconform/framework/cluster"
)

// held is a pod holding ids whose container saw their physical devices.
func held(pod string, ids ...string) Holding {
	return Holding{Pod: pod, Allocated: ids, Seen: PhysicalDevices(ids)}
}

func TestCheckExclusive(t *testing.T) {
	none := cluster.NodeSharing{Strategy: "none", Replicas: 1}
	sliced := cluster.NodeSharing{Strategy: "time-slicing", Replicas: 2}
	cases := []struct {
		name     string
		sharing  cluster.NodeSharing
		holdings []Holding
		want     string // "" = no breach; else a substring of the error
	}{
		{"exclusive: distinct GPUs", none, []Holding{held("p0", "GPU-a"), held("p1", "GPU-b")}, ""},
		{"exclusive: one GPU twice", none, []Holding{held("p0", "GPU-a"), held("p1", "GPU-b"), {Pod: "p2", Allocated: []string{"GPU-c"}, Seen: []string{"GPU-a"}}},
			"device GPU-a is seen by pod p0 and by pod p2, both running on w1: a device was handed out twice"},
		{"exclusive, count only: one GPU seen twice", none, []Holding{{Pod: "p0", Seen: []string{"GPU-a"}}, {Pod: "p1", Seen: []string{"GPU-a"}}}, "a device was handed out twice"},
		{"exclusive: one ID twice to one pod", none, []Holding{held("p0", "GPU-a", "GPU-a")}, "GPU-a is allocated twice to pod p0"},
		// Time-slicing without GFD labels: as strict as ever, and the message says why.
		{"no labels: replicas of one GPU", cluster.NodeSharing{}, []Holding{held("p0", "GPU-a::0"), held("p1", "GPU-a::1")},
			"a device was handed out twice (the kubelet handed out replica IDs such as GPU-a::0"},
		{"time-slicing with 1 replica is exclusive", cluster.NodeSharing{Strategy: "time-slicing", Replicas: 1}, []Holding{held("p0", "GPU-a::0"), held("p1", "GPU-a::1")}, "handed out twice"},
		{"time-sliced: distinct replicas of one GPU", sliced, []Holding{held("p0", "GPU-a::0"), held("p1", "GPU-a::1"), held("p2", "GPU-b::0"), held("p3", "GPU-b::1")}, ""},
		{"time-sliced: one pod, two replicas of one GPU", sliced, []Holding{held("p0", "GPU-a::0", "GPU-a::1"), held("p1", "GPU-b::0")}, ""},
		{"time-sliced: the same replica to two pods", sliced, []Holding{held("p0", "GPU-a::0"), held("p1", "GPU-a::0")},
			"GPU-a::0 is held by pod p0 and by pod p1, both running on w1: a device was handed out twice"},
		{"time-sliced: the same replica twice to one pod", sliced, []Holding{held("p0", "GPU-a::1", "GPU-a::1")}, "GPU-a::1 is allocated twice to pod p0"},
		{"time-sliced: more holders than replicas", sliced, []Holding{held("p0", "GPU-a::0"), held("p1", "GPU-a::1"), held("p2", "GPU-a::2")},
			"GPU GPU-a is held by 3 pods (p0, p1, p2) on w1, which the node's labels share 2 ways (time-slicing, 2 replicas per GPU)"},
		{"time-sliced: a container sees a GPU beyond its replicas", sliced, []Holding{held("p0", "GPU-a::0"), held("p1", "GPU-a::1"), {Pod: "p2", Allocated: []string{"GPU-b::0"}, Seen: []string{"GPU-a"}}},
			"held by 3 pods"},
		{"time-sliced, count only: within the replicas", sliced, []Holding{{Pod: "p0", Seen: []string{"GPU-a"}}, {Pod: "p1", Seen: []string{"GPU-a"}}}, ""},
		{"time-sliced, count only: beyond them", sliced, []Holding{{Pod: "p0", Seen: []string{"GPU-a"}}, {Pod: "p1", Seen: []string{"GPU-a"}}, {Pod: "p2", Seen: []string{"GPU-a"}}}, "more often than it has replicas"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckExclusive("w1", c.sharing, c.holdings)
			if c.want == "" && err != nil {
				t.Errorf("CheckExclusive: %v, want no breach", err)
			}
			if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("CheckExclusive: %v, want a breach containing %q", err, c.want)
			}
		})
	}
}

// Labels describe the device plugin's resource; a DRA claim is judged exclusive whatever they say.
func TestSharingFor(t *testing.T) {
	lbls := map[string]string{cluster.LabelSharingStrategy: "time-slicing", cluster.LabelSharingReplicas: "4"}
	if s := SharingFor(&DevicePlugin{}, lbls); !s.Shared() || s.HoldersPerDevice() != 4 {
		t.Errorf("device plugin on a time-sliced node: %+v", s)
	}
	if s := SharingFor(&DRA{}, lbls); s.Shared() || s.HoldersPerDevice() != 1 {
		t.Errorf("DRA on a time-sliced node: %+v, want exclusive", s)
	}
}
