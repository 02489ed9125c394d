package scenarios

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(name string, cpu string, labels map[string]string, taints ...corev1.Taint) corev1.Node {
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
	}
}

var cpTaint = corev1.Taint{Key: controlPlaneLabel, Effect: corev1.TaintEffectNoSchedule}

func TestTaintedControlPlane(t *testing.T) {
	cp := map[string]string{controlPlaneLabel: ""}
	nodes := []corev1.Node{node("cp", "4", cp, cpTaint), node("w1", "8", nil)}
	if got, why := taintedControlPlane(nodes, nil); len(got) != 1 || got[0] != "cp" {
		t.Errorf("tainted control plane = %v (%s), want [cp]", got, why)
	}
	tolerateAll := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	if got, why := taintedControlPlane(nodes, tolerateAll); len(got) != 0 || !strings.Contains(why, "untolerated") {
		t.Errorf("with a toleration for everything: %v (%s), want none", got, why)
	}
	mixed := append(nodes, node("cp2", "4", cp))
	if got, why := taintedControlPlane(mixed, nil); len(got) != 0 || !strings.Contains(why, "cp2") {
		t.Errorf("an untainted control-plane node must disable the spec: %v (%s)", got, why)
	}
	if got, why := taintedControlPlane([]corev1.Node{node("w1", "8", nil)}, nil); len(got) != 0 || !strings.Contains(why, "managed control plane") {
		t.Errorf("no control-plane label: %v (%s)", got, why)
	}
}

func TestMostAllocatable(t *testing.T) {
	q, n := mostAllocatable([]corev1.Node{node("a", "3500m", nil), node("b", "8", nil), node("c", "7", nil)}, corev1.ResourceCPU)
	if n != "b" || q.Value() != 8 {
		t.Errorf("most cpu = %s on %s, want 8 on b", q.String(), n)
	}
	if _, n := mostAllocatable(nil, corev1.ResourceCPU); n != "" {
		t.Errorf("no nodes: got %s", n)
	}
}
