package scenarios

import (
	"strings"
	"testing"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/internal/fakegpu"
	"gpuconform.io/gpuconform/internal/workload/probe"
)

// daemonAnswered is a probe's MPS report whose daemon answered pct to get_default_active_thread_percentage
// and limit to get_default_device_pinned_mem_limit 0, as the probe records them.
func daemonAnswered(pct, limit string) *probe.MPS {
	return &probe.MPS{PipeDirectory: "/mps/nvidia.com/gpu/pipe", ActiveThreadPercentage: strings.TrimSuffix(pct, ".0"), PinnedDeviceMemLimit: "0=" + limit,
		LimitsFrom: probe.MPSControl, Control: probe.MPSControlAnswered, Asked: []probe.MPSAnswer{
			{Command: "get_default_active_thread_percentage", Answer: pct}, {Command: "get_default_device_pinned_mem_limit 0", Answer: limit}}}
}

// NVIDIA's plugin sets its MPS daemon's defaults to 100% of the threads and the GPU's memory divided among
// the replicas, by integer division; the check reads them from the daemon's answers, says what it answered
// and how it was asked, and no CUDA_MPS_* variable satisfies it.
func TestMPSExpectations(t *testing.T) {
	want := expectedMPS(3, 81920)
	if want.ActiveThreadPercentage != 33 || want.PinnedMemMiB != 27306 || want.Replicas != 3 {
		t.Fatalf("expectedMPS(3, 81920) = %+v", want)
	}
	if w := expectedMPS(2, 0); w.ActiveThreadPercentage != 50 || w.PinnedMemMiB != 0 {
		t.Errorf("without the memory label the memory limit is unknown: %+v", w)
	}
	two := expectedMPS(2, 81920)
	for name, ok := range map[string]*probe.MPS{
		"NVIDIA's defaults":        daemonAnswered("50.0", "40960M"),
		"in whole GiB":             daemonAnswered("50.0", "40G"),
		"a GPU by its node index":  {PipeDirectory: "/p", ActiveThreadPercentage: "50", PinnedDeviceMemLimit: "3=40960M", Control: probe.MPSControlAnswered, Asked: []probe.MPSAnswer{{Command: "get_default_active_thread_percentage", Answer: "50.0"}, {Command: "get_default_device_pinned_mem_limit 3", Answer: "40960M"}}},
		"a CUDA context in share":  withCUDA(daemonAnswered("50.0", "40960M"), probe.MPSContext{SMCount: 66, DeviceSMCount: 132, MemoryLimitBytes: 40960 << 20, OverLimitAllocationFailed: true}),
		"a stand-in is not judged": withCUDA(daemonAnswered("50.0", "40960M"), probe.MPSContext{StandIn: "no CUDA driver in the container"}),
	} {
		if err := checkMPS("p", ok, two); err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
	if err := checkMPS("p", daemonAnswered("33.0", "27306M"), want); err != nil {
		t.Errorf("three replicas refused: %v", err)
	}
	if err := checkMPS("p", daemonAnswered("50.0", "12345M"), expectedMPS(2, 0)); err != nil {
		t.Errorf("any limit must do without the memory label: %v", err)
	}
	envOnly := &probe.MPS{PipeDirectory: "/mps/nvidia.com/gpu/pipe", Control: probe.MPSControlNoAnswer,
		ControlError: `nvidia-cuda-mps-control, asked "get_default_active_thread_percentage" with CUDA_MPS_PIPE_DIRECTORY /mps/nvidia.com/gpu/pipe, did not answer: exit status 1: Cannot find MPS control daemon process`,
		Env:          &probe.MPSEnv{ActiveThreadPercentage: "50", PinnedDeviceMemLimit: "0=40960M"}}
	for name, c := range map[string]struct {
		seen *probe.MPS
		want []string
	}{
		"no variable":    {nil, []string{"has no CUDA_MPS_PIPE_DIRECTORY"}},
		"no pipe":        {&probe.MPS{Env: &probe.MPSEnv{ActiveThreadPercentage: "50"}}, []string{"has no CUDA_MPS_PIPE_DIRECTORY (only other CUDA_MPS_* variables)"}},
		"variables only": {envOnly, []string{"shows no MPS limits: nvidia-cuda-mps-control, asked", "Cannot find MPS control daemon process"}},
		"no client":      {&probe.MPS{PipeDirectory: "/p", Control: probe.MPSControlNotInstalled, ControlError: "nvidia-cuda-mps-control is not on the container's PATH (PATH=/usr/bin)"}, []string{"shows no MPS limits: nvidia-cuda-mps-control is not on the container's PATH"}},
		// mps-no-limits: a daemon nothing configured answers its built-in defaults.
		"no defaults": {daemonAnswered("100.0", "0"), []string{
			"pod p on an MPS node lacks its MPS limits: the MPS control daemon behind CUDA_MPS_PIPE_DIRECTORY=/mps/nvidia.com/gpu/pipe, asked through nvidia-cuda-mps-control in the container, has no default limits set: ",
			`get_default_active_thread_percentage answered "100.0" (the daemon's default: no limit), want 50 (100 divided among 2 replicas)`,
			`get_default_device_pinned_mem_limit 0 answered "0" (no limit), want 40960M (81920 MiB divided among 2 replicas)`}},
		"threads wrong": {daemonAnswered("25.0", "40960M"), []string{"does not get its share of the GPU", `get_default_active_thread_percentage answered "25.0", want 50`}},
		"memory wrong":  {daemonAnswered("50.0", "81920M"), []string{`get_default_device_pinned_mem_limit 0 answered "81920M", want 40960M`}},
		"GiB too much":  {daemonAnswered("50.0", "41G"), []string{`answered "41G", want 40960M`}},
		// A bare number is bytes: 40960 bytes is a limit, and not the 40960 MiB the replicas' share is.
		"bytes":        {daemonAnswered("50.0", "40960"), []string{"does not get its share", `answered "40960", want 40960M`}},
		"too many SMs": {withCUDA(daemonAnswered("50.0", "40960M"), probe.MPSContext{SMCount: 132, DeviceSMCount: 132, OverLimitAllocationFailed: true}), []string{"had 132 SMs of the device's 132, want about 66.0 (50% of them)"}},
		"over limit":   {withCUDA(daemonAnswered("50.0", "40960M"), probe.MPSContext{SMCount: 66, DeviceSMCount: 132, MemoryLimitBytes: 40960 << 20}), []string{"allocated more device memory than its pinned memory limit (40960 MiB) and the allocation succeeded"}},
	} {
		err := checkMPS("p", c.seen, two)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to say %q", name, err, w)
			}
		}
	}
}

func withCUDA(m *probe.MPS, c probe.MPSContext) *probe.MPS {
	m.CUDA = &c
	return m
}

// The report names, per pod, its replica and the pods sharing its GPU, and what the mode does not isolate.
func TestSharedObservations(t *testing.T) {
	obs := sharedObservations("w1", "device-plugin", cluster.ModeTimeSlicing, []sharedHolding{
		{Pod: "a", Replicas: []string{"GPU-1::0"}, GPU: "GPU-1"},
		{Pod: "b", Replicas: []string{"GPU-1::1"}, GPU: "GPU-1"},
		{Pod: "c", Replicas: []string{"GPU-2::0"}, GPU: "GPU-2"},
	})
	if len(obs) != 3 || obs[0].Saw != "replica 0 of GPU-1" || obs[0].Note != "shares GPU-1 with b: no memory or fault isolation" ||
		obs[2].Note != "alone on GPU-2: no memory or fault isolation" || obs[1].Node != "w1" || obs[1].Mode != cluster.ModeTimeSlicing {
		t.Errorf("time-slicing observations: %+v", obs)
	}
	mps := sharedObservations("w1", "device-plugin", cluster.ModeMPS, []sharedHolding{{Pod: "a", Replicas: []string{"GPU-1::0"}, GPU: "GPU-1", MPS: "active threads 50%"}})
	if !strings.Contains(mps[0].Note, "MPS limits active threads 50%") {
		t.Errorf("MPS observation: %+v", mps)
	}
}

// A MIG pod sees exactly its allocated device of its profile on its parent; a device held twice, or a whole
// GPU held beside one of its MIG devices, is a breach.
func TestMIGChecks(t *testing.T) {
	parent := "GPU-aaaa"
	uuid := fakegpu.MIGUUID(parent, fakegpu.Placement{Profile: "3g.40gb", Start: 0})
	seen := []probe.MIGDevice{{UUID: uuid, Parent: parent, Profile: "3g.40gb"}}
	h, err := checkMIGSeen("p", seen, uuid, "3g.40gb", parent)
	if err != nil || h.Parent != parent {
		t.Fatalf("checkMIGSeen: %+v %v", h, err)
	}
	for name, c := range map[string]struct {
		seen              []probe.MIGDevice
		allocated, parent string
		want              string
	}{
		"none":           {nil, uuid, "", "lists 0 MIG devices"},
		"other device":   {seen, "MIG-other", "", "but sees " + uuid},
		"other parent":   {seen, uuid, "GPU-bbbb", "sees " + uuid + " on " + parent},
		"other profile":  {[]probe.MIGDevice{{UUID: uuid, Parent: parent, Profile: "2g.20gb"}}, uuid, "", "sees " + uuid + ", a 2g.20gb"},
		"two of them":    {append(seen, seen...), uuid, "", "lists 2 MIG devices"},
		"unnamed parent": {[]probe.MIGDevice{{UUID: uuid, Profile: "3g.40gb"}}, uuid, parent, "on no parent GPU"},
	} {
		if _, err := checkMIGSeen("p", c.seen, c.allocated, "3g.40gb", c.parent); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	migs := []migHolding{{Pod: "a", UUID: uuid, Profile: "3g.40gb", Parent: parent}}
	if err := checkMIGParents("n", map[string][]string{"GPU-bbbb": {"w"}}, migs); err != nil {
		t.Errorf("a whole GPU beside another GPU's MIG device: %v", err)
	}
	if err := checkMIGParents("n", map[string][]string{parent: {"w"}}, migs); err == nil || !strings.Contains(err.Error(), "held whole by pod w while pod a holds its MIG device") {
		t.Errorf("whole parent beside its MIG device: %v", err)
	}
	if err := checkMIGParents("n", nil, append(migs, migHolding{Pod: "b", UUID: uuid})); err == nil || !strings.Contains(err.Error(), "handed out twice") {
		t.Errorf("one MIG device, two pods: %v", err)
	}
	// Time-sliced MIG (2 replicas per MIG device): two pods on distinct replicas are within the promise,
	// a third pod or a replica given twice is not.
	sliced := []migHolding{{Pod: "a", UUID: uuid, Replicas: 2, Replica: uuid + "::0"}, {Pod: "b", UUID: uuid, Replicas: 2, Replica: uuid + "::1"}}
	if err := checkMIGParents("n", nil, sliced); err != nil {
		t.Errorf("time-sliced MIG device, two pods on two replicas: %v", err)
	}
	if err := checkMIGParents("n", nil, append(sliced, migHolding{Pod: "c", UUID: uuid, Replicas: 2, Replica: uuid + "::2"})); err == nil || !strings.Contains(err.Error(), "held by 3 pods") {
		t.Errorf("time-sliced MIG device, three pods: %v", err)
	}
	if err := checkMIGParents("n", nil, []migHolding{sliced[0], {Pod: "b", UUID: uuid, Replicas: 2, Replica: uuid + "::0"}}); err == nil || !strings.Contains(err.Error(), "handed out twice") {
		t.Errorf("one replica, two pods: %v", err)
	}
	// mig-mixed's whole GPUs: one holder each, or as many as their replicas when time-sliced.
	twice := map[string][]string{parent: {"w0", "w1"}}
	if err := checkWholeHolders("n", 0, twice); err == nil || !strings.Contains(err.Error(), "handed out twice") {
		t.Errorf("a whole GPU to two pods, not time-sliced: %v", err)
	}
	if err := checkWholeHolders("n", 2, twice); err != nil {
		t.Errorf("a whole GPU time-sliced twice, two pods: %v", err)
	}
	if err := checkWholeHolders("n", 2, map[string][]string{parent: {"w0", "w1", "w2"}}); err == nil || !strings.Contains(err.Error(), "more often than it has replicas") {
		t.Errorf("a whole GPU time-sliced twice, three pods: %v", err)
	}
}

// partitionGPU is a parent as the fake stack publishes it (contract: one counter per memory slice and
// multiprocessors, one partition per placement of every H100 profile but 7g), built from fakegpu's
// geometry so the expectations follow NVIDIA's profiles rather than numbers typed here.
func partitionGPU(t *testing.T, drop string) cluster.PartitionableGPU {
	t.Helper()
	g := cluster.PartitionableGPU{Whole: "gpu-4", UUID: "GPU-aaaa", CounterSet: "gpu-4-counters", Counters: map[string]int64{"multiprocessors": 112}}
	for k := range fakegpu.MIGSlices {
		g.Counters["memory-slice-"+string(rune('0'+k))] = 1
	}
	for _, p := range fakegpu.H100Profiles {
		if p.Name == "7g.80gb" {
			continue
		}
		for _, start := range p.Starts {
			d := cluster.PartitionDevice{Name: "gpu-4-mig-" + strings.ReplaceAll(p.Name, ".", "") + "-" + string(rune('0'+start)), Profile: p.Name, MemoryMiB: int64(p.MemoryMiB),
				UUID: fakegpu.MIGUUID(g.UUID, fakegpu.Placement{Profile: p.Name, Start: start}), Consumes: map[string]int64{"multiprocessors": int64(p.Multiprocessors)}}
			for k := start; k < start+p.Slices; k++ {
				d.Consumes["memory-slice-"+string(rune('0'+k))] = 1
			}
			if d.Name == drop {
				d.Consumes = nil
			}
			g.Partitions = append(g.Partitions, d)
		}
	}
	return g
}

// The expected number of partitions comes from the counters: capacity against consumption over every
// placement of a profile; the plan takes the profile with the most that still fits the pod budget.
func TestPartitionPlanFromCounters(t *testing.T) {
	g := partitionGPU(t, "")
	byProfile := map[string][]cluster.PartitionDevice{}
	for _, d := range g.Partitions {
		byProfile[d.Profile] = append(byProfile[d.Profile], d)
	}
	for profile, want := range map[string]int{"1g.10gb": 7, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1} {
		if n, names := maxPlacements(byProfile[profile], g.Counters); n != want || len(names) != want {
			t.Errorf("%s: %d placements fit (%v), want %d", profile, n, names, want)
		}
	}
	plan, err := planPartitions(g, 4)
	if err != nil || plan.Profile != "2g.20gb" || plan.Count != 3 {
		t.Errorf("plan for 4 pods: %+v %v", plan, err)
	}
	if plan, err := planPartitions(g, 2); err != nil || plan.Profile != "3g.40gb" || plan.Count != 2 {
		t.Errorf("plan for 2 pods: %+v %v (ties go to the larger profile)", plan, err)
	}
	if _, err := planPartitions(partitionGPU(t, "gpu-4-mig-3g40gb-4"), 4); err == nil || !strings.Contains(err.Error(), "consumes no counter") {
		t.Errorf("a partition without counters: %v", err)
	}
	// A 3g.40gb and a 4g.40gb both placed at slice 0 overlap: together they exceed memory slice 0.
	overlap := []cluster.PartitionDevice{byProfile["3g.40gb"][0], byProfile["4g.40gb"][0]}
	if err := counterOverrun(g.Counters, overlap); err == nil || !strings.Contains(err.Error(), "memory-slice-0, whose capacity is 1") {
		t.Errorf("overlapping partitions: %v", err)
	}
	if err := counterOverrun(g.Counters, byProfile["2g.20gb"]); err != nil {
		t.Errorf("three 2g.20gb fit an H100: %v", err)
	}
	if err := counterOverrun(map[string]int64{}, byProfile["1g.10gb"][:1]); err == nil || !strings.Contains(err.Error(), "does not publish") {
		t.Errorf("a counter the set lacks: %v", err)
	}
}

// The noisy-neighbour probe's numbers come from its own last log line, both of them, or not at all.
func TestParseLatency(t *testing.T) {
	l, err := parseLatency("warming up\n{\"p50_ms\": 1.25, \"p99_ms\": 4.5}\n")
	if err != nil || l.P50 != 1.25 || l.P99 != 4.5 || l.String() != "p50 1.25 ms, p99 4.50 ms" {
		t.Errorf("%+v %v", l, err)
	}
	for _, bad := range []string{"", "done", `{"p50_ms": 1}`, `{"p50_ms": 0, "p99_ms": 2}`, "{\"p50_ms\": 1, \"p99_ms\": 2}\nbye"} {
		if _, err := parseLatency(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Registration: one node per mode per path from the pool, only the modes checked on that path; an all
// exclusive path and an unconfigured measurement are recorded as not exercised, with the evidence.
func TestSharingRegistrationChoices(t *testing.T) {
	modes := []cluster.NodeSharingMode{
		{Node: "w2", Path: config.PathDevicePlugin, Mode: cluster.ModeTimeSlicing, Replicas: 2},
		{Node: "w1", Path: config.PathDevicePlugin, Mode: cluster.ModeTimeSlicing, Replicas: 2},
		{Node: "w3", Path: config.PathDevicePlugin, Mode: cluster.ModeMIGMixed},
		{Node: "w9", Path: config.PathDevicePlugin, Mode: cluster.ModeMPS, Replicas: 2},
		{Node: "w1", Path: config.PathDRA, Mode: cluster.ModeExclusive, Evidence: []string{"ResourceSlice w1: 4 devices, no counters"}},
	}
	pool := []string{"w1", "w2", "w3"}
	chosen, exclusive := sharingModesOn(modes, config.PathDevicePlugin, pool)
	if len(chosen) != 2 || chosen[0].Node != "w1" || chosen[0].Mode != cluster.ModeTimeSlicing || chosen[1].Mode != cluster.ModeMIGMixed || len(exclusive) != 0 {
		t.Errorf("device-plugin: chosen %+v, exclusive %v", chosen, exclusive)
	}
	chosen, exclusive = sharingModesOn(modes, config.PathDRA, pool)
	if len(chosen) != 0 || len(exclusive) != 1 || !strings.Contains(exclusive[0], "w1: exclusive from ResourceSlice w1") {
		t.Errorf("dra: chosen %+v, exclusive %v", chosen, exclusive)
	}

	var skipped []string
	reg := NoisyInput{Base: Base{NotExercised: func(what, why string) { skipped = append(skipped, what+": "+why) }}}
	// No image configured: the workload image's own probe measures.
	if m := noisyCandidate(reg, config.PathDevicePlugin, modes[:1]); m == nil || len(skipped) != 0 {
		t.Errorf("the workload's own probe: %v %v", m, skipped)
	}
	reg.Noisy.Image = "example.com/bench:1"
	if m := noisyCandidate(reg, config.PathDevicePlugin, modes[2:3]); m != nil || len(skipped) != 1 || !strings.Contains(skipped[0], "no time-sliced or MPS node") {
		t.Errorf("no shared node: %v %v", m, skipped)
	}
	if m := noisyCandidate(reg, config.PathDevicePlugin, modes[:3]); m == nil || m.Node != "w2" {
		t.Errorf("configured, shared node: %+v", m)
	}
}

func TestNoisyStandIn(t *testing.T) {
	if got := noisyStandIn("{\"role\":\"probe\"}\n{\"role\":\"probe\",\"stand_in\":\"stand-in (no CUDA driver in the container): nothing measured\"}\n"); got != "stand-in (no CUDA driver in the container): nothing measured" {
		t.Errorf("stand-in %q", got)
	}
	if got := noisyStandIn("{\"p50_ms\":0.2,\"p99_ms\":0.9}"); got != "" {
		t.Errorf("a measurement read as a stand-in: %q", got)
	}
}
