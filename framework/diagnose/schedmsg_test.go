package diagnose

import (
	"reflect"
	"testing"
)

func TestParseSchedulerMessage(t *testing.T) {
	tests := []struct {
		name       string
		msg        string
		nodes      int
		causes     []Cause
		preemption string
	}{
		{
			name:  "histogram with preemption suffix and dotted resource names",
			msg:   "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod.",
			nodes: 3,
			causes: []Cause{
				{1, "node(s) had untolerated taint(s)"},
				{2, "Insufficient nvidia.com/gpu"},
			},
			preemption: "0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod.",
		},
		{
			name:   "prefilter rejection counts for every node",
			msg:    `0/5 nodes are available: resourceclaim.resource.k8s.io "shared-gpu" not found.`,
			nodes:  5,
			causes: []Cause{{5, `resourceclaim.resource.k8s.io "shared-gpu" not found`}},
		},
		{
			name:  "a reason containing a comma stays whole",
			msg:   "0/2 nodes are available: 2 resource claim ml/c, request gpu: has subrequests, but the DRAPrioritizedList feature is disabled.",
			nodes: 2,
			causes: []Cause{
				{2, "resource claim ml/c, request gpu: has subrequests, but the DRAPrioritizedList feature is disabled"},
			},
		},
		{
			name:  "one node can report two resources",
			msg:   "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient nvidia.com/gpu.",
			nodes: 2,
			causes: []Cause{
				{2, "Insufficient cpu"},
				{2, "Insufficient nvidia.com/gpu"},
			},
		},
		{
			name:   "not a FitError",
			msg:    "running PreBind plugin \"DynamicResources\": waiting for binding conditions.",
			causes: []Cause{{0, "running PreBind plugin \"DynamicResources\": waiting for binding conditions"}},
		},
		{name: "empty", msg: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseSchedulerMessage(tc.msg)
			if got.Nodes != tc.nodes || !reflect.DeepEqual(got.Causes, tc.causes) || got.Preemption != tc.preemption {
				t.Errorf("got %+v\nwant nodes=%d causes=%+v preemption=%q", got, tc.nodes, tc.causes, tc.preemption)
			}
		})
	}
}

func TestPrimaryCause(t *testing.T) {
	tests := []struct {
		name   string
		msg    string
		reason Reason
	}{
		// The control plane's taint must not hide the GPU shortage on the workers.
		{"device behind tainted control plane", "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient nvidia.com/gpu.", InsufficientDevice},
		// Only one eligible node, and it lacks GPUs: still a device shortage for this pod.
		{"device on the only eligible node", "0/4 nodes are available: 3 node(s) didn't match Pod's node affinity/selector, 1 Insufficient nvidia.com/gpu.", InsufficientDevice},
		// CPU is short on more eligible nodes than the GPU: CPU dominates.
		{"cpu dominates device", "0/3 nodes are available: 3 Insufficient cpu, 1 Insufficient nvidia.com/gpu.", InsufficientCPU},
		// Equal counts: the device is the scarcer thing, it wins the tie.
		{"tie goes to the device", "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient nvidia.com/gpu.", InsufficientDevice},
		{"memory", "0/3 nodes are available: 1 Insufficient cpu, 2 Insufficient memory.", InsufficientMemory},
		// Every node fails a gate: the most common gate wins.
		{"gates only, selector most common", "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 node(s) didn't match Pod's node affinity/selector.", NodeSelectorMismatch},
		{"gates only, taint most common", "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) had untolerated taint(s).", UntoleratedTaint},
		{"dra allocation", "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 cannot allocate all claims.", DRAAllocationFailed},
		{"dra claim missing wins outright", `0/3 nodes are available: resourceclaim.resource.k8s.io "shared-gpu" not found.`, DRAClaimMissing},
		{"dra device class missing", "0/3 nodes are available: request gpu: device class gpu.example.com does not exist.", DRAClaimMissing},
		{"volume", "0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind.", UnboundVolume},
		// PreFilter narrowing (kube-scheduler ≥ 1.29): nodes the NodeAffinity PreFilter left out are a gate,
		// recorded on this project's cluster for a pod pinned to a full GPU node.
		{"prefilter affinity, device on the pinned node", "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't satisfy plugin(s) [NodeAffinity]. preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling.", InsufficientDevice},
		{"prefilter affinity and taint gates only", "0/4 nodes are available: 1 node(s) had untolerated taint(s), 3 node(s) didn't satisfy plugin(s) [NodeAffinity].", NodeSelectorMismatch},
		{"prefilter plugins do not intersect", "0/4 nodes are available: 4 node(s) didn't satisfy plugin(s) [NodeAffinity NodeName] simultaneously.", NodeSelectorMismatch},
		{"prefilter taint plugin", "0/2 nodes are available: 2 node(s) didn't satisfy plugin TaintToleration.", UntoleratedTaint},
		{"prefilter dra after affinity", "0/4 nodes are available: 1 cannot allocate all claims, 3 node(s) didn't satisfy plugin(s) [NodeAffinity].", DRAAllocationFailed},
		{"unknown text", "0/3 nodes are available: 3 node(s) didn't satisfy existing pods anti-affinity rules.", Unknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := ParseSchedulerMessage(tc.msg).PrimaryCause()
			if !ok {
				t.Fatal("no primary cause")
			}
			if _, got := classify(c.Text).reason(); got != tc.reason {
				t.Errorf("primary %+v → %s, want %s", c, got, tc.reason)
			}
		})
	}
	if _, ok := ParseSchedulerMessage("").PrimaryCause(); ok {
		t.Error("empty message has a primary cause")
	}
}

// TestClassifyKueueMessage covers the inadmissible messages of Kueue v0.17, each built from the format in
// Kueue's source (flavorassigner, workload_controller, scheduler), and whether each is final.
func TestClassifyKueueMessage(t *testing.T) {
	cases := []struct {
		msg   string
		want  Reason
		final bool
	}{
		{"couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, 2 more needed", QueueQuotaExhausted, false},
		{"couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor gpu, previously considered podsets requests (0) + current podset request (9) > maximum capacity (8)", QueueQuotaExhausted, true},
		{"couldn't assign flavors to pod set main: resource example.com/gpu unavailable in ClusterQueue", QueueNoMatchingFlavor, true},
		{"couldn't assign flavors to pod set main: flavor gpu-a100 not found", QueueNoMatchingFlavor, false},
		{"LocalQueue team-gpus doesn't exist", QueueInactive, false},
		{"LocalQueue team-gpus is inactive", QueueInactive, false},
		{"ClusterQueue team-a doesn't exist", QueueInactive, false},
		{"ClusterQueue team-a is inactive", QueueInactive, false},
		{"The workload has failed admission checks", QueueAdmissionCheckPending, false},
		{"", QueuePending, false},
		{"Workload waits for the cluster to grow (a future Kueue message)", Unknown, false},
	}
	for _, tc := range cases {
		if got := classifyKueueMessage(tc.msg); got != tc.want {
			t.Errorf("classifyKueueMessage(%q) = %s, want %s", tc.msg, got, tc.want)
		}
		if final := kueueFinal(tc.msg) != ""; final != tc.final {
			t.Errorf("kueueFinal(%q) = %v, want %v", tc.msg, final, tc.final)
		}
	}
}
