package checkpoints

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/config"
)

func nodeWith(name, dir string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	if dir != "" {
		n.Annotations[SharedDirAnnotation] = dir
	}
	return n
}

func TestDiscover(t *testing.T) {
	shared := []corev1.Node{nodeWith("a", "/shared"), nodeWith("b", "/shared")}
	if s, why := Discover(config.CheckpointConfig{}, shared); s.HostPath != "/shared" || why != "" {
		t.Errorf("every node announces /shared: %+v %q", s, why)
	}
	for name, pool := range map[string][]corev1.Node{
		"one node without":     {nodeWith("a", "/shared"), nodeWith("b", "")},
		"different dirs":       {nodeWith("a", "/shared"), nodeWith("b", "/other")},
		"relative":             {nodeWith("a", "shared")},
		"no nodes in the pool": nil,
	} {
		if s, why := Discover(config.CheckpointConfig{}, pool); !s.None() || !strings.Contains(why, "no storage that outlives a node") {
			t.Errorf("%s: %+v %q", name, s, why)
		}
	}
	if s, _ := Discover(config.CheckpointConfig{StorageClass: "efs"}, nil); s.StorageClass != "efs" {
		t.Errorf("a configured class wins: %+v", s)
	}
}

func TestObjects(t *testing.T) {
	f := fixtures.NewFactory("run1")
	objs := Storage{HostPath: "/shared"}.Objects(f, "ns1", "checkpoints")
	if len(objs) != 2 {
		t.Fatalf("a shared directory needs a PV and a PVC: %d objects", len(objs))
	}
	pv, pvc := objs[0].(*corev1.PersistentVolume), objs[1].(*corev1.PersistentVolumeClaim)
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != "checkpoints" || pv.Spec.ClaimRef.Namespace != "ns1" || pvc.Spec.VolumeName != pv.Name {
		t.Errorf("PV and PVC are not bound to each other: %+v / %+v", pv.Spec.ClaimRef, pvc.Spec)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || pv.Spec.HostPath.Path != "/shared" {
		t.Errorf("the shared directory is not the suite's to wipe: %+v", pv.Spec)
	}
	if pv.Labels[fixtures.RunLabel] != "run1" || pvc.Labels[fixtures.RunLabel] != "run1" {
		t.Errorf("run labels missing: %v %v", pv.Labels, pvc.Labels)
	}
	if pvc.Spec.AccessModes[0] != corev1.ReadWriteMany || *pvc.Spec.StorageClassName != "" {
		t.Errorf("pvc = %+v", pvc.Spec)
	}
	objs = Storage{StorageClass: "efs"}.Objects(f, "ns1", "checkpoints")
	if len(objs) != 1 || *objs[0].(*corev1.PersistentVolumeClaim).Spec.StorageClassName != "efs" {
		t.Errorf("a storage class needs only a PVC of that class: %+v", objs)
	}
}
