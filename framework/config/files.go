package config

import (
	"os"
	"path/filepath"
	"strings"
)

// In this package "path" is an allocation path; the configuration's file names are "files".

// Resolve makes a relative file name absolute against the first of bases where it exists, else the last
// (a file to create). Empty and absolute names are returned unchanged.
func Resolve(file string, bases []string) string {
	if file == "" || filepath.IsAbs(file) || len(bases) == 0 {
		return file
	}
	for _, b := range bases {
		if _, err := os.Stat(filepath.Join(b, file)); err == nil {
			return filepath.Join(b, file)
		}
	}
	return filepath.Join(bases[len(bases)-1], file)
}

// ResolvePaths makes the configuration's files absolute with Resolve: the kubeconfig, the artifacts
// directory, the baseline, and the fault and upgrade scripts when they name a directory (a bare name is
// looked up on PATH). The name is historical: it resolves files, not allocation paths.
func (c Config) ResolvePaths(bases []string) Config {
	return c.resolveFiles(func(file string) string { return Resolve(file, bases) })
}

// resolveFiles applies abs to the configuration's files, as ResolvePaths describes.
func (c Config) resolveFiles(abs func(string) string) Config {
	for _, file := range []*string{&c.Kubeconfig, &c.ArtifactsDir, &c.Signoff.Baseline} {
		*file = abs(*file)
	}
	for _, script := range []*string{&c.Faults.Command, &c.Upgrade.Command, &c.DRAUpgrade.Command} {
		if strings.Contains(*script, "/") {
			*script = abs(*script)
		}
	}
	return c
}
