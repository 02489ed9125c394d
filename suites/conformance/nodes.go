package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/poollock"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/runlease"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/reports"
	"gpuconform.io/gpuconform/scenarios"
)

// shared is what the first parallel process hands to every process: the run's ID, discovery and, in
// team-namespace mode, what the namespace's quota and queue left of the paths (suite.Run.TeamDecision).
type shared struct {
	RunID        string
	Capabilities cluster.Capabilities
	TeamDecision string
}

// register registers the run's Ginkgo nodes: the one-time checks, the registry's scenarios, the per-spec
// progress line and API cost, the leak audit, and the record and signoff.
func register(r *suite.Run, signoff reports.Signoff, specOut io.Writer, holds *runlease.Holds) {
	var leaks *audit.Result
	if r.Env != nil {
		// A wait that goes on says how it stands every 30 s on the run's live output (framework/wait).
		r.Env.Wait.Say = func(line string) { fmt.Fprintln(specOut, "[gpuconform] "+line) }
	}
	ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
		say := func(line string) { fmt.Fprintln(specOut, "[gpuconform] "+line) }
		stopUnless(r.Preflight(ctx, scenarios.Uses()))
		stopUnless(r.HoldLease(ctx, *holds, say))
		stopUnless(r.ClearLeftovers(ctx))
		for _, s := range r.Skipped() {
			ginkgo.AddReportEntry("not exercised: "+s.What, s.Why)
		}
		// The run ID in the Ginkgo report ties it to this run's record (`gpuconform report` checks).
		ginkgo.AddReportEntry(reports.RunIDEntry, r.RunID)
		b, err := json.Marshal(shared{RunID: r.RunID, Capabilities: r.Caps, TeamDecision: r.TeamDecision()})
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		return b
	}, func(b []byte) {
		var first shared
		gomega.Expect(json.Unmarshal(b, &first)).To(gomega.Succeed())
		// Every process built its spec tree from its own discovery: it must be the first process's.
		gomega.Expect(r.SameDiscovery(ginkgo.GinkgoParallelProcess(), first.Capabilities)).To(gomega.Succeed())
		gomega.Expect(r.SameTeamDecision(ginkgo.GinkgoParallelProcess(), first.TeamDecision)).To(gomega.Succeed())
		r.Start(first.RunID)
	})

	ginkgo.Describe("GPU scheduling", func() {
		// Every spec reports what it cost the API server (cleanup included: registered first, it runs last).
		ginkgo.BeforeEach(func() {
			before := r.Clients.Requests.Snapshot()
			ginkgo.DeferCleanup(func() {
				ginkgo.AddReportEntry(reports.APIRequestsEntry, r.Clients.Requests.Since(before), ginkgo.ReportEntryVisibilityNever)
			})
		})
		for _, s := range scenarios.Registry {
			s.Register(r)
		}
	})

	ginkgo.SynchronizedAfterSuite(func() {
		// The record counts the whole run's API requests: every process but the first, which writes the
		// record, leaves its count where the first reads it.
		if p := ginkgo.GinkgoParallelProcess(); p > 1 {
			if err := reports.WriteProcessRequests(r.Config.ArtifactsDir, p, r.Clients.Requests.Snapshot()); err != nil {
				ginkgo.GinkgoWriter.Printf("process %d could not hand its API request count to the first: %v\n", p, err)
			}
		}
	}, func(ctx context.Context) {
		_ = os.RemoveAll(poollock.Dir(r.RunID)) // every process is done with the pool locks
		res, err := r.LeakAudit(ctx)
		leaks = &res
		// Only now is what the run left a leftover for the next run: the leak audit has had its say.
		if lerr := r.ReleaseLease(ctx); lerr != nil {
			ginkgo.GinkgoWriter.Printf("releasing the run's lease (it expires by itself): %v\n", lerr)
		}
		if r.Config.KeepResources {
			ginkgo.GinkgoWriter.Printf("keep-resources: %d object(s) of this run were kept:\n%s\n", len(res.Ours), audit.Summary(res.Ours))
		}
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	})

	ginkgo.ReportAfterSuite("gpuconform record and signoff report", func(rep types.Report) {
		if dryRun() {
			return
		}
		rec := r.Record(signoff)
		rec.LeakAudit, rec.Results = leaks, reports.Results([]types.Report{rep})
		rec.APIRequests = r.Clients.Requests.Snapshot()
		if rep.SuiteConfig.ParallelTotal > 1 {
			if err := reports.AddProcessRequests(r.Config.ArtifactsDir, rec.APIRequests); err != nil {
				rec.Notes = append(rec.Notes, "the API request total counts only some processes: "+err.Error())
			}
		}
		if err := reports.WriteSignoff(r.Config.ArtifactsDir, []types.Report{rep}, rec); err != nil {
			ginkgo.GinkgoWriter.Printf("writing the record and signoff: %v\n", err)
		}
	})

	// One line per spec as it finishes, whatever Ginkgo's verbosity: a long run's progress in the log of
	// make e2e, CI and the in-cluster runner.
	ginkgo.ReportAfterEach(func(sp types.SpecReport) {
		if dryRun() {
			return
		}
		if res := reports.SpecResult(sp); res != "" && res != reports.ResultFiltered {
			fmt.Fprintln(specOut, reports.SpecLine(sp))
		}
	})
}

// stopUnless stops the run's setup on err: a refusal (another live run, leftovers) skips every spec and
// says why in a report entry, so the verdict is INCOMPLETE with the fix; anything else fails the setup.
func stopUnless(err error) {
	if err == nil {
		return
	}
	ginkgo.GinkgoHelper()
	if _, ok := run.Refused(err); ok {
		ginkgo.AddReportEntry(reports.RefusedEntry, err.Error())
		ginkgo.Skip(err.Error())
	}
	ginkgo.Fail(err.Error())
}

// dryRun reports whether Ginkgo only walks the tree (PreviewSpecs): the report nodes then write nothing.
func dryRun() bool {
	cfg, _ := ginkgo.GinkgoConfiguration()
	return cfg.DryRun
}
