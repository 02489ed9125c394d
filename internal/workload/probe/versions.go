package probe

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// nvidiaSMIUnknownOption is nvidia-smi's exit status for an option it does not know (recorded for
// `--bogus`); a tool older than `--version` answers that option with it.
const nvidiaSMIUnknownOption = 255

var (
	// driverVersion is the shape of an NVIDIA driver version: "580.159.04", "535.183.01", "390.157".
	driverVersion = regexp.MustCompile(`^[0-9]+(\.[0-9]+)+$`)
	// driverVersionLine and cudaVersionLine find the versions in the lines of `nvidia-smi --version`
	//	DRIVER version      : 580.159.04
	//	CUDA Version        : 13.0
	// and in the plain summary's header
	//	| NVIDIA-SMI 535.183.01   Driver Version: 535.183.01   CUDA Version: 12.2 |
	driverVersionLine = regexp.MustCompile(`(?i)driver version\s*:\s*([0-9]+(?:\.[0-9]+)+)`)
	cudaVersionLine   = regexp.MustCompile(`(?i)cuda version\s*:\s*([0-9]+(?:\.[0-9]+)+)`)
)

// queryVersions asks nvidia-smi (bin, "" when not installed) for the driver and CUDA versions this
// container's driver reports. The driver version is what `--query-gpu=driver_version` prints for the
// container's GPUs; the CUDA version is the one `--version` prints (the plain summary's header for a
// tool too old to know `--version`), which also names the driver when the container has no GPU to
// query. A version the tool did not print stays empty, never guessed, and problems are joined into the
// returned error text. When `nvidia-smi -L` already failed (listFailed) nothing is run: the driver did
// not answer, and each call could wait out the timeout again.
func queryVersions(ctx context.Context, bin string, timeout time.Duration, listFailed bool) (driver, cuda, problem string) {
	switch {
	case bin == "":
		return "", "", ""
	case listFailed:
		return "", "", "versions not queried: nvidia-smi -L failed (see sources.nvidia_smi_error)"
	}
	var problems []string
	out, code, err := runTool(ctx, bin, timeout, "--query-gpu=driver_version", "--format=csv,noheader")
	noGPU := code == nvidiaSMINoDevices
	switch {
	case noGPU:
	case err != nil:
		problems = append(problems, err.Error())
	default:
		if driver, err = parseDriverQuery(out); err != nil {
			problems = append(problems, fmt.Sprintf("%s --query-gpu=driver_version: %v", bin, err))
		}
	}

	out, code, err = runTool(ctx, bin, timeout, "--version")
	if code == nvidiaSMIUnknownOption {
		out, code, err = runTool(ctx, bin, timeout)
	}
	switch {
	case code == nvidiaSMINoDevices:
		// Only the plain summary needs a GPU; it prints nothing but "No devices were found" without one.
	case err != nil:
		problems = append(problems, err.Error())
	default:
		if m := cudaVersionLine.FindStringSubmatch(out); m != nil {
			cuda = m[1]
		} else {
			problems = append(problems, bin+" printed no CUDA version")
		}
		if m := driverVersionLine.FindStringSubmatch(out); m != nil && noGPU {
			driver = m[1]
		}
	}
	return driver, cuda, strings.Join(problems, "; ")
}

// parseDriverQuery reads the output of `nvidia-smi --query-gpu=driver_version --format=csv,noheader`:
// one line per GPU, all naming the one driver of the node.
func parseDriverQuery(out string) (string, error) {
	var versions []string
	for line := range strings.SplitSeq(out, "\n") {
		if v := strings.TrimSpace(line); v != "" && !slices.Contains(versions, v) {
			versions = append(versions, v)
		}
	}
	switch {
	case len(versions) == 0:
		return "", errors.New("printed no driver version")
	case len(versions) > 1:
		return "", fmt.Errorf("the GPUs report different driver versions %q", versions)
	case !driverVersion.MatchString(versions[0]):
		return "", fmt.Errorf("%q is not a driver version", versions[0])
	}
	return versions[0], nil
}
