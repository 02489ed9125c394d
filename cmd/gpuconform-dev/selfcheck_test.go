package main

import (
	"bytes"
	"strings"
	"testing"

	"gpuconform.io/gpuconform/internal/fakeplugin"
)

func TestSelfcheckTableCoversEveryFault(t *testing.T) {
	rows := map[fakeplugin.Fault]int{}
	for _, r := range selfcheckTable() {
		rows[r.Fault]++
		if (r.Focus == "") == (r.NoCheck == "") {
			t.Errorf("%s: a row either names the specs that catch it or says why none does", r.Fault)
		}
		if r.Focus != "" && r.Catcher == "" {
			t.Errorf("%s: no catching spec text", r.Fault)
		}
	}
	for _, f := range fakeplugin.AllFaults() {
		if rows[f] != 1 {
			t.Errorf("fault %s has %d rows in the selfcheck table, want 1", f, rows[f])
		}
	}
}

func TestSelfcheckTableUncaughtRowsFail(t *testing.T) {
	var b bytes.Buffer
	printSelfcheck(&b, []selfcheckResult{
		{Row: selfcheckRow{Fault: fakeplugin.FaultLeakAll, Catcher: "second container"}, Verdict: "NO-GO", Caught: true,
			CaughtBy: []string{"GPU exclusivity and isolation on the dra path shows a GPU pod's second container …"}},
		{Row: selfcheckRow{Fault: fakeplugin.FaultIgnoreHealth, NoCheck: "no check"}, Verdict: "-", Note: "no check"},
	})
	out := b.String()
	if !strings.Contains(out, "selfcheck: 1 passed, 1 failed") || !strings.Contains(out, "ignore-health  -        no") {
		t.Errorf("table:\n%s", out)
	}
}
