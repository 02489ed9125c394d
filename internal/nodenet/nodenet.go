// Package nodenet is the local cluster's pod network: a small agent on every node (a stand-in for kind's
// kindnetd, whose module the Go proxy does not serve) that writes the node's CNI configuration from its
// podCIDR, routes every other node's podCIDR to that node, and masquerades traffic leaving the pod network.
// It re-applies everything periodically, so a node that restarts heals by itself.
package nodenet

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ConflistName is the CNI configuration file the agent owns.
const ConflistName = "10-gpuconform.conflist"

// Conflist renders the CNI configuration for a node: ptp veths with host-local IPAM over the node's
// podCIDR, and portmap for hostPort support (the chain kindnetd also writes).
func Conflist(podCIDR string, mtu int) ([]byte, error) {
	if _, _, err := net.ParseCIDR(podCIDR); err != nil {
		return nil, fmt.Errorf("podCIDR %q: %w", podCIDR, err)
	}
	conf := map[string]any{
		"cniVersion": "0.3.1",
		"name":       "gpuconform",
		"plugins": []any{
			map[string]any{
				"type": "ptp", "ipMasq": false, "mtu": mtu,
				"ipam": map[string]any{
					"type": "host-local", "dataDir": "/run/cni-ipam-state",
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
					"ranges": []any{[]any{map[string]any{"subnet": podCIDR}}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// Route sends a pod CIDR to the node that owns it.
type Route struct {
	CIDR, Via string
}

// Routes returns the routes this node needs: every other node's podCIDR via its InternalIP. Nodes without
// a podCIDR or an address yet are skipped (they are picked up on a later pass).
func Routes(nodes []corev1.Node, self string) []Route {
	var rs []Route
	for _, n := range nodes {
		if n.Name == self || n.Spec.PodCIDR == "" {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address).To4() != nil {
				rs = append(rs, Route{CIDR: n.Spec.PodCIDR, Via: a.Address})
				break
			}
		}
	}
	slices.SortFunc(rs, func(a, b Route) int { return strings.Compare(a.CIDR, b.CIDR) })
	return rs
}

// Agent applies the network state of one node.
type Agent struct {
	Client    kubernetes.Interface
	NodeName  string
	PodSubnet string
	// HostRoot is where the node's root filesystem is mounted; the node's own ip and iptables run chrooted
	// there, so they match the iptables backend the node selected.
	HostRoot string
	MTU      int
	Log      *slog.Logger
}

// Run applies the state every interval until ctx ends.
func (a *Agent) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := a.Sync(ctx); err != nil {
			a.Log.Error("sync failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sync applies the node's conflist, routes and masquerade rule once.
func (a *Agent) Sync(ctx context.Context) error {
	nodes, err := a.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes.Items {
		if n.Name == a.NodeName && n.Spec.PodCIDR != "" {
			if err := a.writeConflist(n.Spec.PodCIDR); err != nil {
				return err
			}
		}
	}
	for _, r := range Routes(nodes.Items, a.NodeName) {
		if err := a.host("ip", "route", "replace", r.CIDR, "via", r.Via); err != nil {
			return err
		}
	}
	rule := []string{"-t", "nat", "POSTROUTING", "-s", a.PodSubnet, "!", "-d", a.PodSubnet,
		"-m", "comment", "--comment", "gpuconform-net", "-j", "MASQUERADE"}
	check := append([]string{"-t", "nat", "-C"}, rule[2:]...)
	if a.host("iptables", check...) != nil {
		if err := a.host("iptables", append([]string{"-t", "nat", "-A"}, rule[2:]...)...); err != nil {
			return err
		}
		a.Log.Info("added masquerade rule", "subnet", a.PodSubnet)
	}
	return nil
}

func (a *Agent) writeConflist(podCIDR string) error {
	b, err := Conflist(podCIDR, a.MTU)
	if err != nil {
		return err
	}
	dir := filepath.Join(a.HostRoot, "etc/cni/net.d")
	path := filepath.Join(dir, ConflistName)
	if old, err := os.ReadFile(path); err == nil && string(old) == string(b) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".gpuconform.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	a.Log.Info("wrote CNI configuration", "podCIDR", podCIDR, "path", path)
	return nil
}

// hostPath is where the node's own commands are looked up.
var hostPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// host runs one of the node's own commands inside the node's root filesystem.
func (a *Agent) host(name string, args ...string) error {
	// exec.Command would look the name up in this container's filesystem (FROM scratch: nothing there);
	// find it in the node's instead and pass the path as the chrooted process will see it.
	path := ""
	for _, dir := range hostPath {
		if st, err := os.Stat(filepath.Join(a.HostRoot, dir, name)); err == nil && !st.IsDir() {
			path = filepath.Join(dir, name)
			break
		}
	}
	if path == "" {
		return fmt.Errorf("%s not found in the node's %v", name, hostPath)
	}
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: a.HostRoot}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v: %w: %s", name, args, err, out)
	}
	return nil
}
