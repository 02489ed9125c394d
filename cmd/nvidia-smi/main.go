// Command nvidia-smi is the fake GPU stack's nvidia-smi. The fake node agent's CDI spec mounts it into
// containers given fake GPUs, where the real driver's nvidia-smi would be (fakegpu.ContainerNvidiaSMI),
// and it reports the GPUs whose device nodes the container has, read from the inventory mounted
// beside it. It is never installed on a node with real GPUs. See package
// gpuconform.io/gpuconform/internal/fakegpu/smi for what it answers.
//
// It is a multi-call binary: run as nvidia-cuda-mps-control (the agent installs a copy under that name,
// mounted at fakegpu.ContainerMPSControl) it answers as the MPS control client, from the fake MPS daemon
// behind $CUDA_MPS_PIPE_DIRECTORY (smi.MPSControlMain).
package main

import (
	"os"
	"path/filepath"

	"gpuconform.io/gpuconform/internal/fakegpu/smi"
)

func main() {
	if filepath.Base(os.Args[0]) == smi.MPSControlName {
		os.Exit(smi.MPSControlMain(os.Args[1:], smi.DefaultMPSEnv(), os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(smi.Main(os.Args[1:], smi.DefaultEnv(), os.Stdout, os.Stderr))
}
