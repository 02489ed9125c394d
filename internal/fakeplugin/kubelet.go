package fakeplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// registerTimeout bounds one Register call; the kubelet answers in milliseconds when it is healthy, and a
// hung call must not stop the retry loop.
const registerTimeout = 10 * time.Second

// ServeKubelet serves the plugin's gRPC sockets in PluginDir, one per resource (Resources), and keeps
// each registered with the kubelet until ctx ends. When the kubelet restarts it wipes PluginDir, deleting
// our sockets; that is how we learn it forgot us, so each socket is polled and, once gone, its server is
// restarted on a fresh socket and registered again. Only ctx ending stops it; it then removes its sockets
// and returns nil.
func (p *Plugin) ServeKubelet(ctx context.Context) error {
	dir, err := filepath.Abs(p.cfg.PluginDir)
	if err != nil {
		return fmt.Errorf("device plugin directory: %w", err)
	}
	errs := make(chan error, len(p.servers))
	for _, s := range p.servers {
		go func() { errs <- s.serveKubelet(ctx, dir) }()
	}
	var first error
	for range p.servers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// serveKubelet is ServeKubelet for one resource's server.
func (s *resourceServer) serveKubelet(ctx context.Context, dir string) error {
	p := s.p
	sock := filepath.Join(dir, s.p.cfg.socketFor(s.res.name))
	kubelet := filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket))
	for generation := 1; ; generation++ {
		srv, info, served, err := s.startServer(ctx, sock)
		if err != nil {
			return err // only when ctx ended while we were retrying
		}
		s.log.Info("serving device plugin socket", "socket", sock, "generation", generation)
		if err := s.register(ctx, kubelet, sock); err == nil {
			s.waitSocketGone(ctx, sock, info, served)
		}
		srv.Stop()
		if ctx.Err() != nil {
			removeIfSame(sock, info)
			s.log.Info("device plugin stopped", "socket", sock)
			return nil //nolint:nilerr // a cancelled context is the plugin's normal shutdown
		}
		if p.hasFault(FaultNoReregister) {
			s.log.Warn("FAULT INJECTION: device plugin socket is gone and the plugin will not register again", "fault", string(FaultNoReregister), "socket", sock)
			<-ctx.Done()
			return nil
		}
		s.log.Warn("device plugin socket is gone or the server failed (kubelet restart?); restarting and re-registering", "socket", sock)
	}
}

// startServer listens on a fresh socket and serves the plugin on it, retrying with backoff when the
// directory is not ready yet. It returns the socket's file identity so that later we can tell our
// socket from a file someone else put at the same path.
func (s *resourceServer) startServer(ctx context.Context, sock string) (*grpc.Server, os.FileInfo, <-chan error, error) {
	backoff := s.p.cfg.RegisterInitialBackoff
	for {
		srv, info, served, err := s.listenAndServe(sock)
		if err == nil {
			return srv, info, served, nil
		}
		s.log.Error("cannot serve device plugin socket; retrying", "socket", sock, "err", err, "retry_in", backoff)
		if !sleep(ctx, backoff) {
			return nil, nil, nil, ctx.Err()
		}
		backoff = min(2*backoff, s.p.cfg.RegisterMaxBackoff)
	}
}

func (s *resourceServer) listenAndServe(sock string) (*grpc.Server, os.FileInfo, <-chan error, error) {
	// A socket left by a previous run of this plugin would make Listen fail with "address in use".
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil, fmt.Errorf("remove stale socket: %w", err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, nil, nil, err
	}
	// We remove the socket ourselves and only when it is still ours: after a kubelet restart the path
	// may already hold a newer socket, which an unlink on Close would destroy.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	info, err := os.Stat(sock)
	if err != nil {
		_ = l.Close()
		return nil, nil, nil, err
	}
	// WaitForHandlers makes Stop wait for open ListAndWatch streams to return, so nothing of the old
	// server still runs (or logs) once a restart or shutdown has finished.
	srv := grpc.NewServer(grpc.WaitForHandlers(true))
	pluginapi.RegisterDevicePluginServer(srv, s)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	return srv, info, served, nil
}

// register calls the kubelet's Registration service, retrying with backoff while kubelet.sock is
// missing (the kubelet is not up yet) or the call fails. It returns an error only when ctx ends.
func (s *resourceServer) register(ctx context.Context, kubeletSock, sock string) error {
	p := s.p
	backoff := p.cfg.RegisterInitialBackoff
	for attempt := 1; ; attempt++ {
		err := s.registerOnce(ctx, kubeletSock, sock)
		if err == nil {
			s.log.Info("registered with kubelet", "kubelet_socket", kubeletSock, "endpoint", filepath.Base(sock),
				"version", pluginapi.Version, "devices", len(s.res.ids), "attempt", attempt)
			return nil
		}
		s.log.Warn("registration with kubelet failed; retrying", "kubelet_socket", kubeletSock, "attempt", attempt,
			"err", err, "retry_in", backoff)
		if !sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, p.cfg.RegisterMaxBackoff)
	}
}

func (s *resourceServer) registerOnce(ctx context.Context, kubeletSock, sock string) error {
	if _, err := os.Stat(kubeletSock); err != nil {
		return fmt.Errorf("kubelet socket not available: %w", err)
	}
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(sock), // the kubelet resolves it relative to its device-plugins dir
		ResourceName: s.res.name,
		Options:      s.p.options(),
	})
	return err
}

// waitSocketGone returns when ctx ends, the server stops on its own, or our socket file disappears or is
// replaced. Polling with os.Stat is enough: the kubelet needs seconds to come back anyway, and it keeps
// the plugin free of inotify dependencies.
func (s *resourceServer) waitSocketGone(ctx context.Context, sock string, ours os.FileInfo, served <-chan error) {
	t := time.NewTicker(s.p.cfg.SocketPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-served:
			s.log.Error("device plugin gRPC server exited", "err", err)
			return
		case <-t.C:
			info, err := os.Stat(sock)
			if err != nil || !os.SameFile(info, ours) {
				s.log.Warn("device plugin socket disappeared", "socket", sock)
				return
			}
		}
	}
}

func removeIfSame(path string, ours os.FileInfo) {
	if info, err := os.Stat(path); err == nil && os.SameFile(info, ours) {
		_ = os.Remove(path)
	}
}

// sleep waits d or until ctx ends, reporting whether the full wait happened.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
