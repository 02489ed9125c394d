// Package timeouts is the suite's one timeout vocabulary: a wait for the cluster names what it waits for,
// and the profile (local kind cluster or real cluster) decides how long that is. Durations that are not
// waits for the cluster stay where they are chosen: a workload's parameters (a training step, a grace
// period), the rounding of a measurement, poll intervals, and the bounded contexts of cleanup and of a
// single API read.
package timeouts

import (
	"fmt"
	"time"
)

// Profile names.
const (
	// ProfileLocal is the offline kind cluster with fake GPUs: images are side-loaded, nodes are idle.
	ProfileLocal = "local"
	// ProfileReal is a real cluster: images are pulled, autoscalers may add nodes, drivers load.
	ProfileReal = "real"
	// ProfileAuto picks local for a kind cluster (every node's providerID is kind://) and real otherwise,
	// once the nodes are read; until then it waits as real does.
	ProfileAuto = "auto"
)

// Timeouts holds every budget the suite waits with. Each field says what it waits for and why that long.
type Timeouts struct {
	// Poll is the interval between checks of a polled condition. Short enough that a spec does not idle,
	// long enough not to load the API server when many specs poll at once.
	Poll time.Duration
	// API bounds one API request (get, list, create). A healthy API server answers in well under a
	// second; the margin covers a busy control plane.
	API time.Duration
	// StackReady waits at suite start for Kueue's webhook to have endpoints and for the GPU stack to
	// advertise devices (allocatable > 0, ResourceSlices published). A freshly created cluster may still be
	// starting its plugins when the suite begins. A Kueue controller that is down for good ends the wait
	// at once, one that is not coming up after a short grace (framework/suite's stack wait).
	StackReady time.Duration
	// QueueActive waits for a ClusterQueue/LocalQueue the spec created to report Active. Kueue reconciles
	// them in about a second; the margin covers a Kueue that is just restarting.
	QueueActive time.Duration
	// Admission waits for Kueue to admit a workload whose quota is free. Admission is one scheduling
	// cycle when quota is available; longer means the queue or flavor is misconfigured.
	Admission time.Duration
	// PodStart waits from admission until the pod runs: scheduling, DRA allocation, image pull, the
	// device plugin's Allocate, container start. On a real cluster the image pull dominates.
	PodStart time.Duration
	// JobRun waits for a short probe Job to complete after its pod starts. The probe itself takes
	// seconds; the budget covers kubelet status propagation and the Job controller.
	JobRun time.Duration
	// Release waits for devices to be given back after a pod ends: the generated ResourceClaim is
	// unreserved/deleted by the claim controller and the kubelet frees device-plugin devices.
	Release time.Duration
	// HelperPod waits for a short helper pod (the podresources reader) to run to completion on a node.
	HelperPod time.Duration
	// Metrics waits for a device a pod holds to appear on the accelerator metrics endpoint, attributed to
	// the pod: the DCGM exporter collects every 30 s by default and maps devices to pods at collection, and
	// a Prometheus in between adds its scrape interval (30–60 s); the local fake answers at each scrape. It
	// also bounds a workload's own counter growing between two of the monitoring system's scrapes.
	Metrics time.Duration
	// Autoscale waits for the custom metrics API to serve a new workload's metric and the HPA to act on
	// it: prometheus-adapter finds new series at its relist (every 10 min by default; 15 s on the local
	// cluster), and the HPA controller reads its metrics every 15 s.
	Autoscale time.Duration
	// NodeScale waits for a node autoscaler to add a node for a pending pod (the cloud's provisioning and the
	// kubelet's registration: minutes for a GPU instance), and again to remove the node once it is empty
	// (cluster-autoscaler's --scale-down-unneeded-time and --scale-down-delay-after-add are 10 min each by
	// default; Karpenter's consolidateAfter is the NodePool's).
	NodeScale time.Duration
	// Gateway waits for a Gateway API implementation to program a new Gateway (a cloud's load balancer
	// takes minutes) and to accept a route attached to it.
	Gateway time.Duration
	// Rejection waits for the API server to answer a create that must be rejected.
	Rejection time.Duration
	// Cleanup bounds deleting one spec's objects, namespace included: pods terminate with their grace
	// period and namespace finalization deletes every object inside.
	Cleanup time.Duration
	// NodeLost waits for a stopped node to be reported not Ready (kube-controller-manager's
	// --node-monitor-grace-period, 50s by default) and its pods to be evicted (their tolerationSeconds).
	NodeLost time.Duration
	// NodeReturn waits for a started node to be Ready again and to advertise its devices: the machine
	// boots, the kubelet registers, the GPU driver and plugin come up.
	NodeReturn time.Duration
}

// Local is the profile for the offline kind cluster.
func Local() Timeouts {
	return Timeouts{
		Poll:        250 * time.Millisecond,
		API:         15 * time.Second,
		StackReady:  3 * time.Minute,
		QueueActive: 30 * time.Second,
		Admission:   45 * time.Second,
		PodStart:    90 * time.Second,
		JobRun:      90 * time.Second,
		Release:     60 * time.Second,
		HelperPod:   60 * time.Second,
		Metrics:     30 * time.Second,
		Autoscale:   2 * time.Minute,
		NodeScale:   3 * time.Minute,
		Gateway:     2 * time.Minute,
		Rejection:   15 * time.Second,
		Cleanup:     2 * time.Minute,
		NodeLost:    3 * time.Minute,
		NodeReturn:  4 * time.Minute,
	}
}

// Real is the profile for a real cluster: longer everywhere a pull, a driver or an autoscaler may sit
// on the path.
func Real() Timeouts {
	return Timeouts{
		Poll:        2 * time.Second,
		API:         30 * time.Second,
		StackReady:  10 * time.Minute,
		QueueActive: 2 * time.Minute,
		Admission:   3 * time.Minute,
		PodStart:    10 * time.Minute,
		JobRun:      5 * time.Minute,
		Release:     3 * time.Minute,
		HelperPod:   5 * time.Minute,
		Metrics:     3 * time.Minute,
		Autoscale:   15 * time.Minute,
		NodeScale:   30 * time.Minute,
		Gateway:     10 * time.Minute,
		Rejection:   30 * time.Second,
		Cleanup:     10 * time.Minute,
		NodeLost:    10 * time.Minute,
		NodeReturn:  20 * time.Minute,
	}
}

// ForProfile returns the named profile.
func ForProfile(name string) (Timeouts, error) {
	switch name {
	case ProfileLocal:
		return Local(), nil
	case ProfileReal, ProfileAuto, "":
		return Real(), nil
	}
	return Timeouts{}, fmt.Errorf("unknown timeout profile %q: use %q (decide from the nodes), %q (kind cluster) or %q (real cluster)", name, ProfileAuto, ProfileLocal, ProfileReal)
}
