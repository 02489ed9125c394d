// Package run is the identity of one suite run: an ID that labels everything created, so cleanup,
// the leak audit and the leftover check can tell this run's objects from everyone else's.
package run

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"gpuconform.io/gpuconform/fixtures"
)

// Label is the run label key on every object the suite creates.
const Label = fixtures.RunLabel

// NewID returns a run ID: a UTC timestamp and a random suffix, valid as a label value and sortable.
func NewID(now time.Time) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%s", now.UTC().Format("20060102-150405"), hex.EncodeToString(b))
}

// Selector selects this run's objects.
func Selector(id string) string { return Label + "=" + id }
