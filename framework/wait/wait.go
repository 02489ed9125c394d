// Package wait holds the suite's waiting helpers. Every wait polls a func(g Gomega) with a budget from
// the timeout vocabulary, and a failed wait prints what it waited for, the last observed state, and the
// diagnosis of the object (framework/diagnose) — never just "timed out".
package wait

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
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

// Judge diagnoses a target while a wait for progress runs and says whether the diagnosis is final
// (nothing will change without someone changing the cluster or the workload), with the diagnosis text.
// It must never fail: a diagnosis that cannot be made is not final.
type Judge func(ctx context.Context, t Target) (text string, final bool)

// Waiter runs waits with one poll interval and one explainer.
type Waiter struct {
	// Poll is the interval between checks.
	Poll time.Duration
	// Explain diagnoses a target when a wait fails; nil means NoExplainer.
	Explain Explainer
	// Judge, when set, lets ForProgress end a wait as soon as the target's diagnosis is final.
	Judge Judge
	// JudgeEvery is how often ForProgress diagnoses while its check fails (zero: 2s). A diagnosis reads
	// several objects, so it runs less often than the check.
	JudgeEvery time.Duration
	// Wake, when set, returns a channel that is closed at the next change of the objects waits look at
	// (the spec's Jobs, Pods and Kueue Workloads, from the spec's informers). Waits then check again on
	// each change, and after Fallback at the latest, instead of every Poll: the API server is read when
	// something happened, not on a clock.
	Wake func() <-chan struct{}
	// Fallback bounds the sleep between checks of a wait with Wake (zero: 2s); it covers what the
	// informers do not see (nodes, logs, cluster-scoped queues).
	Fallback time.Duration
	// Say, when set, is told a line at least every SayEvery (zero: 30s) while a wait goes on: what it waits
	// for, how much of its budget has passed, and its current diagnosis (or the check's failure) in one
	// line. A run never stays silent for a minute.
	Say      func(line string)
	SayEvery time.Duration
}

// progressLine tells Say, when it is due, how a wait stands; now-start is the time waited so far.
type progressLine struct {
	w       Waiter
	what    string
	timeout time.Duration
	start   time.Time
	last    time.Time
}

func (w Waiter) progress(what string, timeout time.Duration) *progressLine {
	now := time.Now()
	return &progressLine{w: w, what: what, timeout: timeout, start: now, last: now}
}

// tell says the line when SayEvery has passed since the last one; why is the current diagnosis or failure.
func (p *progressLine) tell(why string) {
	every := p.w.SayEvery
	if every <= 0 {
		every = 30 * time.Second
	}
	if p.w.Say == nil || time.Since(p.last) < every {
		return
	}
	p.last = time.Now()
	p.w.Say(fmt.Sprintf("still waiting for %s: %s of %s; %s", p.what, time.Since(p.start).Round(time.Second), p.timeout, oneLine(why)))
}

// oneLine is a diagnosis in one line of at most 240 characters: its "Reason:" line (framework/diagnose's
// layout), else its first line that is not the "Diagnosis of …" heading.
func oneLine(s string) string {
	line := ""
	for l := range strings.SplitSeq(s, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "Reason:") {
			line = l
			break
		}
		if line == "" && l != "" && !strings.HasPrefix(l, "Diagnosis of ") {
			line = l
		}
	}
	if r := []rune(line); len(r) > 240 {
		return string(r[:240]) + "…"
	}
	return cmp.Or(line, "no diagnosis yet")
}

// gated returns check, preceded from its second run on by a sleep until the next change (or Fallback).
// The channel is taken before each check runs, so a change during the check is not missed.
func (w Waiter) gated(ctx context.Context, check func(g gomega.Gomega)) func(g gomega.Gomega) {
	if w.Wake == nil {
		return check
	}
	var next <-chan struct{}
	first := true
	return func(g gomega.Gomega) {
		if !first {
			t := time.NewTimer(w.fallback())
			select {
			case <-next:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		first = false
		next = w.Wake()
		check(g)
	}
}

func (w Waiter) fallback() time.Duration {
	if w.Fallback <= 0 {
		return 2 * time.Second
	}
	return w.Fallback
}

// judgeBackoff bounds the growth of the time between two diagnoses of one wait, in JudgeEvery: a state
// that turns final late in a wait is found within judgeBackoff+1 JudgeEvery (10 s at the 2 s default).
const judgeBackoff = 4

// finalConfirmations is how many consecutive final diagnoses end a wait: one diagnosis can catch a
// moment (an event from a previous attempt, a node between states); two, JudgeEvery apart, cannot.
const finalConfirmations = 2

// ForProgress is For for a wait on forward progress (admitted, scheduled, started, completed): while
// the check fails it diagnoses the target, the first time JudgeEvery after it began, then less and less
// often while the diagnosis is not final (up to every judgeBackoff × JudgeEvery), and when the diagnosis is final twice in a
// row the wait ends at once with that diagnosis as its failure instead of running to its timeout. A
// wait that expects the target to be stuck must use For.
func (w Waiter) ForProgress(ctx context.Context, what string, target Target, timeout time.Duration, check func(g gomega.Gomega)) {
	ginkgo.GinkgoHelper()
	w.ForJudged(ctx, what, target, timeout, w.Judge, check)
}

// ForJudged is ForProgress with the wait's own judge: a wait that knows better than the run's diagnosis
// when it is over (a wait for one expected verdict ends on any other final one) passes it here, and the
// confirmation rule stays in one place. A nil judge or a zero target is For.
func (w Waiter) ForJudged(ctx context.Context, what string, target Target, timeout time.Duration, judge Judge, check func(g gomega.Gomega)) {
	ginkgo.GinkgoHelper()
	if judge == nil || target == (Target{}) {
		w.For(ctx, what, target, timeout, check)
		return
	}
	start := time.Now()
	// The first diagnosis comes JudgeEvery after the wait began, not at its first failed check: most
	// progress waits end sooner (a pod just created is not running yet), and a diagnosis reads several
	// objects.
	lastJudged := start
	// Each diagnosis that is not final doubles the time to the next, up to judgeBackoff × JudgeEvery: a
	// long wait for progress that is being made (a Job running its steps) is not read over and over. A
	// final one is confirmed JudgeEvery later.
	interval := w.judgeEvery()
	finals := 0
	ended := "" // the final diagnosis that ended the wait
	check = w.gated(ctx, check)
	said, diagnosis := w.progress(what, timeout), ""
	poll := func() error {
		failure := runCheck(check)
		if failure == "" {
			return nil
		}
		said.tell(cmp.Or(diagnosis, failure))
		if time.Since(lastJudged) < interval {
			return errors.New(failure)
		}
		lastJudged = time.Now()
		text, final := judge(ctx, target)
		diagnosis = text
		if !final {
			finals = 0
			interval = min(2*interval, judgeBackoff*w.judgeEvery())
			return errors.New(failure)
		}
		interval = w.judgeEvery()
		if finals++; finals < finalConfirmations {
			return errors.New(failure)
		}
		ended = fmt.Sprintf("gave up after %s waiting for %s: the diagnosis of %s is final (%s)\n\nDiagnosis of %s:\n%s",
			time.Since(start).Round(time.Second), what, target, failure, target, text)
		return gomega.StopTrying("the diagnosis is final")
	}
	gomega.Eventually(ctx, poll).
		WithTimeout(timeout).
		WithPolling(w.poll()).
		Should(gomega.Succeed(), func() string {
			if ended != "" {
				return ended
			}
			return w.Message(what, target, time.Since(start))
		})
}

// checkFailed is the panic runCheck's Gomega raises to leave a failing check at its first failure.
type checkFailed struct{}

// runCheck runs check with its own Gomega and returns its failure message ("" when it passed).
func runCheck(check func(g gomega.Gomega)) (failure string) {
	g := gomega.NewGomega(func(message string, _ ...int) {
		failure = message
		panic(checkFailed{})
	})
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(checkFailed); !ok {
				panic(r)
			}
		}
	}()
	check(g)
	return ""
}

func (w Waiter) judgeEvery() time.Duration {
	if w.JudgeEvery <= 0 {
		return 2 * time.Second
	}
	return w.JudgeEvery
}

// For polls check until it succeeds or timeout passes. what completes the sentence "timed out after T
// waiting for …"; target is diagnosed on failure (zero Target: no diagnosis).
func (w Waiter) For(ctx context.Context, what string, target Target, timeout time.Duration, check func(g gomega.Gomega)) {
	ginkgo.GinkgoHelper()
	start := time.Now()
	gated, said := w.gated(ctx, check), w.progress(what, timeout)
	poll := func() error {
		if failure := runCheck(gated); failure != "" {
			said.tell(failure)
			return errors.New(failure)
		}
		return nil
	}
	gomega.Eventually(ctx, poll).
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
	text := explain(ctx, target)
	if text == "" { // nothing to add to what the wait's own check said
		return msg
	}
	return msg + "\n\nDiagnosis of " + target.String() + ":\n" + text
}

// Consistently checks that check keeps succeeding for d (e.g. "stays suspended").
func (w Waiter) Consistently(ctx context.Context, what string, target Target, d time.Duration, check func(g gomega.Gomega)) {
	ginkgo.GinkgoHelper()
	interval := w.Poll
	if interval <= 0 {
		interval = time.Second
	}
	gomega.Consistently(ctx, check).
		WithTimeout(d).
		WithPolling(interval).
		Should(gomega.Succeed(), func() string {
			return w.Message("the condition to keep holding: "+what, target, d)
		})
}

func (w Waiter) poll() time.Duration {
	if w.Wake != nil {
		return 10 * time.Millisecond // the gate does the waiting
	}
	if w.Poll <= 0 {
		return time.Second
	}
	return w.Poll
}
