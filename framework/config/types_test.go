package config

import (
	"testing"
)

func TestDefaultsAreValid(t *testing.T) {
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if cfg.NamespacePrefix != "gpuconform" || !cfg.WantsPath(PathDRA) || !cfg.WantsPath(PathDevicePlugin) {
		t.Errorf("unexpected defaults: %+v", cfg)
	}
	if cfg.Pools.Explicit("gpu") {
		t.Error("default GPU pool must not count as explicit, or discovery would not fall back")
	}
	if cfg.Queues.Mode != QueuesOwn || cfg.DRA.KueueResourceName != "example.com/gpu" {
		t.Errorf("unexpected queue/DRA defaults: %+v %+v", cfg.Queues, cfg.DRA)
	}
}
