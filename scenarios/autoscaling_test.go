package scenarios

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestHPATargetIsHalfOfOneReplicasValue(t *testing.T) {
	for observed, want := range map[string]string{"1": "500m", "983m": "491m", "12": "6", "1m": "1m", "3m": "1m"} {
		if got := hpaTarget(resource.MustParse(observed)); got.String() != want {
			t.Errorf("hpaTarget(%s) = %s, want %s", observed, got.String(), want)
		}
	}
}
