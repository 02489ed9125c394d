// Package workload holds the pieces of the suite's test workload image (cmd/gpu-workload), one
// subpackage per subcommand, so each can be unit tested without building the binary:
//
//   - probe: reports the devices a container can see and checks them against what was requested.
//   - train: a restartable, checkpointing loop for preemption and recovery scenarios.
//   - gang: train for the W workers of an Indexed Job, which rendezvous over TCP, resume from the
//     newest checkpoint every one of them holds, step in lock step and stop together (peer_lost)
//     when one is lost.
//   - podresources: asks the kubelet which devices it allocated to pods.
//   - devicetest: the local stand-in for a GPU vendor's device test (CUDA vectorAdd): a GPU device node,
//     the driver's control device and an nvidia-smi that lists as many GPUs, or a failure naming what is
//     missing.
//   - termlog: writes a Kubernetes termination message without ever exceeding its size limit.
//
// Every subcommand reports machine-readable JSON lines on stdout, because the suite reads them back
// from pod logs and termination messages instead of scraping free text.
package workload
