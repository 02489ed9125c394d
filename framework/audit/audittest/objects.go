// Package audittest serves the leak audit from a controller-runtime client (its fake, in tests), the
// client e2e-framework's klient wraps.
package audittest

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/klient/k8s"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
)

// Objects is audit.Objects over a controller-runtime client.
type Objects struct{ Client client.Client }

// List lists the objects of ns that match the options' label selector.
func (o Objects) List(ctx context.Context, ns string, list k8s.ObjectList, opts ...resources.ListOption) error {
	lo := &metav1.ListOptions{}
	for _, opt := range opts {
		opt(lo)
	}
	sel, err := labels.Parse(lo.LabelSelector)
	if err != nil {
		return err
	}
	return o.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel})
}

// Delete deletes obj with the options' propagation policy.
func (o Objects) Delete(ctx context.Context, obj k8s.Object, opts ...resources.DeleteOption) error {
	do := &metav1.DeleteOptions{}
	for _, opt := range opts {
		opt(do)
	}
	return o.Client.Delete(ctx, obj, &client.DeleteOptions{PropagationPolicy: do.PropagationPolicy})
}
