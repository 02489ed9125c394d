// Command gpuconform-net is the local cluster's pod network agent (see internal/nodenet). It runs as a
// privileged, host-network DaemonSet with the node's root filesystem mounted at /host.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"gpuconform.io/gpuconform/internal/nodenet"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "check" {
		os.Exit(checkCommand(os.Args[2:]))
	}
	podSubnet := flag.String("pod-subnet", "", "the cluster's pod network, e.g. 10.244.0.0/16 (required)")
	hostRoot := flag.String("host-root", "/host", "where the node's root filesystem is mounted")
	interval := flag.Duration("interval", 10*time.Second, "how often the node's network state is re-applied")
	mtu := flag.Int("mtu", 1500, "MTU of the pod interfaces")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	node := os.Getenv("NODE_NAME")
	if *podSubnet == "" || node == "" {
		fmt.Fprintln(os.Stderr, "gpuconform-net: --pod-subnet and the NODE_NAME environment variable are required")
		os.Exit(2)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Error("in-cluster config", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	a := &nodenet.Agent{Client: kubernetes.NewForConfigOrDie(cfg), NodeName: node, PodSubnet: *podSubnet,
		HostRoot: *hostRoot, MTU: *mtu, Log: log}
	log.Info("starting", "node", node, "podSubnet", *podSubnet)
	_ = a.Run(ctx, *interval)
}
