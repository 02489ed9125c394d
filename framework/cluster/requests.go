package cluster

import (
	"cmp"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// RequestCounter counts the requests the suite's clients send to the API server, by verb and resource,
// through a client-go transport wrapper: the suite's own load on the cluster it tests, reported by
// `gpuconform bench` (the goal is watch-driven waits, about one request per second or less), which ranks
// what sends the most.
type RequestCounter struct {
	mu     sync.Mutex
	counts map[string]int64
}

// Counts are request counts by "verb resource": the verb is get, list, watch, create, update, patch or
// delete; the resource is the API's plural with its subresource ("pods", "pods/log", "resourceslices"),
// or the path of a request outside the resource API ("/version").
type Counts map[string]int64

// Total sums the counts.
func (c Counts) Total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// ByVerb sums the counts by verb (the first word of each key).
func (c Counts) ByVerb() Counts {
	out := Counts{}
	for k, v := range c {
		verb, _, _ := strings.Cut(k, " ")
		out[verb] += v
	}
	return out
}

// Top returns the n keys with the most requests, the most first (ties by key).
func (c Counts) Top(n int) []string {
	keys := slices.Sorted(maps.Keys(c))
	slices.SortStableFunc(keys, func(a, b string) int { return cmp.Compare(c[b], c[a]) })
	return keys[:min(n, len(keys))]
}

// String renders "total (verb n, ...)" in a stable order.
func (c Counts) String() string {
	verbs := c.ByVerb()
	kinds := slices.Sorted(maps.Keys(verbs))
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, k+" "+strconv.FormatInt(verbs[k], 10))
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

// requestKind is the request's "verb resource" (Counts).
func requestKind(req *http.Request) string {
	resource, named := resourceOf(req.URL.Path)
	verb := strings.ToLower(req.Method)
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			verb = "watch"
		case named || strings.HasPrefix(resource, "/"):
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	}
	return verb + " " + resource
}

// resourceOf reads the resource (with its subresource) from an API path, and whether the path names one
// object: /api/v1/namespaces/ns/pods/p/log is pods/log, named; /apis/g/v/resourceslices is resourceslices.
// A path outside the resource API (/version, /openapi/v3) is returned as it is.
func resourceOf(path string) (resource string, named bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return path, false
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:] // a namespaced resource: namespaces/<ns>/<resource>/...
	}
	switch len(rest) {
	case 1:
		return rest[0], false
	case 2:
		return rest[0], true
	default:
		return rest[0] + "/" + rest[2], true
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
