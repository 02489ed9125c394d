// Package textcut shortens text for one-line messages and table cells: by characters (runes), never
// splitting one, with an ellipsis that says something was cut.
package textcut

import "strings"

// Ellipsis marks where text was cut.
const Ellipsis = "…"

// Head keeps s to at most n characters: its first n-1 and an ellipsis when it is longer (trailing spaces
// before the ellipsis dropped). n below 1 keeps nothing.
func Head(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	return strings.TrimRight(string(r[:n-1]), " ") + Ellipsis
}

// Tail keeps s to at most n characters: an ellipsis and its last n-1 when it is longer (the end of a log
// says most). n below 1 keeps nothing.
func Tail(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	return Ellipsis + string(r[len(r)-(n-1):])
}

// Line folds s's whitespace (newlines included) to single spaces and keeps it to n characters (Head).
func Line(s string, n int) string { return Head(strings.Join(strings.Fields(s), " "), n) }
