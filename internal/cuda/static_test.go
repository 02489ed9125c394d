package cuda_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Only the workload binary opens libcuda (purego gives it an ELF interpreter); the suite's runner and the
// fake stack run FROM scratch, so they must stay static: none of them may import this package.
func TestStaticBinariesDoNotLinkCUDA(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	for _, cmd := range []string{"../../cmd/gpuconform", "../../cmd/gpuconform-dev", "../../cmd/fake-device-plugin", "../../cmd/nvidia-smi", "../../cmd/gpuconform-net"} {
		out, err := exec.Command("go", "list", "-deps", cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", cmd, err, out)
		}
		if strings.Contains(string(out), "github.com/ebitengine/purego\n") {
			t.Errorf("%s links purego (through internal/cuda): its binary would need a C runtime in its FROM-scratch image", cmd)
		}
	}
}
