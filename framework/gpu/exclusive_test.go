package gpu

import (
	"strings"
	"testing"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/internal/workload/probe"
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

// MPS is judged like time-slicing, and a MIG node's MIG UUIDs each as a device of their own.
func TestCheckExclusiveMPSAndMIG(t *testing.T) {
	mps := SharingFor(&DevicePlugin{}, map[string]string{cluster.LabelSharingStrategy: "mps", cluster.LabelSharingReplicas: "2"})
	if err := CheckExclusive("w1", mps, []Holding{held("p0", "GPU-a::0"), held("p1", "GPU-a::1")}); err != nil {
		t.Errorf("mps: two replicas of one GPU: %v", err)
	}
	if err := CheckExclusive("w1", mps, []Holding{held("p0", "GPU-a::0"), held("p1", "GPU-a::1"), held("p2", "GPU-a::2")}); err == nil || !strings.Contains(err.Error(), "(mps, 2 replicas per GPU)") {
		t.Errorf("mps: three holders of a 2-way GPU: %v", err)
	}
	mig := SharingFor(&DevicePlugin{}, map[string]string{"nvidia.com/mig.strategy": "mixed", cluster.LabelSharingStrategy: "none", cluster.LabelSharingReplicas: "1"})
	if mig.Shared() || mig.MIG != "mixed" {
		t.Fatalf("MIG node sharing = %+v", mig)
	}
	if err := CheckExclusive("w1", mig, []Holding{held("p0", "MIG-a"), held("p1", "MIG-b"), held("p2", "GPU-c")}); err != nil {
		t.Errorf("distinct MIG devices: %v", err)
	}
	if err := CheckExclusive("w1", mig, []Holding{held("p0", "MIG-a"), held("p1", "MIG-a")}); err == nil || !strings.Contains(err.Error(), "device MIG-a is seen by pod p0 and by pod p1") {
		t.Errorf("one MIG device to two pods: %v", err)
	}
}

func TestCheckMIGParents(t *testing.T) {
	mig := func(uuid, parent, profile string) probe.MIGDevice {
		return probe.MIGDevice{UUID: uuid, Parent: parent, Profile: profile}
	}
	cases := []struct {
		name     string
		holdings []MIGHolding
		want     string
	}{
		{"MIG devices of one GPU to two pods, another GPU whole", []MIGHolding{
			{Pod: "p0", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "3g.40gb")}},
			{Pod: "p1", MIG: []probe.MIGDevice{mig("MIG-2", "GPU-c", "3g.40gb")}},
			{Pod: "p2", Whole: []string{"GPU-a"}},
		}, ""},
		{"parent held whole by another pod (mig-with-parent)", []MIGHolding{
			{Pod: "p0", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "3g.40gb")}},
			{Pod: "p1", MIG: []probe.MIGDevice{mig("MIG-2", "GPU-c", "3g.40gb")}},
			{Pod: "p2", Whole: []string{"GPU-c"}},
		}, "GPU GPU-c is held whole by pod p2 while pod p0 holds its MIG device MIG-1 (3g.40gb), both running on w1: a MIG device's parent was handed out with it (2 MIG device(s) of it held in all)"},
		{"parent held as a replica ID", []MIGHolding{
			{Pod: "p0", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "1g.10gb")}},
			{Pod: "p1", Whole: []string{"GPU-c::0"}},
		}, "GPU GPU-c is held whole by pod p1"},
		{"one pod holds a GPU and its own partition", []MIGHolding{
			{Pod: "p0", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "1g.10gb")}, Whole: []string{"GPU-c"}},
		}, "pod p0 on w1 holds GPU GPU-c whole and also its MIG device MIG-1 (1g.10gb)"},
		{"one MIG device to two pods", []MIGHolding{
			{Pod: "p0", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "1g.10gb")}},
			{Pod: "p1", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "1g.10gb")}},
		}, "MIG device MIG-1 (1g.10gb of GPU-c) is held by pod p0 and by pod p1"},
		// Time-sliced MIG: a MIG device advertised twice may go to two pods, each with its own replica.
		{"time-sliced MIG device to two pods within its replicas", []MIGHolding{
			{Pod: "p0", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "1g.10gb")}, Replicas: 2, ReplicaIDs: []string{"MIG-1::0"}},
			{Pod: "p1", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "1g.10gb")}, Replicas: 2, ReplicaIDs: []string{"MIG-1::1"}},
		}, ""},
		{"time-sliced MIG device beyond its replicas", []MIGHolding{
			{Pod: "p0", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "1g.10gb")}, Replicas: 2},
			{Pod: "p1", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "1g.10gb")}, Replicas: 2},
			{Pod: "p2", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "1g.10gb")}, Replicas: 2},
		}, "MIG device MIG-1 (1g.10gb of GPU-c) is held by 3 pods (p0, p1, p2) on w1, which its resource time-slices 2 ways"},
		{"one replica of a time-sliced MIG device to two pods", []MIGHolding{
			{Pod: "p0", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "1g.10gb")}, Replicas: 2, ReplicaIDs: []string{"MIG-1::0"}},
			{Pod: "p1", MIG: []probe.MIGDevice{mig("MIG-1", "GPU-c", "1g.10gb")}, Replicas: 2, ReplicaIDs: []string{"MIG-1::0"}},
		}, "replica MIG-1::0 of a time-sliced MIG device is held by pod p0 and by pod p1"},
		{"parent unknown: judged by UUID only", []MIGHolding{
			{Pod: "p0", MIG: []probe.MIGDevice{mig("MIG-1", "", "1g.10gb")}},
			{Pod: "p1", Whole: []string{"GPU-c"}},
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckMIGParents("w1", c.holdings)
			if c.want == "" && err != nil {
				t.Errorf("CheckMIGParents: %v, want no breach", err)
			}
			if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("CheckMIGParents: %v, want a breach containing %q", err, c.want)
			}
		})
	}
}
