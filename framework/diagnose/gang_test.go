package diagnose

import (
	"strings"
	"testing"
)

// A gang that only partly fits: the verdict is the waiting worker's, and it names every worker.
func TestGangPartlyPlaced(t *testing.T) {
	tc := runCase{file: "gang-partly-placed.yaml"}
	c, kube, _ := caseClients(t, tc)
	res, err := Run(t.Context(), c, Target{Kind: "Job", Namespace: "gang-demo", Name: "train"})
	if err != nil {
		t.Fatal(err)
	}
	assertReadOnly(t, kube.Actions())
	if res.Layer != LayerScheduler || res.Reason != InsufficientDevice {
		t.Fatalf("got %s/%s, want the waiting worker's Scheduler/InsufficientDevice\n%s", res.Layer, res.Reason, res)
	}
	if len(res.Workers) != 4 {
		t.Fatalf("got %d workers, want 4:\n%s", len(res.Workers), res)
	}
	states := map[string]int{}
	for _, w := range res.Workers {
		states[w.State]++
		if w.State == WorkerWaiting && (w.Index != 1 || w.Layer != LayerScheduler || !strings.Contains(w.Why, "Insufficient nvidia.com/gpu")) {
			t.Errorf("waiting worker: %+v", w)
		}
		if w.State == WorkerRunning && w.Node == "" {
			t.Errorf("running worker without its node: %+v", w)
		}
	}
	if states[WorkerRunning] != 3 || states[WorkerWaiting] != 1 {
		t.Fatalf("states %v, want 3 running and 1 waiting", states)
	}
	if !strings.HasPrefix(res.Messages[0], "gang partly placed: 3 of 4 workers run (0, 2, 3)") {
		t.Errorf("first message %q does not say the gang is partly placed", res.Messages[0])
	}
	out := res.String()
	for _, want := range []string{"Workers:", "worker 1 (pod train-1-", "waiting at the Scheduler", "running on gpuconform-worker"} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered diagnosis lacks %q:\n%s", want, out)
		}
	}
}

// One pod of a one-pod Job is no gang: no workers are listed.
func TestNotAGang(t *testing.T) {
	tc := runCase{file: "insufficient-device.yaml"}
	c, _, _ := caseClients(t, tc)
	res, err := Run(t.Context(), c, job("train"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Workers) != 0 {
		t.Fatalf("a one-pod Job listed workers: %+v", res.Workers)
	}
}
