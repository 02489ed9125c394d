package testenv

import (
	"context"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"gpuconform.io/gpuconform/framework/run"
)

// Undo is a change a spec made to the cluster (a stopped node, an unhealthy device, a cordon, an
// upgrade) and the way back. DeferUndo registers it for cleanup; the spec undoes it itself with Now, or
// says it has with Done, and the cleanup then does nothing. A failed spec's cleanup undoes it, so the
// cluster is left as it was found.
type Undo struct {
	undo func(context.Context) error
	done bool
}

// DeferUndo registers undo to run in cleanup unless the spec has undone the change by then; call it right
// after the change succeeded.
func DeferUndo(undo func(context.Context) error) *Undo { return deferUndo(undo, func() {}) }

// deferUndo is DeferUndo, calling undone after the cleanup's successful undo.
func deferUndo(undo func(context.Context) error, undone func()) *Undo {
	u := &Undo{undo: undo}
	ginkgo.DeferCleanup(func(ctx context.Context) {
		if !u.done {
			gomega.Expect(u.undo(ctx)).To(gomega.Succeed(), "undoing a change the spec made")
			undone()
		}
	})
	return u
}

// DeferRestore is DeferUndo for a change a person wants to hear was put back when the spec did not undo
// it itself (it failed, or the run was interrupted): after the cleanup's undo it adds what
// (run.RestoredEntry), which an interrupted run's verdict lists.
func DeferRestore(what string, undo func(context.Context) error) *Undo {
	return deferUndo(undo, func() { ginkgo.AddReportEntry(run.RestoredEntry, what) })
}

// Now undoes the change in the spec. Only a successful undo is final: after a failed one the cleanup tries
// again.
func (u *Undo) Now(ctx context.Context) error {
	if err := u.undo(ctx); err != nil {
		return err
	}
	u.done = true
	return nil
}

// Done says the spec undid the change in its own way: the cleanup must not.
func (u *Undo) Done() { u.done = true }
