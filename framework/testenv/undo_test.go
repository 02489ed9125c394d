package testenv

import (
	"context"
	"errors"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// undoCalls counts how often each spec's undo ran, in the spec and in its cleanup.
var undoCalls = map[string]int{}

var _ = ginkgo.Describe("DeferUndo", ginkgo.Ordered, func() {
	count := func(name string, err error) func(context.Context) error {
		return func(context.Context) error { undoCalls[name]++; return err }
	}
	ginkgo.It("undoes in cleanup what the spec left", func() {
		DeferUndo(count("left", nil))
	})
	ginkgo.It("does not undo again what the spec undid with Now", func(ctx context.Context) {
		u := DeferUndo(count("now", nil))
		gomega.Expect(u.Now(ctx)).To(gomega.Succeed())
	})
	ginkgo.It("does not undo what the spec says it undid with Done", func() {
		DeferUndo(count("done", nil)).Done()
	})
	ginkgo.It("tries again in cleanup after a failed Now", func(ctx context.Context) {
		failing := errors.New("still cordoned")
		calls := 0
		u := DeferUndo(func(context.Context) error {
			calls++
			undoCalls["retried"]++
			if calls == 1 {
				return failing
			}
			return nil
		})
		gomega.Expect(u.Now(ctx)).To(gomega.MatchError(failing))
	})
	ginkgo.It("ran each undo as often as it should", func() {
		gomega.Expect(undoCalls).To(gomega.Equal(map[string]int{"left": 1, "now": 1, "retried": 2}))
	})
})

func TestDeferUndo(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "testenv")
}
