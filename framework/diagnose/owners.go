package diagnose

import (
	"fmt"
	"strings"
)

// ownerKind returns the canonical kind for a (lower-case, singular or plural, group-less) name of a
// workload kind beyond Job, Workload and Pod: the built-in controllers and the kinds Kueue integrates (its
// integrations list, v0.17). They are diagnosed through owner references: the target's pods are those
// whose controller chain (pod → ReplicaSet or Job → target) reaches it, its Workload the one Kueue
// created for it or for its pods.
func ownerKind(k string) (string, bool) {
	for _, name := range []string{k, strings.TrimSuffix(k, "s")} {
		switch name {
		case "deployment", "deploy":
			return "Deployment", true
		case "statefulset", "sts":
			return "StatefulSet", true
		case "replicaset", "rs":
			return "ReplicaSet", true
		case "jobset":
			return "JobSet", true
		case "leaderworkerset", "lws":
			return "LeaderWorkerSet", true
		case "rayjob":
			return "RayJob", true
		case "raycluster":
			return "RayCluster", true
		case "pytorchjob":
			return "PyTorchJob", true
		case "tfjob":
			return "TFJob", true
		case "mpijob":
			return "MPIJob", true
		case "xgboostjob":
			return "XGBoostJob", true
		case "paddlejob":
			return "PaddleJob", true
		case "jaxjob":
			return "JAXJob", true
		case "trainjob":
			return "TrainJob", true
		case "appwrapper":
			return "AppWrapper", true
		}
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
