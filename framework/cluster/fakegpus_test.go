package cluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/internal/fakeplugin"
)

// The record's real/fake decision reads the label the fake agent writes, and only that.
func TestFakeGPUsFromTheFakeAgentsLabel(t *testing.T) {
	if LabelFakeGPUs != fakeplugin.LabelPluginVersion {
		t.Fatalf("LabelFakeGPUs %q is not the fake agent's label %q", LabelFakeGPUs, fakeplugin.LabelPluginVersion)
	}
	nodes := []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "fake", Labels: map[string]string{LabelFakeGPUs: "v1", LabelGPUProduct: "NVIDIA-H100-80GB-HBM3"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "real", Labels: map[string]string{LabelGPUProduct: "NVIDIA-H100-80GB-HBM3"}}},
	}
	infos := nodeInfos(nodes, &DevicePluginPath{ResourceName: "nvidia.com/gpu", Allocatable: map[string]int64{"fake": 4, "real": 4}}, nil)
	if len(infos) != 2 {
		t.Fatalf("node infos %+v", infos)
	}
	if infos[0].FakeGPUs != "label gpuconform.io/fake-device-plugin-version=v1" || infos[1].FakeGPUs != "" {
		t.Errorf("FakeGPUs %q, %q", infos[0].FakeGPUs, infos[1].FakeGPUs)
	}
}
