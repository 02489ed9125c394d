// Package conformance is the catalogue of the CNCF Kubernetes AI Conformance checklist: the requirement
// IDs of each checklist version this suite knows (cncf/k8s-ai-conformance docs/AIConformance-1.NN.yaml),
// their section and level, and why gpuconform cannot speak to the ones outside GPU scheduling. Scenarios
// declare which requirements their specs prove (scenarios.Scenario.Proves, spec labels
// labels.Requirement); reports turns the results into evidence pages and a filled checklist. The
// descriptions here are short summaries in this project's words: the checklist's own text is the
// program's, and a reader is pointed to it.
package conformance

import (
	"fmt"
	"slices"
	"strings"
)

// ID is a requirement's ID in the checklist (e.g. "secure_accelerator_access").
type ID string

// The requirement IDs of the checklists this suite knows.
const (
	DriverRuntimeManagement  ID = "driver_runtime_management"
	GPUSharing               ID = "gpu_sharing"
	VirtualizedAccelerator   ID = "virtualized_accelerator"
	AIInference              ID = "ai_inference"
	AdvancedInferenceIngress ID = "advanced_inference_ingress"
	HighPerformanceNetwork   ID = "high_performance_networking"
	DisaggregatedInference   ID = "disaggregated_inference"
	GangScheduling           ID = "gang_scheduling"
	ClusterAutoscaling       ID = "cluster_autoscaling"
	PodAutoscaling           ID = "pod_autoscaling"
	AcceleratorMetrics       ID = "accelerator_metrics"
	AIServiceMetrics         ID = "ai_service_metrics"
	SecureAcceleratorAccess  ID = "secure_accelerator_access"
	WorkloadSandboxing       ID = "workload_sandboxing"
	RobustController         ID = "robust_controller"
)

// Level is a requirement's level in the checklist.
type Level string

// Levels.
const (
	Must   Level = "MUST"
	Should Level = "SHOULD"
)

// Requirement is one row of a checklist.
type Requirement struct {
	ID ID
	// Section is the checklist's section key (accelerators, networking, schedulingOrchestration,
	// observability, security, operator).
	Section string
	Level   Level
	// Summary says in a line what the requirement asks (this project's words).
	Summary string
	// OutOfScope says why no spec of gpuconform can prove the requirement; "" when some scenario can.
	OutOfScope string
}

// Checklist is one version of the checklist.
type Checklist struct {
	// Version is the Kubernetes minor the checklist belongs to ("1.37").
	Version      string
	Requirements []Requirement
}

// Latest is the newest checklist version this suite knows: what --profile ai-conformance means.
const Latest = "1.37"

// outside GPU scheduling: the reasons a requirement is not this suite's to prove.
const (
	notScheduling = "a networking/serving requirement outside GPU scheduling: gpuconform runs no Gateway, inference server or network driver"
	noAutoscaler  = "needs an autoscaled accelerator node group or an HPA on custom metrics; gpuconform neither scales nodes nor installs a metrics adapter"
	noOperator    = "asks for an AI operator such as Ray or Kubeflow; gpuconform exercises Kueue's controller and webhook (gang and preemption evidence) but does not claim them for this requirement"
	noVGPU        = "vGPU and sandbox runtimes are not modelled by gpuconform's allocation paths"
)

// v136 is the checklist of Kubernetes 1.36; 1.37 adds workload sandboxing (SHOULD).
var v136 = []Requirement{
	{DriverRuntimeManagement, "accelerators", Should, "verifiable compatible drivers and runtime configuration on accelerator nodes, through DRA where the accelerator exposes its versions there", ""},
	{GPUSharing, "accelerators", Should, "at least one GPU sharing strategy (partitions as schedulable resources, or time-slicing oversubscription)", ""},
	{VirtualizedAccelerator, "accelerators", Should, "virtualized accelerators (e.g. vGPU) exposed and managed consistently with physical fractions", noVGPU},
	{AIInference, "networking", Must, "Gateway API with an implementation for advanced inference traffic management", notScheduling},
	{AdvancedInferenceIngress, "networking", Should, "the Gateway API Inference Extension routing to models", notScheduling},
	{HighPerformanceNetwork, "networking", Should, "specialised pod-to-pod network resources managed and discoverable, through DRA", notScheduling},
	{DisaggregatedInference, "networking", Should, "a disaggregated inference solution (separate prefill and decode) installed and running", notScheduling},
	{GangScheduling, "schedulingOrchestration", Must, "at least one gang scheduling solution with all-or-nothing placement of distributed workloads", ""},
	{ClusterAutoscaling, "schedulingOrchestration", Must, "node groups of an accelerator type scale up and down for pending pods that request it", noAutoscaler},
	{PodAutoscaling, "schedulingOrchestration", Must, "HorizontalPodAutoscaler works for accelerator pods, including custom AI metrics", noAutoscaler},
	{AcceleratorMetrics, "observability", Must, "an accelerator metrics solution exposing per-accelerator utilisation and memory on a machine-readable endpoint", ""},
	{AIServiceMetrics, "observability", Must, "a monitoring system that discovers and collects workload metrics in a standard format", notScheduling},
	{SecureAcceleratorAccess, "security", Must, "access to accelerators isolated and mediated by the device plugin or DRA and the runtime: no unauthorised access or interference", ""},
	{RobustController, "operator", Must, "a complex AI operator with a CRD installed and working: pods, webhooks, reconciliation", noOperator},
}

var v137 = slices.Insert(slices.Clone(v136), 13,
	Requirement{WorkloadSandboxing, "security", Should, "workloads run in a sandbox strongly isolated from the host kernel", noVGPU})

// Versions are the checklist versions this suite knows, oldest first.
func Versions() []string { return []string{"1.36", Latest} }

// For returns the checklist of version.
func For(version string) (Checklist, error) {
	switch version {
	case "1.36":
		return Checklist{Version: version, Requirements: slices.Clone(v136)}, nil
	case "1.37":
		return Checklist{Version: version, Requirements: slices.Clone(v137)}, nil
	}
	return Checklist{}, fmt.Errorf("unknown AI conformance checklist version %q (known: %s)", version, strings.Join(Versions(), ", "))
}

// Known reports whether some known checklist has the requirement.
func Known(id ID) bool {
	for _, v := range Versions() {
		c, _ := For(v)
		if _, ok := c.Find(id); ok {
			return true
		}
	}
	return false
}

// Find returns the checklist's requirement id.
func (c Checklist) Find(id ID) (Requirement, bool) {
	i := slices.IndexFunc(c.Requirements, func(r Requirement) bool { return r.ID == id })
	if i < 0 {
		return Requirement{}, false
	}
	return c.Requirements[i], true
}

// Sections are the checklist's sections in its own order.
func Sections() []string {
	return []string{"accelerators", "networking", "schedulingOrchestration", "observability", "security", "operator"}
}

// Profile names: the signoff (every scenario) and the AI conformance profile, optionally of a version.
const (
	ProfileSignoff       = "signoff"
	ProfileAIConformance = "ai-conformance"
)

// ParseProfile returns whether profile is an AI conformance profile and its checklist version (the
// latest for a bare "ai-conformance"); "" and "signoff" are the default signoff profile. Anything else is
// an error that names the profiles.
func ParseProfile(profile string) (conformance bool, version string, err error) {
	switch profile {
	case "", ProfileSignoff:
		return false, Latest, nil
	case ProfileAIConformance:
		return true, Latest, nil
	}
	if v, ok := strings.CutPrefix(profile, ProfileAIConformance+"-"); ok {
		if _, err := For(v); err == nil {
			return true, v, nil
		}
	}
	names := []string{ProfileSignoff, ProfileAIConformance}
	for _, v := range Versions() {
		names = append(names, ProfileAIConformance+"-"+v)
	}
	return false, "", fmt.Errorf("unknown profile %q (known: %s)", profile, strings.Join(names, ", "))
}

// Proof is a scenario's claim that some of its specs prove a requirement, and how.
type Proof struct {
	Requirement ID `json:"requirement"`
	// How says what the specs check, in a sentence a certifier can hold the output against.
	How string `json:"how"`
}

// Claim is a Proof with the scenario that makes it: what the record carries so the evidence pages can
// say which scenario stands behind a requirement and why it did not run.
type Claim struct {
	Proof
	Scenario string `json:"scenario"`
}
