// Package reports turns a run into evidence: the compatibility record (what stack was tested), the
// results written by Ginkgo, and a Markdown signoff report with a go/no-go verdict. Everything renders
// from files in the artifacts directory, so a report can be regenerated offline.
package reports

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"gpuconform.io/gpuconform/framework/artifacts"
	"gpuconform.io/gpuconform/framework/audit"
	"gpuconform.io/gpuconform/framework/cluster"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/timeline"
)

// RecordFile is the name of the record in the artifacts directory.
const RecordFile = "gpuconform-record.json"

// RemoveRunArtifacts deletes the files an earlier run left in dir that a run writes again (its reports,
// record, signoff and per-spec timelines): a stale report must never be rendered as a new run's.
func RemoveRunArtifacts(dir string) {
	for _, f := range []string{"gpuconform-report.json", JUnitFile, RecordFile, "signoff.md", HTMLFile, ProductFile} {
		_ = os.Remove(filepath.Join(dir, f))
	}
	_ = os.RemoveAll(filepath.Join(dir, "specs"))
	_ = os.RemoveAll(filepath.Join(dir, EvidenceDir))
	_ = os.RemoveAll(filepath.Join(dir, ProcessRequestsDir))
}

// Record is the compatibility record of one run.
type Record struct {
	RunID             string          `json:"runID"`
	GeneratedAt       time.Time       `json:"generatedAt"`
	Context           string          `json:"context"`
	Server            string          `json:"server"`
	KubernetesVersion string          `json:"kubernetesVersion"`
	Kueue             KueueRecord     `json:"kueue"`
	Paths             []PathRecord    `json:"paths"`
	Sharing           cluster.Sharing `json:"sharing"`
	// ObservedSharing is what the run's pods were given of shared GPUs (ObservedSharing), "" when no
	// pod was given a replica ID.
	ObservedSharing string `json:"observedSharing,omitempty"`
	// SharingModes are, per node and path, how the node shares its GPUs, read from evidence by discovery.
	SharingModes []cluster.NodeSharingMode `json:"sharingModes,omitempty"`
	// SharingSeen are what the run's pods saw of their node's sharing (the specs' SharingObservedEntry
	// entries), kept so a report rendered without the specs still shows them.
	SharingSeen []gpu.SharingObservation `json:"sharingSeen,omitempty"`
	Nodes       []NodeRecord             `json:"nodes"`
	// FeatureGates are the GPU-relevant gates of the API server and of one GPU node's kubelet, read from
	// their kubernetes_feature_enabled metric (cluster.ReadFeatureGates); empty when unreadable (Notes say why).
	FeatureGates []cluster.FeatureGate `json:"featureGates"`
	// AcceleratorMetrics is where per-device metrics were read (a DCGM exporter Service or a Prometheus),
	// or "none: why".
	AcceleratorMetrics string `json:"acceleratorMetrics,omitempty"`
	// Monitoring is the monitoring system asked whether it collects a workload's own metrics (a Prometheus),
	// or "none: why".
	Monitoring string `json:"monitoring,omitempty"`
	// NodeMonitorGracePeriod is how long the control plane waits before it calls a silent node NotReady
	// (every node-failure timing starts with it), or "not visible: why".
	NodeMonitorGracePeriod string         `json:"nodeMonitorGracePeriod,omitempty"`
	NotExercised           []NotExercised `json:"notExercised"`
	// LeakAudit is the end-of-run audit; nil when it did not run.
	LeakAudit *audit.Result `json:"leakAudit,omitempty"`
	Notes     []string      `json:"notes,omitempty"`
	// Signoff is the verdict policy of this run (requirements, baseline).
	Signoff Signoff `json:"signoff"`
	// Results are the leaf specs' outcomes by full text: a later run's baseline.
	Results map[string]string `json:"results,omitempty"`
	// SetupFailure says why the run stopped before its specs ("" when it reached them).
	SetupFailure string `json:"setupFailure,omitempty"`
	// SetupRefused says that SetupFailure is a refusal (run.Refusal: another run, leftovers, the run's own
	// namespace settings), not a finding about the cluster: the verdict is INCOMPLETE.
	SetupRefused bool `json:"setupRefused,omitempty"`
	// Taints are the GPU pool's dedication taints, those test pods tolerated, and nodes left out.
	Taints cluster.Taints `json:"taints"`
	// Parameters are how the run was set up (profile, namespace mode, pool, tolerations).
	Parameters Parameters `json:"parameters"`

	// APIRequests are the requests the whole run sent to the API server, by kind.
	APIRequests cluster.Counts `json:"apiRequests,omitempty"`

	// Timelines are the specs' timelines (specs/<spec>/timeline.json), read from the artifacts directory
	// when a report is rendered; they are files of their own, not part of the record.
	Timelines []timeline.Timeline `json:"-"`
}

// Parameters are the run's set-up as the report shows it.
type Parameters struct {
	TimeoutProfile    string              `json:"timeoutProfile"`
	TimeoutProfileWhy string              `json:"timeoutProfileWhy,omitempty"`
	Namespace         string              `json:"namespace,omitempty"`
	LocalQueue        string              `json:"localQueue,omitempty"`
	GPUPool           []string            `json:"gpuPool,omitempty"`
	Tolerations       []corev1.Toleration `json:"tolerations,omitempty"`
	// Faults says which provider injects which fault (disruptive runs).
	Faults string `json:"faults,omitempty"`
	// Checkpoints is the storage that outlives a node ("none" without).
	Checkpoints string `json:"checkpoints,omitempty"`
	// Filters is how the user narrowed the run (label filter, focus, skip), as the run was started: the
	// signoff of a run that stopped before its specs, which has no Ginkgo report, still says it.
	Filters string `json:"filters,omitempty"`
}

// KueueRecord is Kueue's presence and version.
type KueueRecord struct {
	Present bool   `json:"present"`
	Version string `json:"version"`
	// WaitForPodsReady is Kueue's all-or-nothing setting for gangs as read from its Configuration:
	// "timeout 45s, …", or "off: …" / "unknown: …" with why.
	WaitForPodsReady string `json:"waitForPodsReady,omitempty"`
	// TAS is its topology-aware scheduling: the Topologies and their levels, or why there are none.
	TAS string `json:"tas,omitempty"`
}

// PathRecord is one exercised allocation path.
type PathRecord struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// DriverVersion is the DRA driver's (or device plugin's) reported version when known.
	DriverVersion string `json:"driverVersion,omitempty"`
}

// NodeRecord is one GPU node's stack.
type NodeRecord struct {
	Name                string `json:"name"`
	Accelerator         string `json:"accelerator"`
	Driver              string `json:"driver"`
	OSImage             string `json:"osImage"`
	Kernel              string `json:"kernel"`
	ContainerRuntime    string `json:"containerRuntime"`
	Kubelet             string `json:"kubelet"`
	DevicePluginDevices int64  `json:"devicePluginDevices"`
	DRADevices          int    `json:"draDevices"`
	// FakeGPUs is the evidence that the node's GPUs are the project's fakes; empty: real.
	FakeGPUs string `json:"fakeGPUs,omitempty"`
}

// GPUsFake reports whether every GPU node of the record is one of the project's fakes: only then is a
// stand-in not a gap in the evidence. A record without GPU nodes is not fake.
func (r Record) GPUsFake() bool {
	return len(r.Nodes) > 0 && !slices.ContainsFunc(r.Nodes, func(n NodeRecord) bool { return n.FakeGPUs == "" })
}

// NotExercised is one check that was not registered, and why.
type NotExercised struct {
	What string `json:"what"`
	Why  string `json:"why"`
}

// PathDescriber is the part of an allocation path the record needs.
type PathDescriber interface {
	Name() string
	Describe() string
}

// NewRecord builds a record from discovered capabilities.
func NewRecord(runID, contextName, server string, caps cluster.Capabilities, paths []PathDescriber) Record {
	r := Record{
		RunID: runID, GeneratedAt: time.Now().UTC(), Context: contextName, Server: server,
		KubernetesVersion: caps.ServerVersion,
		Kueue:             KueueRecord{Present: caps.Kueue.Present, Version: caps.Kueue.Version, WaitForPodsReady: podsReadyWords(caps.Kueue), TAS: tasWords(caps.Kueue)},
		Sharing:           caps.Sharing,
		SharingModes:      caps.SharingModes,
		Notes:             caps.Notes,
	}
	for _, p := range paths {
		pr := PathRecord{Name: p.Name(), Description: p.Describe()}
		if p.Name() == "dra" && caps.DRA != nil {
			pr.DriverVersion = caps.DRA.DriverVersion
		}
		r.Paths = append(r.Paths, pr)
	}
	for _, n := range caps.Nodes {
		r.Nodes = append(r.Nodes, NodeRecord{
			Name: n.Name, Accelerator: n.Product, Driver: n.Driver, OSImage: n.OSImage, Kernel: n.Kernel,
			ContainerRuntime: n.ContainerRuntime, Kubelet: n.Kubelet, DevicePluginDevices: n.DevicePluginDevices, DRADevices: n.DRADevices,
			FakeGPUs: n.FakeGPUs,
		})
	}
	for what, why := range caps.NotExercised {
		r.NotExercised = append(r.NotExercised, NotExercised{What: what, Why: why})
	}
	r.SortNotExercised()
	return r
}

// AddNotExercised appends an entry, ignoring exact duplicates.
func (r *Record) AddNotExercised(what, why string) {
	for _, n := range r.NotExercised {
		if n.What == what && n.Why == why {
			return
		}
	}
	r.NotExercised = append(r.NotExercised, NotExercised{What: what, Why: why})
	r.SortNotExercised()
}

// SortNotExercised orders entries for stable output.
func (r *Record) SortNotExercised() {
	slices.SortFunc(r.NotExercised, func(a, b NotExercised) int { return cmp.Compare(a.What, b.What) })
}

// Write writes the record as JSON into dir.
func (r Record) Write(dir string) (string, error) {
	return artifacts.WriteJSON(dir, RecordFile, r)
}

// ReadRecord reads a record file.
func ReadRecord(path string) (Record, error) {
	var r Record
	data, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// podsReadyWords is the record's line for Kueue's waitForPodsReady ("" without Kueue).
func podsReadyWords(k cluster.KueueInfo) string {
	switch {
	case !k.Present:
		return ""
	case k.PodsReady != nil:
		return k.PodsReady.String()
	}
	return k.PodsReadyWhy
}

// tasWords is the record's line for Kueue's topology-aware scheduling ("" without Kueue).
func tasWords(k cluster.KueueInfo) string {
	if !k.Present {
		return ""
	}
	if len(k.Topologies) == 0 {
		return k.TopologiesWhy
	}
	var out []string
	for _, t := range k.Topologies {
		out = append(out, "Topology "+t.Name+": "+strings.Join(t.Levels, " > "))
	}
	return strings.Join(out, "; ")
}
