// Command nvidia-smi is the fake GPU stack's nvidia-smi. The fake node agent's CDI spec mounts it into
// containers given fake GPUs, where the real driver's nvidia-smi would be (fakegpu.ContainerNvidiaSMI),
// and it reports the GPUs whose device nodes the container has, read from the inventory mounted
// beside it. It is never installed on a node with real GPUs. See package
// gpuconform.io/gpuconform/internal/fakegpu/smi for what it answers.
package main

import (
	"os"

	"gpuconform.io/gpuconform/internal/fakegpu/smi"
)

func main() {
	os.Exit(smi.Main(os.Args[1:], smi.DefaultEnv(), os.Stdout, os.Stderr))
}
