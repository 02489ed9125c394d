package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"gpuconform.io/gpuconform/framework/cli"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/diagnose"
)

// Exit codes of `gpuconform diagnose`.
const (
	// diagnoseExitOK: a verdict was reached, whatever the workload's stage.
	diagnoseExitOK = 0
	// diagnoseExitUsage: the command line is wrong.
	diagnoseExitUsage = 2
	// diagnoseExitUnreachable: no kubeconfig, no API server, or no such target.
	diagnoseExitUnreachable = 3
)

const diagnoseUsage = `Usage: gpuconform diagnose KIND/NAME [flags]

Say where a workload is waiting (queue, scheduler, DRA, kubelet/runtime,
application) and why, quoting the exact condition or event. Read-only: it
only gets and lists objects.

KIND is job, workload or pod; deployment, statefulset or replicaset; or a
kind Kueue integrates (jobset, leaderworkerset, rayjob, raycluster,
pytorchjob, tfjob, mpijob, xgboostjob, paddlejob, jaxjob, trainjob,
appwrapper), found through owner references. Plural and kubectl forms such
as workloads.kueue.x-k8s.io are accepted. "KIND NAME" also works.

A verdict marked Final cannot change without someone changing the cluster
or the workload (an admission denial, a taint on every eligible node, a
request above every node's allocatable, an image that can never be pulled).

Exit codes: 0 diagnosed, 2 usage error, 3 cannot connect or target not found.

Flags:
`

// diagnoseCommand runs `gpuconform diagnose`. main.go dispatches to it with
// the arguments after the subcommand name.
func diagnoseCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cli.FlagSet("diagnose", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, diagnoseUsage)
		fs.PrintDefaults()
	}
	var namespace, kubeconfig, kubeContext, output string
	fs.StringVar(&namespace, "namespace", "default", "namespace of the target")
	fs.StringVar(&namespace, "n", "default", "shorthand for --namespace")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig path (default $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&kubeContext, "context", "", "kubeconfig context (default: the current context)")
	fs.StringVar(&output, "o", "text", "output format: text or json")

	// Flags may follow the target, as with kubectl.
	positional, err := cli.ParseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return diagnoseExitOK
	}
	if err != nil {
		return diagnoseExitUsage
	}
	target, err := cli.ParseTarget(positional, namespace)
	if err == nil && output != "text" && output != "json" {
		err = fmt.Errorf("-o %q: use text or json", output)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform diagnose: %v\n", err)
		fs.Usage()
		return diagnoseExitUsage
	}

	clients, err := diagnoseClients(ctx, kubeconfig, kubeContext)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform diagnose: %v\n", err)
		return diagnoseExitUnreachable
	}
	res, err := diagnose.Run(ctx, clients, target)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform diagnose: could not diagnose %s: %v; check that the cluster is reachable and retry.\n", target, err)
		return diagnoseExitUnreachable
	}
	if output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(stderr, "gpuconform diagnose: writing JSON: %v\n", err)
			return diagnoseExitUnreachable
		}
	} else {
		fmt.Fprint(stdout, res.String())
	}
	if res.Reason == diagnose.NotFound {
		fmt.Fprintf(stderr, "gpuconform diagnose: %s not found; check the name and -n/--namespace (%s).\n", target, target.Namespace)
		return diagnoseExitUnreachable
	}
	return diagnoseExitOK
}

// diagnoseClients connects as the suite does (cluster.Connect: the same
// kubeconfig, context and reachability errors) and leaves Kueue nil when
// kueue.x-k8s.io/v1beta2 is not served so the diagnosis reports APIMissing
// instead of a 404 per read.
func diagnoseClients(ctx context.Context, kubeconfig, kubeContext string) (diagnose.Clients, error) {
	// The reachability check should fail fast rather than hang on a dead VPN.
	clients, err := cluster.Connect(ctx, cluster.ConnectOptions{Kubeconfig: kubeconfig, Context: kubeContext, Timeout: 20 * time.Second})
	if err != nil {
		return diagnose.Clients{}, err
	}
	c := diagnose.Clients{Kube: clients.Kube}
	if _, err := clients.Kube.Discovery().ServerResourcesForGroupVersion(kueue.GroupVersion.String()); err != nil && apierrors.IsNotFound(err) {
		return c, nil
	}
	c.Kueue = clients.Kueue
	return c, nil
}
