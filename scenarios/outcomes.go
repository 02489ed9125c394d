package scenarios

import (
	"context"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"gpuconform.io/gpuconform/framework/monitoring"
	"gpuconform.io/gpuconform/framework/testenv"
)

// How a spec ends without a finding, and what more than one scenario reads of the cluster's platform
// (no scenario calls another scenario's functions: shared pieces live here or below scenarios).

// notApplicable ends a spec whose requirement the cluster evidently does not offer (reports' prefix).
func notApplicable(why string) { ginkgo.Skip("not applicable: " + why) }

// mayRead ends a spec the suite's credentials may not read for: it cannot tell, which is not the
// cluster's failure (the shipped roles in fixtures/rbac grant it).
func mayRead(err error, permission string) {
	if apierrors.IsForbidden(err) {
		ginkgo.Skip("not exercised: the suite may not " + permission + " (" + err.Error() + "); the shipped roles in fixtures/rbac grant it")
	}
}

// notExercisedYet ends a spec where the cluster offers the thing and gpuconform does not drive it.
func notExercisedYet(found, missing string) {
	ginkgo.AddReportEntry("evidence: found", found)
	ginkgo.Skip("not exercised: " + found + "; " + missing)
}

// noMetricsAPI is why pod autoscaling on custom metrics is not applicable where no metrics API is registered.
var noMetricsAPI = "no custom or external metrics API is registered (APIServices " + strings.Join(monitoring.MetricsAPINames, ", ") +
	" not found): the HPA can scale on resource metrics only"

// readMetricsAPIs are the registered metrics APIServices, as far as the suite may read them.
func readMetricsAPIs(ctx context.Context, env *testenv.Env) []monitoring.MetricsAPI {
	ginkgo.GinkgoHelper()
	apis, err := monitoring.MetricsAPIs(ctx, env.Clients.Dynamic)
	mayRead(err, "get apiregistration.k8s.io apiservices")
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the metrics APIServices")
	return apis
}

// unavailable are the lines of the APIs the aggregator cannot reach.
func unavailable(apis []monitoring.MetricsAPI) []string {
	var out []string
	for _, a := range apis {
		if !a.Available() {
			out = append(out, a.String())
		}
	}
	return out
}

// joinLines is one line per API.
func joinLines(apis []monitoring.MetricsAPI) string {
	lines := make([]string, len(apis))
	for i, a := range apis {
		lines[i] = a.String()
	}
	return strings.Join(lines, "\n")
}
