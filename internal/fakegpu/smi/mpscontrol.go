package smi

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"gpuconform.io/gpuconform/internal/fakegpu"
)

// The fake nvidia-cuda-mps-control: the fake nvidia-smi binary run under that name (cmd/nvidia-smi
// dispatches on its argv[0]). The fake agent installs it beside nvidia-smi and its CDI spec mounts it at
// fakegpu.ContainerMPSControl, as the NVIDIA container toolkit mounts the real client into containers with
// the compute capability.
//
// Like the real client it reads control commands on stdin, one a line (NVIDIA's device plugin writes one
// without a newline), sends them to the control daemon behind $CUDA_MPS_PIPE_DIRECTORY (/tmp/nvidia-mps when
// unset) and prints each answer on a line of its own. The daemon is the file the fake agent keeps there
// (fakegpu.MPSDaemonFile); without it the client fails as the real one does when no daemon listens.
// It answers the two queries of the defaults NVIDIA's plugin sets:
//
//	get_default_active_thread_percentage      → "50.0" (a float with one decimal, as the real daemon
//	                                            prints it; "100.0", the documented default, when unset)
//	get_default_device_pinned_mem_limit <dev> → "40779M" (the value set, in the M unit NVIDIA's plugin
//	                                            sets it in; "0", no limit, when unset)
//
// and get_server_list (no server: nothing). Every other command, and starting a daemon (-d, -f), is
// refused: the fake daemon's defaults are the agent's to set.

// MPSControlName is the name the multi-call binary answers to as the MPS control client.
const MPSControlName = "nvidia-cuda-mps-control"

// MPSNoDaemon is what the real client prints when no control daemon listens behind the pipe directory.
const MPSNoDaemon = "Cannot find MPS control daemon process"

// Exit codes of the MPS control client.
const (
	MPSExitOK       = 0
	MPSExitNoDaemon = 1 // the real client's status with MPSNoDaemon
	MPSExitRefused  = 1
)

// MPSEnv is what the fake client reads from its surroundings; tests replace it.
type MPSEnv struct {
	// PipeDirectory is $CUDA_MPS_PIPE_DIRECTORY, or MPS's default when unset.
	PipeDirectory string
}

// DefaultMPSEnv is the container's environment.
func DefaultMPSEnv() MPSEnv {
	return MPSEnv{PipeDirectory: cmp.Or(os.Getenv(fakegpu.EnvMPSPipeDirectory), fakegpu.MPSDefaultPipeDirectory)}
}

// MPSControlMain runs the fake nvidia-cuda-mps-control with args (without the program name) and the
// commands on stdin, and returns its exit code.
func MPSControlMain(args []string, env MPSEnv, stdin io.Reader, stdout, stderr io.Writer) int {
	if env.PipeDirectory == "" {
		env.PipeDirectory = DefaultMPSEnv().PipeDirectory
	}
	if len(args) > 0 {
		fmt.Fprintf(stderr, "%s (fake, for the gpuconform fake GPU stack): option %s is not supported: the fake agent keeps the MPS daemon; send commands on stdin\n", MPSControlName, args[0])
		return MPSExitRefused
	}
	daemon, err := fakegpu.LoadMPSDaemon(env.PipeDirectory)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(stderr, "%s: %v\n", MPSControlName, err)
		}
		fmt.Fprintln(stdout, MPSNoDaemon)
		return MPSExitNoDaemon
	}
	code := MPSExitOK
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		answer, err := answerMPS(daemon, strings.Fields(line))
		if err != nil {
			fmt.Fprintf(stderr, "%s (fake): %v\n", MPSControlName, err)
			code = MPSExitRefused
			continue
		}
		if answer != "" {
			fmt.Fprintln(stdout, answer)
		}
	}
	return code
}

// answerMPS is the daemon's answer to one command.
func answerMPS(d fakegpu.MPSDaemon, cmd []string) (string, error) {
	switch {
	case cmd[0] == "get_default_active_thread_percentage" && len(cmd) == 1:
		pct := 100
		if d.DefaultActiveThreadPercentage != nil {
			pct = *d.DefaultActiveThreadPercentage
		}
		return strconv.FormatFloat(float64(pct), 'f', 1, 64), nil
	case cmd[0] == "get_default_device_pinned_mem_limit" && len(cmd) == 2:
		dev, err := strconv.Atoi(cmd[1])
		if err != nil || dev < 0 {
			return "", fmt.Errorf("%s: device %q is not a device index", cmd[0], cmd[1])
		}
		if mib, ok := d.PinnedLimitMiB(dev); ok && mib > 0 {
			return strconv.Itoa(mib) + "M", nil
		}
		return "0", nil
	case cmd[0] == "get_server_list" && len(cmd) == 1:
		return "", nil
	}
	return "", fmt.Errorf("command %q is not answered by the fake MPS daemon (it answers get_default_active_thread_percentage, get_default_device_pinned_mem_limit <dev> and get_server_list)", strings.Join(cmd, " "))
}
