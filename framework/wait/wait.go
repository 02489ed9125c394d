// Package wait holds the suite's waiting helpers. Every wait polls a func(g Gomega) with a budget from
// the timeout vocabulary, and a failed wait prints what it waited for, the last observed state, and the
// diagnosis of the object (framework/diagnose) — never just "timed out".
package wait

import (
	"context"
	"fmt"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// Target names the object a wait is about, for the diagnosis. Kind is "Job", "Workload" or "Pod".
type Target struct {
	Kind, Namespace, Name string
}

func (t Target) String() string { return fmt.Sprintf("%s %s/%s", t.Kind, t.Namespace, t.Name) }

// Explainer returns a multi-line diagnosis of a target; it must never fail (it returns what it could
// find). The suite wires framework/diagnose.Explain here.
type Explainer func(ctx context.Context, t Target) string

// NoExplainer is used until a diagnosis is wired; it says so instead of printing nothing.
func NoExplainer(_ context.Context, t Target) string {
	return fmt.Sprintf("(no diagnosis available for %s: framework/diagnose is not wired into this run)", t)
}

// Waiter runs waits with one poll interval and one explainer.
type Waiter struct {
	// Poll is the interval between checks.
	Poll time.Duration
	// Explain diagnoses a target when a wait fails; nil means NoExplainer.
	Explain Explainer
}

// For polls check until it succeeds or timeout passes. what completes the sentence "timed out after T
// waiting for …"; target is diagnosed on failure (zero Target: no diagnosis).
func (w Waiter) For(ctx context.Context, what string, target Target, timeout time.Duration, check func(g gomega.Gomega)) {
	ginkgo.GinkgoHelper()
	start := time.Now()
	gomega.Eventually(ctx, check).
		WithTimeout(timeout).
		WithPolling(w.poll()).
		Should(gomega.Succeed(), func() string { return w.Message(what, target, time.Since(start)) })
}

// Message builds the failure message of a wait: the sentence, then the diagnosis. It runs only when the
// wait failed (lazily), and with a fresh context since the spec's may already be cancelled.
func (w Waiter) Message(what string, target Target, elapsed time.Duration) string {
	msg := fmt.Sprintf("timed out after %s waiting for %s", elapsed.Round(time.Second), what)
	if target == (Target{}) {
		return msg
	}
	explain := w.Explain
	if explain == nil {
		explain = NoExplainer
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return msg + "\n\nDiagnosis of " + target.String() + ":\n" + explain(ctx, target)
}

// Consistently checks that check keeps succeeding for d (e.g. "stays suspended").
func (w Waiter) Consistently(ctx context.Context, what string, target Target, d time.Duration, check func(g gomega.Gomega)) {
	ginkgo.GinkgoHelper()
	gomega.Consistently(ctx, check).
		WithTimeout(d).
		WithPolling(w.poll()).
		Should(gomega.Succeed(), func() string {
			return w.Message("the condition to keep holding: "+what, target, d)
		})
}

func (w Waiter) poll() time.Duration {
	if w.Poll <= 0 {
		return time.Second
	}
	return w.Poll
}
