package diagnose

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCollectReads holds Collect to reading what the decisions use, so that a wait that
// diagnoses on every poll stays cheap: nothing beyond the pod when its status explains it, nodes only
// for a gate or a capacity verdict, Kueue's queues only while it does not say why it waits.
func TestCollectReads(t *testing.T) {
	cases := []struct {
		file   string
		target Target
		reads  []string
	}{
		{"running.yaml", pod(podName), []string{"get pods"}},
		{"application-error.yaml", pod(podName), []string{"get pods"}},
		{"unbound-volume.yaml", pod(podName), []string{"get pods", "list events"}},
		{"insufficient-device.yaml", job("train"), []string{"get jobs", "list pods", "list workloads", "list events", "list nodes"}},
		{"dra-allocation-failed.yaml", pod(podName), []string{"get pods", "list events", "get resourceclaims", "get deviceclasses"}},
		{"dra-class-selects-nothing.yaml", pod(podName), []string{"get pods", "list events", "get resourceclaims", "get deviceclasses", "list resourceslices"}},
		{"dra-not-registered.yaml", pod(podName), []string{"get pods", "list events", "get resourceclaims"}},
		{"dra-extended-resource.yaml", pod(podName), []string{"get pods", "list events", "list deviceclasses", "list resourceslices"}},
		{"queue-quota-exhausted.yaml", job("train"), []string{"get jobs", "list pods", "list workloads", "get localqueues"}},
		{"queue-pending.yaml", workload(wlName), []string{"get workloads", "list events", "get localqueues", "get clusterqueues"}},
		{"workload-preempted.yaml", job("train"), []string{"get jobs", "list pods", "list workloads"}},
		{"image-pull-failed.yaml", pod(podName), []string{"get pods"}},
		{"image-pull-unreachable.yaml", pod(podName), []string{"get pods", "list events"}},
		{"cdi-unresolvable-repeated.yaml", job("train"), []string{"get jobs", "list pods", "list events", "list events"}},
		{"quota-unset.yaml", job("train"), []string{"get jobs", "list pods", "list workloads", "list events"}},
		{"deployment-admission-denied.yaml", Target{Kind: "deployment", Namespace: "ml", Name: "serve"},
			[]string{"get deployments", "list replicasets", "list pods", "list workloads", "list events"}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			kube, kq := fixtureClients(t, tc.file)
			if _, err := Collect(t.Context(), Clients{Kube: kube, Kueue: kq}, tc.target); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range slices.Concat(kube.Actions(), kq.Actions()) {
				got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
			}
			// The two fakes record separately, so their interleaving is lost: compare sorted.
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.reads))
			if !slices.Equal(got, want) {
				t.Errorf("reads %q, want %q", got, want)
			}
		})
	}
}

// TestCollectRecordsFailures: a failed read is in the snapshot, not an error of Collect, and the reads
// that would follow it are not made.
func TestCollectRecordsFailures(t *testing.T) {
	tc := runCases()[slices.IndexFunc(runCases(), func(c runCase) bool { return c.name == "events forbidden is not a GPU shortage" })]
	c, kube, _ := caseClients(t, tc)
	s, err := Collect(t.Context(), c, tc.target)
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	if len(s.Errors) != 1 || s.Errors[0].Read != tc.fault.Read {
		t.Fatalf("errors %+v, want the one read %+v", s.Errors, tc.fault.Read)
	}
	for _, a := range kube.Actions() {
		if a.GetResource().Resource == "nodes" {
			t.Error("nodes were listed after the events the verdict stops at could not be")
		}
	}
	if _, err := Collect(t.Context(), Clients{}, tc.target); err == nil {
		t.Error("Collect without a Kubernetes client succeeded")
	}
	if _, err := Collect(t.Context(), c, Target{Kind: "node", Name: "x"}); err == nil || !strings.Contains(err.Error(), "unsupported kind") {
		t.Errorf("Collect of a node: %v, want unsupported kind", err)
	}
}

// TestCollectReadsReplacedOnlyWhenUnregistered: the events of the pods a Job replaced are read when the
// pod's latest prepare failure is an unregistered driver, whose duration they measure, and not for any
// other prepare failure, which they do not change.
func TestCollectReadsReplacedOnlyWhenUnregistered(t *testing.T) {
	for _, unreg := range []bool{true, false} {
		kube, kq := fixtureClients(t, "dra-not-registered-replaced.yaml")
		if !unreg {
			e, err := kube.CoreV1().Events("ml").Get(t.Context(), "train-k2p7x.18b0000000000031", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			e.Message = "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed: GPU 0 is lost"
			if _, err := kube.CoreV1().Events("ml").Update(t.Context(), e, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			kube.ClearActions()
		}
		if _, err := Collect(t.Context(), Clients{Kube: kube, Kueue: kq}, job("train")); err != nil {
			t.Fatal(err)
		}
		lists := 0
		for _, a := range kube.Actions() {
			if a.GetVerb() == "list" && a.GetResource().Resource == "events" {
				lists++
			}
		}
		if want := map[bool]int{true: 2, false: 1}[unreg]; lists != want {
			t.Errorf("not registered %v: %d event lists, want %d (the pod's, and the replaced pods' only when not registered)", unreg, lists, want)
		}
	}
}
