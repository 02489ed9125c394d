package config

import (
	"os"
	"path/filepath"
	"strings"
)

// Resolve makes p absolute against the first of bases where it exists, else the last (a file to create).
func Resolve(p string, bases []string) string {
	if p == "" || filepath.IsAbs(p) || len(bases) == 0 {
		return p
	}
	for _, b := range bases {
		if _, err := os.Stat(filepath.Join(b, p)); err == nil {
			return filepath.Join(b, p)
		}
	}
	return filepath.Join(bases[len(bases)-1], p)
}

// ResolvePaths makes the configuration's file paths absolute with Resolve: the kubeconfig, the artifacts
// directory, the baseline, and the fault and upgrade scripts when they name a directory (a bare name is
// looked up on PATH).
func (c Config) ResolvePaths(bases []string) Config {
	abs := func(p *string) { *p = Resolve(*p, bases) }
	abs(&c.Kubeconfig)
	abs(&c.ArtifactsDir)
	abs(&c.Signoff.Baseline)
	for _, script := range []*string{&c.Faults.Command, &c.Upgrade.Command} {
		if strings.Contains(*script, "/") {
			abs(script)
		}
	}
	return c
}
