package reports

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"gpuconform.io/gpuconform/framework/cluster"
)

// ProcessRequestsDir holds, during a parallel run, each later process's API request count for the first.
const ProcessRequestsDir = ".api-requests"

// WriteProcessRequests leaves a later process's count for the first.
func WriteProcessRequests(artifacts string, proc int, c cluster.Counts) error {
	dir := filepath.Join(artifacts, ProcessRequestsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.json", proc)), b, 0o644)
}

// AddProcessRequests adds the later processes' counts to total and removes them.
func AddProcessRequests(artifacts string, total cluster.Counts) error {
	dir := filepath.Join(artifacts, ProcessRequestsDir)
	defer os.RemoveAll(dir)
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range files {
		var c cluster.Counts
		b, err := os.ReadFile(f)
		if err == nil {
			err = json.Unmarshal(b, &c)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for k, v := range c {
			total[k] += v
		}
	}
	return errors.Join(errs...)
}
