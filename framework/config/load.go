package config

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// LoadFile reads a YAML config file over base. Unknown keys are an error, so a misspelt key is never
// silently ignored.
func LoadFile(path string, base Config) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return base, fmt.Errorf("reading config file: %w", err)
	}
	cfg := base
	cfg.Pools.explicit = nil
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return base, fmt.Errorf("config file %s: %w", path, err)
	}
	// Which pools did the file set? Decode again into a bare struct to see what was present.
	var present struct {
		Pools map[string]string `json:"pools"`
	}
	_ = yaml.Unmarshal(data, &present)
	cfg.Pools.explicit = map[string]bool{}
	for k, v := range base.Pools.explicit {
		cfg.Pools.explicit[k] = v
	}
	for k := range present.Pools {
		cfg.Pools.explicit[k] = true
	}
	return cfg, nil
}
