package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"gpuconform.io/gpuconform/framework/cli"
	"gpuconform.io/gpuconform/infra/localcluster"
	"gpuconform.io/gpuconform/internal/fakegpu"
)

func clusterCommand(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "usage: gpuconform cluster up|down|logs|load\n")
		return 2
	}
	wd, _ := os.Getwd()
	root, err := localcluster.FindRepoRoot(wd)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform cluster: %v\n", err)
		return 2
	}
	opts := localcluster.DefaultOptions(root)
	opts.Log = stderr
	fs := cli.FlagSet("cluster "+args[0], stderr)
	switch args[0] {
	case "up":
		fs.StringVar(&opts.NodeImage, "node-image", "", "use this kind node image instead of building one")
		fs.IntVar(&opts.GPUWorkers, "gpu-workers", opts.GPUWorkers, "workers in the GPU pool")
		fs.IntVar(&opts.CanaryWorkers, "canary-workers", opts.CanaryWorkers, "workers in the canary pool")
		fs.IntVar(&opts.DRAOnlyWorkers, "dra-only-workers", opts.DRAOnlyWorkers, "of the GPU pool's workers, how many (the last) run no device plugin, their GPUs served to nvidia.com/gpu requests by the DRA driver through the DeviceClass's extendedResourceName (the extended-resource-dra path); 0 turns the mapping off; changing it recreates the cluster")
		fs.IntVar(&opts.DevicesPerNode, "devices", opts.DevicesPerNode, "fake devices per node on each allocation path")
		fs.IntVar(&opts.Replicas, "replicas", opts.Replicas, "time-slicing replicas per fake GPU on the device-plugin path (1 = whole GPUs; default from "+localcluster.EnvReplicas+"); changing it rolls only the fake GPU agent")
		fs.StringVar(&opts.Sharing, "sharing", opts.Sharing, "sharing mode of the fake GPUs: "+strings.Join(fakegpu.SharingModes, ", ")+" (default from "+localcluster.EnvSharing+"; unset: time-slicing when --replicas is above 1, else none); time-slicing and mps need --replicas 2 or more; changing it rolls only the fake GPU agent")
		fs.BoolVar(&opts.RenameShared, "rename-shared", opts.RenameShared, "advertise the time-sliced or MPS fake GPUs as nvidia.com/gpu.shared, as NVIDIA's renameByDefault does (default from "+localcluster.EnvRenameShared+"=true); changing it rolls only the fake GPU agent")
		fs.StringVar(&opts.DRADriver, "dra-driver", opts.DRADriver, "DRA half of the fake GPU stack: "+localcluster.DRADriverFake+" (the project's agent, gpu.nvidia.com) or "+localcluster.DRADriverExample+" (dra-example-driver, gpu.example.com)")
	case "down", "logs", "load":
	default:
		fmt.Fprintf(stderr, "gpuconform cluster: unknown subcommand %q (up, down, logs, load)\n", args[0])
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	// A bad combination of flags (or of GPUCONFORM_SHARING and GPUCONFORM_REPLICAS) is a usage error,
	// refused before anything is built or created.
	if args[0] == "up" {
		if err := opts.Validate(); err != nil {
			fmt.Fprintf(stderr, "gpuconform cluster up: %v\n", err)
			return 2
		}
	}
	c, err := localcluster.New(opts)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform cluster: %v\n", err)
		return 1
	}
	switch args[0] {
	case "up":
		err = c.Up(ctx)
		if err == nil {
			fmt.Fprintf(stderr, "kubeconfig: %s\nkubectl: %s\n", c.Kubeconfig(), c.Kubectl())
		}
	case "down":
		err = c.Down(ctx)
	case "logs":
		if fs.NArg() != 1 {
			fmt.Fprint(stderr, "usage: gpuconform cluster logs DIR\n")
			return 2
		}
		err = c.Logs(ctx, fs.Arg(0))
	case "load":
		if fs.NArg() == 0 {
			fmt.Fprint(stderr, "usage: gpuconform cluster load ARCHIVE...\n")
			return 2
		}
		err = c.LoadArchives(ctx, fs.Args()...)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform cluster %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
