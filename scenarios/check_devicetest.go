package scenarios

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/config"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/pods"
	"gpuconform.io/gpuconform/framework/run"
	"gpuconform.io/gpuconform/framework/testenv"
)

// DeviceTestSpec is the GPU vendor's device test as the specs run it: an image and its command. The zero
// value is the suite's own stand-in, the workload image running `gpu-workload device-test`; an Image with
// no Command runs the image's entrypoint (NVIDIA's CUDA vectorAdd sample runs its test so).
type DeviceTestSpec struct {
	// Image is the test's image; empty: the workload image (the factory's).
	Image string
	// Command replaces the image's entrypoint; only with Image.
	Command []string
}

// deviceTestOf is the device test the configuration names (config.Validate has refused a Command without
// an Image).
func deviceTestOf(c config.DeviceTestConfig) DeviceTestSpec {
	return DeviceTestSpec{Image: c.Image, Command: slices.Clone(c.Command)}
}

// resolve is what the pod runs: the image, and the command (nil: the image's entrypoint).
func (dt DeviceTestSpec) resolve(f fixtures.Factory) (image string, command []string) {
	if dt.Image == "" {
		return f.Image, []string{fixtures.WorkloadBinary, "device-test"}
	}
	return dt.Image, slices.Clone(dt.Command)
}

// DeviceTestEntry is the report entry through which a spec records one run of the device test (its value
// a DeviceTestRecord), passed or failed.
const DeviceTestEntry = "device test"

// DeviceTestRecord is the value of a DeviceTestEntry.
type DeviceTestRecord struct {
	Image string `json:"image"`
	// Command is the container's command; empty: the image's entrypoint.
	Command []string `json:"command"`
	Path    string   `json:"path"`
	Pod     string   `json:"pod"`
	Node    string   `json:"node"`
	// Passed is the verdict: the container exited 0.
	Passed bool `json:"passed"`
	// ExitCode is the container's exit status.
	ExitCode int32 `json:"exit_code"`
	// LastLine is the last non-empty line of the container's log ("Test PASSED" for NVIDIA's sample and the
	// suite's own test when they pass).
	LastLine string `json:"last_line"`
	// CUDA is what the suite's own test ran through libcuda ("CUDA 12.4: vectorAdd verified on NVIDIA H100
	// 80GB HBM3 GPU-…"); StandIn what it checked instead where the container had no libcuda. Both empty
	// for a vendor image.
	CUDA    string `json:"cuda,omitempty"`
	StandIn string `json:"stand_in,omitempty"`
}

// String is what the report shows: `image nvcr.io/…:vectoradd-cuda12.5.0 (its entrypoint) on w1, dra path:
// passed, exit 0, "Test PASSED"`.
func (r DeviceTestRecord) String() string {
	verdict := "failed"
	switch {
	case r.Passed && r.StandIn != "":
		verdict = "passed as a stand-in"
	case r.Passed:
		verdict = "passed"
	}
	s := fmt.Sprintf("image %s (%s) on %s, %s path: %s, exit %d, %q", r.Image, describeCommand(r.Command), r.Node, r.Path, verdict, r.ExitCode, r.LastLine)
	if w := cmp.Or(r.CUDA, r.StandIn); w != "" {
		s += "; " + w
	}
	return s
}

// DeviceTestFix is what makes the device test real where it ran as a stand-in.
const DeviceTestFix = "give GPU containers NVIDIA's CUDA driver library: NVIDIA's container runtime injects libcuda.so.1 for the compute driver capability " +
	"(the suite's pods set NVIDIA_DRIVER_CAPABILITIES=compute,utility; a CDI spec must list the library), or pass --device-test-image with the vendor's vectorAdd sample"

// readOwnDeviceTest fills CUDA and StandIn from the suite's own test's JSON report line in the log tail.
func (r *DeviceTestRecord) readOwnDeviceTest(tail []string) (cudaVersion string) {
	for _, line := range tail {
		// The fields of the workload's devicetest.Report read here (that package opens libcuda, which the
		// suite's static binary must not link).
		var rep struct {
			StandIn string `json:"stand_in"`
			CUDA    *struct {
				DriverVersion string `json:"driver_version"`
				Error         string `json:"error"`
				Devices       []struct {
					Name string `json:"name"`
					UUID string `json:"uuid"`
				} `json:"devices"`
			} `json:"cuda"`
		}
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &rep) != nil {
			continue
		}
		r.StandIn = rep.StandIn
		if c := rep.CUDA; c != nil && c.Error == "" {
			var devs []string
			for _, d := range c.Devices {
				devs = append(devs, d.Name+" "+d.UUID)
			}
			r.CUDA = fmt.Sprintf("CUDA %s: vectorAdd verified on %s", c.DriverVersion, strings.Join(devs, ", "))
			return c.DriverVersion
		}
	}
	return ""
}

func describeCommand(cmd []string) string {
	if len(cmd) == 0 {
		return "its entrypoint"
	}
	return "command " + strings.Join(cmd, " ")
}

// deviceTestLogLines is how many of a failed test's last log lines its failure quotes.
const deviceTestLogLines = 12

// deviceTest runs the device test dt in a pod given one device on path in namespace ns, pinned to nodes
// (nil: anywhere the path can place it), waits until it ends and records a DeviceTestEntry. A test that
// exits non-zero fails the spec at once with its last log lines; a pod that never starts fails it with the
// wait's diagnosis. The upgrade rehearsal runs it on the canary pool too. It returns what the test
// checked instead of the real thing when it passed as a stand-in, "" when it ran for real.
func deviceTest(ctx context.Context, env *testenv.Env, path gpu.Path, ns string, nodes []string, dt DeviceTestSpec) (standIn string) {
	ginkgo.GinkgoHelper()
	image, command := dt.resolve(env.Factory)
	ginkgo.By(fmt.Sprintf("running the device test, image %s (%s), in a pod with one device on the %s path", image, describeCommand(command), path.Name()))
	w := env.Factory.GPUPod("device-test-"+rand.String(5), ns).Path(path).Devices(1).Image(image).Command(command...).OnNodes(nodes...)
	podObj := w.Obj()
	for _, pre := range w.Prerequisites() {
		env.Create(ctx, pre)
	}
	env.Create(ctx, podObj)

	pod := pods.ExpectPodFinished(ctx, env, ns, podObj.Name)
	rec := DeviceTestRecord{Image: image, Command: command, Path: path.Name(), Pod: pod.Name, Node: pod.Spec.NodeName, Passed: pod.Status.Phase == corev1.PodSucceeded}
	if t := pods.Terminated(pod, fixtures.WorkloadContainer); t != nil {
		rec.ExitCode = t.ExitCode
	}
	tail, logErr := pods.LogTail(ctx, env, ns, pod.Name, fixtures.WorkloadContainer, deviceTestLogLines)
	if len(tail) > 0 {
		rec.LastLine = tail[len(tail)-1]
	}
	var cudaVersion string
	if dt.Image == "" {
		cudaVersion = rec.readOwnDeviceTest(tail)
	}
	ginkgo.AddReportEntry(DeviceTestEntry, rec)
	if rec.Passed && rec.StandIn != "" {
		ginkgo.AddReportEntry(run.StandInPrefix+"device test on the "+path.Name()+" path", run.StandIn{Did: rec.StandIn, Fix: DeviceTestFix})
	}

	if len(nodes) > 0 {
		gomega.Expect(nodes).To(gomega.ContainElement(rec.Node), "the device test pod %s ran on %s, outside the nodes it was pinned to", pod.Name, rec.Node)
	}
	if !rec.Passed {
		ended := "its log could not be read: " + fmt.Sprint(logErr)
		if logErr == nil {
			ended = "its log ends:\n    " + strings.Join(tail, "\n    ")
		}
		ginkgo.Fail(fmt.Sprintf("the device test in pod %s/%s on %s failed (image %s, %s; %s); %s",
			ns, pod.Name, rec.Node, image, describeCommand(command), howItEnded(pod), ended))
	}
	gomega.Expect(logErr).NotTo(gomega.HaveOccurred(), "the device test passed, but its log is part of the record")
	if cudaVersion != "" {
		node, err := env.Clients.Kube.CoreV1().Nodes().Get(ctx, rec.Node, metav1.GetOptions{})
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading node %s for its advertised CUDA version", rec.Node)
		if want, from := advertisedCUDA(node.Labels); want != "" {
			gomega.Expect(cudaVersion).To(gomega.Equal(want), "the device test's CUDA driver reports CUDA %s on %s, but the node advertises %s (%s): the driver the containers get is not the one the node's labels describe",
				cudaVersion, rec.Node, want, from)
		}
	}
	return rec.StandIn
}

// advertisedCUDA is the CUDA version a node's GPU feature discovery labels advertise ("12.4"), and the
// label it came from; "" when the node has none.
func advertisedCUDA(labels map[string]string) (version, from string) {
	if v := labels[gfdRuntimeFull]; v != "" {
		return v, gfdRuntimeFull + "=" + v
	}
	major, minor := labels[gfdRuntimeMajor], labels[gfdRuntimeMinor]
	if major != "" && minor != "" {
		return major + "." + minor, gfdRuntimeMajor + "/" + gfdRuntimeMinor
	}
	return "", ""
}

// GPU feature discovery's labels of the CUDA version the node's driver supports.
const (
	gfdRuntimeFull  = "nvidia.com/cuda.runtime-version.full"
	gfdRuntimeMajor = "nvidia.com/cuda.runtime-version.major"
	gfdRuntimeMinor = "nvidia.com/cuda.runtime-version.minor"
)

// howItEnded says how the workload container of a finished pod ended: its exit code and the kubelet's
// reason ("Error", "OOMKilled"), or, when it never ran (the kubelet refused the pod), the pod's reason.
func howItEnded(pod *corev1.Pod) string {
	if t := pods.Terminated(pod, fixtures.WorkloadContainer); t != nil {
		return fmt.Sprintf("exit %d, reason %s", t.ExitCode, t.Reason)
	}
	return fmt.Sprintf("the container never ran: pod %s, reason %s: %s", pod.Status.Phase, pod.Status.Reason, pod.Status.Message)
}
