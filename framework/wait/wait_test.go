package wait

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
)

// A failed wait must print the diagnosis of its target, never just "timed out".
func TestMessageCarriesTheDiagnosis(t *testing.T) {
	target := Target{Kind: "Job", Namespace: "ns", Name: "train"}
	w := Waiter{Explain: func(_ context.Context, got Target) string {
		if got != target {
			t.Errorf("explained %s, want %s", got, target)
		}
		return "Reason:  QueueQuotaExhausted"
	}}
	msg := w.Message("Kueue to admit the Workload", target, 42*time.Second)
	for _, want := range []string{"timed out after 42s waiting for Kueue to admit the Workload", "Diagnosis of Job ns/train:", "Reason:  QueueQuotaExhausted"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if got := (Waiter{}).Message("x", target, time.Second); !strings.Contains(got, "no diagnosis available for Job ns/train") {
		t.Errorf("an unwired waiter must say the diagnosis is missing: %s", got)
	}
	if got := w.Message("namespace to be deleted", Target{}, time.Second); strings.Contains(got, "Diagnosis") {
		t.Errorf("a wait without a target has nothing to diagnose: %s", got)
	}
	quiet := Waiter{Explain: func(context.Context, Target) string { return "" }}
	if got := quiet.Message("x", Target{Kind: "HTTPRoute", Namespace: "ns", Name: "r"}, time.Second); strings.Contains(got, "Diagnosis") {
		t.Errorf("an explainer with nothing to add must leave no empty Diagnosis section: %s", got)
	}
}

// failingCheck never passes.
func failingCheck(g gomega.Gomega) { g.Expect(false).To(gomega.BeTrue(), "pod is not scheduled") }

func TestForProgressEndsOnAFinalDiagnosis(t *testing.T) {
	target := Target{Kind: "Pod", Namespace: "ns", Name: "p"}
	judged := 0
	w := Waiter{Poll: 5 * time.Millisecond, JudgeEvery: 5 * time.Millisecond,
		Explain: func(context.Context, Target) string { return "explained" },
		Judge: func(_ context.Context, got Target) (string, bool) {
			judged++
			return "Reason:  UntoleratedTaint", true
		}}
	failures := gomega.InterceptGomegaFailures(func() {
		w.ForProgress(t.Context(), "pod ns/p to run", target, time.Hour, failingCheck)
	})
	if len(failures) != 1 {
		t.Fatalf("failures = %q, want one", failures)
	}
	for _, want := range []string{"the diagnosis of Pod ns/p is final", "pod is not scheduled", "Reason:  UntoleratedTaint"} {
		if !strings.Contains(failures[0], want) {
			t.Errorf("failure lacks %q:\n%s", want, failures[0])
		}
	}
	if strings.Contains(failures[0], "timed out") {
		t.Errorf("a wait ended by a final diagnosis must not read as a timeout:\n%s", failures[0])
	}
	if judged != finalConfirmations {
		t.Errorf("judged %d times, want %d (a final diagnosis must be confirmed, then the wait ends)", judged, finalConfirmations)
	}
}

func TestForProgressRunsToItsTimeoutWhileNotFinal(t *testing.T) {
	target := Target{Kind: "Pod", Namespace: "ns", Name: "p"}
	n := 0
	w := Waiter{Poll: 5 * time.Millisecond, JudgeEvery: 5 * time.Millisecond,
		Explain: func(context.Context, Target) string { return "explained" },
		// Final every other time: never twice in a row, so never confirmed.
		Judge: func(context.Context, Target) (string, bool) { n++; return "flapping", n%2 == 0 }}
	failures := gomega.InterceptGomegaFailures(func() {
		w.ForProgress(t.Context(), "pod ns/p to run", target, 200*time.Millisecond, failingCheck)
	})
	if len(failures) != 1 || !strings.Contains(failures[0], "timed out after") || strings.Contains(failures[0], "is final") {
		t.Errorf("failures = %q, want one timeout", failures)
	}
	// A wait whose diagnosis is never final is diagnosed less and less often: after JudgeEvery, then twice
	// as long each time, up to judgeBackoff × JudgeEvery (here 10, 20, 40, 40, … ms over 500 ms: about
	// 13, against 50 at a fixed JudgeEvery).
	n = 0
	backoff := Waiter{Poll: time.Millisecond, JudgeEvery: 10 * time.Millisecond, Explain: w.Explain,
		Judge: func(context.Context, Target) (string, bool) { n++; return "Running", false }}
	gomega.InterceptGomegaFailures(func() {
		backoff.ForProgress(t.Context(), "Job ns/j to complete", target, 500*time.Millisecond, failingCheck)
	})
	if n < 5 || n > 20 {
		t.Errorf("a 500 ms wait with JudgeEvery 10 ms and no final diagnosis was judged %d times, want about 13", n)
	}
	// A check that passes within JudgeEvery is never diagnosed, however often it failed before.
	n, tries := 0, 0
	slow := Waiter{Poll: 5 * time.Millisecond, JudgeEvery: time.Hour, Judge: w.Judge, Explain: w.Explain}
	failures = gomega.InterceptGomegaFailures(func() {
		slow.ForProgress(t.Context(), "pod ns/p to run", target, time.Minute, func(g gomega.Gomega) {
			tries++
			g.Expect(tries).To(gomega.BeNumerically(">", 3), "pod is not running yet")
		})
	})
	if len(failures) != 0 || n != 0 || tries != 4 {
		t.Errorf("a wait that ends before JudgeEvery: failures %q, judged %d times, %d tries", failures, n, tries)
	}
	// A passing check never diagnoses.
	n = 0
	failures = gomega.InterceptGomegaFailures(func() {
		w.ForProgress(t.Context(), "pod ns/p to run", target, time.Second, func(gomega.Gomega) {})
	})
	if len(failures) != 0 || n != 0 {
		t.Errorf("passing check: failures %q, judged %d times", failures, n)
	}
}

func TestMain(m *testing.M) {
	// The waits use the global Gomega, as inside Ginkgo; the tests intercept its failures.
	gomega.RegisterFailHandler(func(message string, _ ...int) { panic(message) })
	os.Exit(m.Run())
}

// With Wake, a wait checks again when something changed, not on a clock: a change wakes it at once,
// and without changes it sleeps Fallback between checks.
func TestWaitsWakeOnChange(t *testing.T) {
	changed := make(chan struct{})
	var mu sync.Mutex
	wake := func() <-chan struct{} { mu.Lock(); defer mu.Unlock(); return changed }
	signal := func() {
		mu.Lock()
		defer mu.Unlock()
		close(changed)
		changed = make(chan struct{})
	}
	checks := 0
	var ready atomic.Bool
	w := Waiter{Poll: time.Millisecond, Wake: wake, Fallback: time.Hour}
	go func() {
		for !ready.Load() {
			time.Sleep(time.Millisecond)
		}
		signal() // the change that makes the check pass
	}()
	failures := gomega.InterceptGomegaFailures(func() {
		w.For(t.Context(), "the change", Target{}, time.Minute, func(g gomega.Gomega) {
			checks++
			if checks == 1 {
				ready.Store(true)
				g.Expect(false).To(gomega.BeTrue(), "not yet")
			}
		})
	})
	if len(failures) != 0 || checks != 2 {
		t.Errorf("failures %q, %d checks; want success on the second check, woken by the change (the fallback is an hour)", failures, checks)
	}
}

// A wait that goes on says how it stands every SayEvery: what it waits for, the time of its budget, and
// the current diagnosis in one line (the check's failure before the first diagnosis). One that ends
// sooner says nothing.
func TestWaitsSayHowTheyStand(t *testing.T) {
	target := Target{Kind: "Pod", Namespace: "ns", Name: "p"}
	var lines []string
	w := Waiter{Poll: 2 * time.Millisecond, JudgeEvery: 15 * time.Millisecond, SayEvery: 10 * time.Millisecond,
		Say: func(l string) { lines = append(lines, l) },
		Judge: func(context.Context, Target) (string, bool) {
			return "Diagnosis of Pod ns/p\n  Stage: Scheduling\n  Reason:  Unschedulable: 0/3 nodes are available\n  more detail", false
		}}
	gomega.InterceptGomegaFailures(func() {
		w.ForProgress(t.Context(), "pod ns/p to run", target, 100*time.Millisecond, failingCheck)
	})
	if len(lines) < 3 || len(lines) > 12 {
		t.Fatalf("a 100 ms wait saying every 10 ms said %d lines: %q", len(lines), lines)
	}
	if !strings.HasPrefix(lines[0], "still waiting for pod ns/p to run: ") || !strings.Contains(lines[0], " of 100ms; ") {
		t.Errorf("first line %q", lines[0])
	}
	if last := lines[len(lines)-1]; !strings.HasSuffix(last, "; Reason:  Unschedulable: 0/3 nodes are available") {
		t.Errorf("a line after the diagnosis must carry its first line: %q", last)
	}
	lines = nil
	gomega.InterceptGomegaFailures(func() {
		w.For(t.Context(), "pod ns/p to be gone", target, 50*time.Millisecond, failingCheck)
	})
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "still waiting for pod ns/p to be gone: ") {
		t.Errorf("For says how it stands too: %q", lines)
	}
	lines = nil
	w.For(t.Context(), "nothing", target, time.Second, func(gomega.Gomega) {})
	if len(lines) != 0 {
		t.Errorf("a wait that passed at once said %q", lines)
	}
}
