package gpu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"gpuconform.io/gpuconform/internal/textcut"
	"gpuconform.io/gpuconform/internal/workload/podresources"
	"gpuconform.io/gpuconform/internal/workload/probe"
)

// The JSON documents the workload image prints are the image's own types (internal/workload): one
// definition for the producer and the suite, so the two cannot drift apart.

// ProbeReport is one line of `gpu-workload probe`.
type ProbeReport = probe.Report

// ProbeSources is the raw evidence of a probe report.
type ProbeSources = probe.Sources

// PodResourcesReport is the output of `gpu-workload podresources`.
type PodResourcesReport = podresources.Report

// PodResources is the kubelet's view of one pod.
type PodResources = podresources.Pod

// ContainerPodResources is the kubelet's view of one container: device IDs per resource name.
type ContainerPodResources = podresources.Container

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
		return ProbeReport{}, fmt.Errorf("no probe JSON line (with a \"devices\" field) in %d bytes of output: %q", len(text), textcut.Head(text, 400))
	}
	return *found, nil
}

// ParsePodResources decodes the podresources helper's output (the last JSON line).
func ParsePodResources(text string) (PodResourcesReport, error) {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for _, line := range slices.Backward(lines) {
		var r PodResourcesReport
		if err := json.Unmarshal([]byte(strings.TrimSpace(line)), &r); err == nil && r.Pods != nil {
			return r, nil
		}
	}
	return PodResourcesReport{}, fmt.Errorf("no podresources JSON in output: %q", textcut.Head(text, 400))
}
