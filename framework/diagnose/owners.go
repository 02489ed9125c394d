package diagnose

import (
	"fmt"
	"strings"
)

// ownerKinds are the workload kinds beyond Job, Workload and Pod that a diagnosis accepts: the built-in
// controllers and the kinds Kueue integrates (its integrations list, v0.17). They are diagnosed through
// owner references: the target's pods are those whose controller chain (pod → ReplicaSet or Job →
// target) reaches it, its Workload the one Kueue created for it or for its pods.
var ownerKinds = map[string]string{
	"deployment": "Deployment", "deploy": "Deployment",
	"statefulset": "StatefulSet", "sts": "StatefulSet",
	"replicaset": "ReplicaSet", "rs": "ReplicaSet",
	"jobset":          "JobSet",
	"leaderworkerset": "LeaderWorkerSet", "lws": "LeaderWorkerSet",
	"rayjob": "RayJob", "raycluster": "RayCluster",
	"pytorchjob": "PyTorchJob", "tfjob": "TFJob", "mpijob": "MPIJob", "xgboostjob": "XGBoostJob",
	"paddlejob": "PaddleJob", "jaxjob": "JAXJob", "trainjob": "TrainJob", "appwrapper": "AppWrapper",
}

// ownerKind returns the canonical kind for a (lower-case, singular or plural, group-less) name.
func ownerKind(k string) (string, bool) {
	if kind, ok := ownerKinds[k]; ok {
		return kind, true
	}
	if kind, ok := ownerKinds[strings.TrimSuffix(k, "s")]; ok {
		return kind, true
	}
	return "", false
}

// isOwnerKind reports a kind diagnosed through owner references.
func isOwnerKind(kind string) bool {
	return kind != "Job" && kind != "Workload" && kind != "Pod"
}

func unsupportedKind(s string) error {
	return fmt.Errorf("unsupported kind %q: use job, workload, pod, deployment, statefulset, replicaset, or a Kueue-integrated kind (jobset, leaderworkerset, rayjob, raycluster, pytorchjob, tfjob, mpijob, xgboostjob, paddlejob, jaxjob, trainjob, appwrapper)", s)
}
