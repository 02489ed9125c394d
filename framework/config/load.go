package config

import (
	"fmt"
	"maps"
	"os"

	"sigs.k8s.io/yaml"

	"gpuconform.io/gpuconform/framework/conformance"
)

// LoadProductMetadata reads an AI Conformance metadata file (--product-metadata). Unknown keys are an
// error that names the program's keys.
func LoadProductMetadata(file string) (conformance.Metadata, error) {
	var m conformance.Metadata
	data, err := os.ReadFile(file)
	if err != nil {
		return m, fmt.Errorf("reading the product metadata: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		keys := make([]string, 0, 10)
		for _, f := range conformance.MetadataFields() {
			keys = append(keys, f.Key)
		}
		return m, fmt.Errorf("product metadata %s: %w (the program's keys: %v)", file, err, keys)
	}
	return m, nil
}

// LoadFile reads a YAML config file over base. Unknown keys are an error, so a misspelt key is never
// silently ignored.
func LoadFile(file string, base Config) (Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return base, fmt.Errorf("reading config file: %w", err)
	}
	cfg := base
	cfg.Pools.explicit = nil
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return base, fmt.Errorf("config file %s: %w", file, err)
	}
	// Which pools did the file set? Decode again into a bare struct to see what was present.
	var present struct {
		Pools map[string]string `json:"pools"`
	}
	_ = yaml.Unmarshal(data, &present)
	cfg.Pools.explicit = maps.Clone(base.Pools.explicit)
	for k := range present.Pools {
		cfg.Pools.markExplicit(k)
	}
	return cfg, nil
}
