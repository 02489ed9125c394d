package reports

import (
	"os"
	"path/filepath"
	"testing"

	"gpuconform.io/gpuconform/framework/cluster"
)

func TestTheFirstProcessCountsEveryProcessesRequests(t *testing.T) {
	dir := t.TempDir()
	if err := WriteProcessRequests(dir, 2, cluster.Counts{"get pods": 3, "list nodes": 1}); err != nil {
		t.Fatal(err)
	}
	if err := WriteProcessRequests(dir, 3, cluster.Counts{"get pods": 4}); err != nil {
		t.Fatal(err)
	}
	total := cluster.Counts{"get pods": 10}
	if err := AddProcessRequests(dir, total); err != nil {
		t.Fatal(err)
	}
	if total["get pods"] != 17 || total["list nodes"] != 1 || total.Total() != 18 {
		t.Errorf("total %v, want get pods 17 and list nodes 1", total)
	}
	if _, err := os.Stat(filepath.Join(dir, ProcessRequestsDir)); !os.IsNotExist(err) {
		t.Errorf("the processes' counts were left in the artifacts: %v", err)
	}
	// A count that cannot be read is said, not taken as zero silently.
	_ = WriteProcessRequests(dir, 2, cluster.Counts{"get pods": 1})
	_ = os.WriteFile(filepath.Join(dir, ProcessRequestsDir, "3.json"), []byte("{"), 0o644)
	total = cluster.Counts{}
	if err := AddProcessRequests(dir, total); err == nil || total["get pods"] != 1 {
		t.Errorf("err %v, total %v: want an error and the readable count added", err, total)
	}
}
