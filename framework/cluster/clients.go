// Package cluster connects to the target cluster and discovers what it offers. Connection errors say
// what to check; discovery is a pure function over recorded API objects so it unit-tests with fakes.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
)

// Clients are the typed and dynamic clients for one cluster.
type Clients struct {
	// REST is the connection config, for helpers that need their own client.
	REST *rest.Config
	// Kube is the core clientset.
	Kube kubernetes.Interface
	// Kueue is the Kueue clientset. It is always built; whether Kueue is installed is a capability.
	Kueue kueueclient.Interface
	// Dynamic reaches any resource, for the leak audit and dumps.
	Dynamic dynamic.Interface
	// Resources is the one generic client (e2e-framework's klient): it creates, deletes and lists any
	// kind the suite makes. Typed clientsets stay for watches, informers, status and subresources.
	Resources *resources.Resources
	// Server is the API server URL, for messages.
	Server string
	// Context is the kubeconfig context in use.
	Context string
	// Requests counts what these clients sent to the API server.
	Requests *RequestCounter
}

// ConnectOptions selects the cluster.
type ConnectOptions struct {
	// Kubeconfig is the kubeconfig path; empty uses the default loading rules ($KUBECONFIG, ~/.kube/config).
	Kubeconfig string
	// Context is the context; empty uses the current one.
	Context string
	// Timeout bounds the reachability check.
	Timeout time.Duration
}

// Connect builds clients and checks that the API server answers. Each failure names the kubeconfig,
// the context and the server, and says what to check.
func Connect(ctx context.Context, o ConnectOptions) (*Clients, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	where := o.Kubeconfig
	if where == "" {
		where = strings.Join(rules.GetLoadingPrecedence(), ":")
	}
	raw, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("cannot load kubeconfig %s: %w; pass --kubeconfig or set KUBECONFIG", where, err)
	}
	if o.Kubeconfig == "" && o.Context == "" && len(raw.Contexts) == 0 {
		// No kubeconfig at all: inside a pod (the in-cluster runner), its ServiceAccount.
		if restCfg, err := rest.InClusterConfig(); err == nil {
			return connected(ctx, restCfg, "in-cluster", o.Timeout)
		}
	}
	contextName := o.Context
	if contextName == "" {
		contextName = raw.CurrentContext
	}
	if contextName == "" {
		return nil, fmt.Errorf("kubeconfig %s has no current context; pass --context (available: %s)", where, available(raw.Contexts))
	}
	if _, ok := raw.Contexts[contextName]; !ok {
		return nil, fmt.Errorf("context %q not in kubeconfig %s; available: %s", contextName, where, available(raw.Contexts))
	}
	restCfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, contextName, &clientcmd.ConfigOverrides{}, rules).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s, context %q: %w", where, contextName, err)
	}
	return connected(ctx, restCfg, contextName, o.Timeout)
}

// connected builds the clients on restCfg and checks that the API server answers.
func connected(ctx context.Context, restCfg *rest.Config, contextName string, timeout time.Duration) (*Clients, error) {
	var err error
	restCfg.QPS, restCfg.Burst = 50, 100 // the suite is bursty at spec start; the default 5 QPS throttles it.
	counter := &RequestCounter{}
	restCfg.Wrap(counter.Wrap)

	c := &Clients{REST: restCfg, Server: restCfg.Host, Context: contextName, Requests: counter}
	if c.Kube, err = kubernetes.NewForConfig(restCfg); err != nil {
		return nil, fmt.Errorf("building Kubernetes client for %s: %w", restCfg.Host, err)
	}
	if c.Kueue, err = kueueclient.NewForConfig(restCfg); err != nil {
		return nil, fmt.Errorf("building Kueue client for %s: %w", restCfg.Host, err)
	}
	if c.Dynamic, err = dynamic.NewForConfig(restCfg); err != nil {
		return nil, fmt.Errorf("building dynamic client for %s: %w", restCfg.Host, err)
	}
	if c.Resources, err = NewResources(restCfg); err != nil {
		return nil, fmt.Errorf("building klient for %s: %w", restCfg.Host, err)
	}
	if err := c.CheckReachable(ctx, timeout); err != nil {
		return nil, err
	}
	return c, nil
}

// addKueueToScheme registers Kueue's API in client-go's scheme, which klient uses (it already holds
// every built-in group, resource.k8s.io included). Once: schemes are not safe to write concurrently.
var addKueueToScheme = sync.OnceValue(func() error { return kueue.AddToScheme(scheme.Scheme) })

// NewResources builds klient on cfg (pass the counted config, so its requests are counted too), its
// scheme knowing Kueue's kinds besides the built-in ones.
func NewResources(cfg *rest.Config) (*resources.Resources, error) {
	if err := addKueueToScheme(); err != nil {
		return nil, fmt.Errorf("registering Kueue's API: %w", err)
	}
	return resources.New(cfg)
}

// ResourcesIn returns klient listing in ns ("": all namespaces, or a cluster-scoped kind). klient's
// WithNamespace sets the namespace on the client it is called on, so this scopes a copy and leaves the
// shared one alone.
func (c *Clients) ResourcesIn(ns string) *resources.Resources {
	r := *c.Resources
	return r.WithNamespace(ns)
}

// CheckReachable asks the server for its version and turns failures into advice.
func (c *Clients) CheckReachable(ctx context.Context, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Kube.Discovery().ServerVersion()
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		return UnreachableError(c.Server, c.Context, err)
	case <-time.After(timeout):
		return UnreachableError(c.Server, c.Context, fmt.Errorf("no answer within %s", timeout))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// UnreachableError explains a failed first contact with the API server.
func UnreachableError(server, contextName string, err error) error {
	hint := "check that the cluster is running and that this machine can reach it (VPN, proxy, firewall)"
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.As(err, &dnsErr):
		hint = fmt.Sprintf("the host name %q does not resolve; check the server address in the kubeconfig", dnsErr.Name)
	case errors.As(err, &opErr) && strings.Contains(err.Error(), "connection refused"):
		hint = "nothing listens there; check that the cluster is running (for the local cluster: `make cluster`)"
	case strings.Contains(err.Error(), "Unauthorized"):
		hint = "the server rejected the credentials; refresh them (e.g. re-run your cloud's get-credentials command)"
	case strings.Contains(err.Error(), "x509"):
		hint = "the server certificate is not trusted; check certificate-authority-data in the kubeconfig"
	}
	host := server
	if u, perr := url.Parse(server); perr == nil && u.Host != "" {
		host = u.Host
	}
	return fmt.Errorf("cannot reach the API server %s (context %q, %s): %w; %s", server, contextName, host, err, hint)
}

func available[V any](m map[string]V) string {
	names := slices.Sorted(maps.Keys(m))
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}
