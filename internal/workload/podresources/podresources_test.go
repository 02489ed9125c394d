package podresources

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// fakeKubelet serves a canned List response, like the kubelet's PodResources endpoint.
type fakeKubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	resp *podresourcesv1.ListPodResourcesResponse
}

func (f *fakeKubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return f.resp, nil
}

// serve starts a fake kubelet on a unix socket in a temporary directory and returns the socket path.
func serve(t *testing.T, resp *podresourcesv1.ListPodResourcesResponse) string {
	t.Helper()
	// Unix socket paths are limited to ~108 bytes; t.TempDir() under a long test name can exceed it.
	dir, err := os.MkdirTemp("", "podres") //nolint:usetesting // see above
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "kubelet.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, &fakeKubelet{resp: resp})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return socket
}

func sampleResponse() *podresourcesv1.ListPodResourcesResponse {
	share := "share-1"
	return &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Namespace: "team-b", Name: "infer", Containers: []*podresourcesv1.ContainerResources{
			{Name: "main", DynamicResources: []*podresourcesv1.DynamicResource{{
				ClaimName: "gpu-claim", ClaimNamespace: "team-b",
				ClaimResources: []*podresourcesv1.ClaimResource{
					{DriverName: "gpu.example.com", PoolName: "node-a", DeviceName: "gpu-0",
						CdiDevices: []*podresourcesv1.CDIDevice{{Name: "k8s.gpu.example.com/gpu=claim-uid-gpu-0"}}},
					{DriverName: "gpu.example.com", PoolName: "node-a", DeviceName: "gpu-1", ShareId: &share},
				},
			}}},
		}},
		{Namespace: "team-a", Name: "train", Containers: []*podresourcesv1.ContainerResources{
			{Name: "worker", Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-b"}, Topology: &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: 1}}}},
				{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-a"}},
			}},
			{Name: "sidecar"},
		}},
		{Namespace: "kube-system", Name: "coredns", Containers: []*podresourcesv1.ContainerResources{{Name: "coredns"}}},
	}}
}

func TestQueryRoundTrip(t *testing.T) {
	socket := serve(t, sampleResponse())
	report, err := Query(t.Context(), socket, Filter{}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if report.Socket != socket {
		t.Errorf("socket = %q", report.Socket)
	}
	var names []string
	for _, p := range report.Pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if want := []string{"kube-system/coredns", "team-a/train", "team-b/infer"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("pods = %v, want %v sorted", names, want)
	}

	train := report.Pods[1]
	if len(train.Containers) != 2 || train.Containers[0].Name != "sidecar" || train.Containers[1].Name != "worker" {
		t.Fatalf("train containers = %+v", train.Containers)
	}
	if got := train.Containers[1].Devices; !reflect.DeepEqual(got, map[string][]string{"nvidia.com/gpu": {"GPU-a", "GPU-b"}}) {
		t.Errorf("worker devices = %v, want both topology entries merged and sorted", got)
	}
	if sidecar := train.Containers[0]; sidecar.Devices == nil || sidecar.DynamicResources == nil {
		t.Errorf("empty allocations must encode as {} and [], got %+v", sidecar)
	}

	want := []DynamicResource{
		{ClaimName: "gpu-claim", ClaimNamespace: "team-b", Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-0",
			CDIDevices: []string{"k8s.gpu.example.com/gpu=claim-uid-gpu-0"}},
		{ClaimName: "gpu-claim", ClaimNamespace: "team-b", Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-1",
			ShareID: "share-1", CDIDevices: []string{}},
	}
	if got := report.Pods[2].Containers[0].DynamicResources; !reflect.DeepEqual(got, want) {
		t.Errorf("dynamic resources = %+v, want %+v", got, want)
	}
}

func TestQueryFilters(t *testing.T) {
	socket := serve(t, sampleResponse())
	cases := []struct {
		filter Filter
		want   []string
	}{
		{Filter{Namespace: "team-a"}, []string{"team-a/train"}},
		{Filter{Pod: "infer"}, []string{"team-b/infer"}},
		{Filter{Namespace: "team-a", Pod: "infer"}, nil},
	}
	for _, tc := range cases {
		report, err := Query(t.Context(), socket, tc.filter, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range report.Pods {
			got = append(got, p.Namespace+"/"+p.Name)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("filter %+v: pods = %v, want %v", tc.filter, got, tc.want)
		}
		if report.Pods == nil {
			t.Errorf("filter %+v: pods is nil, must encode as []", tc.filter)
		}
	}
}

func TestJSONShape(t *testing.T) {
	socket := serve(t, sampleResponse())
	report, err := Query(t.Context(), socket, Filter{Pod: "infer"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(report)
	for _, part := range []string{`"pods":[{"namespace":"team-b","name":"infer","containers":[{"name":"main","devices":{}`,
		`"dynamic_resources":[{"claim_name":"gpu-claim","claim_namespace":"team-b","driver":"gpu.example.com","pool":"node-a","device":"gpu-0"`} {
		if !strings.Contains(string(line), part) {
			t.Errorf("JSON %s lacks %s", line, part)
		}
	}
}

func TestQueryMissingSocketFailsWithinTimeout(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "absent.sock")
	start := time.Now()
	_, err := Query(t.Context(), socket, Filter{}, 300*time.Millisecond)
	if err == nil {
		t.Fatal("Query succeeded without a kubelet")
	}
	if !strings.Contains(err.Error(), socket) {
		t.Errorf("error %q does not name the socket", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("Query took %s, ignoring its 300ms timeout", elapsed)
	}
}
