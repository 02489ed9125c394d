package main

import (
	"fmt"
	"slices"
	"strings"
)

// A maintainer harness (hardening, selfcheck, sharing) is a table of rows, each named, of which a flag
// selects a subset; it runs the selected rows in table order, prints a table of their results and exits 1
// when one did not hold. table is that shape, once.
type table[R, Res any] struct {
	rows []R
	name func(R) string
}

// names are the rows' names in table order (for the flag's help and its check).
func (t table[R, Res]) names() []string {
	out := make([]string, len(t.rows))
	for i, r := range t.rows {
		out[i] = t.name(r)
	}
	return out
}

// selected are the rows want names (every row when want is empty), in table order; a name no row has is
// an error that lists the names there are, for a usage error before anything runs.
func (t table[R, Res]) selected(want []string, what string) ([]R, error) {
	for _, w := range want {
		if !slices.Contains(t.names(), w) {
			return nil, fmt.Errorf("unknown %s %q; use %s", what, w, strings.Join(t.names(), ", "))
		}
	}
	var out []R
	for _, r := range t.rows {
		if len(want) == 0 || slices.Contains(want, t.name(r)) {
			out = append(out, r)
		}
	}
	return out, nil
}

// runRows runs each row, prints the results and returns the harness's exit code: 0 when every result
// held, 1 otherwise.
func runRows[R, Res any](rows []R, run func(R) Res, printAll func([]Res), held func(Res) bool) int {
	results := make([]Res, 0, len(rows))
	for _, r := range rows {
		results = append(results, run(r))
	}
	printAll(results)
	if slices.ContainsFunc(results, func(r Res) bool { return !held(r) }) {
		return 1
	}
	return 0
}
