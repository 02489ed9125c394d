package suite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gpuconform.io/gpuconform/framework/cluster"
)

// stepClock is a clock that never sleeps: After moves it on by d at once.
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time { return c.now }

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// notReady is CheckStackReady's error around down, as CheckKueueWebhookReady wraps it.
func notReady(down *cluster.ComponentDown) error {
	return &cluster.StackNotReady{Problems: []error{fmt.Errorf("the Kueue webhook Service kueue-system/kueue-webhook-service has no ready endpoint: %w", down)}}
}

// The stack wait stops at once on a component down for good, after the grace on one that is not coming
// up, and waits its whole budget for a rollout under way or a path without devices yet.
func TestStackWait(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const budget = 10 * time.Minute
	scaledToZero := &cluster.ComponentDown{Component: "Kueue's controller", Namespace: "kueue-system", Name: "kueue-controller-manager", Terminal: true, Why: "it is scaled to zero"}
	starting := &cluster.ComponentDown{Component: "Kueue's controller", Namespace: "kueue-system", Name: "kueue-controller-manager", Desired: 1, Why: "a pod is starting"}
	rollingOut := &cluster.ComponentDown{Component: "Kueue's controller", Namespace: "kueue-system", Name: "kueue-controller-manager", Desired: 1,
		Rollout: true, NewestPod: start.Add(-10 * time.Second), Why: "a rollout is in progress"}
	staleRollout := &cluster.ComponentDown{Component: "Kueue's controller", Namespace: "kueue-system", Name: "kueue-controller-manager", Desired: 1,
		Rollout: true, NewestPod: start.Add(-time.Hour), Why: "a rollout is in progress"}
	noDevices := &cluster.StackNotReady{Problems: []error{errors.New("no allocation path has devices yet")}}
	agentNowhere := &cluster.ComponentDown{Component: "device plugin", Kind: cluster.KindDaemonSet, Namespace: "gpu-operator", Name: "nvidia-device-plugin-daemonset",
		Terminal: true, Why: "its nodeSelector nvidia.com/gpu.deploy.device-plugin=true matches none of the 3 GPU nodes"}
	agentStarting := &cluster.ComponentDown{Component: "device plugin", Kind: cluster.KindDaemonSet, Namespace: "gpu-operator", Name: "nvidia-device-plugin-daemonset",
		Desired: 3, Why: "2 of its 3 pods are not Ready"}
	// The agents come before Kueue's webhook in the stack check's problems: every component counts, not
	// only the first.
	both := func(agent, kueue *cluster.ComponentDown) error {
		return &cluster.StackNotReady{Problems: []error{agent, errors.New("no allocation path has devices yet"),
			fmt.Errorf("the Kueue webhook Service kueue-system/kueue-webhook-service has no ready endpoint: %w", kueue)}}
	}
	cases := []struct {
		name string
		// answers are the checks' errors in turn; the last one repeats.
		answers []error
		// took is how long the wait lasted; checks how often it asked.
		took    time.Duration
		checks  int
		ready   bool
		stopped bool
	}{
		{name: "scaled to zero ends the wait at once", answers: []error{notReady(scaledToZero)}, took: 0, checks: 1, stopped: true},
		{name: "down for good after a while", answers: []error{notReady(starting), notReady(starting), notReady(scaledToZero)}, took: 10 * time.Second, checks: 3, stopped: true},
		{name: "a pod that stays starting gets the grace", answers: []error{notReady(starting)}, took: componentGrace, checks: 7, stopped: true},
		{name: "a rollout under way gets the budget", answers: []error{notReady(rollingOut)}, took: budget, checks: 121},
		{name: "a rollout stuck since long before gets the grace", answers: []error{notReady(staleRollout)}, took: componentGrace, checks: 7, stopped: true},
		{name: "a path without devices gets the budget", answers: []error{noDevices}, took: budget, checks: 121},
		{name: "a GPU agent scheduled nowhere ends the wait at once", answers: []error{both(agentNowhere, rollingOut)}, took: 0, checks: 1, stopped: true},
		{name: "Kueue down for good behind an agent that is starting", answers: []error{both(agentStarting, scaledToZero)}, took: 0, checks: 1, stopped: true},
		{name: "an agent not coming up gets the grace beside a rollout of Kueue", answers: []error{both(agentStarting, rollingOut)}, took: componentGrace, checks: 7, stopped: true},
		{name: "ready after a rollout", answers: []error{notReady(rollingOut), notReady(rollingOut), nil}, took: 10 * time.Second, checks: 3, ready: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := &stepClock{now: start}
			checks := 0
			w := stackWait{clock: clk, poll: stackPoll, budget: budget, check: func(context.Context) (cluster.Capabilities, error) {
				checks++
				return cluster.Capabilities{ServerVersion: "v1.35.0"}, tc.answers[min(checks, len(tc.answers))-1]
			}}
			caps, err := w.run(t.Context())
			if took := clk.now.Sub(start); took != tc.took || checks != tc.checks {
				t.Errorf("took %s with %d checks, want %s with %d", took, checks, tc.took, tc.checks)
			}
			if (err == nil) != tc.ready || caps.ServerVersion == "" {
				t.Fatalf("ready %v, want %v (caps %+v)", err == nil, tc.ready, caps)
			}
			if err == nil {
				return
			}
			if stopped := strings.Contains(err.Error(), "the wait for the GPU stack stopped after"); stopped != tc.stopped {
				t.Errorf("stopped early %v, want %v: %v", stopped, tc.stopped, err)
			}
			if last := tc.answers[len(tc.answers)-1]; !errors.Is(err, last) {
				t.Errorf("the error is not the last check's: %v", err)
			}
		})
	}
}

// A cancelled context ends the wait with the last check's answer, which says more than the context's.
func TestStackWaitCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	blocked := make(chan time.Time)
	w := stackWait{clock: blockingClock{blocked}, poll: stackPoll, budget: time.Minute, check: func(context.Context) (cluster.Capabilities, error) {
		return cluster.Capabilities{}, errors.New("no allocation path has devices yet")
	}}
	if _, err := w.run(ctx); err == nil || !strings.Contains(err.Error(), "no allocation path") {
		t.Errorf("cancelled wait: %v", err)
	}
}

// blockingClock's After never fires.
type blockingClock struct{ never chan time.Time }

func (blockingClock) Now() time.Time                         { return time.Time{} }
func (c blockingClock) After(time.Duration) <-chan time.Time { return c.never }

// A stack wait that goes on says how it stands every 30 s: the time of its budget and the first line of
// what the last check found.
func TestStackWaitSaysHowItStands(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var lines []string
	w := stackWait{clock: &stepClock{now: start}, poll: stackPoll, budget: 2 * time.Minute, say: func(l string) { lines = append(lines, l) },
		check: func(context.Context) (cluster.Capabilities, error) {
			return cluster.Capabilities{}, errors.New("no allocation path has devices yet: device-plugin: node w1 0 allocatable\nmore")
		}}
	if _, err := w.run(t.Context()); err == nil {
		t.Fatal("a stack without devices is not ready")
	}
	if len(lines) != 4 || lines[0] != "still waiting for the GPU stack: 30s of 2m0s; no allocation path has devices yet: device-plugin: node w1 0 allocatable" {
		t.Errorf("lines %q: want one every 30 s of 2 min, the first naming the check's finding", lines)
	}
}
