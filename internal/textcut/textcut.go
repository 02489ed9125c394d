// Package textcut shortens text for one-line messages and table cells: by characters (runes), never
// splitting one, with an ellipsis that says something was cut.
package textcut

import (
	"regexp"
	"strings"
)

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

// gomegaPreamble is the line Gomega puts before an async assertion's own message ("Timed out after
// 91.000s.", "Told to stop trying after 12.004s.").
var gomegaPreamble = regexp.MustCompile(`^[A-Z][^.]* after [0-9.]+s\.$`)

// FirstLine is the first line of a failure message that says something: blank lines and Gomega's
// preamble are skipped, and a line ending in a colon introduces a list ("could not delete 1
// leftover(s):"), so the list's first item joins it: the heading alone says nothing. "" when nothing is
// said.
func FirstLine(msg string) string {
	said := ""
	for line := range strings.SplitSeq(msg, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || (said == "" && gomegaPreamble.MatchString(line)) {
			continue
		}
		if said != "" {
			return said + " " + line
		}
		said = line
		if !strings.HasSuffix(line, ":") {
			return said
		}
	}
	return said
}
