package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/config"
)

func node(name, providerID string, agent bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	if agent {
		n.Labels[localAgentLabel] = "v1"
	}
	return n
}

func docker(string) (string, error)   { return "/usr/bin/docker", nil }
func noDocker(string) (string, error) { return "", errors.New("not found") }

func defaults() config.FaultsConfig { return config.Default().Faults }

func TestNewChoosesProvidersFromTheCluster(t *testing.T) {
	kind := []corev1.Node{*node("w1", "kind://docker/x/w1", true), *node("w2", "kind://docker/x/w2", true)}
	cloud := []corev1.Node{*node("gpu-1", "aws:///us-east-1a/i-1", false)}

	inj := New(Options{Pool: kind, Config: defaults(), LookPath: docker, ServesDeviceTaintRules: true})
	if _, ok := inj.Nodes.(*Local); !ok {
		t.Errorf("kind cluster: node provider %T (%s), want local", inj.Nodes, inj.NodesWhy)
	}
	if _, ok := inj.DRADevices.(*Local); !ok {
		t.Errorf("kind cluster: DRA device provider %T, want the fake agent (local)", inj.DRADevices)
	}
	if _, ok := inj.DRAEvict.(*TaintRule); !ok || !inj.DRAEvict.Evicts() {
		t.Errorf("served DeviceTaintRules: evicting DRA provider %T, want a NoExecute TaintRule", inj.DRAEvict)
	}

	inj = New(Options{Pool: kind, Config: defaults(), LookPath: noDocker})
	if inj.Nodes != nil || !strings.Contains(inj.NodesWhy, "docker") {
		t.Errorf("no docker: node provider %v, why %q", inj.Nodes, inj.NodesWhy)
	}

	inj = New(Options{Pool: cloud, Config: defaults(), LookPath: docker})
	if inj.Nodes != nil || !strings.Contains(inj.NodesWhy, "--fault-command") || inj.Devices != nil || inj.DRAEvict != nil {
		t.Errorf("real cluster without configuration must have no providers and say what to give: %+v", inj)
	}
	if inj.DRADevices != nil || !strings.Contains(inj.DRADevicesWhy, "--fault-command") {
		t.Errorf("real cluster, DRA without DeviceTaintRules: %v %q", inj.DRADevices, inj.DRADevicesWhy)
	}

	c := defaults()
	c.Command = "/opt/faults.sh"
	inj = New(Options{Pool: cloud, Config: c, ServesDeviceTaintRules: true})
	if _, ok := inj.Nodes.(*Command); !ok {
		t.Errorf("--fault-command: node provider %T", inj.Nodes)
	}
	if _, ok := inj.DRADevices.(*Command); !ok {
		t.Errorf("--fault-command: DRA device provider %T (the user's script wins over auto)", inj.DRADevices)
	}

	c = defaults()
	c.NodeProvider = config.FaultProviderKubeletStop
	if inj = New(Options{Pool: cloud, Config: c}); inj.Nodes != nil || !strings.Contains(inj.NodesWhy, "--helper-namespace") {
		t.Errorf("kubelet-stop without a helper namespace: %v %q", inj.Nodes, inj.NodesWhy)
	}
	if inj = New(Options{Pool: cloud, Config: c, HelperNamespace: "gpu-operator"}); inj.Nodes == nil {
		t.Errorf("kubelet-stop: %q", inj.NodesWhy)
	}

	c = defaults()
	c.DRADeviceProvider = config.FaultProviderTaintRule
	if inj = New(Options{Pool: kind, Config: c, LookPath: docker}); inj.DRADevices != nil || !strings.Contains(inj.DRADevicesWhy, "DeviceTaintRules") {
		t.Errorf("device-taint-rule where not served: %v %q", inj.DRADevices, inj.DRADevicesWhy)
	}
}

// recorder is a provider that records what it was asked.
type recorder struct{ calls []string }

func (r *recorder) Name() string { return "rec (test)" }
func (r *recorder) StopNode(_ context.Context, n string) error {
	r.calls = append(r.calls, "stop "+n)
	return nil
}
func (r *recorder) StartNode(_ context.Context, n string) error {
	r.calls = append(r.calls, "start "+n)
	return nil
}
func (r *recorder) RestartKubelet(_ context.Context, n string) error { return nil }
func (r *recorder) Evicts() bool                                     { return false }
func (r *recorder) ShutsDown() bool                                  { return true }
func (r *recorder) SetHealth(_ context.Context, d Device, healthy bool) error {
	r.calls = append(r.calls, "health "+d.ID+" "+map[bool]string{true: "ok", false: "bad"}[healthy])
	return nil
}

// A fault is recorded on its node before it is injected; an interrupted run's faults are found there and
// undone by Restore with the same kind of provider; nodes outside the pool are refused.
func TestFaultsAreRecordedAndAnInterruptedRunsAreRestored(t *testing.T) {
	ctx := t.Context()
	kube := fake.NewClientset(node("w1", "", true), node("cp", "", false))
	rec := &recorder{}
	inj := &Injector{Kube: kube, RunID: "run-1", Pool: []string{"w1"}, Nodes: rec, Devices: rec}

	if _, err := inj.StopNode(ctx, "cp"); err == nil || !strings.Contains(err.Error(), "not in the configured GPU pool") {
		t.Fatalf("a node outside the pool must be refused: %v", err)
	}
	if _, err := inj.StopNode(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	if _, err := inj.MarkDeviceUnhealthy(ctx, rec, Device{Node: "w1", ID: "GPU-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := inj.PutOutOfService(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	n, _ := kube.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
	if n.Annotations[FaultRunAnnotation] != "run-1" || n.Annotations[FaultsAnnotation] != "device-unhealthy=rec/GPU-1,out-of-service,stop-node" {
		t.Fatalf("marks = %v", n.Annotations)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != corev1.TaintNodeOutOfService {
		t.Fatalf("taints = %v", n.Spec.Taints)
	}

	// The next run, with the same providers, undoes all of it.
	next := &Injector{Kube: kube, RunID: "run-2", Pool: []string{"w1"}, Nodes: rec, Devices: rec}
	rec.calls = nil
	if err := next.Restore(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(rec.calls, ";") != "health GPU-1 ok;start w1" {
		t.Errorf("restore calls = %q", rec.calls)
	}
	n, _ = kube.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
	if len(n.Spec.Taints) != 0 || n.Annotations[FaultsAnnotation] != "" || n.Annotations[FaultRunAnnotation] != "" {
		t.Errorf("after restore: taints %v, annotations %v", n.Spec.Taints, n.Annotations)
	}

	// Without a node provider the stopped node is reported, not silently forgotten.
	_ = Mark(ctx, kube, "w1", "run-3", string(StopNode), true)
	if err := (&Injector{Kube: kube, NodesWhy: "none configured"}).Restore(ctx, "w1"); err == nil || !strings.Contains(err.Error(), "was stopped by run run-3") {
		t.Errorf("restore without a node provider: %v", err)
	}
}

// The command provider passes the action, node and device as arguments and environment, and fails
// with the script's output.
func TestCommandProviderCallsTheScript(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	script := filepath.Join(dir, "faults.sh")
	body := "#!/bin/sh\necho \"$@ run=$GPUCONFORM_RUN_ID pool=$GPUCONFORM_DEVICE_POOL\" >> " + log + "\n[ \"$1\" = restart-kubelet ] && { echo 'no ssh to the node' >&2; exit 3; }\nexit 0\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Command{Path: script, RunID: "r1"}
	ctx := t.Context()
	if err := c.StopNode(ctx, "gpu-1"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetHealth(ctx, Device{Node: "gpu-1", ID: "GPU-9", Pool: "gpu-1", Name: "gpu-3"}, false); err != nil {
		t.Fatal(err)
	}
	err := c.RestartKubelet(ctx, "gpu-1")
	if err == nil || !strings.Contains(err.Error(), "no ssh to the node") {
		t.Errorf("a failing script must fail with its output: %v", err)
	}
	got, _ := os.ReadFile(log)
	want := "stop-node gpu-1 run=r1 pool=\ndevice-unhealthy gpu-1 GPU-9 run=r1 pool=gpu-1\nrestart-kubelet gpu-1 run=r1 pool=\n"
	if string(got) != want {
		t.Errorf("calls:\n%s\nwant:\n%s", got, want)
	}
}

// The kubelet-stop helper shares the host's PID namespace, is privileged, tolerates every taint (its own
// node's NotReady taint included) and bounds the outage.
func TestKubeletStopHelperPod(t *testing.T) {
	k := &KubeletStop{RunID: "r1", Namespace: "gpu-operator", Image: "reg/gpu-workload:1", StopFor: 90 * time.Second}
	p := k.helper("gpu-1", "kubelet-stop", "--stop-for", k.StopFor.String())
	c := p.Spec.Containers[0]
	if !p.Spec.HostPID || p.Spec.NodeName != "gpu-1" || c.SecurityContext == nil || !*c.SecurityContext.Privileged {
		t.Fatalf("helper pod: %+v", p.Spec)
	}
	if len(p.Spec.Tolerations) != 1 || p.Spec.Tolerations[0].Operator != corev1.TolerationOpExists || p.Spec.Tolerations[0].Key != "" {
		t.Errorf("tolerations = %v", p.Spec.Tolerations)
	}
	if got := strings.Join(c.Command, " "); !strings.HasSuffix(got, "host-signal --process kubelet --stop-for 1m30s") {
		t.Errorf("command = %s", got)
	}
	if p.Namespace != "gpu-operator" || p.Labels["gpuconform.io/run"] != "r1" {
		t.Errorf("meta = %+v", p.ObjectMeta)
	}
	// Its CPU and memory are the run's, requests equal to limits (a quota on limits admits it); without
	// any, the fixtures' defaults.
	wantPinned(t, "default", c.Resources, fixtures.DefaultCPU, fixtures.DefaultMemory)
	f := fixtures.NewFactory("r1")
	f.CPU, f.Memory = resource.MustParse("300m"), resource.MustParse("64Mi")
	cfg := defaults()
	cfg.NodeProvider = config.FaultProviderKubeletStop
	inj := New(Options{Config: cfg, HelperNamespace: "gpu-operator", Resources: f.Resources()})
	ks, ok := inj.Nodes.(*KubeletStop)
	if !ok {
		t.Fatalf("kubelet-stop provider not chosen: %T %q", inj.Nodes, inj.NodesWhy)
	}
	wantPinned(t, "configured", ks.helper("gpu-1", "kubelet-stop").Spec.Containers[0].Resources, "300m", "64Mi")
}

// wantPinned requires CPU and memory requests equal to limits, of the given quantities.
func wantPinned(t *testing.T, what string, r corev1.ResourceRequirements, cpu, memory string) {
	t.Helper()
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: cpu, corev1.ResourceMemory: memory} {
		req, lim := r.Requests[name], r.Limits[name]
		if req.Cmp(resource.MustParse(want)) != 0 || lim.Cmp(req) != 0 {
			t.Errorf("%s: %s request %s, limit %s; want both %s", what, name, req.String(), lim.String(), want)
		}
	}
}

func TestRuleNameIsAValidName(t *testing.T) {
	got := RuleName("20261201-0350-abcd", Device{Pool: "gpuconform-worker", Name: "gpu-3"})
	if got != "gpuconform-20261201-0350-abcd-gpuconform-worker-gpu-3" {
		t.Errorf("RuleName = %s", got)
	}
}

// start replaces a helper that is still going away (the create answers AlreadyExists until it has) and
// returns once the new helper runs, or with the helper's failure.
func TestKubeletStopStartWaitsForTheHelper(t *testing.T) {
	for _, tc := range []struct {
		phase   corev1.PodPhase
		wantErr string
	}{{corev1.PodRunning, ""}, {corev1.PodFailed, "helper pod gpu-operator/gpuconform-kubelet-stop-gpu-1 failed: Evicted"}} {
		kube := fake.NewClientset()
		creates := 0
		kube.PrependReactor("create", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
			if creates++; creates == 1 {
				return true, nil, apierrors.NewAlreadyExists(corev1.Resource("pods"), "gpuconform-kubelet-stop-gpu-1")
			}
			return false, nil, nil
		})
		kube.PrependReactor("get", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
			name := a.(clienttesting.GetAction).GetName()
			return true, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: a.GetNamespace()},
				Status: corev1.PodStatus{Phase: tc.phase, Reason: "Evicted"}}, nil
		})
		k := &KubeletStop{Kube: kube, RunID: "r1", Namespace: "gpu-operator", Image: "reg/gpu-workload:1", StopFor: time.Minute}
		err := k.StopNode(t.Context(), "gpu-1")
		if got := fmt.Sprint(err); tc.wantErr == "" && err != nil || tc.wantErr != "" && !strings.Contains(got, tc.wantErr) {
			t.Errorf("phase %s: StopNode = %v, want %q", tc.phase, err, tc.wantErr)
		}
		if creates != 2 {
			t.Errorf("phase %s: %d creates, want 2 (one refused while the old helper goes)", tc.phase, creates)
		}
	}
}

// Two specs may mark one node at once (specs of two paths under --procs). A mark computed from a stale
// read is refused by its resourceVersion and computed again, so neither mark is lost.
func TestNodeMarksSurviveAConcurrentWriter(t *testing.T) {
	for name, write := range map[string]func(context.Context, *fake.Clientset) error{
		"fault mark": func(ctx context.Context, kube *fake.Clientset) error {
			return Mark(ctx, kube, "n", "run-1", "kubelet-stop", true)
		},
		"device health": func(ctx context.Context, kube *fake.Clientset) error {
			return (&Local{Kube: kube}).SetHealth(ctx, Device{Node: "n", ID: "GPU-b"}, false)
		},
	} {
		t.Run(name, func(t *testing.T) {
			kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "1"}})
			gvr := corev1.SchemeGroupVersion.WithResource("nodes")
			patches := 0
			kube.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
				patches++
				if patches > 1 {
					return false, nil, nil
				}
				if p := string(a.(clienttesting.PatchAction).GetPatch()); !strings.Contains(p, `"resourceVersion":"1"`) {
					t.Errorf("the patch %s does not say which version it was computed from", p)
				}
				// Another writer's marks land between this read and this patch.
				obj, _ := kube.Tracker().Get(gvr, "", "n")
				other := obj.(*corev1.Node).DeepCopy()
				other.Annotations = map[string]string{FaultsAnnotation: "stop-node", FaultRunAnnotation: "run-1", localUnhealthyDevices: "GPU-a"}
				other.ResourceVersion = "2"
				if err := kube.Tracker().Update(gvr, other, ""); err != nil {
					t.Fatal(err)
				}
				return true, nil, apierrors.NewConflict(gvr.GroupResource(), "n", errors.New("the object has been modified"))
			})
			if err := write(t.Context(), kube); err != nil {
				t.Fatal(err)
			}
			n, err := kube.CoreV1().Nodes().Get(t.Context(), "n", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if name == "fault mark" && n.Annotations[FaultsAnnotation] != "kubelet-stop,stop-node" {
				t.Errorf("faults %q, want both writers' marks", n.Annotations[FaultsAnnotation])
			}
			if name == "device health" && n.Annotations[localUnhealthyDevices] != "GPU-a,GPU-b" {
				t.Errorf("unhealthy devices %q, want both writers' devices", n.Annotations[localUnhealthyDevices])
			}
			if patches != 2 {
				t.Errorf("%d patches, want the refused one and one computed again", patches)
			}
		})
	}
}

// An interrupted upgrade rehearsal's mark: cleared at once on a node whose driver version reads the old one
// again, rolled back through the run's provider where it does not, and refused, saying what to do, with no
// provider.
func TestRestoreAnInterruptedUpgrade(t *testing.T) {
	ctx := t.Context()
	const label = "nvidia.com/cuda.driver-version.full"
	upgraded := func(version string) *fake.Clientset {
		n := node("w1", "", true)
		n.Labels = map[string]string{label: version}
		kube := fake.NewClientset(n)
		if err := Mark(ctx, kube, "w1", "run-1", "upgraded-from=550.1", true); err != nil {
			t.Fatal(err)
		}
		return kube
	}
	cleared := func(kube *fake.Clientset) bool {
		n, _ := kube.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
		return n.Annotations[FaultsAnnotation] == ""
	}

	kube := upgraded("560.2")
	err := (&Injector{Kube: kube, DriverVersionLabel: label}).Restore(ctx, "w1")
	if err == nil || !strings.Contains(err.Error(), "no upgrade provider") || !strings.Contains(err.Error(), label+" reads 550.1") || cleared(kube) {
		t.Errorf("without a provider: %v (cleared %t)", err, cleared(kube))
	}

	kube = upgraded("550.1")
	if err := (&Injector{Kube: kube, DriverVersionLabel: label}).Restore(ctx, "w1"); err != nil || !cleared(kube) {
		t.Errorf("rolled back by hand: %v (cleared %t)", err, cleared(kube))
	}

	kube = upgraded("560.2")
	var calls []string
	inj := &Injector{Kube: kube, DriverVersionLabel: label, UpgradeRollback: func(ctx context.Context, node, from string) error {
		calls = append(calls, node+"→"+from)
		n, _ := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		n.Labels[label] = from
		_, err := kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	}}
	if err := inj.Restore(ctx, "w1"); err != nil || !cleared(kube) || strings.Join(calls, ",") != "w1→550.1" {
		t.Errorf("through the provider: %v (cleared %t, calls %q)", err, cleared(kube), calls)
	}

	kube = upgraded("560.2")
	stuck := &Injector{Kube: kube, DriverVersionLabel: label, RollbackTimeout: time.Second,
		UpgradeRollback: func(context.Context, string, string) error { return nil }}
	if err := stuck.Restore(ctx, "w1"); err == nil || !strings.Contains(err.Error(), `still reads "560.2"`) || cleared(kube) {
		t.Errorf("a rollback that does not take: %v (cleared %t)", err, cleared(kube))
	}
}

// An interrupted DRA driver rehearsal's mark: rolled back through the run's DRA upgrade provider, refused
// with what to do without one.
func TestRestoreAnInterruptedDRAUpgrade(t *testing.T) {
	ctx := t.Context()
	marked := func() *fake.Clientset {
		kube := fake.NewClientset(node("w1", "", true))
		if err := Mark(ctx, kube, "w1", "run-1", DRAUpgradedMark+"v1", true); err != nil {
			t.Fatal(err)
		}
		return kube
	}
	cleared := func(kube *fake.Clientset) bool {
		n, _ := kube.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
		return n.Annotations[FaultsAnnotation] == ""
	}
	kube := marked()
	if err := (&Injector{Kube: kube}).Restore(ctx, "w1"); err == nil || !strings.Contains(err.Error(), "no DRA upgrade provider") || cleared(kube) {
		t.Errorf("without a provider: %v (cleared %t)", err, cleared(kube))
	}
	kube = marked()
	var calls []string
	inj := &Injector{Kube: kube, DRAUpgradeRollback: func(_ context.Context, node, from string) error {
		calls = append(calls, node+"→"+from)
		return nil
	}}
	if err := inj.Restore(ctx, "w1"); err != nil || !cleared(kube) || strings.Join(calls, ",") != "w1→v1" {
		t.Errorf("through the provider: %v (cleared %t, calls %q)", err, cleared(kube), calls)
	}
}
