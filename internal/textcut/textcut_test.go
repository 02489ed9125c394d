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
