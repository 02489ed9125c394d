// Package termlog writes a Kubernetes termination message.
//
// The kubelet reads at most 4096 bytes from a container's termination-message file and silently drops
// the rest, so a message that is cut by the kubelet is a JSON document the suite can no longer parse.
// This package keeps every message under the limit itself and lets the caller supply a smaller
// fallback document, so what the suite reads back is always whole JSON when it can be.
package termlog

import (
	"errors"
	"io/fs"
	"os"
	"unicode/utf8"
)

// DefaultPath is where Kubernetes mounts the termination-message file unless the pod spec overrides
// terminationMessagePath.
const DefaultPath = "/dev/termination-log"

// MaxBytes is the largest message this package writes. The kubelet's limit is 4096 bytes; staying a
// little under it leaves room for a trailing newline and avoids depending on the exact boundary.
const MaxBytes = 4000

// Write stores msg in the termination-message file at path, then fallbacks in order if msg is too
// large: the first candidate that fits under MaxBytes is written. If none fits, the last candidate is
// cut at a UTF-8 boundary so the file never holds a half-written character.
//
// The file is only written when it already exists: outside Kubernetes (a developer machine, a unit
// test) there is no termination log, and creating one under /dev as root would litter the host.
// A missing or read-only file is therefore not an error; it returns (false, nil).
func Write(path string, msg []byte, fallbacks ...[]byte) (bool, error) {
	if path == "" {
		return false, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return false, nil
		}
		return false, err
	}
	payload := Fit(msg, fallbacks...)
	if _, err := f.Write(payload); err != nil {
		_ = f.Close()
		return false, err
	}
	return true, f.Close()
}

// Fit returns the first of msg and fallbacks that is at most MaxBytes long, or, when none is, the last
// candidate truncated to MaxBytes at a UTF-8 character boundary.
func Fit(msg []byte, fallbacks ...[]byte) []byte {
	candidates := append([][]byte{msg}, fallbacks...)
	for _, c := range candidates {
		if len(c) <= MaxBytes {
			return c
		}
	}
	return truncateUTF8(candidates[len(candidates)-1], MaxBytes)
}

// truncateUTF8 cuts b to at most limit bytes without splitting a multi-byte character.
func truncateUTF8(b []byte, limit int) []byte {
	if len(b) <= limit {
		return b
	}
	cut := limit
	// Step back over continuation bytes until the cut starts a new character.
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return b[:cut]
}
