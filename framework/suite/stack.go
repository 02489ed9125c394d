package suite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"gpuconform.io/gpuconform/framework/cluster"
)

// componentGrace is how long the stack wait gives a component the suite depends on (Kueue's controller,
// behind its webhook) that serves nothing yet but is neither down for good nor visibly being rolled out:
// a pod that is only starting (scheduled, creating its containers, Running but not yet Ready) turns
// Ready within seconds once its image is on the node, and Kueue's readiness probe answers as soon as its
// webhook server has its certificate. Past that, waiting out the StackReady budget (10 minutes on a real
// cluster) for a controller nobody is rolling out would only delay the NO-GO the run ends with anyway.
const componentGrace = 30 * time.Second

// stackPoll is how often the stack wait asks again: discovery lists the nodes and DRA objects, so not
// much more often than the kubelets update their status (every 10 s by default).
const stackPoll = 5 * time.Second

// stackClock is the part of a clock the stack wait uses; tests give it one that does not sleep.
type stackClock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// stackWait polls check until the stack is ready, the budget is spent, or a component the stack needs is
// down (see stopEarly).
type stackWait struct {
	check  func(context.Context) (cluster.Capabilities, error)
	clock  stackClock
	poll   time.Duration
	budget time.Duration
	// say, when set, is told every stackSayEvery how the wait stands: a run never stays silent for a minute.
	say func(line string)
}

// stackSayEvery is how often a stack wait that goes on says so.
const stackSayEvery = 30 * time.Second

// waitForStack polls discovery until the requested paths have devices, no device plugin or DRA kubelet
// plugin is settling (cluster.Settle: re-registering plugins, and DRA plugins publishing a GPU node's
// slices again, are waited for within cluster.SettleWindow, not judged broken or left out)
// and Kueue's webhook answers, and returns the last discovery with its error when they do not within the
// StackReady budget, or at once when Kueue's controller or a GPU node agent (a device plugin's or DRA
// driver's DaemonSet, read when its path has no devices) is down for good, after componentGrace when it is
// not coming up either. What settling waited for, or could not read, goes into the run's notes; the
// agents that were not ready, into the discovery's (cluster.CheckStackReady).
func (r *Run) waitForStack(ctx context.Context) (cluster.Capabilities, error) {
	settle := cluster.NewSettle(time.Now())
	defer func() { r.Notes = append(r.Notes, settle.Notes()...) }()
	return stackWait{
		check: func(ctx context.Context) (cluster.Capabilities, error) {
			return cluster.CheckStackReady(ctx, r.Clients.Kube, r.Config, settle)
		},
		clock: clock.RealClock{}, poll: stackPoll, budget: r.Config.Timeouts().StackReady,
		say: r.say,
	}.run(ctx)
}

// run is the wait: the last check's error when it ends without a ready stack (the context's when none
// was made).
func (w stackWait) run(ctx context.Context) (cluster.Capabilities, error) {
	start := w.clock.Now()
	said := start
	var settled settling
	for {
		caps, err := w.check(ctx)
		now := w.clock.Now()
		if settled.done(now, err == nil, caps.SettledBroken()) {
			return caps, nil
		}
		if w.say != nil && now.Sub(said) >= stackSayEvery {
			said = now
			why := "settling"
			if err != nil {
				why, _, _ = strings.Cut(strings.TrimSpace(err.Error()), "\n")
			}
			w.say(fmt.Sprintf("still waiting for the GPU stack: %s of %s; %s", now.Sub(start).Round(time.Second), w.budget, why))
		}
		if stop, why := stopEarly(err, start, now); stop {
			return caps, fmt.Errorf("%w\n(the wait for the GPU stack stopped after %s of its %s budget: %s)", err, now.Sub(start).Round(time.Second), w.budget, why)
		}
		left := w.budget - now.Sub(start)
		if left <= 0 {
			return caps, err // nil when a settled broken path had not stood for cluster.SettledFor yet: judge it as it stands
		}
		select {
		case <-ctx.Done():
			return caps, err
		case <-w.clock.After(min(w.poll, left)):
		}
	}
}

// stopEarly decides whether a failed check ends a wait that began at start: it does when err says a
// component (Kueue's controller, a GPU node agent's DaemonSet) is down for good, or one is down and not
// coming up (ComponentDown.ComingUp) past componentGrace. Every other failure (a path without devices
// whose agents are not read or not down, a webhook whose Deployment is rolling out) keeps the wait going
// for its whole budget.
func stopEarly(err error, start, now time.Time) (bool, string) {
	downs := cluster.ComponentsDown(err)
	for _, down := range downs {
		if down.Terminal {
			return true, "the component is down for good; waiting longer would change nothing"
		}
	}
	if now.Sub(start) < componentGrace {
		return false, ""
	}
	for _, down := range downs {
		if !down.ComingUp(start, componentGrace) {
			return true, fmt.Sprintf("the component did not come up within %s and no rollout of it is in progress", componentGrace)
		}
	}
	return false, ""
}

// settling times how long the stack-ready check has given the same settled findings.
type settling struct {
	findings string
	since    time.Time
}

// done reports whether the wait is over at now: the check passed, and it rests on no settled broken path,
// or on the same ones for cluster.SettledFor.
func (s *settling) done(now time.Time, ready bool, findings string) bool {
	if !ready {
		findings = "" // nothing settled to time while the check fails
	}
	if findings != s.findings {
		s.findings, s.since = findings, now
	}
	return ready && (findings == "" || now.Sub(s.since) >= cluster.SettledFor)
}
