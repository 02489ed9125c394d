package monitoring

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Series is one series of the monitoring system, as a query returned it.
type Series struct {
	Labels map[string]string
	Value  float64
	At     time.Time
}

// String is the series as an exposition line with its timestamp.
func (s Series) String() string {
	keys := slices.Sorted(maps.Keys(s.Labels))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if k != model.MetricNameLabel {
			parts = append(parts, fmt.Sprintf("%s=%q", k, s.Labels[k]))
		}
	}
	return fmt.Sprintf("%s{%s} %g @ %s", s.Labels[model.MetricNameLabel], strings.Join(parts, ","), s.Value, s.At.UTC().Format(time.RFC3339))
}

// Query runs an instant query and returns its series.
func Query(ctx context.Context, api promv1.API, query string) ([]Series, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, _, err := api.Query(ctx, query, time.Now())
	if err != nil {
		return nil, err
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("the query %s answered a %s, not a vector", query, v.Type())
	}
	out := make([]Series, 0, len(vec))
	for _, s := range vec {
		labels := make(map[string]string, len(s.Metric))
		for k, v := range s.Metric {
			labels[string(k)] = string(v)
		}
		out = append(out, Series{Labels: labels, Value: float64(s.Value), At: s.Timestamp.Time()})
	}
	slices.SortFunc(out, func(a, b Series) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// Collection is what the monitoring showed of one counter across reads.
type Collection struct {
	// First and Last are the counter's first sample seen and the latest one.
	First, Last *Series
}

// Observe records one read of the counter's series; more than one series is an error (the nonce names one
// pod's counter).
func (c *Collection) Observe(series []Series) error {
	switch len(series) {
	case 0:
		return nil
	case 1:
	default:
		lines := make([]string, len(series))
		for i, s := range series {
			lines[i] = s.String()
		}
		return fmt.Errorf("%d series where one pod exposes one: %s", len(series), strings.Join(lines, "; "))
	}
	s := series[0]
	if c.First == nil {
		c.First = &s
	}
	c.Last = &s
	return nil
}

// Collected reports whether the counter was seen to grow between two samples of the monitoring system,
// which is a discovery and at least two scrapes: one sample can be a single scrape of a target later lost.
func (c Collection) Collected() bool {
	return c.First != nil && c.Last != nil && c.Last.At.After(c.First.At) && c.Last.Value > c.First.Value
}

// TargetView says what the monitoring system's target list shows of a pod: the active targets it
// discovered for it (with their scrape health and last error) or the dropped targets that were it, by the
// Kubernetes discovery's __meta_kubernetes_namespace and __meta_kubernetes_pod_name labels.
func TargetView(ctx context.Context, api promv1.API, namespace, pod string) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t, err := api.Targets(ctx)
	if err != nil {
		return "its target list could not be read: " + err.Error()
	}
	isPod := func(l map[string]string) bool {
		return l["__meta_kubernetes_namespace"] == namespace && l["__meta_kubernetes_pod_name"] == pod
	}
	var active []string
	jobs := map[string]bool{}
	for _, a := range t.Active {
		jobs[a.ScrapePool] = true
		if !isPod(a.DiscoveredLabels) {
			continue
		}
		s := fmt.Sprintf("%s in scrape pool %s: health %s", a.ScrapeURL, a.ScrapePool, a.Health)
		if a.LastError != "" {
			s += ", last error " + a.LastError
		}
		active = append(active, s)
	}
	dropped := 0
	for _, d := range t.Dropped {
		if isPod(d.DiscoveredLabels) {
			dropped++
		}
	}
	pools := strings.Join(slices.Sorted(maps.Keys(jobs)), ", ")
	switch {
	case len(active) > 0:
		return "it discovered the pod as " + strings.Join(active, "; ")
	case dropped > 0:
		return fmt.Sprintf("it discovered the pod but its relabelling dropped all %d of its candidate targets (active scrape pools: %s)", dropped, pools)
	}
	return fmt.Sprintf("it has no target, active or dropped, for pod %s/%s: its discovery does not see the pod's namespace (active scrape pools: %s)", namespace, pod, pools)
}
