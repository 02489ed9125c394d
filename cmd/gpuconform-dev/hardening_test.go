package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/infra/localcluster"
)

func it(text string, state types.SpecState, took time.Duration, msg string) types.SpecReport {
	return types.SpecReport{LeafNodeType: types.NodeTypeIt, LeafNodeText: text, State: state, RunTime: took, Failure: types.Failure{Message: msg}}
}

// failedSuiteNode is a suite-level node (BeforeSuite, SynchronizedBeforeSuite, …) that failed with msg.
func failedSuiteNode(node types.NodeType, msg string) types.SpecReport {
	return types.SpecReport{LeafNodeType: node, State: types.SpecStateFailed, Failure: types.Failure{Message: msg}}
}

// The harness holds every failed spec, or the run's setup failure, to the row's words, and fails a row
// whose words no failure shows.
func TestJudgeHardening(t *testing.T) {
	words := []string{"kueue-controller-manager", "scaled to zero"}
	down := "GPU stack not ready:\n  - the Kueue webhook Service kueue-system/kueue-webhook-service has no ready endpoint (1 EndpointSlices): " +
		"Kueue's controller (behind webhook Service kueue-system/kueue-webhook-service): Deployment kueue-system/kueue-controller-manager: replicas 0 (scaled to zero); pods: none"
	parallel := "SynchronizedBeforeSuite failed on Ginkgo parallel process #1\n  The first SynchronizedBeforeSuite function running on Ginkgo parallel process #1 failed."
	skipped := it("runs a job", types.SpecStateSkipped, 0, "")
	cases := []struct {
		name         string
		words        []string
		specs        []types.SpecReport
		setupFailure string
		// bad are fragments of the shortfalls, in order (none: the row's failures hold).
		bad            []string
		passed, failed int
		slowest        time.Duration
	}{
		{name: "every failed spec holds the words", words: []string{"UntoleratedTaint", "is final"},
			specs: []types.SpecReport{it("a", types.SpecStatePassed, time.Second, ""), it("b", types.SpecStateFailed, 3*time.Second, "UntoleratedTaint: the wait is final"),
				it("c", types.SpecStateFailed, 2*time.Second, "timed out"), it("d", types.SpecStateSkipped, 0, "")},
			bad: []string{`"c" lacks "UntoleratedTaint"`, `"c" lacks "is final"`}, passed: 1, failed: 2, slowest: 3 * time.Second},
		{name: "stopped in Prepare, the record says why", words: words, setupFailure: down},
		{name: "stopped in Prepare for another reason", words: words, setupFailure: "GPU stack not ready:\n  - no allocation path has devices yet",
			bad: []string{`the setup failure lacks ["kueue-controller-manager" "scaled to zero"]: GPU stack not ready:`}},
		{name: "a failed SynchronizedBeforeSuite holds the words", words: words,
			specs: []types.SpecReport{failedSuiteNode(types.NodeTypeSynchronizedBeforeSuite, down), failedSuiteNode(types.NodeTypeSynchronizedBeforeSuite, parallel), skipped}},
		{name: "a failed BeforeSuite lacks them", words: words,
			specs: []types.SpecReport{failedSuiteNode(types.NodeTypeBeforeSuite, "RBAC preflight: the current user lacks 1 permission(s)"), skipped},
			bad:   []string{`the setup failure lacks ["kueue-controller-manager" "scaled to zero"]: RBAC preflight`}},
		{name: "nothing failed", words: words, specs: []types.SpecReport{it("a", types.SpecStatePassed, time.Second, "")},
			bad: []string{"no spec failed and setup did not fail"}, passed: 1},
		{name: "only the leak audit failed", words: words,
			specs: []types.SpecReport{it("a", types.SpecStatePassed, time.Second, ""), failedSuiteNode(types.NodeTypeSynchronizedAfterSuite, "leak audit: kueue-controller-manager scaled to zero")},
			bad:   []string{"no spec failed and setup did not fail"}, passed: 1},
		{name: "a GO row asks nothing of failures", specs: []types.SpecReport{it("a", types.SpecStateFailed, time.Second, "anything")}, failed: 1, slowest: time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var suites []types.Report
			if tc.specs != nil {
				suites = []types.Report{{SpecReports: tc.specs}}
			}
			res := hardeningResult{Row: hardeningRow{Want: "NO-GO", Failures: tc.words}}
			bad := judgeHardening(&res, suites, tc.setupFailure)
			if len(bad) != len(tc.bad) {
				t.Fatalf("shortfalls %q, want %d like %q", bad, len(tc.bad), tc.bad)
			}
			for i, want := range tc.bad {
				if !strings.Contains(bad[i], want) {
					t.Errorf("shortfall %d is %q, want it to contain %q", i, bad[i], want)
				}
			}
			if res.Passed != tc.passed || res.Failed != tc.failed || res.Slowest != tc.slowest {
				t.Errorf("tally %d passed %d failed slowest %s, want %d %d %s", res.Passed, res.Failed, res.Slowest, tc.passed, tc.failed, tc.slowest)
			}
		})
	}
}

// A NO-GO row names the words its failures must show; without them any NO-GO would pass it.
func TestHardeningNoGoRowsNameTheirReason(t *testing.T) {
	for _, r := range hardeningTable() {
		if r.Want == "NO-GO" && len(r.Failures) == 0 {
			t.Errorf("%s: a NO-GO row without Failures", r.Name)
		}
	}
}

// The kueue-down row's words are in the setup failure the suite writes when Kueue's controller is scaled
// to zero, as the stack check makes it (against a fake cluster in the local cluster's shape).
func TestKueueDownRowHoldsTheSuitesMessage(t *testing.T) {
	ns, labels := localcluster.KueueNamespace, map[string]string{"control-plane": "controller-manager"}
	kube := fake.NewClientset(
		&admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kueue-mutating-webhook-configuration"},
			Webhooks: []admissionv1.MutatingWebhook{{Name: "mworkload.kb.io",
				ClientConfig: admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: ns, Name: cluster.KueueWebhookService}},
				Rules:        []admissionv1.RuleWithOperations{{Rule: admissionv1.Rule{APIGroups: []string{"kueue.x-k8s.io"}}}}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.KueueWebhookService}, Spec: corev1.ServiceSpec{Selector: labels}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: localcluster.KueueManager},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}}}})
	setup := (&cluster.StackNotReady{Problems: []error{cluster.CheckKueueWebhookReady(t.Context(), kube, ns)}}).Error()
	i := slices.IndexFunc(hardeningTable(), func(r hardeningRow) bool { return r.Name == "kueue-down" })
	if i < 0 {
		t.Fatal("no kueue-down row")
	}
	res := hardeningResult{Row: hardeningTable()[i]}
	if bad := judgeHardening(&res, nil, setup); len(bad) > 0 {
		t.Errorf("%q\nsetup failure:\n%s", bad, setup)
	}
	if got := lineWith(setup, res.Row.Failures); !strings.Contains(got, "Deployment kueue-system/kueue-controller-manager: replicas 0") {
		t.Errorf("the table's note would be %q", got)
	}
}

// The gpu-agent-scheduled-nowhere row's words are in the setup failure the stack check makes when the
// local cluster's agent is patched as the row patches it (a fake cluster in its shape: four GPU nodes
// keeping their capacity without allocatable, the DRA slices gone), and the failure is final.
func TestAgentScheduledNowhereRowHoldsTheSuitesMessage(t *testing.T) {
	var objs []runtime.Object
	objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpuconform-control-plane"}})
	for i, pool := range []string{"gpu", "gpu", "gpu", "canary"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpuconform-worker" + strings.TrimPrefix(strconv.Itoa(i+1), "1"),
			Labels: map[string]string{"gpuconform.io/pool": pool, "nvidia.com/gpu.count": "4"}}}
		n.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}
		n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("0")}
		objs = append(objs, n)
	}
	hostPath := func(name, path string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
	}
	lbls := map[string]string{"app.kubernetes.io/name": localcluster.PluginDaemonSet}
	objs = append(objs,
		&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: localcluster.DRADriverName}, Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}}}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: localcluster.SystemNamespace, Name: localcluster.PluginDaemonSet, Generation: 35},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: lbls}, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbls},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{localcluster.AgentNowhereLabel: "true"},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpuconform.io/pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu", "canary"}}}}}}}},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Volumes: []corev1.Volume{hostPath("device-plugins", "/var/lib/kubelet/device-plugins"), hostPath("plugins-registry", "/var/lib/kubelet/plugins_registry"),
						hostPath("plugins", "/var/lib/kubelet/plugins")},
					Containers: []corev1.Container{{Name: localcluster.PluginDaemonSet, VolumeMounts: []corev1.VolumeMount{{Name: "device-plugins", MountPath: "/var/lib/kubelet/device-plugins"},
						{Name: "plugins-registry", MountPath: "/var/lib/kubelet/plugins_registry"}, {Name: "plugins", MountPath: "/var/lib/kubelet/plugins"}}}}}}},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: 35}})
	kube := fake.NewClientset(objs...)
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{
		{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "deviceclasses"}, {Name: "resourceslices"}}},
	}
	_, err := cluster.CheckStackReady(t.Context(), kube, config.Default(), cluster.NewSettle(time.Now()))
	if downs := cluster.ComponentsDown(err); len(downs) != 1 || !downs[0].Terminal {
		t.Fatalf("not a final component down: %v", err)
	}
	i := slices.IndexFunc(hardeningTable(), func(r hardeningRow) bool { return r.Name == "gpu-agent-scheduled-nowhere" })
	if i < 0 {
		t.Fatal("no gpu-agent-scheduled-nowhere row")
	}
	res := hardeningResult{Row: hardeningTable()[i]}
	if bad := judgeHardening(&res, nil, err.Error()); len(bad) > 0 {
		t.Errorf("%q\nsetup failure:\n%s", bad, err)
	}
	want := "device plugin and DRA kubelet plugin (driver gpu.nvidia.com): DaemonSet gpuconform-system/fake-device-plugin is scheduled on no node (desired 0): " +
		"its nodeSelector gpuconform.io/hardening-scheduled-nowhere=true matches none of the 4 GPU nodes (gpuconform-worker, gpuconform-worker2, gpuconform-worker3, gpuconform-worker4); " +
		"label the GPU nodes or fix the selector"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("setup failure\n%s\nlacks %q", err, want)
	}
	if got := lineWith(err.Error(), res.Row.Failures); !strings.Contains(got, "fake-device-plugin is scheduled on no node") {
		t.Errorf("the table's note would be %q", got)
	}
}
