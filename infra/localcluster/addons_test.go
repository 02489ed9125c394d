package localcluster

import (
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
