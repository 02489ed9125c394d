package cluster

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// RequestCounter counts the requests the suite's clients send to the API server, by kind of request,
// through a client-go transport wrapper: the suite's own load on the cluster it tests, reported by
// `gpuconform bench` (the goal is watch-driven waits, about one request per second or less).
type RequestCounter struct {
	mu     sync.Mutex
	counts map[string]int64
}

// Counts are request counts by kind: get (reads, lists included), watch, create, update, patch, delete.
type Counts map[string]int64

// Total sums the counts.
func (c Counts) Total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// String renders "total (kind n, ...)" in a stable order.
func (c Counts) String() string {
	kinds := slices.Sorted(maps.Keys(c))
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, k+" "+strconv.FormatInt(c[k], 10))
	}
	return strconv.FormatInt(c.Total(), 10) + " (" + strings.Join(parts, ", ") + ")"
}

// Snapshot returns the counts so far.
func (r *RequestCounter) Snapshot() Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := Counts{}
	maps.Copy(out, r.counts)
	return out
}

// Since returns the requests counted after an earlier snapshot.
func (r *RequestCounter) Since(before Counts) Counts {
	out := Counts{}
	for k, v := range r.Snapshot() {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// Wrap is a client-go transport wrapper (rest.Config.Wrap) that counts every request.
func (r *RequestCounter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		r.count(requestKind(req))
		return rt.RoundTrip(req)
	})
}

func (r *RequestCounter) count(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[string]int64{}
	}
	r.counts[kind]++
}

func requestKind(req *http.Request) string {
	switch req.Method {
	case http.MethodGet:
		if req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1" {
			return "watch"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(req.Method)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
