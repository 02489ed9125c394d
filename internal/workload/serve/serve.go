// Package serve is the suite's stand-in for a model server as a monitoring system sees it: it answers
// inference requests on /v1/infer, sends itself one every interval, and exposes what it served on /metrics
// in the Prometheus text format (requests served by model and code, their latency), as vLLM, Triton and
// TGI expose theirs. Every series carries the run's nonce as the const label gpuconform_nonce, so a query
// of the cluster's monitoring finds this pod's series and no other's, whatever target labels the
// monitoring adds.
package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metric names and the nonce label the workload exposes (the suite's check queries them).
const (
	RequestsTotal = "gpuconform_inference_requests_total"
	Latency       = "gpuconform_inference_request_duration_seconds"
	NonceLabel    = "gpuconform_nonce"
	// Model is the model name the requests are labelled with.
	Model = "gpuconform-echo"
	// Port is where the workload serves /metrics and /v1/infer unless told otherwise.
	Port = 8080
)

// NewNonce is a random value for NonceLabel: a run's workload and no other carries it.
func NewNonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Options configure Run.
type Options struct {
	// Port is where /metrics and /v1/infer are served.
	Port int
	// Nonce is the value of NonceLabel on every series.
	Nonce string
	// Interval is how often the workload sends itself a request.
	Interval time.Duration
}

// Event is a JSON line Run prints: "listening" once, then one per failed self-request.
type Event struct {
	Event   string `json:"event"`
	Addr    string `json:"addr,omitempty"`
	Message string `json:"message,omitempty"`
}

// Run serves until ctx ends.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if o.Nonce == "" || o.Port <= 0 || o.Interval <= 0 {
		return errors.New("serve needs a nonce, a port and a positive interval")
	}
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{NonceLabel: o.Nonce}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: RequestsTotal, Help: "Inference requests served, by model and HTTP status code.", ConstLabels: labels}, []string{"model", "code"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: Latency, Help: "Inference request latency.", ConstLabels: labels, Buckets: prometheus.DefBuckets}, []string{"model"})
	reg.MustRegister(requests, latency)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// The server's name in every answer is its host name: the pod's name in a pod.
	name, _ := os.Hostname()
	mux.Handle("/v1/infer", promhttp.InstrumentHandlerDuration(latency.MustCurryWith(prometheus.Labels{"model": Model}),
		promhttp.InstrumentHandlerCounter(requests.MustCurryWith(prometheus.Labels{"model": Model}), infer(name))))
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(o.Port))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	enc := json.NewEncoder(out)
	_ = enc.Encode(Event{Event: "listening", Addr: ln.Addr().String()})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()

	url := fmt.Sprintf("http://127.0.0.1:%d/v1/infer", o.Port)
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		case err := <-done:
			return err
		case <-tick.C:
			if _, err := askOnce(ctx, url, nil); err != nil && ctx.Err() == nil {
				_ = enc.Encode(Event{Event: "request-failed", Message: err.Error()})
			}
		}
	}
}

// Answer is what /v1/infer answers: the request's body echoed back as the model's output, and which
// server answered (what a client counts to see where a gateway sent its requests).
type Answer struct {
	Model  string `json:"model"`
	Server string `json:"server"`
	Output string `json:"output"`
}

// infer answers a request as server.
func infer(server string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Answer{Model: Model, Server: server, Output: string(body)})
	}
}
