package cluster

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// SettleWindow is how long discovery waits, from the run's start, for a device plugin that is
// (re)starting before it judges the device-plugin path. When the last plugin serving a resource
// disconnects, the kubelet's device manager marks all its devices unhealthy at once
// (ManagerImpl.PluginDisconnected → markResourceUnhealthy) and keeps their capacity for
// endpointStopGracePeriod (5 minutes): a plugin pod that restarts shows as capacity without allocatable
// until the new one registers on kubelet.sock, answers its first ListAndWatch, and the kubelet writes the
// node status again (every nodeStatusUpdateFrequency, 10 s by default). A minute covers a container
// start, the registration and several status updates; a plugin that serves nothing after that is broken,
// not starting.
const SettleWindow = 60 * time.Second

// devicePluginDir is where the kubelet listens for device plugin registrations (kubelet.sock) and the
// plugins put their sockets: DevicePluginPath of the device plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1). It is spelled out here because that package would link
// gRPC into the binary for one string; a test keeps the two equal.
const devicePluginDir = "/var/lib/kubelet/device-plugins"

// maxSettleNodes bounds the nodes one check lists pods on (one request each): a rollout's batch of nodes
// fits, and a cluster with thousands of GPU nodes costs the API server the same.
const maxSettleNodes = 16

// Settle lets the stack-ready wait of one run tell a device plugin that is re-registering (its pod new,
// not Ready yet, or being replaced) from a broken one, instead of calling the path "present but broken"
// while it recovers. A node is looked at when its status serves fewer devices than its capacity (or it is
// labelled as a GPU node and advertises none), and every GPU node while a plugin DaemonSet is not fully
// available, because the node status lags the kubelet by up to a status update. The plugin's pod is the
// node's pod owned by a DaemonSet whose template mounts devicePluginDir. The wait is bounded by the
// window; what could not be read, and every wait, becomes a note for the record. Not safe for concurrent
// use: one run's wait polls it.
type Settle struct {
	start  time.Time
	window time.Duration
	waits  map[string]*settleWait
	order  []string
	notes  []string
	noted  map[string]bool
	// published remembers the driver/node pairs (draKey) seen publishing devices during the run.
	published map[string]bool
}

// settleWait is what the run waited for on one node.
type settleWait struct {
	// first is why the node was settling when first seen; state is its status at the last check.
	first, state string
	// done is set when the node served its capacity again, after that long from the run's start.
	done  bool
	after time.Duration
	// last is the last check's time from the run's start.
	last time.Duration
	// driver and node are set for a DRA driver's plugin (CheckDRA); a device plugin's wait has neither.
	driver, node string
}

// NewSettle starts one run's settling; the window counts from start.
func NewSettle(start time.Time) *Settle {
	return &Settle{start: start, window: SettleWindow, waits: map[string]*settleWait{}, noted: map[string]bool{}, published: map[string]bool{}}
}

// Check is one poll of the stack-ready wait: nil when no node's device plugin is settling (the path is
// judged from nodes as they are), else an error naming the nodes still settling. nodes are the nodes
// discovery read; resource is the configured device-plugin resource ("" for any GPU resource); now is the
// poll's time. Once the window has passed nothing settles.
func (s *Settle) Check(ctx context.Context, kube kubernetes.Interface, nodes []corev1.Node, resource string, now time.Time) error {
	short := shortNodes(nodes, resource)
	elapsed := now.Sub(s.start)
	var settling map[string]string
	if elapsed < s.window {
		settling = s.inspect(ctx, kube, nodes, short, now)
	}
	s.record(short, settling, elapsed)
	if len(settling) == 0 {
		return nil
	}
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(settling)) {
		parts = append(parts, n+" ("+settling[n]+")")
	}
	// Three nodes with their reasons keep the line readable in a log that repeats it every poll.
	return fmt.Errorf("device plugin settling on %s; the device-plugin path is judged %s after the run started at the latest",
		strings.Join(firstN(parts, 3), ", "), s.window)
}

// Notes are what the record says of settling: what could not be read, then each node waited for.
func (s *Settle) Notes() []string {
	out := slices.Clone(s.notes)
	for _, n := range s.order {
		w := s.waits[n]
		if w.driver != "" {
			out = append(out, w.draNote())
			continue
		}
		if w.done {
			out = append(out, fmt.Sprintf("device plugin on %s re-registered %s after the run started (when first seen, %s); discovery waited for it instead of judging the device-plugin path broken",
				n, w.after.Round(time.Second), w.first))
			continue
		}
		out = append(out, fmt.Sprintf("device plugin on %s had not settled %s after the run started (when first seen, %s; at the last look the node %s): the device-plugin path was judged as it stood",
			n, w.last.Round(time.Second), w.first, cmp.Or(w.state, "served its capacity")))
	}
	return out
}

// note records a note once per key (the first wording).
func (s *Settle) note(key, text string) {
	if !s.noted[key] {
		s.noted[key] = true
		s.notes = append(s.notes, text)
	}
}

// inspect finds the plugin pods of the nodes to look at and returns the settling nodes with why.
func (s *Settle) inspect(ctx context.Context, kube kubernetes.Interface, nodes []corev1.Node, short map[string]string, now time.Time) map[string]string {
	shortNames := slices.Sorted(maps.Keys(short))
	list, err := kube.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		if len(short) > 0 {
			s.note("daemonsets", fmt.Sprintf("cannot list DaemonSets to find the device plugin's pods (%v): node(s) %s were judged without telling a re-registering plugin from a broken one",
				err, strings.Join(firstN(shortNames, 5), ", ")))
		}
		return nil
	}
	plugins := pluginDaemonSets(list.Items)
	if len(plugins) == 0 {
		if len(short) > 0 {
			s.note("no-plugin-daemonset", fmt.Sprintf("no DaemonSet mounts %s, so the device plugin's pods on node(s) %s could not be found: judged without telling a re-registering plugin from a broken one",
				devicePluginDir, strings.Join(firstN(shortNames, 5), ", ")))
		}
		return nil
	}
	rolling := rollingDaemonSets(plugins)
	look := shortNames
	if len(rolling) > 0 {
		look = append(look, readyGPUNodes(nodes, short)...)
	}
	if len(look) > maxSettleNodes {
		s.note("too-many-nodes", fmt.Sprintf("device plugin pods were looked for on %d of %d nodes (at most %d per check); the others were judged as they stood",
			maxSettleNodes, len(look), maxSettleNodes))
		look = look[:maxSettleNodes]
	}
	settling := map[string]string{}
	for _, node := range look {
		pods, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		if err != nil {
			s.note("pods/"+node, fmt.Sprintf("cannot list the pods on node %s to find its device plugin (%v): judged without telling a re-registering plugin from a broken one", node, err))
			continue
		}
		_, isShort := short[node]
		mine := pluginPods(pods.Items, node, plugins)
		if why := settlingWhy(mine, isShort, rolling, now, s.window); why != "" {
			settling[node] = why
		} else if isShort && len(mine) == 0 {
			s.note("no-plugin-pod/"+node, fmt.Sprintf("no device plugin pod runs on node %s (looked for pods of %s): judged as it stood", node, strings.Join(dsNames(plugins), ", ")))
		}
	}
	return settling
}

// record updates the waits from one check: a node settling now is waited for; one that neither settles
// nor is short any more is done.
func (s *Settle) record(short, settling map[string]string, elapsed time.Duration) {
	for _, n := range slices.Sorted(maps.Keys(settling)) {
		w := s.waits[n]
		if w == nil {
			w = &settleWait{first: settling[n]}
			s.waits[n] = w
			s.order = append(s.order, n)
		}
		w.done = false
	}
	for _, n := range s.order {
		w := s.waits[n]
		if w.driver != "" {
			continue
		}
		w.last = elapsed
		if w.done {
			continue
		}
		_, still := settling[n]
		state, isShort := short[n]
		w.state = state
		if !still && !isShort {
			w.done, w.after = true, elapsed
		}
	}
}
