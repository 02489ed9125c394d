package fakeplugin

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// testDeadline bounds every wait in these tests; they poll, so a pass is fast and only a bug waits this long.
const testDeadline = 10 * time.Second

// eventually polls cond until it holds or testDeadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", testDeadline, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shortDir returns a fresh directory with a short path: unix socket paths are limited to ~108 bytes and
// t.TempDir embeds the (long) test name.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fp") //nolint:usetesting // t.TempDir's path is too long for a unix socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// testConfig is DefaultConfig with fast timings, a temp plugin dir and the test's log output.
func testConfig(t *testing.T, dir, node string) Config {
	cfg := DefaultConfig()
	cfg.NodeName = node
	cfg.PluginDir = dir
	cfg.SocketPollInterval = 20 * time.Millisecond
	cfg.RegisterInitialBackoff = 10 * time.Millisecond
	cfg.RegisterMaxBackoff = 50 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	// Run serves the metrics on a free loopback port (not dcgm-exporter's, which tests must not hold), and
	// scrapes ask no kubelet unless a test sets a socket.
	cfg.MetricsAddress = "127.0.0.1:0"
	cfg.PodResourcesSocket = ""
	return cfg
}

// fakeKubelet is the kubelet's Registration service on kubelet.sock, recording every request.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	srv *grpc.Server

	mu   sync.Mutex
	reqs []*pluginapi.RegisterRequest
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reqs = append(k.reqs, r)
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) requests() []*pluginapi.RegisterRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.reqs)
}

// startFakeKubelet serves a Registration service on dir/kubelet.sock until stop or test end.
func startFakeKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{srv: grpc.NewServer()}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	t.Cleanup(k.srv.Stop)
	return k
}

// startPlugin runs fn (ServeKubelet or Run of p) in the background and stops it at test end, failing
// the test if it does not return promptly or returns an error.
func startPlugin(t *testing.T, fn func(context.Context) error) {
	t.Helper()
	// Not t.Context: that ends before every cleanup; the plugin must keep serving until this one.
	ctx, cancel := context.WithCancel(context.Background()) //nolint:usetesting // see above
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("plugin returned error on shutdown: %v", err)
			}
		case <-time.After(testDeadline):
			t.Errorf("plugin did not stop within %s of cancellation", testDeadline)
		}
	})
}

// dialPlugin connects to the plugin's socket like the kubelet does.
func dialPlugin(t *testing.T, cfg Config) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(cfg.PluginDir, cfg.SocketName()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

func mustNew(t *testing.T, cfg Config) *Plugin {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
