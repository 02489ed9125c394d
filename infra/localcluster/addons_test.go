package localcluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStalePluginPods(t *testing.T) {
	nodeStart := time.Date(2026, 11, 30, 10, 0, 0, 500_000_000, time.UTC)
	started := map[string]time.Time{"w1": nodeStart}
	cases := []struct {
		name, lines, want string
	}{
		{"current and ready", "fdp-a=w1=True=2026-11-30T10:00:05Z\ndra-a=w1=True=2026-11-30T10:00:00Z", ""},
		{"not ready", "fdp-a=w1=False=2026-11-30T10:00:05Z", "fdp-a on w1 is not Ready"},
		{"no running container", "fdp-a=w1=True=", "has no running container"},
		// The Ready status the kubelet wrote before the node container stopped.
		{"predates the node's start", "fdp-a=w1=True=2026-11-30T09:12:00Z", "predates the node's start"},
		{"node start unknown", "fdp-a=w9=True=2026-11-30T09:12:00Z", ""},
		{"malformed", "fdp-a=w1", "unexpected pod line"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := stalePluginPods(tc.lines, started)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("stalePluginPods = %q, want %q", got, tc.want)
			}
		})
	}
}

// poll returns as soon as check holds, names the last reason when the time is up, and stops with the
// caller's context.
func TestPoll(t *testing.T) {
	calls := 0
	if err := poll(t.Context(), time.Minute, func() (bool, string) { calls++; return true, "" }); err != nil || calls != 1 {
		t.Errorf("ready at once: err %v after %d checks, want nil after 1", err, calls)
	}
	err := poll(t.Context(), 50*time.Millisecond, func() (bool, string) { return false, "2 of 3 pods ready" })
	if err == nil || err.Error() != "not ready after 50ms: 2 of 3 pods ready" {
		t.Errorf("timed out: err %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := poll(ctx, time.Minute, func() (bool, string) { return false, "never" }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err %v, want context.Canceled", err)
	}
}

// A manager that started before the network answered and is not Ready is restarted; a Ready one, one that
// started after, and one still being created are left alone; one in CrashLoopBackOff is restarted whenever
// it started.
func TestStartedBlind(t *testing.T) {
	networkAt := time.Date(2026, 12, 3, 23, 40, 17, 0, time.UTC)
	listing := strings.Join([]string{
		"blind|False|2026-12-03T23:39:37Z|",
		"ready-before|True|2026-12-03T23:39:37Z|",
		"after|False|2026-12-03T23:40:30Z|",
		"creating|False||ContainerCreating",
		"backoff|False||CrashLoopBackOff",
		"unknown-ready||2026-12-03T23:39:37Z|",
		"",
	}, "\n")
	got := startedBlind(listing, networkAt)
	want := []string{"blind", "backoff", "unknown-ready"}
	if !slices.Equal(got, want) {
		t.Fatalf("startedBlind = %v, want %v", got, want)
	}
	if got := startedBlind("", networkAt); len(got) != 0 {
		t.Fatalf("startedBlind of no pods = %v, want none", got)
	}
}
