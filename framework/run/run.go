// Package run is the identity of one suite run: an ID that labels everything created, so cleanup,
// the leak audit and the leftover check can tell this run's objects from everyone else's.
package run

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
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

// Refusal is why a run would not start (or stopped early) for a reason that is not a finding about the
// cluster's GPU scheduling: another live run holds what it needs, an earlier run's leftovers, the run's
// own namespace settings. Its verdict is INCOMPLETE with Fix, never NO-GO: nothing was tested and found
// broken.
type Refusal struct {
	// Why says what stopped the run; Fix what the user does about it.
	Why, Fix string
}

func (r *Refusal) Error() string {
	if r.Fix == "" {
		return r.Why
	}
	return r.Why + "; " + r.Fix
}

// Refused returns the Refusal in err's chain, if any.
func Refused(err error) (*Refusal, bool) {
	var r *Refusal
	ok := errors.As(err, &r)
	return r, ok
}

// Report entries through which a run tells its verdict what is not a finding (reports reads them).
const (
	// RefusedEntry carries why the run's setup would not start (a Refusal), before it skips every spec.
	RefusedEntry = "gpuconform refused to start"
	// RestoredEntry carries what a spec's cleanup put back that the spec had not undone itself (the
	// canary's driver rolled back, its nodes uncordoned): an interrupted run's verdict lists them.
	RestoredEntry = "restored"
)

// StandInPrefix starts the name of a report entry through which a passed spec says that one of its checks
// could not do the real thing ("stand-in: device test"), its value a StandIn. On fake GPUs the signoff
// counts them; on a cluster whose GPUs are real each makes the run INCOMPLETE, naming the fix.
const StandInPrefix = "stand-in: "

// StandIn is what a check did instead of the real thing, and what makes it real.
type StandIn struct {
	// Did is what ran instead ("stand-in (no CUDA driver in the container): checked the device nodes …").
	Did string `json:"did"`
	// Fix is the flag or change that makes the check real.
	Fix string `json:"fix"`
}

func (s StandIn) String() string { return s.Did + "; to make it real: " + s.Fix }
