package suite

import (
	"testing"

	"gpuconform.io/gpuconform/framework/config"
)

func TestFactsGateOnlyTheGatingNeeds(t *testing.T) {
	for _, c := range []struct {
		name  string
		facts Facts
		needs Needs
		want  bool
	}{
		{"nothing needed", Facts{}, Needs{}, true},
		{"Kueue needed, absent", Facts{}, Needs{Kueue: true}, false},
		{"Kueue needed, present", Facts{Kueue: true}, Needs{Kueue: true}, true},
		{"priority queues needed, Kueue only", Facts{Kueue: true}, Needs{Kueue: true, PriorityQueues: true}, false},
		{"disruptive needed, not opted in", Facts{CanaryPool: true}, Needs{Disruptive: true, CanaryPool: true}, false},
		{"canary needed, absent", Facts{Disruptive: true}, Needs{Disruptive: true, CanaryPool: true}, false},
		{"fault provider and storage do not gate", Facts{Disruptive: true}, Needs{Disruptive: true, FaultProvider: true, CheckpointStorage: true}, true},
	} {
		if got := c.facts.Gates(c.needs); got != c.want {
			t.Errorf("%s: Gates = %v, want %v", c.name, got, c.want)
		}
	}
	if f := ConfigFacts(config.Config{Disruptive: true}); !f.Disruptive || f.Kueue || f.CanaryPool {
		t.Errorf("ConfigFacts = %+v: only the opt-in is known from the configuration", f)
	}
	if u := (Needs{Kueue: true}).Or(Needs{CanaryPool: true}); !u.Kueue || !u.CanaryPool || u.Disruptive {
		t.Errorf("Or = %+v", u)
	}
}
