// Package conformance is the catalogue of the CNCF Kubernetes AI Conformance checklist: the program's own
// checklist files (cncf/k8s-ai-conformance docs/AIConformance-1.NN.yaml, embedded verbatim in checklists/),
// with, per requirement, a one-line summary in this project's words and why gpuconform cannot speak to
// the ones outside GPU scheduling. Scenarios declare which requirements their specs prove
// (scenarios.Scenario.Proves, spec labels labels.Requirement); reports turns the results into evidence
// pages and the program's submission file (PRODUCT.yaml).
package conformance

import (
	"embed"
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// ID is a requirement's ID in the checklist (e.g. "secure_accelerator_access").
type ID string

// The requirement IDs of the checklists this suite knows.
const (
	DRASupport               ID = "dra_support"
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
	// Description is the checklist's own text, verbatim (a submission must keep it so).
	Description string
	// Summary says in a line what the requirement asks (this project's words).
	Summary string
	// OutOfScope says why no spec of gpuconform can prove the requirement; "" when some scenario can.
	OutOfScope string
}

// Checklist is one version of the checklist.
type Checklist struct {
	// Version is the Kubernetes minor the checklist belongs to ("1.37").
	Version string
	// Draft marks a checklist the program has not published (gpuconform's own draft of the next one).
	Draft        bool
	Requirements []Requirement
}

// Latest is the newest published checklist version this suite knows: what --profile ai-conformance
// means when the cluster's own minor has no checklist.
const Latest = "1.37"

// draft is the version of gpuconform's draft checklist (checklists/README.md).
const draft = "1.38"

//go:embed checklists/AIConformance-*.yaml
var checklistFiles embed.FS

// File is checklist version's file as the program publishes it (the draft's as gpuconform wrote it).
func File(version string) ([]byte, error) {
	data, err := checklistFiles.ReadFile("checklists/" + FileName(version))
	if err != nil {
		return nil, fmt.Errorf("unknown AI conformance checklist version %q (known: %s)", version, strings.Join(Versions(), ", "))
	}
	return data, nil
}

// FileName is a checklist version's file name, the program's own (docs/AIConformance-1.NN.yaml).
func FileName(version string) string { return "AIConformance-" + version + ".yaml" }

// outside GPU scheduling: the reasons a requirement is not this suite's to prove.
const (
	notScheduling = "a networking/serving requirement outside GPU scheduling: gpuconform runs no network driver and no disaggregated inference server"
	noGAIE        = "gpuconform routes inference traffic through the Gateway API's own weighted and header-matched rules (ai_inference), " +
		"not through the Inference Extension's InferencePool and endpoint picker"
	noVGPU = "vGPU and sandbox runtimes are not modelled by gpuconform's allocation paths"
)

// ours is this project's word on each requirement: a summary, and why it is out of scope where it is.
var ours = map[ID][2]string{
	DRASupport:               {"Dynamic Resource Allocation APIs enabled for accelerators", ""},
	DriverRuntimeManagement:  {"verifiable compatible drivers and runtime configuration on accelerator nodes, through DRA where the accelerator exposes its versions there", ""},
	GPUSharing:               {"at least one GPU sharing strategy (partitions as schedulable resources, or time-slicing oversubscription)", ""},
	VirtualizedAccelerator:   {"virtualized accelerators (e.g. vGPU) exposed and managed consistently with physical fractions", noVGPU},
	AIInference:              {"Gateway API with an implementation for advanced inference traffic management", ""},
	AdvancedInferenceIngress: {"the Gateway API Inference Extension routing to models", noGAIE},
	HighPerformanceNetwork:   {"specialised pod-to-pod network resources managed and discoverable, through DRA", notScheduling},
	DisaggregatedInference:   {"a disaggregated inference solution (separate prefill and decode) installed and running", notScheduling},
	GangScheduling:           {"at least one gang scheduling solution with all-or-nothing placement of distributed workloads", ""},
	ClusterAutoscaling:       {"node groups of an accelerator type scale up and down for pending pods that request it", ""},
	PodAutoscaling:           {"HorizontalPodAutoscaler works for accelerator pods, including custom AI metrics", ""},
	AcceleratorMetrics:       {"an accelerator metrics solution exposing per-accelerator utilisation and memory on a machine-readable endpoint", ""},
	AIServiceMetrics:         {"a monitoring system that discovers and collects workload metrics in a standard format", ""},
	SecureAcceleratorAccess:  {"access to accelerators isolated and mediated by the device plugin or DRA and the runtime: no unauthorised access or interference", ""},
	WorkloadSandboxing:       {"workloads run in a sandbox strongly isolated from the host kernel", noVGPU},
	RobustController:         {"a complex AI operator with a CRD installed and working: pods, webhooks, reconciliation", ""},
}

// Versions are the checklist versions this suite knows, oldest first (the draft last).
func Versions() []string { return []string{"1.33", "1.34", "1.35", "1.36", Latest, draft} }

// programFile is the part of a checklist file the catalogue reads.
type programFile struct {
	Spec map[string][]struct {
		ID          ID     `yaml:"id"`
		Description string `yaml:"description"`
		Level       Level  `yaml:"level"`
	} `yaml:"spec"`
}

// For returns the checklist of version, read from the program's file.
func For(version string) (Checklist, error) {
	if _, err := File(version); err != nil {
		return Checklist{}, err
	}
	c := parsed()[version]
	c.Requirements = slices.Clone(c.Requirements)
	return c, nil
}

// parsed are the embedded checklists, read once. A file that does not parse is a build defect that
// the package's test catches.
var parsed = sync.OnceValue(func() map[string]Checklist {
	out := map[string]Checklist{}
	for _, v := range Versions() {
		data, _ := File(v)
		var f programFile
		if err := yaml.Unmarshal(data, &f); err != nil {
			panic(fmt.Sprintf("embedded checklist %s: %v", v, err))
		}
		c := Checklist{Version: v, Draft: v == draft}
		for _, section := range Sections() {
			for _, r := range f.Spec[section] {
				w := ours[r.ID]
				c.Requirements = append(c.Requirements, Requirement{ID: r.ID, Section: section, Level: r.Level, Description: r.Description,
					Summary: w[0], OutOfScope: w[1]})
			}
		}
		out[v] = c
	}
	return out
})

// ForKubernetes is the checklist version of a cluster's Kubernetes version ("v1.37.2"): its own minor's
// when the program has published one, else false.
func ForKubernetes(serverVersion string) (string, bool) {
	parts := strings.SplitN(strings.TrimPrefix(serverVersion, "v"), ".", 3)
	if len(parts) < 2 {
		return "", false
	}
	v := parts[0] + "." + parts[1]
	return v, v != draft && slices.Contains(Versions(), v)
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

// Metadata is the submission's metadata section, in the program's keys (instructions.md): who certifies
// which product. gpuconform cannot know it; the participant supplies it (config section `product`, or
// --product-metadata FILE) and PRODUCT.yaml leaves each missing field blank with a TODO.
type Metadata struct {
	PlatformName        string `json:"platformName,omitempty" yaml:"platformName,omitempty"`
	PlatformVersion     string `json:"platformVersion,omitempty" yaml:"platformVersion,omitempty"`
	VendorName          string `json:"vendorName,omitempty" yaml:"vendorName,omitempty"`
	WebsiteURL          string `json:"websiteUrl,omitempty" yaml:"websiteUrl,omitempty"`
	RepoURL             string `json:"repoUrl,omitempty" yaml:"repoUrl,omitempty"`
	DocumentationURL    string `json:"documentationUrl,omitempty" yaml:"documentationUrl,omitempty"`
	ProductLogoURL      string `json:"productLogoUrl,omitempty" yaml:"productLogoUrl,omitempty"`
	Description         string `json:"description,omitempty" yaml:"description,omitempty"`
	ContactEmailAddress string `json:"contactEmailAddress,omitempty" yaml:"contactEmailAddress,omitempty"`
	K8sConformanceURL   string `json:"k8sConformanceUrl,omitempty" yaml:"k8sConformanceUrl,omitempty"`
}

// MetadataField is one metadata key of the program: whether a submission must fill it, and what it is.
type MetadataField struct {
	Key      string
	Required bool
	What     string
}

// MetadataFields are the program's metadata keys in its order (instructions.md, scripts/validate.go);
// kubernetesVersion is the checklist's own and not listed.
func MetadataFields() []MetadataField {
	return []MetadataField{
		{"platformName", true, "name of the product being certified"},
		{"platformVersion", true, "version of the product (not of Kubernetes)"},
		{"vendorName", true, "legal entity certifying, exactly as listed under CNCF Members in the CNCF Landscape"},
		{"websiteUrl", true, "URL of the product's website"},
		{"repoUrl", false, "primary repository of an open-source product"},
		{"documentationUrl", true, "URL of the product's documentation"},
		{"productLogoUrl", true, "URL of the product's logo, an SVG, EPS or AI file"},
		{"description", true, "one sentence describing the offering"},
		{"contactEmailAddress", true, "address for the maintainers of the submission"},
		{"k8sConformanceUrl", true, "the product's Kubernetes Conformance submission, https://github.com/cncf/k8s-conformance/tree/master/vX.Y/NAME"},
	}
}

// Get is the value of a metadata key ("" for an unknown one).
func (m Metadata) Get(key string) string {
	return map[string]string{
		"platformName": m.PlatformName, "platformVersion": m.PlatformVersion, "vendorName": m.VendorName,
		"websiteUrl": m.WebsiteURL, "repoUrl": m.RepoURL, "documentationUrl": m.DocumentationURL,
		"productLogoUrl": m.ProductLogoURL, "description": m.Description, "contactEmailAddress": m.ContactEmailAddress,
		"k8sConformanceUrl": m.K8sConformanceURL,
	}[key]
}

// conditional are the MUST requirements that bind only a platform offering the thing (an autoscaler, the
// HPA on custom metrics, an inference gateway): N/A, with the evidence, where the cluster evidently has none.
var conditional = []ID{ClusterAutoscaling, PodAutoscaling, AIInference}

// Conditional reports whether id may be N/A on a cluster that does not offer what it is about.
func Conditional(id ID) bool { return slices.Contains(conditional, id) }
