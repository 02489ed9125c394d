package gpu

import "testing"

func TestParseProbeTakesLastJSONLine(t *testing.T) {
	out := "starting\n{\"node\":\"w1\",\"pod\":\"p\",\"devices\":[\"GPU-b\",\"GPU-a\"],\"sources\":{\"nvidia_visible_devices\":[\"GPU-a\",\"GPU-b\"]},\"expect\":2,\"ok\":true,\"message\":\"2 devices\",\"extra\":1}\n"
	r, err := ParseProbe(out)
	if err != nil || r.Node != "w1" || len(r.Devices) != 2 || !r.OK || *r.Expect != 2 {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := ParseProbe("no json here"); err == nil {
		t.Error("expected an error without a probe line")
	}
	empty, err := ParseProbe(`{"node":"w1","devices":[],"ok":true}`)
	if err != nil || len(empty.Devices) != 0 {
		t.Errorf("an empty device list is a valid report: %+v %v", empty, err)
	}
}

func TestParsePodResources(t *testing.T) {
	out := `{"pods":[{"namespace":"ns","name":"p","containers":[{"name":"workload","devices":{"nvidia.com/gpu":["GPU-2","GPU-1"]}}]}]}`
	r, err := ParsePodResources(out)
	if err != nil {
		t.Fatal(err)
	}
	d, found := r.DevicesOf("ns", "p", "workload", "nvidia.com/gpu")
	if !found || !SameDevices(d, []string{"GPU-1", "GPU-2"}) {
		t.Errorf("%v %v", d, found)
	}
	if _, found := r.DevicesOf("ns", "other", "workload", "nvidia.com/gpu"); found {
		t.Error("unknown pod must be not found")
	}
}
