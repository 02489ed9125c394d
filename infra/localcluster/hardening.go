package localcluster

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
	"sigs.k8s.io/yaml"
)

// Hardening variations put on the local cluster the production set-ups a healthy GPU cluster has and
// the suite must still sign off GO on (`gpuconform hardening`): a dedication taint on every GPU node, a
// cluster-wide admission policy equivalent to Pod Security "restricted", and a team that owns one
// namespace with a LocalQueue and only the shipped team-namespace RBAC. Each Apply returns its undo,
// which removes exactly what it added.

//go:embed hardening/*.yaml
var hardeningFiles embed.FS

// DedicationTaint is the taint several managed services put on GPU nodes.
var DedicationTaint = corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}

// Undo removes what an Apply added.
type Undo func(ctx context.Context) error

// undoStack collects the undos of what an Apply created; run undoes them newest first.
type undoStack []Undo

func (s *undoStack) run(ctx context.Context) error {
	var errs []error
	for _, undo := range slices.Backward(*s) {
		errs = append(errs, undo(ctx))
	}
	return errors.Join(errs...)
}

// ApplyDedicationTaint taints every pool node of the local cluster with DedicationTaint.
func ApplyDedicationTaint(ctx context.Context, kube kubernetes.Interface) (Undo, error) {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: PoolLabel})
	if err != nil {
		return nil, err
	}
	if len(nodes.Items) == 0 {
		return nil, fmt.Errorf("no node carries %s: is this the local cluster?", PoolLabel)
	}
	same := func(t corev1.Taint) bool { return t.Key == DedicationTaint.Key && t.Effect == DedicationTaint.Effect }
	var names []string
	for _, n := range nodes.Items {
		if slices.ContainsFunc(n.Spec.Taints, same) {
			continue // already tainted: not ours to remove later
		}
		n.Spec.Taints = append(n.Spec.Taints, DedicationTaint)
		if _, err := kube.CoreV1().Nodes().Update(ctx, &n, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("tainting %s: %w", n.Name, err)
		}
		names = append(names, n.Name)
	}
	return func(ctx context.Context) error {
		var errs []error
		for _, name := range names {
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, same)
			if _, err := kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}, nil
}

// ApplyRestrictedAdmission installs hardening/restricted-pods.yaml: a ValidatingAdmissionPolicy and its
// binding that refuse, outside the system namespaces, any pod Pod Security "restricted" would refuse.
func ApplyRestrictedAdmission(ctx context.Context, kube kubernetes.Interface) (Undo, error) {
	raw, err := hardeningFiles.ReadFile("hardening/restricted-pods.yaml")
	if err != nil {
		return nil, err
	}
	docs := strings.Split(string(raw), "\n---\n")
	var policy admissionv1.ValidatingAdmissionPolicy
	var binding admissionv1.ValidatingAdmissionPolicyBinding
	if len(docs) != 2 || yaml.UnmarshalStrict([]byte(docs[0]), &policy) != nil || yaml.UnmarshalStrict([]byte(docs[1]), &binding) != nil {
		return nil, errors.New("hardening/restricted-pods.yaml: want a ValidatingAdmissionPolicy and its binding")
	}
	api := kube.AdmissionregistrationV1()
	if _, err := api.ValidatingAdmissionPolicies().Create(ctx, &policy, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating ValidatingAdmissionPolicy %s: %w", policy.Name, err)
	}
	undo := func(ctx context.Context) error {
		return errors.Join(
			client.IgnoreNotFound(api.ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})),
			client.IgnoreNotFound(api.ValidatingAdmissionPolicies().Delete(ctx, policy.Name, metav1.DeleteOptions{})))
	}
	if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		return nil, errors.Join(fmt.Errorf("creating ValidatingAdmissionPolicyBinding %s: %w", binding.Name, err), undo(ctx))
	}
	return undo, nil
}

// Team is what ApplyTeamNamespace set up: the namespace, its LocalQueue, and a kubeconfig for a
// ServiceAccount bound to nothing but the shipped team-namespace RBAC.
type Team struct {
	Namespace, LocalQueue, Kubeconfig string
}

// Team-namespace names. The namespaces do not start with the suite's prefix: they are the teams', not
// the suite's. Each team's ClusterQueue and ResourceFlavor are named after its namespace, so one row's
// team can be set up while another's is still being deleted.
const (
	TeamNamespace      = "team-gpu-a"
	QuotaTeamNamespace = "team-gpu-quota"
	TeamLocalQueue     = "team-gpus"
	teamAccount        = "gpuconform-runner"
	teamRoleBinding    = "gpuconform"
	teamRBACFile       = "fixtures/rbac/team-namespace.yaml"
	teamTokenLifetime  = 2 * 3600
)

// ApplyTeamNamespace sets up what a platform team gives one of its teams: a namespace (TeamNamespace),
// a LocalQueue there on a ClusterQueue the team does not own, the shipped fixtures/rbac/team-namespace.yaml
// (read from root) bound to a ServiceAccount, and a kubeconfig in dir that authenticates as that
// ServiceAccount.
func ApplyTeamNamespace(ctx context.Context, cfg *rest.Config, kube kubernetes.Interface, kq kueueclient.Interface, root, dir string) (Team, Undo, error) {
	return applyTeam(ctx, cfg, kube, kq, root, dir, TeamNamespace, nil)
}

// teamCovered are the resources a team's ClusterQueue covers unless a row says otherwise: CPU, memory
// and both paths' devices.
var teamCovered = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, GPUResource, KueueDRAResource}

// applyTeam is ApplyTeamNamespace for the team namespace named namespace, its ClusterQueue covering
// covered (nil: teamCovered).
func applyTeam(ctx context.Context, cfg *rest.Config, kube kubernetes.Interface, kq kueueclient.Interface, root, dir, namespace string, covered []corev1.ResourceName) (Team, Undo, error) {
	team := Team{Namespace: namespace, LocalQueue: TeamLocalQueue}
	teamClusterQueue, teamFlavor, teamReadsBinding := namespace, namespace, "gpuconform-"+namespace+"-reads"
	var undos undoStack
	undo := Undo(undos.run)
	fail := func(err error) (Team, Undo, error) { return team, nil, errors.Join(err, undo(ctx)) }

	raw, err := os.ReadFile(filepath.Join(root, teamRBACFile))
	if err != nil {
		return fail(err)
	}
	docs := strings.Split(string(raw), "\n---\n")
	var role rbacv1.Role
	var reads rbacv1.ClusterRole
	if len(docs) != 2 || yaml.UnmarshalStrict([]byte(docs[0]), &role) != nil || yaml.UnmarshalStrict([]byte(docs[1]), &reads) != nil {
		return fail(fmt.Errorf("%s: want a Role and a ClusterRole", teamRBACFile))
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team.Namespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating namespace %s: %w", team.Namespace, err))
	}
	undos = append(undos, func(ctx context.Context) error {
		return client.IgnoreNotFound(kube.CoreV1().Namespaces().Delete(ctx, team.Namespace, metav1.DeleteOptions{}))
	})

	rbac := kube.RbacV1()
	role.Namespace = team.Namespace
	if _, err := rbac.Roles(team.Namespace).Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating Role %s: %w", role.Name, err))
	}
	if _, err := rbac.ClusterRoles().Create(ctx, &reads, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fail(fmt.Errorf("creating ClusterRole %s: %w", reads.Name, err))
	} else if err == nil {
		undos = append(undos, func(ctx context.Context) error {
			return client.IgnoreNotFound(rbac.ClusterRoles().Delete(ctx, reads.Name, metav1.DeleteOptions{}))
		})
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: teamAccount, Namespace: team.Namespace}}
	if _, err := kube.CoreV1().ServiceAccounts(team.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating ServiceAccount: %w", err))
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: teamAccount, Namespace: team.Namespace}}
	if _, err := rbac.RoleBindings(team.Namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: teamRoleBinding, Namespace: team.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}, Subjects: subject,
	}, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating RoleBinding: %w", err))
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: teamReadsBinding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reads.Name}, Subjects: subject,
	}, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating ClusterRoleBinding: %w", err))
	}
	undos = append(undos, func(ctx context.Context) error {
		return client.IgnoreNotFound(rbac.ClusterRoleBindings().Delete(ctx, teamReadsBinding, metav1.DeleteOptions{}))
	})

	// The team's queue: a ClusterQueue the platform team owns, admitting from this namespace only, with
	// quota for every GPU of the pool on the paths it covers.
	k := kq.KueueV1beta2()
	if _, err := k.ResourceFlavors().Create(ctx, &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: teamFlavor}}, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating ResourceFlavor: %w", err))
	}
	undos = append(undos, func(ctx context.Context) error {
		return client.IgnoreNotFound(k.ResourceFlavors().Delete(ctx, teamFlavor, metav1.DeleteOptions{}))
	})
	if covered == nil {
		covered = teamCovered
	}
	nominal := map[corev1.ResourceName]string{corev1.ResourceCPU: "64", corev1.ResourceMemory: "256Gi", GPUResource: "64", KueueDRAResource: "64"}
	quotas := make([]kueue.ResourceQuota, len(covered))
	for i, r := range covered {
		quotas[i] = kueue.ResourceQuota{Name: r, NominalQuota: resource.MustParse(nominal[r])}
	}
	cq := &kueue.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: teamClusterQueue},
		Spec: kueue.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: team.Namespace}},
			ResourceGroups: []kueue.ResourceGroup{{
				CoveredResources: covered,
				Flavors:          []kueue.FlavorQuotas{{Name: kueue.ResourceFlavorReference(teamFlavor), Resources: quotas}},
			}},
		},
	}
	if _, err := k.ClusterQueues().Create(ctx, cq, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating ClusterQueue: %w", err))
	}
	undos = append(undos, func(ctx context.Context) error {
		return client.IgnoreNotFound(k.ClusterQueues().Delete(ctx, teamClusterQueue, metav1.DeleteOptions{}))
	})
	lq := &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: team.LocalQueue, Namespace: team.Namespace},
		Spec: kueue.LocalQueueSpec{ClusterQueue: kueue.ClusterQueueReference(teamClusterQueue)}}
	if _, err := k.LocalQueues(team.Namespace).Create(ctx, lq, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating LocalQueue: %w", err))
	}

	tok, err := kube.CoreV1().ServiceAccounts(team.Namespace).CreateToken(ctx, teamAccount, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](teamTokenLifetime)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fail(fmt.Errorf("requesting a token for ServiceAccount %s: %w", teamAccount, err))
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos[teamAccount] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["team"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: teamAccount, Namespace: team.Namespace}
	kc.CurrentContext = "team"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	team.Kubeconfig = filepath.Join(dir, "team.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, team.Kubeconfig); err != nil {
		return fail(err)
	}
	return team, undo, nil
}

// A platform team's queue that does not preempt: the preemption scenario must be NO-GO on it and name
// the ClusterQueue's policy (hardening row queue-without-preemption).
const (
	NoPreemptNamespace  = "team-gpu-nopreempt"
	NoPreemptLocalQueue = "team-gpus"
	NoPreemptLow        = "team-nopreempt-low"
	NoPreemptHigh       = "team-nopreempt-high"
	noPreemptQueue      = "team-gpu-nopreempt"
)

// ApplyQueueWithoutPreemption creates a namespace with a LocalQueue whose ClusterQueue has quota for one
// GPU on each path and no preemption policy (Kueue's default: never within the queue), and two
// WorkloadPriorityClasses. The undo deletes all of it.
func ApplyQueueWithoutPreemption(ctx context.Context, kube kubernetes.Interface, kq kueueclient.Interface) (Undo, error) {
	var undos undoStack
	undo := Undo(undos.run)
	fail := func(err error) (Undo, error) { return nil, errors.Join(err, undo(ctx)) }
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: NoPreemptNamespace}}, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating namespace %s: %w", NoPreemptNamespace, err))
	}
	undos = append(undos, func(ctx context.Context) error {
		return client.IgnoreNotFound(kube.CoreV1().Namespaces().Delete(ctx, NoPreemptNamespace, metav1.DeleteOptions{}))
	})
	k := kq.KueueV1beta2()
	for name, value := range map[string]int32{NoPreemptLow: 100, NoPreemptHigh: 1000} {
		if _, err := k.WorkloadPriorityClasses().Create(ctx, &kueue.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{}); err != nil {
			return fail(fmt.Errorf("creating WorkloadPriorityClass %s: %w", name, err))
		}
		undos = append(undos, func(ctx context.Context) error {
			return client.IgnoreNotFound(k.WorkloadPriorityClasses().Delete(ctx, name, metav1.DeleteOptions{}))
		})
	}
	if _, err := k.ResourceFlavors().Create(ctx, &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: noPreemptQueue}}, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating ResourceFlavor: %w", err))
	}
	undos = append(undos, func(ctx context.Context) error {
		return client.IgnoreNotFound(k.ResourceFlavors().Delete(ctx, noPreemptQueue, metav1.DeleteOptions{}))
	})
	quota := func(name string, q string) kueue.ResourceQuota {
		return kueue.ResourceQuota{Name: corev1.ResourceName(name), NominalQuota: resource.MustParse(q)}
	}
	cq := &kueue.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: noPreemptQueue},
		Spec: kueue.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: NoPreemptNamespace}},
			ResourceGroups: []kueue.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, GPUResource, KueueDRAResource},
				Flavors: []kueue.FlavorQuotas{{Name: noPreemptQueue, Resources: []kueue.ResourceQuota{
					quota("cpu", "16"), quota("memory", "64Gi"), quota(GPUResource, "1"), quota(KueueDRAResource, "1"),
				}}},
			}},
		},
	}
	if _, err := k.ClusterQueues().Create(ctx, cq, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating ClusterQueue: %w", err))
	}
	undos = append(undos, func(ctx context.Context) error {
		return client.IgnoreNotFound(k.ClusterQueues().Delete(ctx, noPreemptQueue, metav1.DeleteOptions{}))
	})
	lq := &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: NoPreemptLocalQueue, Namespace: NoPreemptNamespace}, Spec: kueue.LocalQueueSpec{ClusterQueue: noPreemptQueue}}
	if _, err := k.LocalQueues(NoPreemptNamespace).Create(ctx, lq, metav1.CreateOptions{}); err != nil {
		return fail(fmt.Errorf("creating LocalQueue: %w", err))
	}
	return undo, nil
}
