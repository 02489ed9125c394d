package gpu

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
	"gpuconform.io/gpuconform/internal/workload/podresources"
)

// The podresources helper declares the run's CPU and memory, requests equal to limits, so a namespace
// whose quota covers limits admits it as it admits the test pods.
func TestPodResourcesHelperDeclaresCPUAndMemory(t *testing.T) {
	kube := fake.NewClientset()
	var helper *corev1.Pod
	kube.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		helper = a.(clienttesting.CreateAction).GetObject().(*corev1.Pod)
		return true, nil, errors.New("stop here")
	})
	f := fixtures.NewFactory("r1")
	f.CPU, f.Memory = resource.MustParse("200m"), resource.MustParse("96Mi")
	pod := gpuPod("ns", "held-1", "w1", "1", corev1.PodRunning)
	if _, err := runPodResourcesHelper(t.Context(), GivenInput{Kube: kube, Pod: pod, Container: "c", Factory: f}, "w1", podresources.Filter{Namespace: "ns", Pod: "held-1"}); err == nil || helper == nil {
		t.Fatalf("the helper was not created: %v", err)
	}
	r := helper.Spec.Containers[0].Resources
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "200m", corev1.ResourceMemory: "96Mi"} {
		req, lim := r.Requests[name], r.Limits[name]
		if req.Cmp(resource.MustParse(want)) != 0 || lim.Cmp(req) != 0 {
			t.Errorf("helper %s: request %s, limit %s; want both %s", name, req.String(), lim.String(), want)
		}
	}
}

// Reading several pods' devices starts one kubelet reader per node, not one per pod: the node with four
// pods gets one reader for the namespace, the node with one a reader for that pod. A cluster that refuses
// the reader leaves each pod's count from its spec, marked count-only.
func TestGivenAllReadsEachNodeOnce(t *testing.T) {
	kube := fake.NewClientset()
	var mu sync.Mutex
	commands := map[string][]string{}
	kube.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		helper := a.(clienttesting.CreateAction).GetObject().(*corev1.Pod)
		mu.Lock()
		defer mu.Unlock()
		commands[helper.Spec.NodeName] = helper.Spec.Containers[0].Command
		return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), helper.Name, errors.New("hostPath volumes are not allowed"))
	})
	f := fixtures.NewFactory("r1")
	var ins []GivenInput
	for i, node := range []string{"w1", "w1", "w2", "w1", "w1"} {
		ins = append(ins, GivenInput{Kube: kube, Pod: gpuPod("ns", fmt.Sprintf("fill-%d", i), node, strconv.Itoa(i%2+1), corev1.PodRunning), Container: "c", Factory: f})
	}
	p := &DevicePlugin{Resource: "nvidia.com/gpu"}
	got, err := GivenAll(t.Context(), p, ins)
	if err != nil {
		t.Fatal(err)
	}
	if len(commands) != 2 {
		t.Fatalf("readers started: %v; want one on w1 and one on w2", commands)
	}
	if c := strings.Join(commands["w1"], " "); !strings.HasSuffix(c, "podresources --namespace ns") {
		t.Errorf("w1's reader: %q; want every pod of the namespace", c)
	}
	if c := strings.Join(commands["w2"], " "); !strings.HasSuffix(c, "podresources --namespace ns --pod fill-2") {
		t.Errorf("w2's reader: %q; want the one pod", c)
	}
	for i, a := range got {
		if !a.CountOnly || a.Count != i%2+1 || a.Node != ins[i].Pod.Spec.NodeName {
			t.Errorf("pod %d: %+v", i, a)
		}
	}

	ins[3].Pod.Spec.NodeName = ""
	if _, err := GivenAll(t.Context(), p, ins); err == nil || !strings.Contains(err.Error(), "fill-3 is not scheduled") {
		t.Errorf("an unscheduled pod: %v", err)
	}
}

// The helper is watched to its end: one list and one watch however long it runs, its last state on a
// timeout.
func TestUntilPodDoneWatchesTheHelper(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: "ns"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	kube := fake.NewClientset(pod.DeepCopy(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "ns"}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}})
	go func() {
		time.Sleep(200 * time.Millisecond)
		p := pod.DeepCopy()
		p.Status.Phase = corev1.PodRunning
		_, _ = kube.CoreV1().Pods("ns").UpdateStatus(t.Context(), p, metav1.UpdateOptions{})
		time.Sleep(100 * time.Millisecond)
		p.Status.Phase = corev1.PodSucceeded
		_, _ = kube.CoreV1().Pods("ns").UpdateStatus(t.Context(), p, metav1.UpdateOptions{})
	}()
	last, err := untilPodDone(t.Context(), kube, pod, 5*time.Second)
	if err != nil || last == nil || last.Name != "helper" || last.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("untilPodDone = %v, %v; want the helper Succeeded", last, err)
	}
	verbs := map[string]int{}
	for _, a := range kube.Actions() {
		verbs[a.GetVerb()]++
	}
	if verbs["list"] != 1 || verbs["watch"] != 1 || verbs["get"] != 0 {
		t.Errorf("requests by verb %v; want one list and one watch", verbs)
	}

	stuck := fake.NewClientset(pod.DeepCopy())
	last, err = untilPodDone(t.Context(), stuck, pod, 300*time.Millisecond)
	if err == nil || last == nil || last.Status.Phase != corev1.PodPending {
		t.Errorf("a helper that never ends: %v, %v; want an error and its last phase, Pending", last, err)
	}
}
