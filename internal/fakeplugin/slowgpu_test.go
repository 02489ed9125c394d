package fakeplugin

import (
	"encoding/json"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/internal/clockreasons"
)

// The slow-gpu fault reaches a container only as a real slow driver does: through what nvidia-smi prints
// about the GPU's clocks (the inventory the agent keeps), switched at run time by the node annotation and
// with --fault in the inventory written at start; no variable and no CDI edit carries it.
func TestSlowGPUShowsOnlyInNvidiaSMIClocks(t *testing.T) {
	cfg := cdiConfig(t, 2)
	p, c := servePlugin(t, cfg)
	nvidiaSMI := containerSMI(t, p, cfg)
	clocks := func() string {
		return nvidiaSMI("--query-gpu=clocks.sm,clocks.max.sm,pstate,clocks_event_reasons.active", "--format=csv,noheader,nounits")
	}
	const healthy, slow = "1980, 1980, P0, 0x0000000000000000", "495, 1980, P8, 0x0000000000000008"

	eventually(t, "nvidia-smi prints full clocks", func() bool { return clocks() == healthy })
	p.SetFaultsFromAnnotation(string(FaultSlowGPU))
	eventually(t, "nvidia-smi prints low clocks with HW Slowdown under slow-gpu", func() bool { return clocks() == slow })
	r := allocateResp(t, c, p.DeviceIDs()[0])
	for k, v := range r.Envs {
		if strings.Contains(k, "SLOW") || strings.Contains(k, "GPUCONFORM_FAKE") {
			t.Errorf("under slow-gpu an allocation sets %s=%s: the fault must show only where a real node shows it", k, v)
		}
	}
	raw, err := json.Marshal(p.CDISpec())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "SLOW") {
		t.Errorf("under slow-gpu the CDI spec carries a slowdown: %s", raw)
	}
	p.SetFaultsFromAnnotation("")
	eventually(t, "nvidia-smi prints full clocks again", func() bool { return clocks() == healthy })

	// A driver version that carries the fault (run.go) has it in the inventory InstallDriver writes at start.
	q := mustNew(t, cfg)
	q.setVersionFaults(VersionFaults(cfg.DriverVersion + "-" + string(FaultSlowGPU)))
	for _, g := range q.Inventory().GPUs {
		if c := g.ClocksOf(); c.SMMHz*SlowGPUFactor != c.MaxSMMHz || c.EventReasons != clockreasons.HWSlowdown {
			t.Errorf("GPU %d under a slow-gpu driver version: clocks %+v, want SM at 1/%d of its maximum with HW Slowdown", g.Minor, c, SlowGPUFactor)
		}
	}
}
