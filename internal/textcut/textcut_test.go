package textcut

import "testing"

func TestCuts(t *testing.T) {
	cases := []struct{ got, want string }{
		{Head("short", 10), "short"},
		{Head("exactly10!", 10), "exactly10!"},
		{Head("0123456789ab", 10), "012345678…"},
		{Head("GPU Größe über alles", 8), "GPU Grö…"}, // never splits a character
		{Head("words and  spaces", 11), "words and…"},
		{Head("anything", 0), ""},
		{Tail("0123456789ab", 5), "…89ab"},
		{Tail("äöü", 3), "äöü"},
		{Tail("äöüß", 3), "…üß"},
		{Line("two\n  lines\tand tabs", 100), "two lines and tabs"},
		{Line("a\nb c d e f", 6), "a b c…"},
	}
	for i, c := range cases {
		if c.got != c.want {
			t.Errorf("case %d: %q, want %q", i, c.got, c.want)
		}
	}
}

// A failure's first words skip Gomega's preamble, and a list's heading takes its first item along (CI of
// 9b18aae printed "could not delete 1 leftover(s):" and nothing of what).
func TestFirstLine(t *testing.T) {
	for msg, want := range map[string]string{
		"could not delete 1 leftover(s):\n  - NodeFault w1 (run r): stop-node: node w1 was stopped\n  - Namespace x": "could not delete 1 leftover(s): - NodeFault w1 (run r): stop-node: node w1 was stopped",
		"Timed out after 91.000s.\ntimed out waiting for pod x\n\nDiagnosis:":                                        "timed out waiting for pod x",
		"not applicable: no autoscaler": "not applicable: no autoscaler",
		"heading only:\n\n":             "heading only:",
		"\n\n":                          "",
	} {
		if got := FirstLine(msg); got != want {
			t.Errorf("FirstLine(%q) = %q, want %q", msg, got, want)
		}
	}
}
