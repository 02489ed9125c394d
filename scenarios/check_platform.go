package scenarios

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/testenv"
	"gpuconform.io/gpuconform/internal/objcond"
)

// gatewayClass is a GatewayClass as the check reads it.
type gatewayClass struct {
	Name, Controller, Accepted string
}

func (c gatewayClass) String() string {
	return fmt.Sprintf("%s (controller %s, Accepted=%s)", c.Name, c.Controller, c.Accepted)
}

// noClusterAutoscaler is why cluster autoscaling is not applicable where autoscalers finds none.
const noClusterAutoscaler = "no cluster autoscaler: no ConfigMap kube-system/cluster-autoscaler-status, no karpenter.sh API served"

// autoscalers are what a node autoscaler leaves on a cluster it runs on: cluster-autoscaler writes its
// status to a ConfigMap in kube-system (whose cluster-wide health must be Healthy); Karpenter serves its
// karpenter.sh API.
func autoscalers(ctx context.Context, env *testenv.Env) []string {
	ginkgo.GinkgoHelper()
	var found []string
	cm, err := env.Clients.Kube.CoreV1().ConfigMaps("kube-system").Get(ctx, "cluster-autoscaler-status", metav1.GetOptions{})
	switch {
	case err == nil:
		health := autoscalerHealth(cm.Data["status"])
		found = append(found, "ConfigMap kube-system/cluster-autoscaler-status (cluster-autoscaler's status, cluster-wide health "+health+")")
		ginkgo.AddReportEntry("evidence: cluster-autoscaler status", cm.Data["status"])
		gomega.Expect(health).To(gomega.Equal("Healthy"), "cluster-autoscaler's status (ConfigMap kube-system/cluster-autoscaler-status) gives its cluster-wide health as %s: it cannot scale node groups", health)
	case !apierrors.IsNotFound(err):
		mayRead(err, "get configmaps kube-system/cluster-autoscaler-status")
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading ConfigMap kube-system/cluster-autoscaler-status")
	}
	if g, ok := servedGroup(env, "karpenter.sh"); ok {
		found = append(found, "the karpenter.sh API ("+g.PreferredVersion.GroupVersion+")")
	}
	return found
}

// servedGroup is the API group the cluster serves under name, if it does.
func servedGroup(env *testenv.Env, name string) (metav1.APIGroup, bool) {
	groups, err := env.Clients.Kube.Discovery().ServerGroups()
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the API groups the cluster serves")
	i := slices.IndexFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == name })
	if i < 0 {
		return metav1.APIGroup{}, false
	}
	return groups.Groups[i], true
}

const gatewayGroup = fixtures.GatewayGroup

// noGatewayAPI is why inference traffic through a gateway is not applicable where the Gateway API is not served.
const noGatewayAPI = "the Gateway API is not installed (" + gatewayGroup + " is not served)"

// listGatewayClasses reads every GatewayClass through gcs.
func listGatewayClasses(ctx context.Context, gcs dynamic.ResourceInterface) []gatewayClass {
	ginkgo.GinkgoHelper()
	list, err := gcs.List(ctx, metav1.ListOptions{})
	mayRead(err, "list gateway.networking.k8s.io gatewayclasses")
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "listing GatewayClasses")
	classes := make([]gatewayClass, 0, len(list.Items))
	for _, gc := range list.Items {
		controller, _, _ := unstructured.NestedString(gc.Object, "spec", "controllerName")
		accepted, _, _ := objcond.Status(objcond.Of(gc.Object, "status", "conditions"), string(gatewayv1.GatewayClassConditionStatusAccepted))
		classes = append(classes, gatewayClass{Name: gc.GetName(), Controller: controller, Accepted: accepted})
	}
	return classes
}

// semverOf makes a driver version a semantic version as DRA version attributes carry it: three numeric
// parts without leading zeros (560.35.03 → 560.35.3, 560.35 → 560.35.0); "" when it is not numeric.
func semverOf(v string) string {
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return ""
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return ""
		}
		parts[i] = strconv.Itoa(n)
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	return strings.Join(parts, ".")
}

// autoscalerHealth is the cluster-wide health in cluster-autoscaler's status ("unreadable" when the
// status has none).
func autoscalerHealth(status string) string {
	if m := autoscalerHealthRE.FindStringSubmatch(status); m != nil {
		return m[1]
	}
	return "unreadable"
}

// autoscalerHealthRE finds the cluster-wide health in cluster-autoscaler's status, in both of the forms it
// has written: YAML ("clusterWide:" … "health:" … "status: Healthy") and the older text ("Cluster-wide:" …
// "Health:      Healthy (ready=…").
var autoscalerHealthRE = regexp.MustCompile(`(?s)(?:clusterWide|Cluster-wide):.*?(?i:health):\s*(?:status:\s*)?(\w+)`)
