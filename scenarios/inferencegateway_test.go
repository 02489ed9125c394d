package scenarios

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"gpuconform.io/gpuconform/internal/workload/serve"
)

func cond(typ, status, reason string) any {
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": reason + " says so", "lastTransitionTime": "2026-12-07T15:00:00Z"}
}

// apiDefault is a condition as the Gateway API's CRD defaults a new Gateway's status to.
func apiDefault(typ string) any {
	return map[string]any{"type": typ, "status": "Unknown", "reason": "Pending", "message": "Waiting for controller", "lastTransitionTime": "1970-01-01T00:00:00Z"}
}

func gatewayWith(conds []any, addr string) *unstructured.Unstructured {
	status := map[string]any{"conditions": conds,
		"listeners": []any{map[string]any{"name": "http", "conditions": []any{cond("Accepted", "True", "Accepted")}}}}
	if addr != "" {
		status["addresses"] = []any{map[string]any{"type": "Hostname", "value": addr}}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetName("inference")
	u.SetCreationTimestamp(metav1.NewTime(created))
	return u
}

func routeWith(parent string, conds ...any) *unstructured.Unstructured {
	var parents []any
	if parent != "" {
		parents = []any{map[string]any{"parentRef": map[string]any{"name": parent}, "controllerName": "traefik.io/gateway-controller", "conditions": conds}}
	}
	return &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"parents": parents}}}
}

// created is when every test Gateway was created.
var created = time.Date(2026, 12, 7, 15, 0, 0, 0, time.UTC)

func TestReadGateway(t *testing.T) {
	programmed := []any{cond("Accepted", "True", "Accepted"), cond("Programmed", "True", "Programmed")}
	accepted := []any{cond("Accepted", "True", "Accepted"), cond("ResolvedRefs", "True", "ResolvedRefs")}
	for _, c := range []struct {
		name              string
		gw, route         *unstructured.Unstructured
		ready, final      bool
		addr, whyContains string
	}{
		{name: "ready", gw: gatewayWith(programmed, "gw.example"), route: routeWith("inference", accepted...), ready: true, addr: "gw.example"},
		{name: "pending, written by its controller", gw: gatewayWith([]any{cond("Accepted", "Unknown", "Pending"), cond("Programmed", "Unknown", "Pending")}, ""),
			route: routeWith(""), whyContains: "not programmed"},
		{name: "new Gateway: the API's defaults", gw: gatewayWith([]any{apiDefault("Accepted"), apiDefault("Programmed")}, ""),
			route: routeWith(""), whyContains: "no controller has written the Gateway's status in 10s"},
		{name: "Gateway refused", gw: gatewayWith([]any{cond("Accepted", "False", "InvalidParameters")}, ""), route: routeWith(""), final: true, whyContains: "InvalidParameters"},
		{name: "Gateway invalid", gw: gatewayWith([]any{cond("Accepted", "True", "Accepted"), cond("Programmed", "False", "Invalid")}, ""), route: routeWith(""), final: true, whyContains: "http: Accepted=True"},
		{name: "address coming", gw: gatewayWith([]any{cond("Accepted", "True", "Accepted"), cond("Programmed", "False", "AddressNotAssigned")}, ""), route: routeWith(""), whyContains: "AddressNotAssigned"},
		{name: "programmed, no address", gw: gatewayWith(programmed, ""), route: routeWith(""), whyContains: "no address"},
		{name: "route not yet seen", gw: gatewayWith(programmed, "10.96.0.80"), route: routeWith(""), addr: "10.96.0.80", whyContains: "no controller has written"},
		{name: "route of another parent only", gw: gatewayWith(programmed, "10.96.0.80"), route: routeWith("other", accepted...), addr: "10.96.0.80", whyContains: "no controller has written"},
		{name: "route refused", gw: gatewayWith(programmed, "a"), route: routeWith("inference", cond("Accepted", "False", "NotAllowedByListeners")), addr: "a", final: true, whyContains: "NotAllowedByListeners"},
		{name: "route pending", gw: gatewayWith(programmed, "a"), route: routeWith("inference", cond("Accepted", "False", "Pending")), addr: "a", whyContains: "Pending"},
		{name: "backend kind refused", gw: gatewayWith(programmed, "a"), route: routeWith("inference", cond("Accepted", "True", "Accepted"), cond("ResolvedRefs", "False", "InvalidKind")), addr: "a", final: true, whyContains: "InvalidKind"},
		{name: "backend not found yet", gw: gatewayWith(programmed, "a"), route: routeWith("inference", cond("Accepted", "True", "Accepted"), cond("ResolvedRefs", "False", "BackendNotFound")), addr: "a", whyContains: "BackendNotFound"},
	} {
		got := readGateway(c.gw, c.route, created.Add(10*time.Second))
		if got.Ready != c.ready || got.Final != c.final || got.Address != c.addr || !strings.Contains(got.Why, c.whyContains) {
			t.Errorf("%s: %+v, want ready %v final %v address %q and a reason with %q", c.name, got, c.ready, c.final, c.addr, c.whyContains)
		}
	}
}

// A Gateway no controller has read for untouchedGrace ends the wait: its controller is not running.
func TestReadGatewayGivesUpOnAnUntouchedGateway(t *testing.T) {
	gw := gatewayWith([]any{apiDefault("Accepted"), apiDefault("Programmed")}, "")
	if got := readGateway(gw, routeWith(""), created.Add(untouchedGrace-time.Second)); got.Final {
		t.Errorf("final %s after the create: %+v", untouchedGrace-time.Second, got)
	}
	if got := readGateway(gw, routeWith(""), created.Add(untouchedGrace)); !got.Final || !strings.Contains(got.Why, "controller is not running") {
		t.Errorf("after %s: %+v, want final: no controller has read it", untouchedGrace, got)
	}
	// One condition its controller wrote: touched, whatever the others say.
	touched := gatewayWith([]any{cond("Accepted", "True", "Accepted"), apiDefault("Programmed")}, "")
	if got := readGateway(touched, routeWith(""), created.Add(time.Hour)); got.Final || strings.Contains(got.Why, "no controller") {
		t.Errorf("a Gateway its controller accepted: %+v", got)
	}
}

func TestSplitProblems(t *testing.T) {
	tally := func(plain, header map[string]int, failed int) serve.Tally {
		return serve.Tally{Event: serve.TallyEvent, Plain: plain, WithHeader: header, Failed: failed}
	}
	allB := map[string]int{"b": 200}
	for _, c := range []struct {
		name  string
		t     serve.Tally
		wrong []string // what the error must name; none: no error
	}{
		{name: "weighted round robin", t: tally(map[string]int{"a": 150, "b": 50}, allB, 0)},
		{name: "random by weight, 4 deviations off", t: tally(map[string]int{"a": 175, "b": 25}, allB, 0)},
		{name: "weights ignored", t: tally(map[string]int{"a": 100, "b": 100}, allB, 0), wrong: []string{"split map[a:100 b:100]"}},
		{name: "one backend only", t: tally(map[string]int{"a": 200}, allB, 0), wrong: []string{"split map[a:200]"}},
		{name: "header ignored", t: tally(map[string]int{"a": 150, "b": 50}, map[string]int{"a": 150, "b": 50}, 0), wrong: []string{"X-Gateway-Model-Name"}},
		{name: "no header answer", t: tally(map[string]int{"a": 150, "b": 50}, map[string]int{}, 0), wrong: []string{"X-Gateway-Model-Name"}},
		{name: "a stranger answered", t: tally(map[string]int{"a": 150, "b": 49, "c": 1}, allB, 0), wrong: []string{"answered by c"}},
		{name: "a few failed", t: tally(map[string]int{"a": 149, "b": 50}, map[string]int{"b": 197}, 4)},
		{name: "many failed", t: tally(map[string]int{"a": 140, "b": 50}, map[string]int{"b": 190}, 20), wrong: []string{"20 request(s) failed"}},
		{name: "never answered", t: serve.Tally{Event: serve.NotReadyEvent, FirstError: "connection refused"}, wrong: []string{"connection refused"}},
	} {
		err := splitProblems(c.t, "a", "b")
		switch {
		case len(c.wrong) == 0 && err != nil:
			t.Errorf("%s: %v, want no problem", c.name, err)
		case len(c.wrong) > 0 && err == nil:
			t.Errorf("%s: no problem found, want %v", c.name, c.wrong)
		}
		for _, w := range c.wrong {
			if err != nil && !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to name %q", c.name, err, w)
			}
		}
	}
}

func TestAnEvenSplitIsFarOutsideTheTolerance(t *testing.T) {
	p := float64(weightFirst) / float64(weightFirst+weightOther)
	if tol := splitTolerance(askRequests, p); float64(askRequests)*(p-0.5) <= 2*tol {
		t.Errorf("an even split of %d requests is %.0f from the weighted one, within twice the tolerance %.0f: the check could not tell them apart",
			askRequests, float64(askRequests)*(p-0.5), tol)
	}
}
