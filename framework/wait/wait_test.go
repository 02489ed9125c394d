package wait

import (
	"context"
	"strings"
	"testing"
	"time"
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
}
