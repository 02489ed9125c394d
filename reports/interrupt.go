package reports

import (
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/run"
)

// RefusedEntry and RestoredEntry name the report entries a run's setup and cleanup write for the
// verdict (run.RefusedEntry, run.RestoredEntry): a refusal is INCOMPLETE with its fix, and an interrupted
// run lists what its cleanup restored.
const (
	RefusedEntry  = run.RefusedEntry
	RestoredEntry = run.RestoredEntry
)

// Ginkgo's words for why a suite did not succeed that are not findings (internal/suite.go,
// interrupt_handler.InterruptCause.String): an interruption and a skipped setup.
const (
	ginkgoInterruptedBySignal  = "Interrupted by User"
	ginkgoInterruptedByProcess = "Interrupted by Other Ginkgo Process"
	ginkgoSuiteTimeout         = "Suite Timeout Elapsed"
	ginkgoSkippedInBeforeSuite = "Suite skipped in BeforeSuite"
	// ginkgoSuiteTimeoutFailure is the failure message of the node that was running when the suite's
	// timeout elapsed (its state is "timedout", as a spec's own timeout's is, with other words).
	ginkgoSuiteTimeoutFailure = "A suite timeout occurred"
)

// refusals are the reasons the run's setup gave for not starting (RefusedEntry).
func refusals(suites []types.Report) []string {
	var out []string
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			for _, e := range sp.ReportEntries {
				if e.Name == RefusedEntry {
					out = append(out, strings.Trim(e.StringRepresentation(), `"`))
				}
			}
		}
	}
	return out
}

// explained reports whether every one of Ginkgo's reasons for an unsuccessful suite is an interruption
// or, when the run refused to start, the skip that followed: the verdict says those in its own words.
func explained(reasons []string, refused bool) bool {
	return !slices.ContainsFunc(reasons, func(r string) bool {
		switch r {
		case ginkgoInterruptedBySignal, ginkgoInterruptedByProcess, ginkgoSuiteTimeout:
			return false
		case ginkgoSkippedInBeforeSuite:
			return !refused
		}
		return true
	})
}

// interruption is how a run was cut short: by a signal, by its own timeout, or because another of its
// processes aborted; the zero value is a run that was not.
type interruption struct {
	cause string
	// interrupted are the specs (and setup or cleanup nodes) the interruption ended; notRun the specs it
	// kept from starting; restored what the interrupted specs' cleanup said it put back.
	interrupted, notRun []string
	restored            []string
}

// interruptionOf reads the suites' Ginkgo reasons and the specs the interruption ended.
func interruptionOf(suites []types.Report) interruption {
	var in interruption
	for _, s := range suites {
		switch {
		case slices.Contains(s.SpecialSuiteFailureReasons, ginkgoInterruptedBySignal):
			in.cause = "a signal (SIGINT or SIGTERM)"
		case slices.Contains(s.SpecialSuiteFailureReasons, ginkgoSuiteTimeout) && in.cause == "":
			in.cause = "the run's own timeout (--timeout)"
		case slices.Contains(s.SpecialSuiteFailureReasons, ginkgoInterruptedByProcess) && in.cause == "":
			in.cause = "another of its processes, which aborted the suite"
		}
	}
	if in.cause == "" {
		return in
	}
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			switch {
			case in.cut(sp):
				in.interrupted = append(in.interrupted, cmpText(sp))
			case sp.LeafNodeType == types.NodeTypeIt && sp.State == types.SpecStateSkipped && sp.Failure.Message != "":
				in.notRun = append(in.notRun, sp.FullText())
			}
			for _, e := range sp.ReportEntries {
				if e.Name == RestoredEntry {
					in.restored = append(in.restored, strings.Trim(e.StringRepresentation(), `"`))
				}
			}
		}
	}
	return in
}

// cut reports whether sp ended because of the run's interruption.
func (in interruption) cut(sp types.SpecReport) bool { return in.cause != "" && cutByInterruption(sp) }

// cutByInterruption reports whether sp ended because the run was interrupted: Ginkgo's interrupted
// state, or a timeout by the suite's own deadline (not the spec's).
func cutByInterruption(sp types.SpecReport) bool {
	return sp.State == types.SpecStateInterrupted ||
		(sp.State == types.SpecStateTimedout && strings.HasPrefix(sp.Failure.Message, ginkgoSuiteTimeoutFailure))
}

// reason is the verdict's line: what cut the run, what it ended, and what its cleanup put back.
func (in interruption) reason(rec Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "interrupted by %s: %d spec(s) or step(s) cut short", in.cause, len(in.interrupted))
	if len(in.interrupted) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(in.interrupted, "; "))
	}
	if len(in.notRun) > 0 {
		fmt.Fprintf(&b, ", %d not run", len(in.notRun))
	}
	if len(in.restored) > 0 {
		fmt.Fprintf(&b, "; its cleanup restored: %s", strings.Join(in.restored, "; "))
	}
	switch {
	case rec.LeakAudit == nil:
		b.WriteString("; the leak audit did not run: check the cluster (gpuconform cleanup restores what a run left)")
	case rec.LeakAudit.Clean():
		b.WriteString("; the leak audit found nothing of the run left")
	}
	b.WriteString(". Nothing was found broken by the cut; run again for a verdict")
	return b.String()
}

// cmpText names a spec report: a leaf spec's full text, or the node type of a setup or cleanup node.
func cmpText(sp types.SpecReport) string {
	if sp.LeafNodeType == types.NodeTypeIt {
		return sp.FullText()
	}
	return sp.LeafNodeType.String()
}
