package serve

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestServedRequestsAreCountedOnMetricsWithTheNonce(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Options{Port: 18931, Nonce: "n0nce", Interval: 20 * time.Millisecond}, &out) }()
	var count float64
	deadline := time.Now().Add(10 * time.Second)
	for count < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		resp, err := http.Get("http://127.0.0.1:18931/metrics")
		if err != nil {
			continue
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
		if err != nil {
			t.Fatalf("metrics are not the text format: %v\n%s", err, raw)
		}
		f, ok := families[RequestsTotal]
		if !ok {
			continue
		}
		m := f.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels[NonceLabel] != "n0nce" || labels["model"] != Model || labels["code"] != "200" {
			t.Fatalf("labels %v, want the nonce, model and code 200", labels)
		}
		count = m.GetCounter().GetValue()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if count < 3 {
		t.Fatalf("%s stayed at %g after 10s of self-requests every 20ms", RequestsTotal, count)
	}
	if !strings.Contains(out.String(), `"event":"listening"`) {
		t.Fatalf("no listening event: %s", out.String())
	}
}

func TestOptionsAreRequired(t *testing.T) {
	if err := Run(t.Context(), Options{Port: 1, Interval: time.Second}, io.Discard); err == nil {
		t.Fatal("no nonce accepted")
	}
}
