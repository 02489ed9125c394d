package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"gpuconform.io/gpuconform/framework/cli"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/infra/localcluster"
	"gpuconform.io/gpuconform/internal/fakeplugin"
	"gpuconform.io/gpuconform/reports"
)

// selfcheckRow says which conformance specs must catch one fault of the fake GPU stack: with the fault on,
// a run of the specs matched by Focus must fail (NO-GO), and one of the failed specs must be one whose
// text contains Catcher. A fault with no catching check yet has an empty Focus and says why: it is a
// failing row, never a silent pass.
type selfcheckRow struct {
	Fault   fakeplugin.Fault
	Focus   string
	Catcher string
	NoCheck string
	// RestartAgents restarts the fake GPU agents after the row: a fault that leaves an agent out of
	// service (no-reregister) is not undone by switching it off.
	RestartAgents bool
}

// selfcheckTable is the proof table of `make selfcheck`: every fault mode of internal/fakeplugin.
func selfcheckTable() []selfcheckRow {
	return []selfcheckRow{
		{Fault: fakeplugin.FaultWrongIDs, Focus: "shows a running pod exactly", Catcher: "shows a running pod exactly"},
		{Fault: fakeplugin.FaultOverAdvertise, Focus: "full node", Catcher: "full node"},
		{Fault: fakeplugin.FaultDoubleAllocate, Focus: "full node", Catcher: "full node"},
		{Fault: fakeplugin.FaultIgnoreHealth, Focus: "withdraws exactly the device reported unhealthy", Catcher: "withdraws exactly the device reported unhealthy"},
		{Fault: fakeplugin.FaultLeakAll, Focus: "second container", Catcher: "second container"},
		{Fault: fakeplugin.FaultDRAPrepareFail, Focus: "shows a running pod exactly", Catcher: "on the dra path"},
		{Fault: fakeplugin.FaultPhantomSliceDevice, Focus: "full node", Catcher: "on the dra path"},
		{Fault: fakeplugin.FaultNoReregister, Focus: "after its kubelet restarts", Catcher: "device-plugin path advertises a node's devices again after its kubelet restarts", RestartAgents: true},
		{Fault: fakeplugin.FaultStaleAfterReboot, Focus: "device-plugin path reschedules a training job whose GPU node fails", Catcher: "whose GPU node fails", RestartAgents: true},
		{Fault: fakeplugin.FaultDriverMismatch, Focus: "driver and CUDA versions the node advertises", Catcher: "driver and CUDA versions the node advertises"},
	}
}

// statusSettle covers one kubelet node-status period (nodeStatusUpdateFrequency, 10 s by default) and a
// margin: after it the API shows what a fault changed in the node's allocatable.
const statusSettle = 15 * time.Second

// selfcheckResult is one row's outcome.
type selfcheckResult struct {
	Row      selfcheckRow
	Verdict  string   // NO-GO or GO (the subset run's), "-" when not run
	CaughtBy []string // failed specs
	Caught   bool
	Note     string
}

// selfcheckCommand switches each fault of the fake GPU stack on, on every GPU/canary node of the local
// cluster, runs the specs that must catch it, and requires them to fail; it prints the table and exits 1
// when a row was not caught.
func selfcheckCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cli.FlagSet("selfcheck", stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the local cluster (default: _output/kubeconfig of this checkout)")
	only := fs.String("faults", "", "comma-separated subset of faults to check (default: all)")
	artifacts := fs.String("artifacts", "", "directory for each row's run artifacts (default: _artifacts/selfcheck)")
	binary := fs.String("gpuconform", "", "the shipped binary to prove (default: _output/bin/gpuconform of this checkout)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if _, err := localCheckout(kubeconfig, artifacts, binary, "selfcheck"); err != nil {
		fmt.Fprintf(stderr, "gpuconform selfcheck: %v\n", err)
		return 2
	}
	want, err := fakeplugin.ParseFaults(*only)
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform selfcheck: --faults: %v\n", err)
		return 2
	}
	clients, err := cluster.Connect(ctx, cluster.ConnectOptions{Kubeconfig: *kubeconfig, Timeout: 30 * time.Second})
	if err != nil {
		fmt.Fprintf(stderr, "gpuconform selfcheck: %v\n", err)
		return 2
	}
	var results []selfcheckResult
	for _, row := range selfcheckTable() {
		if len(want) > 0 && !slices.Contains(want, row.Fault) {
			continue
		}
		res := selfcheckResult{Row: row, Verdict: "-"}
		if row.NoCheck != "" {
			res.Note = row.NoCheck
			results = append(results, res)
			continue
		}
		fmt.Fprintf(stderr, "selfcheck: %s on, running specs matching %q\n", row.Fault, row.Focus)
		res = runSelfcheckRow(ctx, clients.Kube, shipped(*binary), *kubeconfig, filepath.Join(*artifacts, string(row.Fault)), row, stderr)
		results = append(results, res)
	}
	printSelfcheck(stdout, results)
	for _, r := range results {
		if !r.Caught {
			return 1
		}
	}
	return 0
}

// runSelfcheckRow switches the row's fault on, runs the specs that must catch it with the shipped binary,
// and switches the fault off again.
func runSelfcheckRow(ctx context.Context, kube kubernetes.Interface, bin shipped, kubeconfig, dir string, row selfcheckRow, stderr io.Writer) selfcheckResult {
	res := selfcheckResult{Row: row, Verdict: "-"}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: localcluster.PoolLabel})
	if err != nil || len(nodes.Items) == 0 {
		res.Note = fmt.Sprintf("cannot list the pool nodes: %v", err)
		return res
	}
	set := func(value *string) error {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fakeplugin.FaultsAnnotation: value}}})
		for _, n := range nodes.Items {
			if _, err := kube.CoreV1().Nodes().Patch(ctx, n.Name, k8stypes.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
	on := string(row.Fault)
	start := time.Now()
	if err := set(&on); err != nil {
		res.Note = "switching the fault on: " + err.Error()
		return res
	}
	defer func() {
		// A fresh context: the fault must come off even when ctx was cancelled.
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		off := time.Now()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fakeplugin.FaultsAnnotation: nil}}})
		for _, n := range nodes.Items {
			_, _ = kube.CoreV1().Nodes().Patch(cctx, n.Name, k8stypes.MergePatchType, patch, metav1.PatchOptions{})
		}
		_ = waitAgentsLogged(cctx, kube, nodes.Items, off, "was="+on)
		if row.RestartAgents {
			restartAgents(cctx, kube, nodes.Items, stderr)
		}
	}()
	if err := waitAgentsLogged(ctx, kube, nodes.Items, start, "faults="+on); err != nil {
		res.Note = err.Error()
		return res
	}
	// What the agents now advertise reaches the Node objects with the kubelet's next status update (every
	// 10 s by default); the run's discovery must see it, or it sizes its checks from the old allocatable.
	select {
	case <-ctx.Done():
	case <-time.After(statusSettle):
	}
	_ = os.RemoveAll(dir)
	_ = os.MkdirAll(filepath.Dir(dir), 0o755)
	log := io.Discard
	if f, err := os.Create(dir + ".log"); err == nil {
		defer f.Close()
		log = f
	}
	runErr := bin.run(ctx, log, "--timeout=30m", "--kubeconfig="+kubeconfig, "--artifacts="+dir, "--disruptive",
		"--ginkgo.no-color", "--ginkgo.focus="+regexp.QuoteMeta(row.Focus))
	suites, err := reports.ReadGinkgoJSON(filepath.Join(dir, "gpuconform-report.json"))
	if err != nil {
		res.Note = fmt.Sprintf("no report from the run (%v; run error %v; log %s.log)", err, runErr, dir)
		return res
	}
	res.Verdict = "GO"
	if runErr != nil {
		res.Verdict = "NO-GO"
	}
	results := reports.Results(suites)
	for _, spec := range slices.Sorted(maps.Keys(results)) {
		if results[spec] == reports.ResultFailed {
			res.CaughtBy = append(res.CaughtBy, spec)
			res.Caught = res.Caught || strings.Contains(spec, row.Catcher) && runErr != nil
		}
	}
	if !res.Caught {
		res.Note = "no spec matching " + fmt.Sprintf("%q", row.Catcher) + " failed"
	}
	fmt.Fprintf(stderr, "selfcheck: %s → %s (%d failed spec(s); log %s.log)\n", row.Fault, res.Verdict, len(res.CaughtBy), dir)
	return res
}

// restartAgents deletes the fake GPU agent pods of the pool (their DaemonSet recreates them) and waits until
// every pool node advertises its device-plugin GPUs again.
func restartAgents(ctx context.Context, kube kubernetes.Interface, nodes []corev1.Node, stderr io.Writer) {
	_ = kube.CoreV1().Pods(localcluster.SystemNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: agentSelector})
	for _, n := range nodes {
		want := n.Status.Capacity[corev1.ResourceName(localcluster.GPUResource)]
		err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // a failed read is retried until the node answers or ctx ends
			}
			q := got.Status.Allocatable[corev1.ResourceName(localcluster.GPUResource)]
			return q.Cmp(want) == 0 || want.IsZero(), nil
		})
		if err != nil {
			fmt.Fprintf(stderr, "selfcheck: %s did not advertise its GPUs again after the agents restarted: %v\n", n.Name, err)
			return
		}
	}
}

// agentSelector selects the fake GPU agent pods.
const agentSelector = "app.kubernetes.io/name=fake-device-plugin"

// waitAgentsLogged waits, up to a minute in all, until the fake GPU agent on every node has logged that
// the faults in force changed (with the given fragment) since start.
func waitAgentsLogged(ctx context.Context, kube kubernetes.Interface, nodes []corev1.Node, start time.Time, fragment string) error {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	since := metav1.NewTime(start.Add(-time.Second))
	for _, n := range nodes {
		err := wait.PollUntilContextCancel(wctx, time.Second, true, func(ctx context.Context) (bool, error) {
			pods, err := kube.CoreV1().Pods(localcluster.SystemNamespace).List(ctx, metav1.ListOptions{
				LabelSelector: agentSelector, FieldSelector: "spec.nodeName=" + n.Name})
			if err != nil {
				return false, nil
			}
			for _, p := range pods.Items {
				logs, err := kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &since}).DoRaw(ctx)
				if err != nil {
					continue
				}
				for line := range strings.SplitSeq(string(logs), "\n") {
					if strings.Contains(line, fakeplugin.LogFaultsChanged) && strings.Contains(line, fragment) {
						return true, nil
					}
				}
			}
			return false, nil
		})
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return fmt.Errorf("the fake GPU agent on %s did not log %q with %q within a minute", n.Name, fakeplugin.LogFaultsChanged, fragment)
		}
	}
	return nil
}

func printSelfcheck(w io.Writer, results []selfcheckResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tVERDICT\tCAUGHT\tCATCHING SPEC / WHY NOT")
	caught := 0
	for _, r := range results {
		mark := "no"
		if r.Caught {
			mark = "yes"
			caught++
		}
		why := r.Note
		if r.Caught {
			var hits []string
			for _, s := range r.CaughtBy {
				if strings.Contains(s, r.Row.Catcher) {
					hits = append(hits, s)
				}
			}
			why = strings.Join(hits, " | ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Row.Fault, r.Verdict, mark, why)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "selfcheck: %d passed, %d failed\n", caught, len(results)-caught)
}
