package monitoring

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"gpuconform.io/gpuconform/internal/objcond"
)

// MetricsAPINames are the APIServices through which the HPA reads custom and external metrics.
var MetricsAPINames = []string{"v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io"}

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// MetricsAPI is one registered metrics APIService as the aggregator judges it.
type MetricsAPI struct {
	// Name is the APIService's name; Service is namespace/name of the adapter behind it ("local" for none).
	Name, Service string
	// Status, Reason and Message are its Available condition's.
	Status, Reason, Message string
}

// Available reports whether the aggregator can reach the adapter.
func (a MetricsAPI) Available() bool { return a.Status == string(metav1.ConditionTrue) }

// Custom reports whether it is the custom metrics API (custom.metrics.k8s.io), not the external one.
func (a MetricsAPI) Custom() bool { return strings.HasSuffix(a.Name, ".custom.metrics.k8s.io") }

func (a MetricsAPI) String() string {
	return fmt.Sprintf("APIService %s (service %s): Available=%s %s %s", a.Name, a.Service, a.Status, a.Reason, a.Message)
}

// MetricsAPIs reads the registered metrics APIServices of MetricsAPINames, in that order; one not
// registered is left out, any other failed read is returned.
func MetricsAPIs(ctx context.Context, dyn dynamic.Interface) ([]MetricsAPI, error) {
	var out []MetricsAPI
	for _, name := range MetricsAPINames {
		svc, err := dyn.Resource(apiServiceGVR).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading APIService %s: %w", name, err)
		}
		api := MetricsAPI{Name: name, Status: "Unknown", Reason: "NoCondition", Message: "the aggregator has set no Available condition"}
		ns, _, _ := unstructured.NestedString(svc.Object, "spec", "service", "namespace")
		n, _, _ := unstructured.NestedString(svc.Object, "spec", "service", "name")
		api.Service = cmp.Or(strings.Trim(ns+"/"+n, "/"), "local")
		if c := meta.FindStatusCondition(objcond.Of(svc.Object, "status", "conditions"), "Available"); c != nil {
			api.Status, api.Reason, api.Message = string(c.Status), c.Reason, c.Message
		}
		out = append(out, api)
	}
	return out, nil
}
