package reports

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/timeline"
)

// WriteSignoff writes a finished run's compatibility record, then renders the signoff (Markdown and
// HTML) from the suites' report, the record and the timelines the specs left in dir.
func WriteSignoff(dir string, suites []types.Report, rec Record) error {
	rec.ObservedSharing = ObservedSharing(suites)
	rec.SharingSeen = SharingObservations(suites)
	_, errRecord := rec.Write(dir)
	tls, errTimelines := timeline.ReadAll(dir)
	rec.Timelines = tls
	errMD := os.WriteFile(filepath.Join(dir, "signoff.md"), []byte(RenderMarkdown(suites, rec)), 0o644)
	errHTML := os.WriteFile(filepath.Join(dir, HTMLFile), []byte(RenderHTML(suites, rec)), 0o644)
	var errEvidence error
	if ev := ConformanceEvidence(suites, rec); ev.HasClaims() {
		errEvidence = WriteEvidence(dir, ev, rec)
	}
	return errors.Join(errRecord, errTimelines, errMD, errHTML, errEvidence)
}

// WriteSetupFailure writes the record and signoff of a run that could not reach its specs because of
// cause, so that an earlier run's report never stands in for it.
func WriteSetupFailure(dir string, rec Record, cause error) error {
	rec.GeneratedAt, rec.SetupFailure = time.Now().UTC(), cause.Error()
	_, rec.SetupRefused = run.Refused(cause)
	if _, err := rec.Write(dir); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "signoff.md"), []byte(RenderMarkdown(nil, rec)), 0o644)
}
