package fakeplugin

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestRegistersWithKubelet(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, "node-a")
	cfg.ResourceName = "example.com/fakegpu"
	kubelet := startFakeKubelet(t, dir)
	p := mustNew(t, cfg)
	startPlugin(t, p.ServeKubelet)

	eventually(t, "one registration", func() bool { return len(kubelet.requests()) == 1 })
	r := kubelet.requests()[0]
	if r.Version != pluginapi.Version || r.ResourceName != "example.com/fakegpu" || r.Endpoint != cfg.SocketName() {
		t.Errorf("register request = {version %q, resource %q, endpoint %q}, want {%q, %q, %q}",
			r.Version, r.ResourceName, r.Endpoint, pluginapi.Version, "example.com/fakegpu", cfg.SocketName())
	}
	if strings.Contains(r.Endpoint, "/") {
		t.Errorf("endpoint %q must be a file name relative to the device-plugins dir", r.Endpoint)
	}
	if !r.GetOptions().GetGetPreferredAllocationAvailable() || r.GetOptions().GetPreStartRequired() {
		t.Errorf("register options = %v, want preferred allocation and no pre-start", r.GetOptions())
	}

	// The kubelet dials the endpoint next; it must answer there.
	opts, err := dialPlugin(t, cfg).GetDevicePluginOptions(t.Context(), &pluginapi.Empty{})
	if err != nil {
		t.Fatalf("GetDevicePluginOptions on %s: %v", r.Endpoint, err)
	}
	if !opts.GetPreferredAllocationAvailable {
		t.Errorf("GetDevicePluginOptions disagrees with the registration: %v", opts)
	}
	if _, err := dialPlugin(t, cfg).PreStartContainer(t.Context(), &pluginapi.PreStartContainerRequest{}); err != nil {
		t.Errorf("PreStartContainer: %v", err)
	}
}

func TestRegistrationWaitsForKubeletSocket(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, "node-a")
	p := mustNew(t, cfg)
	startPlugin(t, p.ServeKubelet)

	// The plugin serves its socket and retries registration while kubelet.sock is absent…
	eventually(t, "plugin socket to exist", func() bool { return fileExists(filepath.Join(dir, cfg.SocketName())) })
	// …and registers once the kubelet shows up.
	kubelet := startFakeKubelet(t, dir)
	eventually(t, "registration after kubelet appeared", func() bool { return len(kubelet.requests()) >= 1 })
}

func TestReregistersAfterKubeletRestartDeletesSocket(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, "node-a")
	first := startFakeKubelet(t, dir)
	p := mustNew(t, cfg)
	startPlugin(t, p.ServeKubelet)
	eventually(t, "first registration", func() bool { return len(first.requests()) == 1 })

	// A kubelet restart: the old kubelet goes away and the directory is wiped, our socket included.
	first.srv.Stop()
	sock := filepath.Join(dir, cfg.SocketName())
	if err := os.Remove(sock); err != nil {
		t.Fatalf("remove plugin socket: %v", err)
	}
	_ = os.Remove(filepath.Join(dir, "kubelet.sock"))
	second := startFakeKubelet(t, dir)

	eventually(t, "registration with the restarted kubelet", func() bool { return len(second.requests()) == 1 })
	if got := second.requests()[0]; got.Endpoint != cfg.SocketName() || got.ResourceName != cfg.ResourceName {
		t.Errorf("re-registration = %v, want endpoint %q resource %q", got, cfg.SocketName(), cfg.ResourceName)
	}
	eventually(t, "fresh plugin socket", func() bool { return fileExists(sock) })
	stream, err := dialPlugin(t, cfg).ListAndWatch(t.Context(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || len(resp.Devices) != cfg.Devices {
		t.Fatalf("ListAndWatch on the new socket: %v devices, err %v", len(resp.GetDevices()), err)
	}
}

func TestShutdownRemovesSocket(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, "node-a")
	kubelet := startFakeKubelet(t, dir)
	p := mustNew(t, cfg)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.ServeKubelet(ctx) }()
	eventually(t, "registration", func() bool { return len(kubelet.requests()) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ServeKubelet on shutdown: %v", err)
	}
	if fileExists(filepath.Join(dir, cfg.SocketName())) {
		t.Errorf("socket still present after shutdown; the kubelet would keep dialing a dead endpoint")
	}
}

// servePlugin starts p behind a fake kubelet and returns a client connected like the kubelet.
func servePlugin(t *testing.T, cfg Config) (*Plugin, pluginapi.DevicePluginClient) {
	t.Helper()
	kubelet := startFakeKubelet(t, cfg.PluginDir)
	p := mustNew(t, cfg)
	startPlugin(t, p.ServeKubelet)
	eventually(t, "registration", func() bool { return len(kubelet.requests()) == 1 })
	return p, dialPlugin(t, cfg)
}

func allocate(t *testing.T, c pluginapi.DevicePluginClient, ids ...string) map[string]string {
	t.Helper()
	resp, err := c.Allocate(t.Context(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		t.Fatalf("Allocate(%v): %v", ids, err)
	}
	if len(resp.ContainerResponses) != 1 {
		t.Fatalf("Allocate returned %d container responses, want 1", len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0].Envs
}

func TestAllocateHandsOutExactlyTheRequestedDevices(t *testing.T) {
	cfg := testConfig(t, shortDir(t), "node-a")
	p, c := servePlugin(t, cfg)
	ids := p.DeviceIDs()

	env := allocate(t, c, ids[2])
	want := map[string]string{EnvVisibleDevices: ids[2], EnvResource: "nvidia.com/gpu", EnvNode: "node-a"}
	if !maps.Equal(env, want) {
		t.Errorf("Allocate 1 device env = %v, want %v", env, want)
	}

	// Request order is kept, not sorted: NVIDIA's stack numbers devices in that order in the container.
	env = allocate(t, c, ids[3], ids[0])
	if got, w := env[EnvVisibleDevices], ids[3]+","+ids[0]; got != w {
		t.Errorf("Allocate 2 devices %s = %q, want %q", EnvVisibleDevices, got, w)
	}

	// Two containers in one request each get their own devices.
	resp, err := c.Allocate(t.Context(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{ids[0]}}, {DevicesIds: []string{ids[1]}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := resp.ContainerResponses[0].Envs[EnvVisibleDevices], resp.ContainerResponses[1].Envs[EnvVisibleDevices]; a != ids[0] || b != ids[1] {
		t.Errorf("per-container devices = %q, %q; want %q, %q", a, b, ids[0], ids[1])
	}

	// An ID that is not ours is refused rather than passed through.
	_, err = c.Allocate(t.Context(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-not-mine"}}},
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Allocate of an unknown ID: err = %v, want InvalidArgument", err)
	}
}

func TestWrongIDsFaultChangesAllocatedDevices(t *testing.T) {
	cfg := testConfig(t, shortDir(t), "node-a")
	cfg.Faults = []Fault{FaultWrongIDs}
	p, c := servePlugin(t, cfg)
	ids := p.DeviceIDs()

	for _, req := range [][]string{{ids[0]}, {ids[1], ids[2]}, ids} {
		got := strings.Split(allocate(t, c, req...)[EnvVisibleDevices], ",")
		if len(got) != len(req) {
			t.Errorf("fault: request %d devices, handed out %d (%v)", len(req), len(got), got)
		}
		for _, id := range got {
			if slices.Contains(req, id) {
				t.Errorf("fault active but requested device %s was handed out for request %v", id, req)
			}
			if !uuidPattern.MatchString(id) {
				t.Errorf("fault handed out %q, which does not even look like a GPU UUID", id)
			}
		}
	}
}

func TestTimeSlicingAllocateDeduplicatesReplicas(t *testing.T) {
	cfg := testConfig(t, shortDir(t), "node-a")
	cfg.Devices, cfg.Replicas = 2, 4
	p, c := servePlugin(t, cfg)
	u := p.PhysicalUUIDs()

	stream, err := c.ListAndWatch(t.Context(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Devices) != 8 {
		t.Fatalf("time-slicing 2 GPUs × 4 replicas advertised %d devices, want 8", len(resp.Devices))
	}
	for _, d := range resp.Devices {
		if !strings.Contains(d.ID, "::") {
			t.Errorf("replica device ID %q lacks the ::<replica> suffix", d.ID)
		}
	}

	env := allocate(t, c, ReplicaID(u[1], 3), ReplicaID(u[0], 0), ReplicaID(u[1], 0))
	if got, want := env[EnvVisibleDevices], u[1]+","+u[0]; got != want {
		t.Errorf("replicas map to %q, want the deduplicated physical UUIDs %q", got, want)
	}
}

func TestGetPreferredAllocationIsDeterministic(t *testing.T) {
	cfg := testConfig(t, shortDir(t), "node-a")
	cfg.Devices, cfg.Replicas = 3, 2
	p, c := servePlugin(t, cfg)
	ids := p.DeviceIDs() // u0::0 u0::1 u1::0 u1::1 u2::0 u2::1
	available := []string{ids[5], ids[1], ids[3], ids[0], ids[2]}
	req := &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: available, MustIncludeDeviceIDs: []string{ids[3]}, AllocationSize: 3,
	}}}
	resp, err := c.GetPreferredAllocation(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	// Must-include first, then replica 0 of each GPU in index order before any second replica.
	want := []string{ids[3], ids[0], ids[2]}
	if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, want) {
		t.Errorf("preferred = %v, want %v", got, want)
	}
	again, _ := c.GetPreferredAllocation(t.Context(), req)
	if !slices.Equal(again.ContainerResponses[0].DeviceIDs, want) {
		t.Errorf("second call answered differently: %v", again.ContainerResponses[0].DeviceIDs)
	}
}

// The readiness marker follows the kubelet's ListAndWatch streams: absent before the kubelet connects,
// present while a stream is open (two streams count once), absent again when the last one closes, and a
// marker left by an earlier process is cleared at start.
func TestReadyFileFollowsListAndWatchStreams(t *testing.T) {
	dir := shortDir(t)
	cfg := testConfig(t, dir, "node-a")
	cfg.ReadyFile = filepath.Join(dir, "state", "serving")
	if err := os.MkdirAll(filepath.Dir(cfg.ReadyFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.ReadyFile, nil, 0o644); err != nil { // stale, from a crashed container
		t.Fatal(err)
	}
	cfg.ReadyAddress = freeAddress(t)
	// probe is the kubelet's HTTP readiness probe: the endpoint's status code, with its body.
	probe := func() (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + cfg.ReadyAddress + ReadyPath)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	kubelet := startFakeKubelet(t, dir)
	p := mustNew(t, cfg)
	startPlugin(t, func(ctx context.Context) error { return p.Run(ctx, nil) })
	eventually(t, "registration", func() bool { return len(kubelet.requests()) == 1 })
	if err := CheckReady(cfg.ReadyFile); err == nil {
		t.Fatalf("ready before the kubelet opened ListAndWatch (stale marker not cleared)")
	}
	if code, body := probe(); code != http.StatusServiceUnavailable || !strings.Contains(body, "ListAndWatch") {
		t.Errorf("readiness endpoint before the kubelet opened ListAndWatch: %d %q, want 503 saying why", code, body)
	}
	c := dialPlugin(t, cfg)
	open := func() context.CancelFunc {
		ctx, cancel := context.WithCancel(t.Context())
		stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		return cancel
	}
	first := open()
	if err := CheckReady(cfg.ReadyFile); err != nil {
		t.Fatalf("with a stream open: %v", err)
	}
	if code, body := probe(); code != http.StatusOK {
		t.Errorf("readiness endpoint with a stream open: %d %q, want 200", code, body)
	}
	second := open()
	first()
	eventually(t, "the server to see the first stream end", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.streams == 1
	})
	if err := CheckReady(cfg.ReadyFile); err != nil {
		t.Fatalf("with one of two streams still open: %v", err)
	}
	second()
	eventually(t, "marker removed after the last stream closed", func() bool { return CheckReady(cfg.ReadyFile) != nil })
	if err := CheckReady(cfg.ReadyFile); err == nil || !strings.Contains(err.Error(), "ListAndWatch") {
		t.Errorf("CheckReady error should say why: %v", err)
	}
	if code, _ := probe(); code != http.StatusServiceUnavailable {
		t.Errorf("readiness endpoint after the last stream closed: %d, want 503", code)
	}
}

// freeAddress is a loopback address with a port free a moment ago.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
