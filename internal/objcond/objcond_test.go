package objcond

import (
	"testing"
	"time"
)

func TestOfAndStatus(t *testing.T) {
	obj := map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "ok", "lastTransitionTime": "2026-12-07T15:00:00Z"},
		map[string]any{"type": "Programmed", "status": "Unknown", "reason": "Pending", "message": "Waiting for controller", "lastTransitionTime": "1970-01-01T00:00:00Z"},
		"not a condition",
	}}}
	conds := Of(obj, "status", "conditions")
	if len(conds) != 2 {
		t.Fatalf("Of = %+v, want the two conditions", conds)
	}
	if !conds[1].LastTransitionTime.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("Programmed's lastTransitionTime %s, want the epoch", conds[1].LastTransitionTime)
	}
	if s, r, m := Status(conds, "Accepted"); s != "True" || r != "Accepted" || m != "ok" {
		t.Errorf("Status(Accepted) = %q %q %q", s, r, m)
	}
	if s, r, _ := Status(conds, "ResolvedRefs"); s != "Unknown" || r != "" {
		t.Errorf("Status of a missing condition = %q %q, want Unknown and no reason", s, r)
	}
	if got := Of(map[string]any{}, "status", "conditions"); len(got) != 0 {
		t.Errorf("Of an object without status = %+v", got)
	}
}
