package monitoring

import (
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	custommetrics "k8s.io/metrics/pkg/client/custom_metrics"
)

// CustomMetrics reads pods metrics from the custom metrics API (custom.metrics.k8s.io), in the version
// the aggregator prefers, as the HPA controller does.
type CustomMetrics struct {
	client custommetrics.CustomMetricsClient
}

// NewCustomMetrics is a reader of the custom metrics API through cfg.
func NewCustomMetrics(cfg *rest.Config) (*CustomMetrics, error) {
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	return &CustomMetrics{client: custommetrics.NewForConfig(cfg, mapper, custommetrics.NewAvailableAPIsGetter(disc))}, nil
}

// PodValue is a pods metric's value for one pod, as the custom metrics API served it.
type PodValue struct {
	Value     resource.Quantity
	Timestamp time.Time
	Window    time.Duration
}

func (v PodValue) String() string {
	at := v.Value.String() + " at " + v.Timestamp.UTC().Format(time.RFC3339)
	if v.Window > 0 {
		at += " over " + v.Window.String()
	}
	return at
}

// Pod is metric's value for pod namespace/name (the client of k8s.io/metrics takes no context).
func (c *CustomMetrics) Pod(namespace, name, metric string) (PodValue, error) {
	v, err := c.client.NamespacedMetrics(namespace).GetForObject(schema.GroupKind{Kind: "Pod"}, name, metric, labels.Everything())
	if err != nil {
		return PodValue{}, err
	}
	out := PodValue{Value: v.Value, Timestamp: v.Timestamp.Time}
	if v.WindowSeconds != nil {
		out.Window = time.Duration(*v.WindowSeconds) * time.Second
	}
	return out, nil
}

// NotServed reports whether err, from Pod, says the metric is not served for the pod (yet).
func NotServed(err error) bool { return apierrors.IsNotFound(err) }
