// Package probe reports which devices a container can see, from every place a device plugin, a DRA
// driver or the NVIDIA runtime may have left a trace, and checks that against what the pod asked for.
//
// The suite runs `gpu-workload probe --expect N` in pods and reads the JSON line it prints (and the
// same document in the termination message), so the field names of Report are a contract: add fields,
// never rename them.
package probe

// Report is the single JSON document `gpu-workload probe` prints.
type Report struct {
	// Node is $NODE_NAME (set through the downward API) or, failing that, the hostname.
	Node string `json:"node"`
	// Pod is $POD_NAME (set through the downward API); empty when the pod did not pass it.
	Pod string `json:"pod"`
	// Devices is the deduplicated, sorted set of device identities the container sees; see
	// UnionRule for how sources are combined. Never null, so "no device" is an empty array.
	Devices []string `json:"devices"`
	// CountedFrom names the Sources fields that contributed to Devices, so a reader can tell a count
	// taken from nvidia-smi from one taken from an environment variable.
	CountedFrom []string `json:"counted_from"`
	// Sources is the raw evidence, one field per place devices can be discovered.
	Sources Sources `json:"sources"`
	// Expect is the --expect value, null when the flag was not given.
	Expect *int `json:"expect"`
	// ExpectIDs is the --expect-ids set, null when the flag was not given.
	ExpectIDs []string `json:"expect_ids"`
	// OK is false when an expectation was given and not met.
	OK bool `json:"ok"`
	// Message is a one-line human explanation; on failure it names the missing and unexpected devices.
	Message string `json:"message"`
	// DriverVersion is the driver version nvidia-smi prints in this container
	// (`--query-gpu=driver_version`), to compare with what the node advertises; empty when nvidia-smi is
	// not installed or did not say.
	DriverVersion string `json:"driver_version"`
	// CUDAVersion is the CUDA version nvidia-smi prints (`--version`, or the summary's header); empty when
	// nvidia-smi is not installed or did not say.
	CUDAVersion string `json:"cuda_version"`
	// VersionError says why nvidia-smi, although installed, gave no DriverVersion or CUDAVersion.
	VersionError string `json:"version_error,omitempty"`
	// MIGDevices are the MIG devices `nvidia-smi -L` lists, each with its parent GPU: null when
	// nvidia-smi is not installed or failed, empty when it listed none. Devices holds their UUIDs too.
	MIGDevices []MIGDevice `json:"mig_devices"`
	// GPUs are the GPUs nvidia-smi shows with their total memory (`--query-gpu=uuid,memory.total`): null
	// when nvidia-smi is not installed or failed, empty when it shows none.
	GPUs []GPUMemory `json:"gpus"`
	// GPUsError says why nvidia-smi, although it listed the GPUs, gave no memory for them.
	GPUsError string `json:"gpus_error,omitempty"`
	// MPS is what the container shows of CUDA MPS: its pipe directory and the MPS control daemon's default
	// limits, read through nvidia-cuda-mps-control; null when no CUDA_MPS_* variable is set.
	MPS *MPS `json:"mps"`
	// Truncated is true only in a termination message that had to drop Sources to fit the kubelet's
	// size limit; stdout always carries the full report.
	Truncated bool `json:"truncated,omitempty"`
}

// Sources holds what each discovery mechanism reported. A null field means that source was absent
// (variable unset, binary not installed); an empty array means it was present and listed nothing.
type Sources struct {
	// NvidiaVisibleDevices is NVIDIA_VISIBLE_DEVICES split on commas, recorded verbatim, including the
	// special values "all", "none", "void" and "" that name no specific device.
	NvidiaVisibleDevices []string `json:"nvidia_visible_devices"`
	// DRAEnv holds every GPU_DEVICE_* variable the dra-example-driver injected through CDI, including
	// the suffixed ones (GPU_DEVICE_0_RESOURCE_CLAIM, ..._SHARING_STRATEGY, ...) that describe a device
	// rather than name one. Only keys matching ^GPU_DEVICE_[0-9]+$ count as devices.
	DRAEnv map[string]string `json:"dra_env"`
	// GPUConformVisibleDevices is GPUCONFORM_VISIBLE_DEVICES split on commas: the generic variable the
	// suite's own fake device plugin and DRA driver set.
	GPUConformVisibleDevices []string `json:"gpuconform_visible_devices"`
	// DevFiles lists the /dev/nvidiaN character devices present, sorted by N.
	DevFiles []string `json:"dev_files"`
	// NvidiaSMI lists the UUIDs `nvidia-smi -L` printed; a GPU split into MIG instances is listed as
	// its MIG UUIDs, since those are what the container was given.
	NvidiaSMI []string `json:"nvidia_smi"`
	// NvidiaSMIError says why nvidia-smi, although installed, produced nothing usable.
	NvidiaSMIError string `json:"nvidia_smi_error,omitempty"`
}

// Names of Sources fields as they appear in JSON and in Report.CountedFrom.
const (
	SourceNvidiaVisibleDevices     = "nvidia_visible_devices"
	SourceDRAEnv                   = "dra_env"
	SourceGPUConformVisibleDevices = "gpuconform_visible_devices"
	SourceDevFiles                 = "dev_files"
	SourceNvidiaSMI                = "nvidia_smi"
)
