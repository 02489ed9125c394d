package cluster

import (
	"context"
	"fmt"
	"strings"

	authv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// Permission is one verb on one resource the suite needs.
type Permission struct {
	Verb, Group, Resource string
	// Why is shown when the permission is missing.
	Why string
	// Namespace is where the permission is needed; "" means cluster-wide (or every namespace).
	Namespace string
	// Advisory: without it a check is skipped and noted, never refused (the team preflight reads the
	// namespace's quotas and queue with it); the shipped roles grant it, and Preflight does not ask.
	Advisory bool
}

func (p Permission) String() string {
	g := p.Group
	if g == "" {
		g = "core"
	}
	s := fmt.Sprintf("%s %s (%s)", p.Verb, p.Resource, g)
	if p.Namespace != "" {
		s += " in namespace " + p.Namespace
	}
	return s
}

// Needs says which parts of the suite will run, so the preflight asks for what they need and no more.
type Needs struct {
	// OwnQueues: specs create their own ResourceFlavor, ClusterQueue and LocalQueue.
	OwnQueues bool
	// Kueue: specs submit through Kueue (own or existing queues).
	Kueue bool
	// DRA: the DRA path is exercised.
	DRA bool
	// Namespace: team-namespace mode; the suite's writes all happen in this existing namespace.
	Namespace string
	// HelperNamespace: where the podresources helper pods run, when not in the spec's namespace.
	HelperNamespace string
	// Checkpoints: specs create PersistentVolumeClaims for checkpoints; SharedDir: and the static
	// PersistentVolumes of a shared directory (cluster-scoped).
	Checkpoints, SharedDir bool
	// Disruptive: the failure and upgrade scenarios change nodes (fixtures/rbac/disruptive.yaml).
	Disruptive bool
	// LeaseNamespace: where the run keeps the Lease that tells other runs it is alive ("": none).
	LeaseNamespace string
}

// PreflightNeeds lists what the non-disruptive level needs. Kueue objects are included only when the
// suite will create them, DRA objects only when the DRA path is exercised. In team-namespace mode the
// writes are asked for in that namespace (fixtures/rbac/team-namespace.yaml's Role grants them) and the
// cluster-wide part is reads only (fixtures/rbac/read-only.yaml).
func PreflightNeeds(n Needs) []Permission {
	ns := n.Namespace
	perms := []Permission{{Verb: "list", Resource: "nodes", Why: "discover GPU nodes and pools"}}
	if n.LeaseNamespace != "" {
		for _, verb := range []string{"create", "update", "delete", "list"} {
			perms = append(perms, Permission{Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: n.LeaseNamespace,
				Why: "the run's Lease: other runs on the cluster see that it is alive, wait for what it holds, and never take its objects for leftovers"})
		}
	}
	if ns == "" {
		perms = append(perms,
			Permission{Verb: "create", Resource: "namespaces", Why: "run each spec in its own namespace"},
			Permission{Verb: "delete", Resource: "namespaces", Why: "clean up each spec's namespace"},
			Permission{Verb: "list", Resource: "namespaces", Why: "leak audit and leftover check"},
			Permission{Verb: "list", Group: "resource.k8s.io", Resource: "devicetaintrules", Why: "leftover check: a DeviceTaintRule an interrupted disruptive run left"},
			// Settle: without them a re-registering device plugin is judged at once (a note says so), which
			// is why team-namespace mode, whose cluster-wide role reads no pods, does not ask for them.
			Permission{Verb: "list", Group: "apps", Resource: "daemonsets", Why: "find the device plugins (DaemonSets mounting /var/lib/kubelet/device-plugins), to wait for one that is re-registering instead of judging its path broken"},
			Permission{Verb: "list", Resource: "pods", Why: "find the device plugin's pod on a GPU node whose devices are missing, to tell a re-registering plugin from a broken one"})
	} else {
		perms = append(perms,
			Permission{Verb: "list", Resource: "pods", Why: "leak audit and leftover check in the team namespace", Namespace: ns},
			Permission{Verb: "delete", Resource: "pods", Why: "clean up each spec's pods", Namespace: ns},
			Permission{Verb: "list", Group: "batch", Resource: "jobs", Why: "leak audit and cleanup by label", Namespace: ns},
			Permission{Verb: "delete", Group: "batch", Resource: "jobs", Why: "clean up each spec's Jobs", Namespace: ns})
	}
	perms = append(perms,
		Permission{Verb: "create", Group: "batch", Resource: "jobs", Why: "submit GPU jobs", Namespace: ns},
		Permission{Verb: "create", Resource: "pods", Why: "run probe and podresources helper pods", Namespace: ns},
		Permission{Verb: "get", Resource: "pods/log", Why: "read probe output", Namespace: ns},
		Permission{Verb: "list", Resource: "events", Why: "diagnose failures", Namespace: ns})
	if n.HelperNamespace != "" {
		perms = append(perms,
			Permission{Verb: "create", Resource: "pods", Why: "run the podresources helper where hostPath pods are admitted", Namespace: n.HelperNamespace},
			Permission{Verb: "delete", Resource: "pods", Why: "remove the podresources helper", Namespace: n.HelperNamespace},
			Permission{Verb: "get", Resource: "pods/log", Why: "read the podresources helper's report", Namespace: n.HelperNamespace})
	}
	if n.DRA {
		perms = append(perms,
			Permission{Verb: "create", Group: "resource.k8s.io", Resource: "resourceclaimtemplates", Why: "ask for DRA devices", Namespace: ns},
			Permission{Verb: "list", Group: "resource.k8s.io", Resource: "resourceclaims", Why: "read which devices a pod was given", Namespace: ns},
			Permission{Verb: "list", Group: "resource.k8s.io", Resource: "resourceslices", Why: "discover DRA capacity"},
			Permission{Verb: "list", Group: "resource.k8s.io", Resource: "deviceclasses", Why: "discover DRA device classes"},
		)
		if ns != "" {
			perms = append(perms,
				Permission{Verb: "list", Group: "resource.k8s.io", Resource: "resourceclaimtemplates", Why: "leak audit and cleanup by label", Namespace: ns},
				Permission{Verb: "delete", Group: "resource.k8s.io", Resource: "resourceclaimtemplates", Why: "clean up each spec's claim templates", Namespace: ns})
		}
	}
	if ns != "" {
		for _, r := range []string{"resourcequotas", "limitranges"} {
			for _, verb := range []string{"get", "list"} {
				perms = append(perms, Permission{Verb: verb, Resource: r, Why: "check before any spec that one pod with one device fits the namespace's " + r, Namespace: ns, Advisory: true})
			}
		}
	}
	if n.Kueue {
		perms = append(perms, Permission{Verb: "list", Group: kueue.GroupVersion.Group, Resource: "workloads", Why: "check admission", Namespace: ns},
			Permission{Verb: "list", Group: kueue.GroupVersion.Group, Resource: "localqueues", Why: "watch the spec's LocalQueues, so a wait for one to turn Active wakes when it does", Namespace: ns},
			Permission{Verb: "create", Resource: "services", Why: "a gang's headless Service, where its workers find each other", Namespace: ns},
			Permission{Verb: "delete", Resource: "services", Why: "clean up each gang's Service", Namespace: ns})
		if ns != "" {
			perms = append(perms, Permission{Verb: "list", Resource: "services", Why: "leak audit and cleanup by label", Namespace: ns})
		}
		if ns != "" {
			perms = append(perms,
				Permission{Verb: "get", Group: kueue.GroupVersion.Group, Resource: "localqueues", Why: "check the team's LocalQueue is active", Namespace: ns},
				Permission{Verb: "get", Group: kueue.GroupVersion.Group, Resource: "clusterqueues", Why: "check before any spec that the team's ClusterQueue covers each path's Kueue resource", Advisory: true})
		}
	}
	if n.Checkpoints {
		perms = append(perms,
			Permission{Verb: "create", Resource: "persistentvolumeclaims", Why: "offer checkpoint storage that outlives a node", Namespace: ns},
			Permission{Verb: "delete", Resource: "persistentvolumeclaims", Why: "clean up each spec's checkpoint claim", Namespace: ns})
		if ns != "" {
			perms = append(perms, Permission{Verb: "list", Resource: "persistentvolumeclaims", Why: "leak audit and cleanup by label", Namespace: ns})
		}
	}
	if n.SharedDir {
		perms = append(perms,
			Permission{Verb: "create", Resource: "persistentvolumes", Why: "offer the shared checkpoint directory as a volume"},
			Permission{Verb: "delete", Resource: "persistentvolumes", Why: "remove the checkpoint volume (its files stay)"},
			Permission{Verb: "list", Resource: "persistentvolumes", Why: "leak audit"})
	}
	if n.Disruptive {
		perms = append(perms,
			Permission{Verb: "patch", Resource: "nodes", Why: "record faults on nodes, cordon the canary pool, put a stopped node out of service"},
			Permission{Verb: "update", Resource: "nodes", Why: "add and remove the out-of-service taint"},
			Permission{Verb: "create", Resource: "pods/eviction", Why: "drain the canary pool, honouring PodDisruptionBudgets"},
			Permission{Verb: "list", Resource: "pods", Why: "find GPU workloads and the GPU stack's pods on the pools"},
			Permission{Verb: "create", Resource: "pods/exec", Why: "read the clocks of the upgrade rehearsal's representative load's GPUs with nvidia-smi in its own containers", Namespace: ns})
		if n.DRA {
			perms = append(perms,
				Permission{Verb: "create", Group: "resource.k8s.io", Resource: "devicetaintrules", Why: "turn a DRA device unhealthy through the API"},
				Permission{Verb: "delete", Group: "resource.k8s.io", Resource: "devicetaintrules", Why: "make the device healthy again"})
		}
	}
	if n.OwnQueues {
		for _, r := range []string{"resourceflavors", "clusterqueues", "localqueues", "workloadpriorityclasses"} {
			perms = append(perms,
				Permission{Verb: "create", Group: kueue.GroupVersion.Group, Resource: r, Why: "create each spec's own queues"},
				Permission{Verb: "delete", Group: kueue.GroupVersion.Group, Resource: r, Why: "clean up each spec's queues"})
		}
	}
	return perms
}

// Preflight asks the API server, through SelfSubjectAccessReviews, whether the caller holds every
// permission that is not Advisory, and returns one error listing all that are missing with the reason
// each is needed.
func Preflight(ctx context.Context, kube kubernetes.Interface, perms []Permission) error {
	var missing []string
	for _, p := range perms {
		if p.Advisory {
			continue
		}
		review := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authv1.ResourceAttributes{Verb: p.Verb, Group: p.Group, Resource: baseResource(p.Resource), Subresource: subresource(p.Resource), Namespace: p.Namespace},
		}}
		res, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("RBAC preflight: cannot create a SelfSubjectAccessReview (%w); the suite cannot check its permissions", err)
		}
		if !res.Status.Allowed {
			missing = append(missing, fmt.Sprintf("%s: needed to %s", p, p.Why))
		}
	}
	if len(missing) > 0 {
		advice := "apply fixtures/rbac/non-disruptive.yaml and bind it to this user"
		for _, p := range perms {
			if p.Namespace != "" {
				advice = fmt.Sprintf("apply fixtures/rbac/team-namespace.yaml in namespace %s and fixtures/rbac/read-only.yaml, and bind both to this user (see their headers)", p.Namespace)
				break
			}
		}
		return fmt.Errorf("RBAC preflight: the current user lacks %d permission(s) for the non-disruptive level:\n  - %s\n%s",
			len(missing), strings.Join(missing, "\n  - "), advice)
	}
	return nil
}

func baseResource(r string) string { b, _, _ := strings.Cut(r, "/"); return b }
func subresource(r string) string  { _, s, _ := strings.Cut(r, "/"); return s }
