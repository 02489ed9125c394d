package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// Rows run in table order whatever order the flag names them in; an unknown name lists the known ones;
// the exit code is 1 as soon as one result does not hold.
func TestRowRunner(t *testing.T) {
	tb := table[string, int]{rows: []string{"a", "bb", "ccc"}, name: func(s string) string { return s }}
	if got := tb.names(); strings.Join(got, ",") != "a,bb,ccc" {
		t.Errorf("names %v", got)
	}
	rows, err := tb.selected([]string{"ccc", "a"}, "row")
	if err != nil || strings.Join(rows, ",") != "a,ccc" {
		t.Errorf("selected %v, %v; want a,ccc in table order", rows, err)
	}
	if all, _ := tb.selected(nil, "row"); len(all) != 3 {
		t.Errorf("no subset selects every row: %v", all)
	}
	if _, err := tb.selected([]string{"d"}, "row"); err == nil || !strings.Contains(err.Error(), `unknown row "d"; use a, bb, ccc`) {
		t.Errorf("unknown name: %v", err)
	}
	var out bytes.Buffer
	printInts := func(rs []int) { fmt.Fprint(&out, rs) }
	if code := runRows(rows, func(s string) int { return len(s) }, printInts, func(n int) bool { return n > 0 }); code != 0 || out.String() != "[1 3]" {
		t.Errorf("all held: code %d, printed %q", code, out.String())
	}
	if code := runRows(rows, func(s string) int { return len(s) }, printInts, func(n int) bool { return n < 3 }); code != 1 {
		t.Errorf("one did not hold: code %d, want 1", code)
	}
}
