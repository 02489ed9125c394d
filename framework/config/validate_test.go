package config

import (
	"strings"
	"testing"
)

func TestValidationErrorsAreSpecific(t *testing.T) {
	cases := map[string]struct {
		args []string
		want []string
	}{
		"unknown path":        {[]string{"--allocation-paths", "mig"}, []string{`unknown path "mig"`}},
		"auto mixed":          {[]string{"--allocation-paths", "auto,dra"}, []string{"cannot be combined"}},
		"bad selector":        {[]string{"--gpu-pool", "a=b=c"}, []string{"pools.gpu", "not a label selector"}},
		"existing without lq": {[]string{"--queues", "existing"}, []string{"queues.localQueue is empty"}},
		"bad profile":         {[]string{"--timeout-profile", "fast"}, []string{`unknown timeout profile "fast"`}},
		"bad prefix":          {[]string{"--namespace-prefix", "Bad_Prefix"}, []string{"namespacePrefix"}},
		"two errors at once":  {[]string{"--queues", "x", "--image", ""}, []string{"queues.mode", "image: empty"}},
		"bad toleration":      {[]string{"--toleration", "nocolon"}, []string{"want key[=value]:Effect"}},
		"bad bool":            {[]string{"--disruptive=maybe"}, []string{"disruptive"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.args)
			if err == nil {
				t.Fatal("expected an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
