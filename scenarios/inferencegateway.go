package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/conformance"
	"gpuconform.io/gpuconform/framework/labels"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/suite"
	"gpuconform.io/gpuconform/framework/wait"
	"gpuconform.io/gpuconform/internal/objcond"
	"gpuconform.io/gpuconform/internal/workload/serve"
)

// InferenceGatewayInput is the input of InferenceGatewaySpec.
type InferenceGatewayInput struct {
	Base
	// Class is the GatewayClass to route through (config gateway.class); "": the one a controller accepted.
	Class string
}

const inferenceGatewayName = "inference-gateway"

// The route the check asks the gateway for: requests carrying modelHeader go to the second model server
// alone; the others are split 3:1 between the first and the second.
const (
	// modelHeader is the header the Gateway API Inference Extension's body-based router sets from an
	// OpenAI request's "model" field: the header an inference route matches on.
	modelHeader = "X-Gateway-Model-Name"
	// gatewayPort is the Gateway's HTTP listener port.
	gatewayPort              = 80
	weightFirst, weightOther = 3, 1
	// askRequests is how many requests each set sends: enough that a split that ignores the weights (an
	// even one) falls outside splitTolerance of the weighted one.
	askRequests = 400
	// askFailuresAllowed is the share of requests that may fail once the route answered.
	askFailuresAllowed = 0.01
)

// InferenceGateway proves the AI Conformance requirement ai_inference where the cluster has a Gateway API
// implementation: a Gateway of its class and an HTTPRoute in front of two GPU model servers must split
// requests by the route's weights and send the requests that carry the model header to the server the
// header names. Not required by the signoff.
var InferenceGateway = Define(Scenario{Name: inferenceGatewayName, Title: "a Gateway API implementation splits inference traffic by weight and routes it by header to GPU model servers",
	Proves: []conformance.Proof{{Requirement: conformance.AIInference,
		How: fmt.Sprintf("two model servers holding one device each behind Services, a Gateway of the accepted GatewayClass (--gateway-class) with an HTTP listener on port %d "+
			"and an HTTPRoute: requests with %s go to the second server only, the others are split %d:%d; %d requests of each kind from a pod in the cluster "+
			"must all go where the route says (the split within %d standard deviations of its weights). The Gateway API not served is not applicable",
			gatewayPort, modelHeader, weightFirst, weightOther, askRequests, splitDeviations)}}},
	func(r *suite.Run) InferenceGatewayInput {
		return InferenceGatewayInput{Base: baseOf(r), Class: r.Config.Gateway.Class}
	},
	InferenceGatewaySpec)

// InferenceGatewaySpec registers the check on the first path with two devices on a node: the gateway is
// the cluster's, not a path's.
func InferenceGatewaySpec(input func() InferenceGatewayInput) {
	reg := input()
	regPath, nodes := reg.firstPathWith(2)
	if regPath == nil {
		reg.notExercised("inference gateway", "no node in the GPU pool has two devices on any path")
		return
	}
	describePath(input, regPath, "Inference gateway", "gateway", []any{labels.Of(labels.Scenario(inferenceGatewayName))}, func(s *Spec[InferenceGatewayInput]) {
		ginkgo.It("routes inference traffic to GPU model servers by weight and by header", proves(inferenceGatewayName, conformance.AIInference),
			takes(Takes{Devices: FewOnOneNode}), func(ctx context.Context) {
				gatewayRoutes(ctx, s, s.lease(ctx, nodes))
			})
	})
}

// gatewayRoutes runs the check: the class, the servers, the Gateway and its route, and the requests.
func gatewayRoutes(ctx context.Context, s *Spec[InferenceGatewayInput], nodes []string) {
	env := s.Env
	group, ok := servedGroup(env, gatewayGroup)
	if !ok {
		notApplicable(noGatewayAPI)
	}
	version := group.PreferredVersion.Version
	class := chooseGatewayClass(ctx, s, version)

	began := time.Now()
	gw := env.Create(ctx, env.Factory.Gateway("inference", s.NS, version, class.Name, gatewayPort))
	var servers []string
	for _, name := range []string{"model-a", "model-b"} {
		w := env.Factory.ModelServer(name, s.NS, serve.NewNonce(), serve.Port).Path(s.Path).Devices(1).RestartAlways().OnNodes(nodes...)
		pod := w.Obj()
		for _, pre := range w.Prerequisites() {
			env.Create(ctx, pre)
		}
		env.Create(ctx, pod)
		env.Create(ctx, env.Factory.ServiceFor(pod, serve.Port))
		servers = append(servers, pod.Name)
	}
	first, other := servers[0], servers[1]
	route := env.Create(ctx, env.Factory.InferenceRoute("inference", s.NS, version, gw.GetName(), "/v1/",
		fixtures.HeaderRoute{Header: modelHeader, Value: other, To: fixtures.Backend{Service: other, Port: serve.Port, Weight: 1}},
		fixtures.Backend{Service: first, Port: serve.Port, Weight: weightFirst}, fixtures.Backend{Service: other, Port: serve.Port, Weight: weightOther}))
	for _, name := range servers {
		p := pods.ExpectPodRunning(ctx, env, s.NS, name)
		ginkgo.AddReportEntry("evidence: model server", fmt.Sprintf("pod %s/%s on %s holds 1 device on the %s path, Service %s port %d", s.NS, name, p.Spec.NodeName, s.Path.Name(), name, serve.Port))
	}

	ginkgo.By(fmt.Sprintf("waiting for %s to program Gateway %s/%s and accept HTTPRoute %s/%s", class.Controller, s.NS, gw.GetName(), s.NS, route.GetName()))
	var state gatewayState
	read := func(ctx context.Context) gatewayState {
		gwNow, err := gatewayObject(ctx, s, version, "gateways", gw.GetName())
		if err != nil {
			return gatewayState{Why: err.Error()}
		}
		routeNow, err := gatewayObject(ctx, s, version, "httproutes", route.GetName())
		if err != nil {
			return gatewayState{Why: err.Error()}
		}
		return readGateway(gwNow, routeNow, time.Now())
	}
	env.Wait.ForJudged(ctx, fmt.Sprintf("Gateway %s/%s programmed and HTTPRoute %s/%s accepted by %s", s.NS, gw.GetName(), s.NS, route.GetName(), class.Controller),
		wait.Target{Kind: "HTTPRoute", Namespace: s.NS, Name: route.GetName()}, env.Timeouts.Gateway,
		// The judge runs right after a failed check: it judges the state that check read.
		func(context.Context, wait.Target) (string, bool) { return state.Why, state.Final },
		func(g gomega.Gomega) {
			state = read(ctx)
			g.Expect(state.Ready).To(gomega.BeTrue(), state.Why)
		})
	ginkgo.AddReportEntry("evidence: gateway", fmt.Sprintf("Gateway %s/%s of class %s (controller %s) programmed at %s and its route accepted, seen %s after the Gateway's creation",
		s.NS, gw.GetName(), class.Name, class.Controller, state.Address, time.Since(began).Round(time.Second)))

	url := "http://" + net.JoinHostPort(state.Address, strconv.Itoa(gatewayPort)) + "/v1/infer"
	ginkgo.By(fmt.Sprintf("sending %d requests to %s, and %d with %s: %s", askRequests, url, askRequests, modelHeader, other))
	client := env.Factory.GPUPod("ask", s.NS).Args("ask", "--url", url, "--requests", strconv.Itoa(askRequests),
		// The Gateway is programmed and the route accepted: its data plane follows within seconds, and half
		// of JobRun leaves the requests the other half.
		"--header", modelHeader+": "+other, "--ready-within", (env.Timeouts.JobRun / 2).String()).Obj()
	env.Create(ctx, client)
	done := pods.ExpectPodFinished(ctx, env, s.NS, client.Name)
	tally := readTally(ctx, s, done)
	ginkgo.AddReportEntry("evidence: requests", tallyWords(tally))
	gomega.Expect(splitProblems(tally, first, other)).To(gomega.Succeed(), "through Gateway %s/%s (%s)", s.NS, gw.GetName(), class.Controller)
}

// readGatewayClasses lists the cluster's GatewayClasses in the group's version.
func readGatewayClasses(ctx context.Context, s *Spec[InferenceGatewayInput], version string) []gatewayClass {
	return listGatewayClasses(ctx, s.Env.Clients.Dynamic.Resource(schema.GroupVersionResource{Group: gatewayGroup, Version: version, Resource: "gatewayclasses"}))
}

// chooseGatewayClass is the GatewayClass --gateway-class names, which must be accepted; without it, the
// one accepted GatewayClass (several: not exercised until one is named).
func chooseGatewayClass(ctx context.Context, s *Spec[InferenceGatewayInput], version string) gatewayClass {
	ginkgo.GinkgoHelper()
	classes := readGatewayClasses(ctx, s, version)
	all := make([]string, len(classes))
	for i, c := range classes {
		all[i] = c.String()
	}
	ginkgo.AddReportEntry("evidence: GatewayClasses", strings.Join(all, "\n"))
	if s.In.Class != "" {
		i := slices.IndexFunc(classes, func(c gatewayClass) bool { return c.Name == s.In.Class })
		gomega.Expect(i).NotTo(gomega.BeNumerically("<", 0), "GatewayClass %q (--gateway-class) does not exist; the cluster has %v", s.In.Class, all)
		gomega.Expect(classes[i].Accepted).To(gomega.Equal("True"), "GatewayClass %s (--gateway-class) is not accepted by its controller", classes[i])
		return classes[i]
	}
	accepted := slices.DeleteFunc(classes, func(c gatewayClass) bool { return c.Accepted != "True" })
	gomega.Expect(accepted).NotTo(gomega.BeEmpty(), "the Gateway API is served but no controller accepted a GatewayClass (%d GatewayClass(es)): no implementation serves it", len(all))
	if len(accepted) > 1 {
		notExercisedYet("GatewayClasses accepted: "+strings.Join(all, "; "), "several GatewayClasses are accepted: name the one inference traffic goes through with --gateway-class")
	}
	return accepted[0]
}

// gatewayObject reads one of the check's Gateway API objects.
func gatewayObject(ctx context.Context, s *Spec[InferenceGatewayInput], version, resource, name string) (*unstructured.Unstructured, error) {
	gvr := schema.GroupVersionResource{Group: gatewayGroup, Version: version, Resource: resource}
	u, err := s.Env.Clients.Dynamic.Resource(gvr).Namespace(s.NS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", resource, s.NS, name, err)
	}
	return u, nil
}

// gatewayState is how far the implementation got with the Gateway and its route.
type gatewayState struct {
	// Ready: the Gateway is programmed with an address and the route is accepted with its references
	// resolved.
	Ready bool
	// Address is the Gateway's first address.
	Address string
	// Why is what the wait is on, or why it cannot end.
	Why string
	// Final: the implementation refused the Gateway or the route, which waiting cannot mend.
	Final bool
}

// Reasons of a False condition that say the implementation has not got to the object yet (Gateway API's
// GatewayReasonPending, RouteReasonPending) or is still resolving it, as opposed to a refusal.
var (
	gatewayPending    = []string{string(gatewayv1.GatewayReasonPending)}
	gatewayWaitReason = []string{string(gatewayv1.GatewayReasonPending), string(gatewayv1.GatewayReasonAddressNotAssigned), string(gatewayv1.GatewayReasonNoResources)}
	routePending      = []string{string(gatewayv1.RouteReasonPending)}
	// The Services exist before the route: an implementation's cache catches up.
	routeRefsWaiting = []string{string(gatewayv1.RouteReasonBackendNotFound)}
)

// apiDefaultTransition is the lastTransitionTime of the conditions the Gateway API's CRDs default a new
// Gateway's status to ("1970-01-01T00:00:00Z", "Waiting for controller"): a Gateway whose conditions all
// carry it has not been read by any controller.
var apiDefaultTransition = time.Unix(0, 0)

// untouchedGrace is how long a Gateway may keep its API defaults before the wait gives up on its
// controller: a running controller writes its Accepted condition within seconds of the create, even where
// its load balancer takes minutes.
const untouchedGrace = time.Minute

// readGateway judges, at now, the Gateway and the HTTPRoute attached to it from their status.
func readGateway(gw, route *unstructured.Unstructured, now time.Time) gatewayState {
	gwConds := objcond.Of(gw.Object, "status", "conditions")
	if untouched(gwConds) {
		age := now.Sub(gw.GetCreationTimestamp().Time)
		return gatewayState{Final: age >= untouchedGrace, Why: fmt.Sprintf("no controller has written the Gateway's status in %s: its conditions are the API's defaults "+
			"(Waiting for controller); the GatewayClass's controller is not running or does not serve this namespace", age.Round(time.Second))}
	}
	if st, reason, msg := objcond.Status(gwConds, string(gatewayv1.GatewayConditionAccepted)); st == "False" && !slices.Contains(gatewayPending, reason) {
		return gatewayState{Final: true, Why: fmt.Sprintf("the Gateway is not accepted: %s: %s; listeners: %s", reason, msg, listenerWords(gw))}
	}
	if st, reason, msg := objcond.Status(gwConds, string(gatewayv1.GatewayConditionProgrammed)); st != "True" {
		return gatewayState{Final: st == "False" && !slices.Contains(gatewayWaitReason, reason),
			Why: fmt.Sprintf("the Gateway is not programmed (Programmed=%s %s: %s); listeners: %s", st, reason, msg, listenerWords(gw))}
	}
	addrs, _, _ := unstructured.NestedSlice(gw.Object, "status", "addresses")
	var addr string
	if len(addrs) > 0 {
		first, _ := addrs[0].(map[string]any)
		addr, _, _ = unstructured.NestedString(first, "value")
	}
	if addr == "" {
		return gatewayState{Why: "the Gateway is programmed but has no address in its status"}
	}
	parents, _, _ := unstructured.NestedSlice(route.Object, "status", "parents")
	i := slices.IndexFunc(parents, func(p any) bool {
		m, _ := p.(map[string]any)
		name, _, _ := unstructured.NestedString(m, "parentRef", "name")
		return name == gw.GetName()
	})
	if i < 0 {
		return gatewayState{Address: addr, Why: "no controller has written the HTTPRoute's status for Gateway " + gw.GetName()}
	}
	parent, _ := parents[i].(map[string]any)
	conds := objcond.Of(parent, "conditions")
	if st, reason, msg := objcond.Status(conds, string(gatewayv1.RouteConditionAccepted)); st != "True" {
		return gatewayState{Address: addr, Final: st == "False" && !slices.Contains(routePending, reason),
			Why: fmt.Sprintf("the HTTPRoute is not accepted by Gateway %s (Accepted=%s %s: %s)", gw.GetName(), st, reason, msg)}
	}
	if st, reason, msg := objcond.Status(conds, string(gatewayv1.RouteConditionResolvedRefs)); st != "True" {
		return gatewayState{Address: addr, Final: st == "False" && !slices.Contains(routeRefsWaiting, reason),
			Why: fmt.Sprintf("the HTTPRoute's backends are not resolved (ResolvedRefs=%s %s: %s)", st, reason, msg)}
	}
	return gatewayState{Ready: true, Address: addr, Why: "programmed and accepted"}
}

// untouched reports whether conds are all the API's defaults (and there is one at least).
func untouched(conds []metav1.Condition) bool {
	return len(conds) > 0 && !slices.ContainsFunc(conds, func(c metav1.Condition) bool { return !c.LastTransitionTime.Time.Equal(apiDefaultTransition) })
}

// listenerWords are the Gateway's listeners' conditions, for a failure.
func listenerWords(gw *unstructured.Unstructured) string {
	listeners, _, _ := unstructured.NestedSlice(gw.Object, "status", "listeners")
	if len(listeners) == 0 {
		return "none in the status"
	}
	var out []string
	for _, l := range listeners {
		m, _ := l.(map[string]any)
		var cs []string
		for _, c := range objcond.Of(m, "conditions") {
			cs = append(cs, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
		}
		out = append(out, fmt.Sprintf("%v: %s", m["name"], strings.Join(cs, ", ")))
	}
	return strings.Join(out, "; ")
}

// readTally is the ask pod's tally: its last log line.
func readTally(ctx context.Context, s *Spec[InferenceGatewayInput], done *corev1.Pod) serve.Tally {
	ginkgo.GinkgoHelper()
	lines, err := pods.LogTail(ctx, s.Env, s.NS, done.Name, fixtures.WorkloadContainer, 1)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(lines).NotTo(gomega.BeEmpty(), "pod %s/%s (%s) printed no tally", s.NS, done.Name, done.Status.Phase)
	var t serve.Tally
	gomega.Expect(json.Unmarshal([]byte(lines[0]), &t)).To(gomega.Succeed(), "pod %s/%s's last line is not a tally: %s", s.NS, done.Name, lines[0])
	return t
}

// splitDeviations is how far, in standard deviations of a binomial split, the first server's share of
// the plain requests may lie from its weight: an implementation that picks backends at random by weight
// passes (Envoy's), as does one that rotates through them (Traefik's); one that ignores the weights
// (an even split of 400 requests is 11.5 deviations off) does not.
const splitDeviations = 5

// splitProblems says what in the tally does not match the route: the header set must all have gone to
// other, the plain set split between first and other by their weights, and few requests failed.
func splitProblems(t serve.Tally, first, other string) error {
	if t.Event != serve.TallyEvent {
		return fmt.Errorf("no request was answered through the gateway: %s", t.FirstError)
	}
	var errs []error
	plain, header := sumCounts(t.Plain), sumCounts(t.WithHeader)
	if allowed := int(askFailuresAllowed * float64(plain+header+t.Failed)); t.Failed > allowed {
		errs = append(errs, fmt.Errorf("%d request(s) failed once the route answered (at most %d may): first %s", t.Failed, allowed, t.FirstError))
	}
	if header == 0 || t.WithHeader[other] != header {
		errs = append(errs, fmt.Errorf("requests with %s: %s went to %v, want every one to %s", modelHeader, other, t.WithHeader, other))
	}
	for server := range t.Plain {
		if server != first && server != other {
			errs = append(errs, fmt.Errorf("plain requests were answered by %s, which no rule names", server))
		}
	}
	p := float64(weightFirst) / float64(weightFirst+weightOther)
	want, tol := p*float64(plain), splitTolerance(plain, p)
	if got := t.Plain[first]; plain == 0 || t.Plain[other] == 0 || math.Abs(float64(got)-want) > tol {
		errs = append(errs, fmt.Errorf("plain requests were split %v, want %s:%s %d:%d (%s about %.0f of %d, within %.0f)",
			t.Plain, first, other, weightFirst, weightOther, first, want, plain, tol))
	}
	return errors.Join(errs...)
}

// splitTolerance is splitDeviations standard deviations of a binomial count of n trials with p.
func splitTolerance(n int, p float64) float64 {
	return splitDeviations * math.Sqrt(float64(n)*p*(1-p))
}

func sumCounts(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// tallyWords says where the requests went, for the evidence.
func tallyWords(t serve.Tally) string {
	return fmt.Sprintf("%s: plain %v; with %s %v; failed %d; first answers after %s", t.URL, t.Plain, t.Header, t.WithHeader, t.Failed, t.ReadyAfter)
}
