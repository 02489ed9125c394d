package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A create refused with "status unknown for quota" is retried until the quota controller has counted
// (or the grace ends); any other outcome is returned at once.
func TestRetryQuotaStatus(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	unknown := apierrors.NewForbidden(pods, "p", errors.New("status unknown for quota: compute-quota, resources: limits.cpu,limits.memory"))
	exceeded := apierrors.NewForbidden(pods, "p", errors.New("exceeded quota: compute-quota, requested: limits.cpu=100m, used: limits.cpu=0, limited: limits.cpu=50m"))
	for _, c := range []struct {
		name    string
		answers []error
		calls   int
		want    error
	}{
		{"created at once", []error{nil}, 1, nil},
		{"counted on the third try", []error{unknown, unknown, nil}, 3, nil},
		{"another refusal is not retried", []error{exceeded}, 1, exceeded},
		{"still unknown after the grace", []error{unknown}, -1, unknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := retryQuotaStatus(t.Context(), 200*time.Millisecond, 10*time.Millisecond, func(context.Context) error {
				calls++
				return c.answers[min(calls, len(c.answers))-1]
			})
			if !errors.Is(err, c.want) {
				t.Errorf("err %v, want %v", err, c.want)
			}
			if c.calls >= 0 && calls != c.calls {
				t.Errorf("%d calls, want %d", calls, c.calls)
			}
			if c.calls < 0 && calls < 3 {
				t.Errorf("%d calls within the grace: it was not retried", calls)
			}
		})
	}
}
