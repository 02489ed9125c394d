package gpu

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/internal/fakeplugin"
)

func TestParseDeviceID(t *testing.T) {
	cases := []struct {
		id       string
		physical string
		replica  int
		repl     bool
	}{
		{"GPU-a", "GPU-a", 0, false},
		{"GPU-a::0", "GPU-a", 0, true},
		{"GPU-a::3", "GPU-a", 3, true},
		{"MIG-b::1", "MIG-b", 1, true},
		// NVIDIA's AnnotatedID.Split: split once, an unreadable replica number reads as 0.
		{"GPU-a::x", "GPU-a", 0, true},
		{"GPU-a::1::2", "GPU-a", 0, true},
		{"gpu-4", "gpu-4", 0, false},
	}
	for _, c := range cases {
		got := ParseDeviceID(c.id)
		if got.Advertised != c.id || got.Physical != c.physical || got.Replica != c.replica || got.Replicated != c.repl {
			t.Errorf("ParseDeviceID(%q) = %+v, want physical %q replica %d replicated %v", c.id, got, c.physical, c.replica, c.repl)
		}
	}
}

func TestKubeletAllocationSplitsReplicas(t *testing.T) {
	plain := KubeletAllocation("w1", []string{"GPU-b", "GPU-a"})
	if !slices.Equal(plain.Devices, []string{"GPU-a", "GPU-b"}) || plain.Replicas != nil || plain.Count != 2 || plain.Sharing() != "" {
		t.Errorf("physical IDs: %+v", plain)
	}
	shared := KubeletAllocation("w1", []string{"GPU-b::0", "GPU-a::1", "GPU-a::0"})
	if !slices.Equal(shared.Devices, []string{"GPU-a", "GPU-b"}) || !slices.Equal(shared.Replicas, []string{"GPU-a::0", "GPU-a::1", "GPU-b::0"}) || shared.Count != 3 {
		t.Errorf("replica IDs: %+v", shared)
	}
	if got, want := shared.Sharing(), "replicas 0, 1 of GPU-a; replica 0 of GPU-b"; got != want {
		t.Errorf("Sharing() = %q, want %q", got, want)
	}
	if !slices.Equal(shared.Allocated(), shared.Replicas) || !slices.Equal(plain.Allocated(), plain.Devices) {
		t.Errorf("Allocated: shared %v, plain %v", shared.Allocated(), plain.Allocated())
	}
}

// identityShape is the identity check's failure as make selfcheck recognises it (cmd/gpuconform-dev).
var identityShape = regexp.MustCompile(`container saw \[[^\]]*\] but .+? allocated \[`)

func TestCheckSeen(t *testing.T) {
	cases := []struct {
		name      string
		allocated []string
		seen      []string
		want      string // "" = match; else a substring of the error
	}{
		{"whole GPUs, same", []string{"GPU-a", "GPU-b"}, []string{"GPU-b", "GPU-a"}, ""},
		{"whole GPUs, another", []string{"GPU-a"}, []string{"GPU-b"}, "container saw [GPU-b] but kubelet pod-resources API on w1 allocated [GPU-a]"},
		{"whole GPU listed twice", []string{"GPU-a", "GPU-a"}, []string{"GPU-a"}, "allocated [GPU-a GPU-a]"},
		{"a replica: its GPU", []string{"GPU-a::0"}, []string{"GPU-a"}, ""},
		{"replicas of two GPUs", []string{"GPU-a::1", "GPU-b::0"}, []string{"GPU-a", "GPU-b"}, ""},
		{"two replicas of one GPU, seen once", []string{"GPU-a::0", "GPU-a::1"}, []string{"GPU-a"}, ""},
		{"the container names the replica", []string{"GPU-a::1"}, []string{"GPU-a::1"}, ""},
		{"a replica: another GPU", []string{"GPU-a::0"}, []string{"GPU-b"}, "allocated [GPU-a::0], replicas of [GPU-a]"},
		{"a GPU it holds no replica of", []string{"GPU-a::0"}, []string{"GPU-a", "GPU-b"}, "container saw [GPU-a GPU-b]"},
		{"one replica twice", []string{"GPU-a::0", "GPU-a::0"}, []string{"GPU-a"}, "replica GPU-a::0 twice to one container"},
		{"nothing seen", []string{"GPU-a::0"}, []string{}, "container saw []"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := KubeletAllocation("w1", c.allocated).CheckSeen(c.seen)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("CheckSeen(%v) of %v: %v, want a match", c.seen, c.allocated, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("CheckSeen(%v) of %v: %v, want an error containing %q", c.seen, c.allocated, err, c.want)
			case err != nil && !identityShape.MatchString(err.Error()):
				t.Errorf("error %q does not have the shape make selfcheck recognises", err)
			}
		})
	}
}

// The wrong-ids fault of the fake agent (make selfcheck) must still be caught on a time-sliced node: the
// agent hands the container a GPU none of whose replicas the kubelet allocated.
func TestWrongIDsFaultIsAMismatchWithReplicas(t *testing.T) {
	for _, fault := range []bool{false, true} {
		cfg := fakeplugin.DefaultConfig()
		cfg.NodeName, cfg.Devices, cfg.Replicas = "w1", 4, 2
		if fault {
			cfg.Faults = []fakeplugin.Fault{fakeplugin.FaultWrongIDs}
		}
		p, err := fakeplugin.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ids := p.DeviceIDs()
		for _, req := range [][]string{{ids[0]}, {ids[1]}, {ids[0], ids[1]}, {ids[2], ids[5]}} {
			resp, err := p.Allocate(t.Context(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: req}}})
			if err != nil {
				t.Fatal(err)
			}
			seen := strings.Split(resp.ContainerResponses[0].Envs[fakeplugin.EnvVisibleDevices], ",")
			given := KubeletAllocation("w1", req)
			if given.Replicas == nil {
				t.Fatalf("replicas on, but %v reads as whole GPUs", req)
			}
			err = given.CheckSeen(seen)
			if fault && err == nil {
				t.Errorf("wrong-ids: container saw %v for %v and the identity check passed", seen, req)
			}
			if !fault && err != nil {
				t.Errorf("no fault: %v", err)
			}
		}
	}
}

func TestSharingObservationString(t *testing.T) {
	o := SharingObservation{Node: "w1", Path: "device-plugin", Pod: "p0", Mode: cluster.ModeTimeSlicing, Saw: "replica 1 of GPU-a", Note: "no memory or fault isolation"}
	if s := o.String(); s != "pod p0 on w1 (device-plugin): time-slicing, saw replica 1 of GPU-a (no memory or fault isolation)" {
		t.Errorf("String = %q", s)
	}
}

func TestSeenConsistent(t *testing.T) {
	cases := []struct {
		node, seen string
		want       bool
	}{
		{cluster.ModeExclusive, cluster.ModeExclusive, true},
		{cluster.ModeExclusive, cluster.ModeTimeSlicing, false},
		{cluster.ModeTimeSlicing, cluster.ModeTimeSlicing, true},
		{cluster.ModeTimeSlicing, cluster.ModeExclusive, false},
		{cluster.ModeTimeSlicing, cluster.ModeMPS, false},
		{cluster.ModeMPS, cluster.ModeMPS, true},
		{cluster.ModeMIGSingle, ObservedMIG, true},
		{cluster.ModeMIGSingle, cluster.ModeExclusive, false},
		{cluster.ModeMIGMixed, ObservedMIG, true},
		{cluster.ModeMIGMixed, cluster.ModeExclusive, true},
		{cluster.ModePartitionable, ObservedMIG, true},
		{cluster.ModeConsumable, cluster.ModeConsumable, true},
		{cluster.ModeConsumable, cluster.ModeExclusive, true},
		{cluster.ModeConsumable, ObservedMIG, false},
		{cluster.ModeExclusive, cluster.ModeConsumable, false},
		{cluster.ModeTimeSlicing, cluster.ModeConsumable, false},
		{cluster.ModePartitionable, cluster.ModeExclusive, true},
		{cluster.ModeExclusive, ObservedMIG, false},
	}
	for _, c := range cases {
		if got := SeenConsistent(c.node, c.seen); got != c.want {
			t.Errorf("SeenConsistent(%s, %s) = %v, want %v", c.node, c.seen, got, c.want)
		}
	}
}
