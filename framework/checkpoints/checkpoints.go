// Package checkpoints offers the scenarios storage that outlives a node: a training job that checkpoints
// there resumes on another node after its node fails or it is preempted. Two kinds: a StorageClass that
// provisions ReadWriteMany volumes (a real cluster's NFS, Filestore, EFS, CephFS), and a directory every
// GPU node mounts from the same shared storage, offered as a static ReadWriteMany PersistentVolume (the
// local kind cluster mounts one host directory into every worker and says so in a node annotation).
package checkpoints

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/config"
)

// SharedDirAnnotation on a node names a directory that every GPU node mounts from the same shared
// storage (the local cluster sets it on its workers).
const SharedDirAnnotation = "gpuconform.io/shared-dir"

// Storage is the checkpoint storage of a run; the zero value is none.
type Storage struct {
	// StorageClass provisions one ReadWriteMany volume per use.
	StorageClass string
	// HostPath is the shared directory on every GPU node.
	HostPath string
	// Source says where it came from, for the report.
	Source string
}

// None reports whether there is no storage that outlives a node.
func (s Storage) None() bool { return s.StorageClass == "" && s.HostPath == "" }

func (s Storage) String() string {
	switch {
	case s.StorageClass != "":
		return fmt.Sprintf("ReadWriteMany volumes of StorageClass %s (%s)", s.StorageClass, s.Source)
	case s.HostPath != "":
		return fmt.Sprintf("shared directory %s on every GPU node (%s)", s.HostPath, s.Source)
	}
	return "none"
}

// Discover returns the configured storage, else the shared directory every node of the GPU pool
// announces, else none and why.
func Discover(cfg config.CheckpointConfig, pool []corev1.Node) (Storage, string) {
	switch {
	case cfg.StorageClass != "":
		return Storage{StorageClass: cfg.StorageClass, Source: "--checkpoint-storage-class"}, ""
	case cfg.HostPath != "":
		return Storage{HostPath: cfg.HostPath, Source: "--checkpoint-host-path"}, ""
	case len(pool) == 0:
		return Storage{}, "no storage that outlives a node: the GPU pool has no nodes"
	}
	dir := pool[0].Annotations[SharedDirAnnotation]
	for _, n := range pool {
		if v := n.Annotations[SharedDirAnnotation]; v == "" || v != dir {
			return Storage{}, "no storage that outlives a node: give --checkpoint-storage-class (a ReadWriteMany StorageClass) or --checkpoint-host-path (a directory every GPU node mounts from shared storage)"
		}
	}
	if !strings.HasPrefix(dir, "/") {
		return Storage{}, fmt.Sprintf("no storage that outlives a node: the nodes' %s %q is not an absolute path", SharedDirAnnotation, dir)
	}
	return Storage{HostPath: dir, Source: "the GPU nodes' " + SharedDirAnnotation + " annotation"}, ""
}

// Objects returns what a spec creates to mount the storage: a PersistentVolumeClaim named name in ns
// and, for a shared directory, the static PersistentVolume bound to it (cluster-scoped, so the caller
// deletes it: its reclaim policy is Retain, the directory is not the suite's to wipe). Every workload
// writes its own subdirectory (the train subcommand's --checkpoint-dir).
func (s Storage) Objects(f fixtures.Factory, ns, name string) []fixtures.Object {
	labels := map[string]string{fixtures.RunLabel: f.RunID, fixtures.ManagedByLabel: fixtures.ManagedByValue}
	if f.SpecTag != "" {
		labels[fixtures.SpecLabel] = f.SpecTag
	}
	size := resource.MustParse("1Gi")
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if s.StorageClass != "" {
		pvc.Spec.StorageClassName = ptr.To(s.StorageClass)
		return []fixtures.Object{pvc}
	}
	pvName := ns + "-" + name
	pvc.Spec.StorageClassName = ptr.To("")
	pvc.Spec.VolumeName = pvName
	pv := &corev1.PersistentVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolume"},
		ObjectMeta: metav1.ObjectMeta{Name: pvName, Labels: labels},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			ClaimRef:                      &corev1.ObjectReference{APIVersion: "v1", Kind: "PersistentVolumeClaim", Namespace: ns, Name: name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: s.HostPath, Type: ptr.To(corev1.HostPathDirectory),
			}},
		},
	}
	return []fixtures.Object{pv, pvc}
}
