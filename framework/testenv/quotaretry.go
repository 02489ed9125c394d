package testenv

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"gpuconform.io/gpuconform/framework/diagnose"
)

// retryQuotaStatus runs create until it succeeds or fails otherwise than with "status unknown for
// quota", for up to grace: the quota controller has not yet counted a quota that was just created or
// changed (a namespace provisioned with its quota refuses every pod for its first moments), and a working
// controller does within seconds. Whether an error is that refusal is diagnose's to say, so one place
// knows the message. The last error is returned.
func retryQuotaStatus(ctx context.Context, grace, poll time.Duration, create func(context.Context) error) error {
	var last error
	_ = wait.PollUntilContextTimeout(ctx, poll, grace, true, func(ctx context.Context) (bool, error) {
		last = create(ctx)
		return !quotaStatusUnknown(last), nil
	})
	return last
}

// quotaStatusUnknown reports an API error that is the quota plugin's "status unknown for quota".
func quotaStatusUnknown(err error) bool {
	if err == nil {
		return false
	}
	d, ok := diagnose.ParseAdmissionDenial(err.Error())
	return ok && d.StatusUnknown()
}
