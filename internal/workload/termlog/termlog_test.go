package termlog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestWriteSkipsMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "termination-log")
	written, err := Write(path, []byte(`{"a":1}`))
	if err != nil || written {
		t.Fatalf("Write to a missing file = (%v, %v), want (false, nil)", written, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("Write created %s; it must only write a file Kubernetes already mounted", path)
	}
}

func TestWriteReplacesContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(path, []byte("old content that is longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	written, err := Write(path, []byte(`{"a":1}`))
	if err != nil || !written {
		t.Fatalf("Write = (%v, %v), want (true, nil)", written, err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != `{"a":1}` {
		t.Fatalf("file holds %q, want the new message only", got)
	}
}

func TestFitPrefersFirstCandidateThatFits(t *testing.T) {
	big := bytes.Repeat([]byte("x"), MaxBytes+1)
	small := []byte(`{"truncated":true}`)
	if got := Fit(big, small); !bytes.Equal(got, small) {
		t.Fatalf("Fit chose %d bytes, want the fallback", len(got))
	}
	if got := Fit(small, big); !bytes.Equal(got, small) {
		t.Fatalf("Fit did not keep a message that already fits")
	}
}

func TestFitTruncatesAtRuneBoundary(t *testing.T) {
	// "é" is two bytes; an odd limit position must not leave half of one behind.
	msg := []byte("a" + strings.Repeat("é", MaxBytes))
	got := Fit(msg)
	if len(got) > MaxBytes {
		t.Fatalf("Fit returned %d bytes, limit %d", len(got), MaxBytes)
	}
	if !utf8.Valid(got) {
		t.Fatalf("Fit split a UTF-8 character")
	}
}
