package gpu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
)

// The JSON documents the workload image prints. They live here, in one file, so a change in the image's
// output is adapted in one place. Unknown fields are ignored; the suite relies only on these.

// ProbeReport is one line of `gpu-workload probe`.
type ProbeReport struct {
	Node      string       `json:"node"`
	Pod       string       `json:"pod"`
	Devices   []string     `json:"devices"`
	Sources   ProbeSources `json:"sources"`
	Expect    *int         `json:"expect"`
	ExpectIDs []string     `json:"expect_ids"`
	OK        bool         `json:"ok"`
	Message   string       `json:"message"`
	Truncated bool         `json:"truncated,omitempty"`
}

// ProbeSources is the raw evidence of a probe report.
type ProbeSources struct {
	NvidiaVisibleDevices     []string          `json:"nvidia_visible_devices"`
	DRAEnv                   map[string]string `json:"dra_env"`
	GPUConformVisibleDevices []string          `json:"gpuconform_visible_devices"`
	DevFiles                 []string          `json:"dev_files"`
	NvidiaSMI                []string          `json:"nvidia_smi"`
}

// PodResourcesReport is the output of `gpu-workload podresources`.
type PodResourcesReport struct {
	Pods []PodResources `json:"pods"`
}

// PodResources is the kubelet's view of one pod.
type PodResources struct {
	Namespace  string                  `json:"namespace"`
	Name       string                  `json:"name"`
	Containers []ContainerPodResources `json:"containers"`
}

// ContainerPodResources is the kubelet's view of one container: device IDs per resource name.
type ContainerPodResources struct {
	Name             string              `json:"name"`
	Devices          map[string][]string `json:"devices"`
	DynamicResources json.RawMessage     `json:"dynamic_resources,omitempty"`
}

// ParseProbe finds the probe's JSON line in text (logs or a termination message). It takes the last
// line that decodes, since the image may log other lines before it.
func ParseProbe(text string) (ProbeReport, error) {
	var found *ProbeReport
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r ProbeReport
		if err := json.Unmarshal([]byte(line), &r); err == nil && r.Devices != nil {
			found = &r
		}
	}
	if found == nil {
		return ProbeReport{}, fmt.Errorf("no probe JSON line (with a \"devices\" field) in %d bytes of output: %q", len(text), truncate(text, 400))
	}
	return *found, nil
}

// ParsePodResources decodes the podresources helper's output (the last JSON line).
func ParsePodResources(text string) (PodResourcesReport, error) {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		var r PodResourcesReport
		if err := json.Unmarshal([]byte(strings.TrimSpace(lines[i])), &r); err == nil && r.Pods != nil {
			return r, nil
		}
	}
	return PodResourcesReport{}, fmt.Errorf("no podresources JSON in output: %q", truncate(text, 400))
}

// DevicesOf returns the device IDs of resource the kubelet assigned to container of pod ns/name.
func (r PodResourcesReport) DevicesOf(namespace, pod, container, resource string) ([]string, bool) {
	for _, p := range r.Pods {
		if p.Namespace != namespace || p.Name != pod {
			continue
		}
		for _, c := range p.Containers {
			if c.Name == container {
				return c.Devices[resource], true
			}
		}
		return nil, true
	}
	return nil, false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
