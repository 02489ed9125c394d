package localcluster

import (
	"bytes"
	"strings"
	"testing"
)

// GPUCONFORM_REPLICAS sets the default the --replicas flag starts from; unset it is 1, and a value that
// is not a count is refused before anything is touched.
func TestReplicasOption(t *testing.T) {
	cases := []struct {
		env     string
		want    int
		invalid bool
	}{
		{"", 1, false},
		{"2", 2, false},
		{" 4 ", 4, false},
		{"0", 0, true},
		{"two", 0, true},
		{"-1", -1, true},
	}
	for _, c := range cases {
		t.Setenv(EnvReplicas, c.env)
		o := DefaultOptions(t.TempDir())
		if o.Replicas != c.want {
			t.Errorf("%s=%q: Replicas = %d, want %d", EnvReplicas, c.env, o.Replicas, c.want)
		}
		err := o.validate()
		if c.invalid != (err != nil) {
			t.Errorf("%s=%q: validate() = %v, want invalid=%v", EnvReplicas, c.env, err, c.invalid)
		}
		if err != nil && !strings.Contains(err.Error(), EnvReplicas) {
			t.Errorf("the refusal %q does not name %s", err, EnvReplicas)
		}
	}
}

// The setting reaches the agent's flags, and a different setting renders a different pod template: `cluster
// up` applies it on every run, so a cluster brought up with 1 replica and then with --replicas 2 rolls its
// agent instead of keeping 1.
func TestReplicasReachTheAgent(t *testing.T) {
	t.Setenv(EnvReplicas, "")
	o := DefaultOptions(t.TempDir())
	whole := o.gpuStack("tools:1")
	o.Replicas = 2
	sliced := o.gpuStack("tools:1")
	if whole.Replicas != 1 || sliced.Replicas != 2 || sliced.Devices != o.DevicesPerNode || sliced.DRADevices != o.DevicesPerNode {
		t.Fatalf("stacks: whole %+v, sliced %+v", whole, sliced)
	}
	a, err := render("fake-device-plugin.yaml", whole)
	if err != nil {
		t.Fatal(err)
	}
	b, err := render("fake-device-plugin.yaml", sliced)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(a, []byte(`"--replicas=1"`)) || !bytes.Contains(b, []byte(`"--replicas=2"`)) {
		t.Errorf("the agent's --replicas flag does not follow the option")
	}
	if bytes.Equal(a, b) {
		t.Error("replicas 1 and 2 render the same manifest: the agent would keep its old setting")
	}
	// The example DRA driver replaces the agent's DRA half, whatever the replicas.
	o.DRADriver = DRADriverExample
	if s := o.gpuStack("tools:1"); !s.ExampleDRADriver || s.DRADevices != 0 || s.Replicas != 2 {
		t.Errorf("example driver stack: %+v", s)
	}
}
