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

func TestParseMetricsEndpoint(t *testing.T) {
	good := map[string]MetricsEndpoint{
		"":     {Kind: MetricsAuto},
		"auto": {Kind: MetricsAuto},
		"none": {Kind: MetricsNone},
		"service:gpu-operator/nvidia-dcgm-exporter:9400": {Kind: MetricsService, Namespace: "gpu-operator", Name: "nvidia-dcgm-exporter", Port: 9400},
		"service:monitoring/dcgm-exporter":               {Kind: MetricsService, Namespace: "monitoring", Name: "dcgm-exporter"},
		"prometheus:http://prometheus.monitoring:9090/":  {Kind: MetricsPrometheus, URL: "http://prometheus.monitoring:9090"},
	}
	for in, want := range good {
		got, err := ParseMetricsEndpoint(in)
		if err != nil || got != want {
			t.Errorf("ParseMetricsEndpoint(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"dcgm", "service:nvidia-dcgm-exporter", "service:a/b:port", "service:a/b:0", "prometheus:prometheus:9090", "prometheus:ftp://x"} {
		if _, err := ParseMetricsEndpoint(bad); err == nil {
			t.Errorf("ParseMetricsEndpoint(%q) accepted", bad)
		}
	}
}
