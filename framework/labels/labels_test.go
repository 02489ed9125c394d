package labels

import (
	"slices"
	"testing"
)

func TestScenarioLabelsJoinTheSetWhenDeclared(t *testing.T) {
	if Validate("scenario:labels-test") == nil {
		t.Fatal("an undeclared scenario label validated")
	}
	if got := DeclareScenario("labels-test"); got != "scenario:labels-test" {
		t.Fatalf("DeclareScenario = %q", got)
	}
	if err := Validate("scenario:labels-test", Serial, PathDRA); err != nil {
		t.Fatalf("declared scenario label refused: %v", err)
	}
	if !slices.Contains(Known(), "scenario:labels-test") {
		t.Fatalf("Known() = %v lacks the declared scenario", Known())
	}
	if err := Validate("scenario:labels-tset"); err == nil {
		t.Fatal("a typo of a scenario label validated")
	}
	for _, bad := range []string{"labels-test", "", "two words", "a:b"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("DeclareScenario(%q) did not panic", bad)
				}
			}()
			DeclareScenario(bad)
		}()
	}
}
